"""`traceanalyzer serve`: the web service (uploads, analysis jobs, reports), and `serve token create`."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import click

from ..errors import UsageError
from ._options import DurationType, ParsedType, SizeType

DEFAULT_DATA = "ta-data"


def _age(text: str) -> float:
    """'30d' / '12h' / '90m' -> seconds."""
    m = re.fullmatch(r"\s*(\d{1,6})\s*(d|h|m)\s*", text)
    if not m:
        raise ValueError(f"{text!r} is not an age: a whole number and d, h or m (30d, 12h)")
    return int(m.group(1)) * {"d": 86400, "h": 3600, "m": 60}[m.group(2)]


def _need_extra() -> None:
    try:
        import alembic  # noqa: F401
        import python_multipart  # noqa: F401
        import sqlalchemy  # noqa: F401
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise UsageError(f"the service needs pip install 'traceanalyzer-ml[serve]' ({exc.name} is missing)") from None


def _store(data: Path, db: str | None) -> Any:
    from ..serve.settings import Settings
    from ..serve.store import Store

    settings = Settings(data=data, db_url=db)
    settings.make_dirs()
    store = Store(settings.database_url)
    try:
        store.migrate()
    except Exception as exc:
        raise UsageError(f"cannot open the database {settings.database_url.split('@')[-1]}: "
                         f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from None
    return store


@click.group("serve", invoke_without_command=True)
@click.option("--data", type=click.Path(file_okay=False, path_type=Path), default=DEFAULT_DATA, show_default=True,
              help="Folder of the service: the SQLite database (by default), the traces and the reports.")
@click.option("--db", "db", metavar="URL",
              help="Database URL, e.g. postgresql://user@host/db. Default: SQLite in DATA.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True)
@click.option("--jobs", type=click.IntRange(1, 256), default=1, show_default=True,
              help="Analyses run at the same time (each in its own process).")
@click.option("--scheduler", metavar="ADDRESS",
              help="Run each analysis' per-rank tasks on a Dask cluster (e.g. tcp://10.0.0.5:8786); its workers "
                   "must see DATA at the same absolute path. Needs pip install 'traceanalyzer-ml[dask]'.")
@click.option("--max-upload", "max_upload", type=SizeType(), default="8GiB", show_default=True,
              help="Largest upload (one request); refused with 413 before more is read.")
@click.option("--max-unpacked", "max_unpacked", type=SizeType(), default="16GiB", show_default=True,
              help="Largest inflated gzip stream or unpacked archive (also the analysis' --max-input-size).")
@click.option("--job-timeout", "job_timeout_ns", type=DurationType(1_000_000_000, 7 * 24 * 3_600_000_000_000),
              default="1h", show_default=True, help="Wall-clock limit of one analysis.")
@click.option("--job-memory", "job_memory", type=SizeType(), default="8GiB", show_default=True,
              help="Address-space limit of one analysis process.")
@click.option("--private", is_flag=True, help="Reading needs a token too (bearer header, or log in on /login).")
@click.option("--public-url", metavar="URL", help="Base of absolute links (PR comments). Default: from the request.")
@click.option("--keep-traces", "keep_traces_s", type=ParsedType("AGE", _age), metavar="AGE",
              help="Remove uploaded traces older than AGE (e.g. 30d, 12h); their analyses are kept. Default: keep.")
@click.pass_context
def serve_command(ctx: click.Context, data: Path, db: str | None, host: str, port: int, jobs: int,
                  scheduler: str | None, max_upload: int,
                  max_unpacked: int, job_timeout_ns: int, job_memory: int, private: bool,
                  public_url: str | None, keep_traces_s: float | None) -> None:
    """Serve uploaded traces and their reports over HTTP (needs pip install 'traceanalyzer-ml[serve]').

    \b
    Start it, make a token, upload from CI:
      traceanalyzer serve --data ta-data &
      TOKEN=$(traceanalyzer serve token create --data ta-data --project demo)
      curl -H "Authorization: Bearer $TOKEN" -H "Content-Type: application/octet-stream" \\
           -H "X-Filename: trace.json" --data-binary @trace.json \\
           "http://127.0.0.1:8000/api/v1/projects/demo/runs?branch=main&commit=abc123"
    """
    if ctx.invoked_subcommand is not None:
        return
    _need_extra()
    import uvicorn

    from ..serve.app import create_app
    from ..serve.settings import Settings

    settings = Settings(data=data, db_url=db, max_upload_bytes=max_upload, max_unpacked_bytes=max_unpacked,
                        jobs=jobs, job_timeout_s=job_timeout_ns / 1e9, job_memory_bytes=job_memory, private=private,
                        public_url=public_url.rstrip("/") if public_url else None, keep_traces_s=keep_traces_s,
                        scheduler=scheduler)
    _store(data, db).close()  # a bad database URL is one line here, not a traceback from the server
    app = create_app(settings)
    click.echo(f"traceanalyzer: serving {data} on http://{host}:{port} (Ctrl-C to stop)", err=True)
    # limit_concurrency: past it, new connections get 503 instead of exhausting the process
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False, server_header=False,
                limit_concurrency=1000, timeout_keep_alive=10)


@serve_command.group("token")
def token_group() -> None:
    """API tokens: one project each, read-only or allowed to upload."""


@token_group.command("create")
@click.option("--data", type=click.Path(file_okay=False, path_type=Path), default=DEFAULT_DATA, show_default=True)
@click.option("--db", "db", metavar="URL", help="Database URL (default: SQLite in DATA).")
@click.option("--project", required=True, help="The project the token may read (and upload to).")
@click.option("--read-only", is_flag=True, help="The token may read, not upload.")
def token_create(data: Path, db: str | None, project: str, read_only: bool) -> None:
    """Print a new token alone on standard output (it is stored hashed: shown once)."""
    _need_extra()
    from ..serve.uploads import PROJECT_RE

    if not PROJECT_RE.match(project):
        raise UsageError(f"--project {project!r}: 1 to 64 of A-Z a-z 0-9 . _ - (starting with a letter or digit)")
    store = _store(data, db)
    try:
        token = store.create_token(project, read_only)
    finally:
        store.close()
    sys.stdout.write(token + "\n")
