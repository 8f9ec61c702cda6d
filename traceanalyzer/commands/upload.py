"""`traceanalyzer upload TRACE... --server URL --project P`: the CI client of `traceanalyzer serve`.

Streams the trace(s) to the service (progress on stderr), prints the run's URL; with --wait (implied by
--fail-on and --comment) waits for the analysis, compares the run with the last runs of --base-branch
on the server (GET /api/v1/runs/{id}/compare: the gates are evaluated there as `diff --fail-on` does)
and writes the pull-request comment. The token is read from $TRACEANALYZER_TOKEN, never from the
command line (where other users of the machine and CI logs could see it). Standard library only: the
client needs no extra package.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode, urlsplit

import click
import orjson

from ..errors import EXIT_INTERNAL, GateFailed, TraceAnalyzerError, UsageError
from ..inert import terminal

if TYPE_CHECKING:  # the HTTP client, tar and temporary files load when a command uses them, not for --help
    import http.client

TOKEN_ENV = "TRACEANALYZER_TOKEN"
CHUNK = 1 << 20
POLL_S = (0.5, 1.0, 2.0, 5.0)  # waits between polls of the run's status, the last repeated
OIDC_ENV = "TRACEANALYZER_OIDC_TOKEN"  # a CI job's OIDC token (GitLab: an `id_tokens` variable)
BUSY_WAIT_S = 600.0  # how long an upload answered 503 + Retry-After (the service busy) is tried again


def _retry_after(status: int, header: str | None) -> float | None:
    """The wait a service answering 503 asked for (its uploads at their cap, its database restarting), or
    None: not a 503 with a Retry-After of seconds (at most a minute)."""
    if status != 503 or header is None or not header.strip().isdigit():
        return None
    return float(min(int(header.strip()), 60))


class ServerError(TraceAnalyzerError):
    """The service failed (5xx), could not be reached, or the analysis did not finish in time. Exit code 3."""

    exit_code = EXIT_INTERNAL


UPLOAD_HELP = f"""Upload traces to a `traceanalyzer serve` service, wait for the analysis, compare with
the base branch's last runs there, and write the pull-request comment.

\b
Examples:
  export TRACEANALYZER_TOKEN=...   # the project's token, from your CI's secrets
  traceanalyzer upload trace.json --server https://perf.example.com --project resnet \\
      --branch main --commit "$GITHUB_SHA"
  traceanalyzer upload trace.json --server https://perf.example.com --project resnet \\
      --branch "$GITHUB_HEAD_REF" --commit "$SHA" --fail-on step_time:+5% --comment comment.md

\b
The token is read from ${TOKEN_ENV} (`traceanalyzer serve token create --project P`). Each TRACE is a
file (.json, .json.gz, ...); a directory (a log dir, a directory of ranks) is sent as a tar.gz. The
run's URL is printed on stdout; progress goes to stderr. --fail-on and --comment imply --wait. The
comparison takes the last --last runs of --base-branch that are analysed (uploaded before this run
when it is on that branch itself); with none, the comment says so and no gate is evaluated. The
comment (Markdown: links to the served report, the compare page and the branch's history, then the
diff) goes to --comment FILE, else is appended to $GITHUB_STEP_SUMMARY when that is set.

\b
Exit status: 0 ok, 1 a gate failed (the comment is written first), 2 bad input or usage (no token,
a refused upload, an analysis that failed on the trace), 3 the server failed or was unreachable, or
the analysis did not finish within --timeout.
More: docs/ci-service.md (GitHub Actions workflows, pull requests from forks).
"""


class Client:
    """Requests to the service, each on a fresh connection (uploads may take long; CI runs few requests)."""

    def __init__(self, server: str, token: str) -> None:
        parts = urlsplit(server)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise UsageError(f"--server {server!r}: expected http://HOST[:PORT] or https://HOST[:PORT]")
        self.scheme, self.host, self.port = parts.scheme, parts.hostname, parts.port
        self.prefix = parts.path.rstrip("/")
        self.token = token
        self.server = server.rstrip("/")
        self.retry_after: str | None = None  # the last answer's Retry-After header

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        import http.client

        cls = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
        return cls(self.host, self.port, timeout=timeout)

    def request(self, method: str, path: str, body: Iterator[bytes] | None = None,
                headers: dict[str, str] | None = None, timeout: float = 120.0) -> tuple[int, bytes]:
        import http.client

        conn = self._connection(timeout)
        try:
            conn.putrequest(method, self.prefix + path)
            for k, v in {"Authorization": f"Bearer {self.token}", "Accept": "application/json",
                         **(headers or {})}.items():
                conn.putheader(k, v)
            conn.endheaders()
            if body is not None:
                try:
                    for block in body:
                        conn.send(block)
                except (BrokenPipeError, ConnectionResetError):  # answered before the body was read (413,
                    pass  # 503 + Retry-After): its answer may be there to read; if not, it fails below
            resp = conn.getresponse()
            self.retry_after = resp.getheader("Retry-After")
            return resp.status, resp.read(16 * 1024**2)
        except (OSError, http.client.HTTPException) as exc:
            raise ServerError(f"{self.server}: cannot reach the service ({type(exc).__name__}: {exc})") from None
        finally:
            conn.close()

    def json(self, method: str, path: str, expect: tuple[int, ...] = (200,), **kw: Any) -> dict[str, Any]:
        """The JSON reply of a request answered with one of the `expect` statuses; any other status is an
        error (a redirect too: it is not followed, so the token never goes to another address)."""
        status, data = self.request(method, path, **kw)
        return self.reply(status, data, method, path, expect)

    def reply(self, status: int, data: bytes, method: str, path: str, expect: tuple[int, ...]) -> dict[str, Any]:
        try:
            reply = json.loads(data) if data else {}
        except ValueError:
            reply = {}
        if not isinstance(reply, dict):
            reply = {}
        if status in expect:
            return reply
        if status >= 500:
            raise ServerError(f"{self.server}: the service failed ({status}): {reply.get('error', '')}".rstrip(": "))
        if 400 <= status < 500:
            why = reply.get("error") or data[:200].decode(errors="replace")
            raise UsageError(f"{self.server}: refused ({status}): {why}")
        if 300 <= status < 400:
            raise ServerError(f"{self.server}: answered a redirect ({status}), not followed (the token is sent "
                              f"to --server only): give the service's final address as --server")
        raise ServerError(f"{self.server}: unexpected answer ({status}) to {method} {path.split('?')[0]}")


def ci_oidc_token(audience: str) -> str:
    """This CI job's OIDC token: ${OIDC_ENV}, else asked of GitHub Actions for `audience`
    ($ACTIONS_ID_TOKEN_REQUEST_URL / _TOKEN, there when the job has `permissions: id-token: write`)."""
    import urllib.request
    from urllib.parse import quote

    given = os.environ.get(OIDC_ENV, "").strip()
    if given:
        return given
    url, bearer = os.environ.get("ACTIONS_ID_TOKEN_REQUEST_URL"), os.environ.get("ACTIONS_ID_TOKEN_REQUEST_TOKEN")
    if not url or not bearer:
        raise UsageError(f"--oidc-audience: no OIDC token: set {OIDC_ENV}, or run in GitHub Actions with "
                         f"`permissions: id-token: write`")
    req = urllib.request.Request(f"{url}&audience={quote(audience, safe='')}",
                                 headers={"Authorization": f"Bearer {bearer}", "Accept": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:  # noqa: S310 (the CI service's own address)
            value = json.loads(resp.read(1 << 20)).get("value")
    except (OSError, ValueError) as exc:
        raise ServerError(f"cannot get this job's OIDC token: {type(exc).__name__}") from None
    if not isinstance(value, str) or not value:
        raise ServerError("the CI service gave no OIDC token")
    return value


def oidc_token_for(client: Client, project: str, jwt_text: str) -> str:
    """A short-lived token of `project` in exchange for the job's OIDC token (POST .../oidc-token)."""
    client.token = jwt_text
    reply = client.json("POST", f"/api/v1/projects/{quote(project, safe='')}/oidc-token", expect=(201,))
    token = reply.get("token")
    if not isinstance(token, str) or not token:
        raise ServerError(f"{client.server}: the OIDC exchange gave no token")
    return token


def _parts(paths: list[Path], tmp: Path) -> list[Path]:
    """The files to send: a directory becomes a tar.gz of it (made in `tmp`)."""
    import tarfile

    out = []
    for i, p in enumerate(paths):
        if p.is_dir():
            target = tmp / f"{p.resolve().name or 'upload'}.tar.gz"
            if target.exists():
                target = tmp / f"{i}-{target.name}"
            with tarfile.open(target, "w:gz") as t:  # its content at the archive's root, as the folder was
                for child in sorted(p.iterdir()):
                    t.add(child, arcname=child.name)
            out.append(target)
        elif p.is_file():
            out.append(p)
        else:
            raise UsageError(f"{p}: no such file or directory")
    return out


def _multipart(files: list[Path], boundary: str) -> tuple[list[bytes | Path], int]:
    """A multipart/form-data body as pieces (bytes, or a file streamed in chunks) and its length."""
    pieces: list[bytes | Path] = []
    for f in files:
        name = f.name.replace('"', "_").replace("\r", "_").replace("\n", "_")
        pieces.append(f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{name}"\r\n'
                      f"Content-Type: application/octet-stream\r\n\r\n".encode())
        pieces.append(f)
        pieces.append(b"\r\n")
    pieces.append(f"--{boundary}--\r\n".encode())
    return pieces, sum(p.stat().st_size if isinstance(p, Path) else len(p) for p in pieces)


def _stream(pieces: list[bytes | Path], total: int, quiet: bool) -> Iterator[bytes]:
    sent = 0
    shown = -1
    start = time.monotonic()
    for piece in pieces:
        blocks: Iterator[bytes]
        if isinstance(piece, Path):
            def read(path: Path = piece) -> Iterator[bytes]:
                with open(path, "rb") as fh:
                    while block := fh.read(CHUNK):
                        yield block
            blocks = read()
        else:
            blocks = iter([piece])
        for block in blocks:
            yield block
            sent += len(block)
            pct = int(100 * sent / max(total, 1))
            if not quiet and (pct // 10 > shown // 10 or sent == total):
                shown = pct
                rate = sent / max(time.monotonic() - start, 1e-3) / 1024**2
                click.echo(f"traceanalyzer: uploading {pct:3d}% ({sent / 1024**2:.1f} of {total / 1024**2:.1f} MiB, "
                           f"{rate:.1f} MiB/s)", err=True)


def upload_files(client: Client, project: str, paths: list[Path], fields: dict[str, str],
                 quiet: bool) -> dict[str, Any]:
    import tempfile

    query = urlencode({k: v for k, v in fields.items() if v})
    path = f"/api/v1/projects/{quote(project, safe='')}/runs" + (f"?{query}" if query else "")
    with tempfile.TemporaryDirectory(prefix="ta-upload-") as tmp:
        files = _parts(paths, Path(tmp))
        if len(files) == 1:
            size = files[0].stat().st_size
            headers = {"Content-Type": "application/octet-stream", "X-Filename": files[0].name,
                       "Content-Length": str(size)}
            pieces: list[bytes | Path] = [files[0]]
        else:
            boundary = "ta" + secrets.token_hex(16)
            pieces, size = _multipart(files, boundary)
            headers = {"Content-Type": f"multipart/form-data; boundary={boundary}", "Content-Length": str(size)}
        deadline = time.monotonic() + BUSY_WAIT_S
        while True:  # a busy service (503 + Retry-After: its uploads at their cap) is tried again a while
            status, data = client.request("POST", path, body=_stream(pieces, size, quiet), headers=headers,
                                          timeout=600)
            wait = _retry_after(status, client.retry_after)
            if wait is None or time.monotonic() + wait > deadline:
                break
            if not quiet:
                click.echo(f"traceanalyzer: the service is busy; trying again in {wait:g} s", err=True)
            time.sleep(wait)
        reply = client.reply(status, data, "POST", path, expect=(201,))
    if not isinstance(reply.get("id"), str) or not reply["id"]:
        raise ServerError(f"{client.server}: the upload was answered without a run id")
    return reply


def wait_for(client: Client, run_id: str, timeout_s: float, quiet: bool) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    said = None
    for n in range(10**9):
        try:
            run = client.json("GET", f"/api/v1/runs/{run_id}")
        except ServerError:  # the service is away for a moment (503 while its database restarts): poll on
            if time.monotonic() > deadline:
                raise
            time.sleep(POLL_S[-1])
            continue
        status = run.get("status")
        if status in ("done", "failed", "canceled"):
            return run
        if not quiet and status != said:
            click.echo(f"traceanalyzer: run {run_id} is {status}", err=True)
            said = status
        if time.monotonic() > deadline:
            raise ServerError(f"run {run_id} is still {status} after {timeout_s:g} s (--timeout)")
        time.sleep(POLL_S[min(n, len(POLL_S) - 1)])
    raise AssertionError("unreachable")


def _write_comment(text: str, target: Path | None) -> Path | None:
    if target is None:
        summary = os.environ.get("GITHUB_STEP_SUMMARY")
        if not summary:
            return None
        with open(summary, "a", encoding="utf-8") as fh:  # the job summary: other steps' text stays
            fh.write(text)
        return Path(summary)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")
    return target


@click.command("upload", help=UPLOAD_HELP)
@click.argument("traces", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--server", required=True, metavar="URL", help="The service, e.g. https://perf.example.com.")
@click.option("--project", required=True, metavar="P", help="The project (its token must be in $TRACEANALYZER_TOKEN).")
@click.option("--branch", metavar="B", help="The branch the traces were captured on.")
@click.option("--commit", metavar="SHA", help="The commit the traces were captured at.")
@click.option("--order", type=float, metavar="N",
              help="The run's place in its branch's history (e.g. the commit's time, `git log -1 --format=%ct`); "
                   "the history is in this order when every run has one, else in upload order.")
@click.option("--setting", metavar="TEXT",
              help="A label of the run's setting (e.g. a config's hash): runs of one commit and one label are "
                   "repeats, whose spread is the compare page's run-to-run allowance.")
@click.option("--repeat-of", "repeat_of", metavar="RUN",
              help="This capture repeats run RUN's setting (same code, same settings): counted with it for the "
                   "run-to-run allowance.")
@click.option("--base-branch", default="main", show_default=True, metavar="B",
              help="Compare with the last runs of this branch.")
@click.option("--last", default=5, show_default=True, type=click.IntRange(1, 50), metavar="N",
              help="At most N runs to compare with: the base branch's latest run and runs of its setting "
                   "(same commit and --setting, or --repeat-of it).")
@click.option("--fail-on", "fail_on", multiple=True, metavar="RULE",
              help="Exit 1 when RULE holds, as `diff --fail-on` (repeatable): step_time:+5%, gpu_idle>0.30, ...")
@click.option("--fail-on-unconfirmed", is_flag=True,
              help="step_time gates also fail on a likely_slower change (within run-to-run variation), as in diff.")
@click.option("--wait", is_flag=True, help="Wait for the analysis and compare (implied by --fail-on and --comment).")
@click.option("--comment", type=click.Path(path_type=Path, dir_okay=False), metavar="FILE",
              help="Write the pull-request comment here (default: append to $GITHUB_STEP_SUMMARY when set).")
@click.option("--timeout", "timeout_s", default=3600.0, show_default=True, type=click.FloatRange(1, 86400),
              metavar="S", help="Longest wait for the analysis, in seconds.")
@click.option("--json", "json_out", type=click.Path(path_type=Path, dir_okay=False), metavar="FILE",
              help="Also write the comparison as JSON (change_verdict, headline, gates, run and compare URLs) "
                   "for scripts (implies --wait).")
@click.option("--oidc-audience", "oidc_audience", metavar="AUD",
              help="Without a token: exchange this CI job's OIDC token (audience AUD) for a short-lived token of "
                   f"the project (the service's `serve oidc add` policy). The JWT is ${OIDC_ENV}, else GitHub "
                   "Actions' (the job needs `permissions: id-token: write`).")
@click.option("-q", "--quiet", is_flag=True, help="No progress on stderr.")
def upload_command(traces: tuple[Path, ...], server: str, project: str, branch: str | None, commit: str | None,
                   order: float | None, setting: str | None, repeat_of: str | None, base_branch: str, last: int,
                   fail_on: tuple[str, ...],
                   fail_on_unconfirmed: bool, wait: bool,
                   comment: Path | None, timeout_s: float, json_out: Path | None, oidc_audience: str | None,
                   quiet: bool) -> None:
    """Upload traces, wait, compare, write the comment (the help text is UPLOAD_HELP)."""
    from ..gates import parse_rules

    token = os.environ.get(TOKEN_ENV, "").strip()
    if not token and not oidc_audience:
        raise UsageError(f"no token: set {TOKEN_ENV} (traceanalyzer serve token create --project {project}), "
                         f"or use --oidc-audience in a CI job")
    parse_rules(fail_on)  # a bad rule is a usage error before anything is sent
    client = Client(server, token)
    if not token:
        assert oidc_audience is not None
        client.token = oidc_token_for(client, project, ci_oidc_token(oidc_audience))
    fields = {"branch": branch or "", "commit": commit or "", "order": "" if order is None else repr(order),
              "setting": setting or "", "repeat_of": repeat_of or ""}
    created = upload_files(client, project, list(traces), fields, quiet)
    run_id = str(created.get("id", ""))
    click.echo(created.get("url", f"{client.server}/runs/{run_id}"))
    if not (wait or fail_on or comment is not None or json_out is not None):
        return
    run = wait_for(client, run_id, timeout_s, quiet)
    if run["status"] == "failed":
        raise UsageError(f"run {run_id}: the analysis failed: {run.get('error') or 'no reason given'}")
    if run["status"] == "canceled":
        raise UsageError(f"run {run_id} was deleted on the server before its analysis ended")
    query = urlencode([("branch", base_branch), ("last", str(last)), *(("fail_on", r) for r in fail_on),
                       *([("fail_on_unconfirmed", "1")] if fail_on_unconfirmed else [])])
    result = client.json("GET", f"/api/v1/runs/{run_id}/compare?{query}")
    written = _write_comment(str(result.get("comment", "")), comment)
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_bytes(orjson.dumps({k: v for k, v in result.items() if k != "comment"},
                                          option=orjson.OPT_INDENT_2))
    if not quiet:
        line = result.get("headline") or f"no analysed run of {base_branch} to compare with"
        click.echo(f"traceanalyzer: {terminal(str(line))}", err=True)
        if written is not None:
            click.echo(f"traceanalyzer: comment written to {terminal(str(written))}", err=True)
    sys.stdout.flush()
    if result.get("failed"):
        raise GateFailed(str(result["failed"]))
