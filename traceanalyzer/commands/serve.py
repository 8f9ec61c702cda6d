"""`traceanalyzer serve`: the web service (uploads, analysis jobs, reports), `serve worker`, `serve token
create|list|revoke`, and `serve audit` (who wrote what)."""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Iterator
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


@contextlib.contextmanager
def _opened(data: Path, db: str | None) -> Iterator[Any]:
    """The service's store for one command (the token commands), closed after."""
    _need_extra()
    store = _store(data, db)
    try:
        yield store
    finally:
        store.close()


def _store(data: Path, db: str | None) -> Any:
    from ..serve.settings import Settings
    from ..serve.store import Store

    settings = Settings(data=data, db_url=db)
    settings.make_dirs()
    store = Store(settings.database_url)
    try:
        store.migrate()
    except Exception as exc:  # what the database driver raises (sqlite3, psycopg: no common base), one line
        raise UsageError(f"cannot open the database {settings.database_url.split('@')[-1]}: "
                         f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from None
    return store


def _check_blobs(settings: Any) -> None:
    """A bad --blob-store (URL, bucket, credentials) is one line at start; a store that cannot be reached
    now is a warning (uploads get 503 and jobs wait until it is back)."""
    if not settings.blob_store:
        return
    from ..serve.blobs import BlobRefused, BlobUnavailable, S3Blobs, parse_s3_url

    try:
        parse_s3_url(settings.blob_store)
        S3Blobs(settings.blob_store, settings.data / "cache").check()
    except (ValueError, BlobRefused) as exc:
        raise UsageError(f"--blob-store: {exc}") from None
    except BlobUnavailable as exc:
        click.echo(f"traceanalyzer: warning: {exc}", err=True)


def _worker_options(f: Any) -> Any:
    """The options of the analyses, shared by `serve` (web and worker in one) and `serve worker`."""
    options = [
        click.option("--jobs", type=click.IntRange(0, 256), default=1, show_default=True,
                     help="Analyses run at the same time (each in its own process); `serve --jobs 0`: a web "
                          "server only (run `serve worker` processes beside it)."),
        click.option("--scheduler", metavar="ADDRESS",
                     help="Run each analysis' per-rank tasks on a Dask cluster (e.g. tcp://10.0.0.5:8786); its "
                          "workers must see DATA at the same absolute path. Needs pip install "
                          "'traceanalyzer-ml[dask]'."),
        click.option("--max-unpacked", "max_unpacked", type=SizeType(), default="16GiB", show_default=True,
                     help="Largest inflated gzip stream or unpacked archive (also the analysis' --max-input-size)."),
        click.option("--job-timeout", "job_timeout_ns",
                     type=DurationType(1_000_000_000, 7 * 24 * 3_600_000_000_000),
                     default="1h", show_default=True, help="Wall-clock limit of one analysis."),
        click.option("--job-memory", "job_memory", type=SizeType(), default="8GiB", show_default=True,
                     help="Address-space limit of one analysis process."),
        click.option("--lease", "lease_ns", type=DurationType(1_000_000_000, 3_600_000_000_000), default="60s",
                     show_default=True,
                     help="A worker's hold on a job, renewed every third of it while the analysis runs; a job "
                          "whose worker was killed or cut off is taken by another worker once it expires."),
        click.option("--blob-store", "blob_store", metavar="s3://BUCKET/PREFIX",
                     help="Keep traces and reports in an S3-compatible object store (endpoint, region and "
                          "credentials from the AWS environment variables and ~/.aws, e.g. AWS_ENDPOINT_URL); "
                          "servers and workers on several machines then share only it and the database. "
                          "Needs pip install 'traceanalyzer-ml[s3]'. Default: in DATA."),
        click.option("--blob-retry", "blob_retry_ns", type=DurationType(100_000_000, 3_600_000_000_000),
                     default="30s", show_default=True, hidden=True,
                     help="A job that could not reach the object store is queued again this much later."),
        click.option("--keep-traces", "keep_traces_s", type=ParsedType("AGE", _age), metavar="AGE",
                     help="Remove uploaded traces older than AGE (e.g. 30d, 12h); their analyses are kept. "
                          "Default: keep."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


@click.group("serve", invoke_without_command=True)
@click.option("--data", type=click.Path(file_okay=False, path_type=Path), default=DEFAULT_DATA, show_default=True,
              help="Folder of the service: the SQLite database (by default), the traces and the reports.")
@click.option("--db", "db", metavar="URL",
              help="Database URL, e.g. postgresql://user@host/db. Default: SQLite in DATA.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True)
@_worker_options
@click.option("--max-upload", "max_upload", type=SizeType(), default="8GiB", show_default=True,
              help="Largest upload (one request); refused with 413 before more is read.")
@click.option("--private", is_flag=True, help="Reading needs a token too (bearer header, or log in on /login).")
@click.option("--public-url", metavar="URL", help="Base of absolute links (PR comments). Default: from the request.")
@click.option("--header-timeout", "header_timeout_ns", type=DurationType(100_000_000, 600_000_000_000),
              default="10s", show_default=True,
              help="Close a connection that has not sent a request's headers within this time.")
@click.option("--max-connections", type=click.IntRange(10, 1_000_000), default=2000, show_default=True,
              help="Connections served at once; past it, new requests get 503.")
@click.option("--max-uploads", type=click.IntRange(1, 10_000), default=4, show_default=True,
              help="Uploads handled at once; past it, an upload gets 503 with Retry-After before its body is read "
                   "(the pages stay fast under an upload flood).")
@click.option("--max-failures", type=click.IntRange(0, 1_000_000), default=10, show_default=True,
              help="Failed tokens, logins and refused writes a client may make in a minute before it gets 429 "
                   "for a minute (0: never throttled).")
@click.option("--session", "session_ns", type=DurationType(60_000_000_000, 30 * 86400 * 1_000_000_000),
              default="8h", show_default=True, help="Life of a browser login (its session ends then).")
@click.pass_context
def serve_command(ctx: click.Context, data: Path, db: str | None, host: str, port: int, jobs: int,
                  scheduler: str | None, max_upload: int, max_unpacked: int, job_timeout_ns: int, job_memory: int,
                  lease_ns: int, keep_traces_s: float | None, private: bool, public_url: str | None,
                  header_timeout_ns: int, max_connections: int, max_uploads: int, max_failures: int,
                  session_ns: int, blob_store: str | None, blob_retry_ns: int) -> None:
    """Serve uploaded traces and their reports over HTTP (needs pip install 'traceanalyzer-ml[serve]').

    \b
    Start it, make a token, upload from CI:
      traceanalyzer serve --data ta-data &
      TOKEN=$(traceanalyzer serve token create --data ta-data --project demo --name ci)
      curl -H "Authorization: Bearer $TOKEN" -H "Content-Type: application/octet-stream" \\
           -H "X-Filename: trace.json" --data-binary @trace.json \\
           "http://127.0.0.1:8000/api/v1/projects/demo/runs?branch=main&commit=abc123"

    \b
    Web and analyses in one process by default; for several machines, `serve --jobs 0` (web) and any
    number of `serve worker` processes on one PostgreSQL database and one shared DATA.
    """
    if ctx.invoked_subcommand is not None:
        return
    _need_extra()
    from ..serve.server import run_web
    from ..serve.settings import Settings

    settings = Settings(data=data, db_url=db, max_upload_bytes=max_upload, max_unpacked_bytes=max_unpacked,
                        jobs=jobs, job_timeout_s=job_timeout_ns / 1e9, job_memory_bytes=job_memory, private=private,
                        public_url=public_url.rstrip("/") if public_url else None, keep_traces_s=keep_traces_s,
                        scheduler=scheduler, lease_s=lease_ns / 1e9, header_timeout_s=header_timeout_ns / 1e9,
                        max_connections=max_connections, max_uploads=max_uploads, max_failures=max_failures,
                        session_s=session_ns / 1e9, blob_store=blob_store, blob_retry_s=blob_retry_ns / 1e9)
    _check_blobs(settings)
    _store(data, db).close()  # a bad database URL is one line here, not a traceback from the server
    click.echo(f"traceanalyzer: serving {data} on http://{host}:{port} (Ctrl-C to stop)", err=True)
    run_web(settings, host, port)


@serve_command.command("worker")
@click.option("--data", type=click.Path(file_okay=False, path_type=Path), default=DEFAULT_DATA, show_default=True,
              help="DATA of the service (the same folder as the web server's, e.g. on a shared file system).")
@click.option("--db", "db", metavar="URL", help="Database URL (default: SQLite in DATA).")
@_worker_options
def worker_command(data: Path, db: str | None, jobs: int, scheduler: str | None, max_unpacked: int,
                   job_timeout_ns: int, job_memory: int, lease_ns: int, keep_traces_s: float | None,
                   blob_store: str | None, blob_retry_ns: int) -> None:
    """Analyse the service's queued jobs (no web server): run any number, on any machine that sees the
    database and DATA. Stops on Ctrl-C or SIGTERM (an analysis under way is queued again)."""
    _need_extra()
    from ..serve.server import run_worker
    from ..serve.settings import Settings

    if jobs < 1:
        raise UsageError("--jobs: a worker runs at least one analysis at a time")
    settings = Settings(data=data, db_url=db, max_unpacked_bytes=max_unpacked, jobs=jobs,
                        job_timeout_s=job_timeout_ns / 1e9, job_memory_bytes=job_memory, scheduler=scheduler,
                        lease_s=lease_ns / 1e9, keep_traces_s=keep_traces_s, blob_store=blob_store,
                        blob_retry_s=blob_retry_ns / 1e9)
    _check_blobs(settings)
    _store(data, db).close()
    run_worker(settings)


@serve_command.command("audit")
@click.option("--data", type=click.Path(file_okay=False, path_type=Path), default=DEFAULT_DATA, show_default=True)
@click.option("--db", "db", metavar="URL", help="Database URL (default: SQLite in DATA).")
@click.option("--project", help="Only this project's writes.")
@click.option("--action", metavar="ACTION", help="Only this action, or those that start so (run., token.revoke).")
@click.option("--since", "since_s", type=ParsedType("AGE", _age), metavar="AGE",
              help="Only the last AGE (e.g. 7d, 12h). Default: all.")
@click.option("--limit", type=click.IntRange(1, 100_000), default=100, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line instead of a table.")
def audit_command(data: Path, db: str | None, project: str | None, action: str | None, since_s: float | None,
                  limit: int, as_json: bool) -> None:
    """The audit of writes, newest first: when (UTC), who (token name and id, or the command line's user),
    from where (client address, or cli user@host), what (upload, project made, delete, cancel, token made
    or revoked) and on what. Only who can open the database sees it."""
    import json
    import time

    with _opened(data, db) as store:
        rows = store.audit_log(project, None if since_s is None else time.time() - since_s, action, limit)
    if as_json:
        for r in rows:
            click.echo(json.dumps(r, sort_keys=True))
        return
    head = ("WHEN", "WHO", "FROM", "ACTION", "PROJECT", "TARGET", "DETAIL")
    table = [head] + [(_when(r["at"]), r["actor"] + (f" (#{r['token_id']})" if r["token_id"] is not None else ""),
                       r["source"], r["action"], r["project"] or "-", r["target"] or "-",
                       " ".join((r["detail"] or "-").split())) for r in rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(head) - 1)]
    for r in table:
        click.echo("  ".join([*(c.ljust(w) for c, w in zip(r, widths, strict=False)), r[-1]]).rstrip())


@serve_command.group("token")
def token_group() -> None:
    """API tokens: one project each, read-only or allowed to upload; listed and revoked here."""


def _when(t: float | None) -> str:
    from datetime import datetime, timezone

    return "-" if t is None else datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%d %H:%M")


@token_group.command("create")
@click.option("--data", type=click.Path(file_okay=False, path_type=Path), default=DEFAULT_DATA, show_default=True)
@click.option("--db", "db", metavar="URL", help="Database URL (default: SQLite in DATA).")
@click.option("--project", required=True, help="The project the token may read (and upload to).")
@click.option("--read-only", is_flag=True, help="The token may read, not upload.")
@click.option("--name", metavar="TEXT", help="What the token is for (e.g. 'CI of resnet'); shown by `token list` "
                                             "and on the runs it uploads.")
@click.option("--created-by", metavar="TEXT", help="Who made it. Default: $USER.")
@click.option("--expires", "expires_s", type=ParsedType("AGE", _age), metavar="AGE",
              help="Refused after AGE (e.g. 90d, 12h). Default: never.")
def token_create(data: Path, db: str | None, project: str, read_only: bool, name: str | None,
                 created_by: str | None, expires_s: float | None) -> None:
    """Print a new token alone on standard output (it is stored hashed: shown once)."""
    import os
    import time

    _need_extra()
    from ..serve.uploads import PROJECT_RE

    if not PROJECT_RE.match(project):
        raise UsageError(f"--project {project!r}: 1 to 64 of A-Z a-z 0-9 . _ - (starting with a letter or digit)")
    for label, text in (("--name", name), ("--created-by", created_by)):
        if text is not None and (len(text) > 100 or any(ord(c) < 32 or ord(c) == 127 for c in text)):
            raise UsageError(f"{label}: at most 100 printable characters")
    from ..serve.store import cli_actor

    who = created_by or os.environ.get("USER") or None
    with _opened(data, db) as store:
        token = store.create_token(project, read_only, name=name, created_by=who,
                                   expires_at=None if expires_s is None else time.time() + expires_s,
                                   actor=cli_actor(who))
    sys.stdout.write(token + "\n")


@token_group.command("list")
@click.option("--data", type=click.Path(file_okay=False, path_type=Path), default=DEFAULT_DATA, show_default=True)
@click.option("--db", "db", metavar="URL", help="Database URL (default: SQLite in DATA).")
@click.option("--project", help="Only this project's tokens.")
def token_list(data: Path, db: str | None, project: str | None) -> None:
    """The tokens (never their value): id, project, role, name, who made it, when made, last used,
    expires, and whether revoked. Times in UTC."""
    import time

    with _opened(data, db) as store:
        rows = store.list_tokens(project)
    now = time.time()
    head = ("ID", "PROJECT", "ROLE", "NAME", "CREATED BY", "CREATED", "LAST USED", "EXPIRES", "STATE")
    table = [head]
    for t in rows:
        state = ("revoked" if t["revoked_at"] is not None
                 else "expired" if t["expires_at"] is not None and t["expires_at"] <= now else "active")
        table.append((str(t["id"]), t["project"], t["role"], t["name"] or "-", t["created_by"] or "-",
                      _when(t["created_at"]), _when(t["last_used_at"]), _when(t["expires_at"]), state))
    widths = [max(len(r[i]) for r in table) for i in range(len(head))]
    for r in table:
        click.echo("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())


@token_group.command("revoke")
@click.option("--data", type=click.Path(file_okay=False, path_type=Path), default=DEFAULT_DATA, show_default=True)
@click.option("--db", "db", metavar="URL", help="Database URL (default: SQLite in DATA).")
@click.argument("token_id", type=click.IntRange(1))
def token_revoke(data: Path, db: str | None, token_id: int) -> None:
    """Revoke the token with this ID (from `token list`): refused at once by every server."""
    from ..serve.store import cli_actor

    with _opened(data, db) as store:
        done = store.revoke_token(token_id, actor=cli_actor())
    if not done:
        raise UsageError(f"no active token with id {token_id} (see `traceanalyzer serve token list`)")
    click.echo(f"traceanalyzer: token {token_id} revoked", err=True)


@serve_command.group("oidc")
def oidc_group() -> None:
    """CI without stored secrets: which CI jobs may exchange their OIDC token for a short-lived token of a
    project (docs/ci-service.md)."""


@oidc_group.command("add")
@click.option("--data", type=click.Path(file_okay=False, path_type=Path), default=DEFAULT_DATA, show_default=True)
@click.option("--db", "db", metavar="URL", help="Database URL (default: SQLite in DATA).")
@click.option("--project", required=True, help="The project the tokens given are of.")
@click.option("--issuer", required=True, metavar="URL",
              help="The CI's OIDC issuer, e.g. https://token.actions.githubusercontent.com.")
@click.option("--audience", required=True, metavar="TEXT", help="The audience the CI job asks its token for.")
@click.option("--claim", "claims", multiple=True, metavar="NAME=VALUE", required=True,
              help="A claim the token must carry, e.g. repository=owner/repo (repeatable; at least one).")
@click.option("--jwks-url", metavar="URL",
              help="Where the issuer's keys are fetched from. Default: the issuer's discovery document's "
                   "jwks_uri (on the issuer's host), looked up now and stored.")
@click.option("--read-only", is_flag=True, help="The tokens given may read, not upload.")
@click.option("--ttl", "ttl_ns", type=DurationType(60_000_000_000, 86400 * 1_000_000_000), default="15min",
              show_default=True, help="Life of each token given.")
def oidc_add(data: Path, db: str | None, project: str, issuer: str, audience: str, claims: tuple[str, ...],
             jwks_url: str | None, read_only: bool, ttl_ns: int) -> None:
    """Let CI jobs of ISSUER with these claims exchange their OIDC token for a token of PROJECT."""
    _need_extra()
    from ..serve import oidc
    from ..serve.store import cli_actor
    from ..serve.uploads import PROJECT_RE

    if not PROJECT_RE.match(project):
        raise UsageError(f"--project {project!r}: 1 to 64 of A-Z a-z 0-9 . _ - (starting with a letter or digit)")
    required: dict[str, str] = {}
    for c in claims:
        name, sep, value = c.partition("=")
        if not sep or not name or not value:
            raise UsageError(f"--claim {c!r}: NAME=VALUE, e.g. repository=owner/repo")
        required[name] = value
    try:
        url = jwks_url or oidc.discover_jwks_url(issuer)
        with _opened(data, db) as store:
            policy_id = oidc.add_policy(store, project, issuer, audience, url, required, read_only, ttl_ns / 1e9,
                                        created_by=cli_actor().name, actor=cli_actor())
    except oidc.OidcError as exc:
        raise UsageError(exc.message) from None
    click.echo(f"traceanalyzer: OIDC policy #{policy_id} of project {project}: issuer {issuer}, keys from {url}",
               err=True)


@oidc_group.command("list")
@click.option("--data", type=click.Path(file_okay=False, path_type=Path), default=DEFAULT_DATA, show_default=True)
@click.option("--db", "db", metavar="URL", help="Database URL (default: SQLite in DATA).")
@click.option("--project", help="Only this project's policies.")
def oidc_list(data: Path, db: str | None, project: str | None) -> None:
    """The OIDC policies: id, project, issuer, audience, required claims, role, token life, keys URL."""
    import json

    from ..serve import oidc

    with _opened(data, db) as store:
        rows = oidc.policies(store, project)
    for p in rows:
        click.echo(f"#{p.id}  {p.project}  issuer {p.issuer}  audience {p.audience}  claims {json.dumps(p.claims)}  "
                   f"{'read' if p.read_only else 'upload'}  {p.ttl_s:g} s  keys {p.jwks_url}")


@oidc_group.command("remove")
@click.option("--data", type=click.Path(file_okay=False, path_type=Path), default=DEFAULT_DATA, show_default=True)
@click.option("--db", "db", metavar="URL", help="Database URL (default: SQLite in DATA).")
@click.argument("policy_id", type=click.IntRange(1))
def oidc_remove(data: Path, db: str | None, policy_id: int) -> None:
    """Remove the OIDC policy with this ID (tokens it gave live out their short life)."""
    from ..serve import oidc
    from ..serve.store import cli_actor

    with _opened(data, db) as store:
        done = oidc.remove_policy(store, policy_id, actor=cli_actor())
    if not done:
        raise UsageError(f"no OIDC policy with id {policy_id} (see `traceanalyzer serve oidc list`)")
    click.echo(f"traceanalyzer: OIDC policy {policy_id} removed", err=True)
