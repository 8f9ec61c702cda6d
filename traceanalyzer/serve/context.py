"""What the routes share, passed to each handler explicitly: the settings, the store, the job runner, the
templates, the reports' cache, and the helpers every route uses (who is asking, may they read this run,
render a page, refuse with one line).

Who may do what (the routes only read `request.state.who` for a write; `guard.py` sets it):
* a write (any unsafe method) is checked once, before any route runs, by `guard.Guard`: not cross-site,
  a valid token that is not read-only (a bearer header for the API; the login cookie plus the page's CSRF
  token for a form), see `routes.writes`;
* reading is open, or needs a token with `--private` (bearer header, or the session the login form makes,
  `sessions.py`); a request that carries a token only sees that token's project (another project's run: 404);
* a client that keeps failing (unknown tokens, failed logins, refused writes) is throttled (`throttle.py`):
  429 + Retry-After on whatever credential it sends next; each failure is in the audit and the log.
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import hashlib
import json
import math
import re
import secrets
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import jinja2
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response

from . import history as hist
from . import sessions
from .blobs import blobs_of
from .jobs import JobRunner
from .settings import Settings, instance_name
from .store import Actor, Store, TokenInfo
from .throttle import Throttle

PAGE_SIZE = 50
RETRY_AFTER_S = 5  # a 503 while the database is away
RUN_ID_RE = re.compile(r"^[0-9a-f]{12}$")
VERDICT_RE = re.compile(r"^[a-z0-9_]{1,40}$")
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "form-action 'self'; frame-src 'self'; frame-ancestors 'self'; base-uri 'none'")
SECURITY_HEADERS = {"X-Content-Type-Options": "nosniff", "Referrer-Policy": "same-origin",
                    "Cross-Origin-Opener-Policy": "same-origin", "Cross-Origin-Resource-Policy": "same-origin"}


PROXY_HEADERS = ("x-forwarded-host", "x-forwarded-for", "x-forwarded-proto", "forwarded", "x-real-ip")


class Refused(HTTPException):
    """A 4xx with one line for the client."""


def refuse(status: int, message: str, headers: dict[str, str] | None = None) -> Refused:
    return Refused(status_code=status, detail=message, headers=headers)


def throttled(retry_after_s: int) -> Refused:
    return refuse(429, f"too many failed tokens or logins from this address: try again in {retry_after_s} s",
                  {"Retry-After": str(retry_after_s)})


class Access:
    """Who is asking: the project and rights of the token the request carries, if any."""

    def __init__(self, project: str | None = None, read_only: bool = True, bearer: bool = False,
                 token_id: int | None = None) -> None:
        self.project = project
        self.read_only = read_only
        self.bearer = bearer
        self.token_id = token_id


def _checkout_templates() -> Path | None:
    """templates/serve of the source checkout this package runs from (a checkout's own templates win over
    those an editable install maps elsewhere); None for an installed wheel."""
    folder = Path(__file__).resolve().parents[2] / "templates" / "serve"
    return folder if (folder / "base.html.j2").is_file() else None


def _templates() -> jinja2.Environment:
    checkout = _checkout_templates()
    if checkout is not None:
        loader: jinja2.BaseLoader = jinja2.FileSystemLoader(checkout)
    else:
        loader = jinja2.PackageLoader("traceanalyzer.templates", "serve")
    env = jinja2.Environment(loader=loader, autoescape=True, trim_blocks=True, lstrip_blocks=True,
                             undefined=jinja2.StrictUndefined)
    env.filters["when"] = lambda t: datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    env.filters["size"] = lambda n: human(n)
    env.filters["figure"] = hist.figure
    return env


def human(n: int | None) -> str:
    from ..units import format_bytes

    return "" if n is None else format_bytes(int(n))


def static_file(name: str) -> bytes:
    checkout = _checkout_templates()
    if checkout is not None:
        return (checkout / name).read_bytes()
    try:
        from importlib.resources import files

        return (files("traceanalyzer.templates") / "serve" / name).read_bytes()
    except (ImportError, FileNotFoundError, ModuleNotFoundError, OSError):
        return (Path(__file__).resolve().parents[2] / "templates" / "serve" / name).read_bytes()


def _inline_hashes(html: str, tag: str) -> list[str]:
    """'sha256-...' of each inline <tag> block of a page we rendered ourselves (its data is escaped)."""
    blocks = re.findall(rf"<{tag}>(.*?)</{tag}>", html, re.DOTALL)
    return [f"'sha256-{base64.b64encode(hashlib.sha256(b.encode()).digest()).decode()}'" for b in blocks]


def report_csp(html: str) -> str:
    """The policy of a stored report (or diff) page: exactly its own inline scripts and styles."""
    scripts = " ".join(_inline_hashes(html, "script")) or "'none'"
    styles = " ".join(_inline_hashes(html, "style")) or "'none'"
    return (f"default-src 'none'; script-src {scripts}; style-src {styles}; style-src-attr 'unsafe-inline'; "
            f"img-src data: blob:; frame-ancestors 'self'; base-uri 'none'; form-action 'none'; "
            f"sandbox allow-scripts allow-downloads")


# Posted by a stored report to the run page that frames it: its height, each time it changes, so the frame
# shows it whole. The report is sandboxed (an opaque origin); it posts only to the service's own origin.
HEIGHT_SCRIPT = (
    "(function(){var o=%s,last=0;function h(){var d=document.documentElement,b=document.body;"
    "return Math.ceil(Math.max(d.getBoundingClientRect().height,b?b.getBoundingClientRect().bottom:0));}"
    "function post(){var n=h();if(Math.abs(n-last)<2){return;}last=n;"
    "parent.postMessage({traceanalyzerReportHeight:n},o);}"
    "if(window.ResizeObserver){new ResizeObserver(post).observe(document.documentElement);}"
    "window.addEventListener('load',post);post();})();")


def with_height_script(html: str, origin: str) -> str:
    """The stored page with the script that tells the page framing it its height (see HEIGHT_SCRIPT)."""
    script = "<script>" + HEIGHT_SCRIPT % json.dumps(origin).replace("<", "\\u003c") + "</script>"
    at = html.rfind("</body>")
    return html[:at] + script + html[at:] if at >= 0 else html + script


class Context:
    """The app's shared state and the helpers of its routes (one per app)."""

    def __init__(self, settings: Settings, run_jobs: bool = True) -> None:
        settings = dataclasses.replace(settings, data=settings.data.resolve(),  # analyses run in their own folder
                                       instance=settings.instance or instance_name())
        settings.make_dirs()
        self.settings = settings
        self.run_jobs = run_jobs and settings.jobs > 0
        self.db = Store(settings.database_url)
        self.runner = JobRunner(settings, self.db)
        self.env = _templates()
        self.reports = hist.Reports(functools.partial(blobs_of(settings).report, name="report.json"))
        self.histories = hist.HistoryCache()
        self.last_db_log = 0.0
        self.throttle = Throttle(limit=settings.max_failures)
        self._oidc: Any = None  # the OIDC exchange (oidc.py), made on first use
        self.uploads_active = 0  # upload requests being handled (routes/uploads.py caps them: --max-uploads)
        self.proxy_warned = False  # the one warning about a proxy without --public-url (base_url)
        self.disk_full_at = -1e9  # when an upload last found the disk full (health reports it a while) ...
        self.disk_full_free = 0  # ... unless more space is free now than then

    # -- who is asking
    @staticmethod
    def client(request: Request) -> str:
        return ((request.client.host if request.client else None) or "unknown")[:200]

    def check_throttle(self, request: Request) -> None:
        """Refuses (429 + Retry-After) a client that failed too often lately (see throttle.py)."""
        left = self.throttle.blocked(self.client(request))
        if left:
            raise throttled(left)

    def failed(self, request: Request, action: str, detail: str, who: Access | None = None) -> None:
        """A failed credential or a refused write: counted against the client (throttle), in the audit and
        in the log. Throttling bounds how many of these one client can write."""
        import sys

        client = self.client(request)
        blocked = self.throttle.failed(client)
        actor = Actor("anonymous", None, client)
        if who is not None and who.token_id is not None:
            actor = self.actor(request, who)
        project = who.project if who is not None else None
        target = f"{request.method} {request.url.path}"[:200]
        print(f"traceanalyzer serve: {action} from {client}: {detail} ({target})", file=sys.stderr)
        try:
            self.db.record(actor, action, project, target, detail)
            if blocked:
                self.db.record(actor, "client.throttle", project, target,
                               f"{self.throttle.limit} failures in {self.throttle.window_s:g} s: refused for "
                               f"{self.throttle.block_s:g} s")
        except Exception as exc:  # the audit is away with the database: the refusal stands
            print(f"traceanalyzer serve: audit not written: {type(exc).__name__}", file=sys.stderr)

    @property
    def oidc(self) -> Any:
        """The exchange of CI jobs' OIDC tokens (oidc.py; PyJWT loads on first use)."""
        if self._oidc is None:
            from .oidc import Exchanger

            self._oidc = Exchanger(self.db)
        return self._oidc

    def disk_full(self) -> None:
        """An upload found the disk full: health says so for a while (routes/site.py)."""
        import shutil
        import time

        self.disk_full_at = time.monotonic()
        try:
            self.disk_full_free = shutil.disk_usage(self.settings.data).free + 1
        except OSError:
            self.disk_full_free = 0

    def session(self, request: Request) -> TokenInfo | None:
        """The token of the browser's live session (looked up once per request)."""
        if not hasattr(request.state, "session"):
            request.state.session = sessions.lookup(self.db, request.cookies.get(sessions.COOKIE))
        found: TokenInfo | None = request.state.session
        return found

    def access(self, request: Request) -> Access:
        """The token of the request (bearer header; on GET and HEAD also the login session, ignored when it
        ended or its token was revoked or expired). A write's was checked by the guard already: it is taken
        from there. An unknown bearer token counts against the client (throttle.py)."""
        checked = getattr(request.state, "who", None)
        if isinstance(checked, Access):
            return checked
        header = request.headers.get("authorization")
        if header is not None:
            self.check_throttle(request)
            scheme, _, value = header.partition(" ")
            if scheme.lower() != "bearer" or not value.strip():
                self.failed(request, "token.fail", "an Authorization header that is not 'Bearer TOKEN'")
                raise refuse(401, "the Authorization header must be 'Bearer TOKEN'")
            found = self.db.token(value.strip())
            if found is None:
                self.failed(request, "token.fail", "unknown, expired or revoked token")
                raise refuse(401, "unknown token (or an expired or revoked one)")
            return Access(found.project, found.read_only, True, found.id)
        if request.method in ("GET", "HEAD"):
            found = self.session(request)  # a session that ended: logged out, not refused
            if found is not None:
                return Access(found.project, found.read_only, False, found.id)
        return Access()

    def actor(self, request: Request, who: Access) -> Actor:
        """Who made a write, for the audit: the token's name and id, and the client's address."""
        name = None
        if who.token_id is not None:
            name = self.db.token_names([who.token_id]).get(who.token_id)
        client = request.client.host if request.client else None
        return Actor(name or "anonymous", who.token_id, (client or "unknown")[:200])

    def may_read(self, who: Access, project: str) -> bool:
        if who.project is not None:
            return who.project == project
        return not self.settings.private

    def need_reader(self, who: Access) -> None:
        if self.settings.private and who.project is None:
            raise refuse(401, "this service is private: send a token (Authorization: Bearer TOKEN) or log in")

    def run_or_404(self, request: Request, run_id: str) -> tuple[dict[str, Any], Access]:
        who = self.access(request)
        self.need_reader(who)
        row = self.db.run(run_id) if RUN_ID_RE.match(run_id) else None
        if row is None or not self.may_read(who, row["project"]):
            raise refuse(404, f"no run {run_id[:40]!r}")
        return row, who

    def base_url(self, request: Request) -> str:
        """The base of absolute links (API answers, PR comments): `--public-url`, else the address this
        server answers on (its socket's), never the request's Host header, which the client (or a proxy)
        sets. Behind a proxy without `--public-url`, one warning in the log says to set it."""
        if self.settings.public_url:
            return self.settings.public_url.rstrip("/")
        if not self.proxy_warned and any(h in request.headers for h in PROXY_HEADERS):
            import sys

            self.proxy_warned = True
            print("traceanalyzer serve: a request came through a proxy (a forwarding header) but --public-url is "
                  "not set: absolute links use this server's own address; set --public-url to the address "
                  "people use", file=sys.stderr)
        server = request.scope.get("server")
        if not server or server[1] is None:
            return ""  # a socket without an address (a Unix socket): links stay relative
        host, port = str(server[0]), int(server[1])
        scheme = request.url.scheme
        if ":" in host:
            host = f"[{host}]"
        default = (scheme == "http" and port == 80) or (scheme == "https" and port == 443)
        return f"{scheme}://{host}" + ("" if default else f":{port}")

    def page_origin(self, request: Request) -> str:
        """The origin the browser showing this page uses (for postMessage between our own frames, never
        for a link that leaves the browser): `--public-url`, else what the browser asked for."""
        return (self.settings.public_url or str(request.base_url)).rstrip("/")

    def same_origin(self, request: Request, origin: str) -> bool:
        return origin.rstrip("/") in {str(request.base_url).rstrip("/"), self.base_url(request)}

    # -- what a run is, for the API and the pages
    def run_json(self, request: Request, row: dict[str, Any], shas: list[str] | None = None) -> dict[str, Any]:
        base = self.base_url(request)
        return {"id": row["id"], "project": row["project"], "branch": row["branch"], "commit": row["commit"],
                "status": row["status"], "error": row["error"], "verdict": row["verdict"],
                "step_time_ms": row["step_time_ms"], "gpu_idle": row["gpu_idle"], "size_bytes": row["size_bytes"],
                "files": row["files"], "tries": row["tries"], "created_at": row["created_at"],
                "finished_at": row["finished_at"], "url": f"{base}/runs/{row['id']}",
                "report_json": f"{base}/api/v1/runs/{row['id']}/report.json" if row["status"] == "done" else None,
                "sha256": shas if shas is not None else [f.sha256 for f in self.db.files(row["id"])],
                "uploaded_by": uploader(row), "setting": row.get("setting"), "repeat_of": row.get("repeat_of")}

    # -- pages
    def login_state(self, request: Request) -> str | None:
        """'project (token name)' of the browser's login, or None (logged out, or its token revoked)."""
        if not request.cookies.get(sessions.COOKIE):
            return None
        try:
            found = self.session(request)
        except Exception:
            return None
        if found is None:
            return None
        names = self.db.token_names([found.id])
        return f"{found.project} · {names.get(found.id, 'token')}"

    def page(self, request: Request, template: str, status: int = 200, **context: Any) -> HTMLResponse:
        token = request.cookies.get("ta_csrf") or secrets.token_urlsafe(24)
        html = self.env.get_template(template).render(csrf=token, private=self.settings.private,
                                                      public_url=self.settings.public_url,
                                                      login=self.login_state(request), **context)
        resp = HTMLResponse(html, status_code=status)
        if request.cookies.get("ta_csrf") != token:
            resp.set_cookie("ta_csrf", token, httponly=True, samesite="strict", path="/")
        return resp

    def error_response(self, request: Request, status: int, message: str,
                       headers: dict[str, str] | None = None) -> Response:
        """One line: {"error": ...} for the API and scripts, the error page for a browser."""
        if request.url.path.startswith("/api/") or "text/html" not in request.headers.get("accept", ""):
            resp: Response = JSONResponse({"error": message}, status_code=status)
        else:
            resp = self.page(request, "error.html.j2", status=status, status_code=status, message=message)
        if status == 413:
            resp.headers["Connection"] = "close"  # the rest of the body is not read
        for k, v in (headers or {}).items():
            resp.headers[k] = v
        return resp


def uploader(row: dict[str, Any]) -> str | None:
    """The token that uploaded a run: its name and id (never its value)."""
    if row.get("token_id") is None:
        return None
    name = row.get("token_name")
    return f"{name} (token #{row['token_id']})" if name else f"token #{row['token_id']}"


# -- parameters
def text_param(value: str | None, name: str, limit: int) -> str | None:
    if value is None or value == "":
        return None
    if len(value) > limit or any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise refuse(400, f"bad {name}: at most {limit} printable characters")
    return value


def order_param(value: str | None) -> float | None:
    """`order`: the run's place in its branch's history (e.g. the commit's time); a finite number."""
    if value is None or value == "":
        return None
    try:
        number = float(value[:40])
    except ValueError:
        raise refuse(400, "bad order: a number (e.g. the commit's time in seconds)") from None
    if not math.isfinite(number):
        raise refuse(400, "bad order: a finite number")
    return number


def day_param(value: str, name: str) -> float | None:
    if not value:
        return None
    try:
        day = datetime.strptime(value, "%Y-%m-%d").replace(tzinfo=timezone.utc)
    except ValueError:
        raise refuse(400, f"bad {name}: a date, YYYY-MM-DD") from None
    return day.timestamp()
