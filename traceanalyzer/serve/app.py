"""The routes: a JSON API for CI scripts and server-rendered pages beside it (jinja2, autoescaped).

Who may do what, on every route:
* an upload needs a bearer token of the project, not read-only (403 otherwise, 401 for an unknown token);
* reading is open, or needs a token with `--private` (bearer header, or the cookie the login form sets);
  a request that carries a token only sees that token's project (another project's run: 404);
* a form that changes something (login, logout, delete) carries the CSRF token of its page (a
  double-submitted cookie) and a same-origin Origin header when the browser sends one.

Every response carries a Content-Security-Policy that allows no request outside the service. A stored
report page is served in a sandboxed frame, with its own policy that allows exactly its inline script
and style (by hash). Every refusal is a 4xx with one line (`{"error": "..."}` on /api), never a traceback.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import errno
import hashlib
import hmac
import math
import re
import secrets
import shutil
import time
from collections.abc import AsyncIterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import jinja2
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import (
    FileResponse,
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
)
from starlette.routing import Route

from . import history as hist
from .body import receive
from .jobs import JobRunner, backfill_metrics, clean_leftovers, is_db_error, remove_run_files
from .settings import Settings, instance_name
from .store import STATUSES, Store, StoredFile
from .uploads import PROJECT_RE, UploadError, blob_path, place

PAGE_SIZE = 50
RETRY_AFTER_S = 5  # a 503 while the database is away
MIN_FREE_BYTES = 64 * 1024**2  # less free space in DATA (or 5% of a smaller disk): health says the storage is full
RUN_ID_RE = re.compile(r"^[0-9a-f]{12}$")
VERDICT_RE = re.compile(r"^[a-z0-9_]{1,40}$")
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "form-action 'self'; frame-src 'self'; frame-ancestors 'self'; base-uri 'none'")
SECURITY_HEADERS = {"X-Content-Type-Options": "nosniff", "Referrer-Policy": "same-origin",
                    "Cross-Origin-Opener-Policy": "same-origin", "Cross-Origin-Resource-Policy": "same-origin"}
STATIC = {"serve.css": "text/css; charset=utf-8", "upload.js": "text/javascript; charset=utf-8",
          "history.js": "text/javascript; charset=utf-8"}


FAVICON = (b'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16"><rect width="16" height="16" rx="3" '
           b'fill="#1f6feb"/><path d="M3 12h2V7H3zm4 0h2V4H7zm4 0h2V9h-2z" fill="#fff"/></svg>')


class Refused(HTTPException):
    """A 4xx with one line for the client."""


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
    env.filters["size"] = lambda n: _human(n)
    return env


def _human(n: int | None) -> str:
    from ..units import format_bytes

    return "" if n is None else format_bytes(int(n))


def _static(name: str) -> bytes:
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


def _report_csp(html: str) -> str:
    scripts = " ".join(_inline_hashes(html, "script")) or "'none'"
    styles = " ".join(_inline_hashes(html, "style")) or "'none'"
    return (f"default-src 'none'; script-src {scripts}; style-src {styles}; style-src-attr 'unsafe-inline'; "
            f"img-src data: blob:; frame-ancestors 'self'; base-uri 'none'; form-action 'none'; "
            f"sandbox allow-scripts allow-downloads")


class Access:
    """Who is asking: the project and rights of the token the request carries, if any."""

    def __init__(self, project: str | None = None, read_only: bool = True, bearer: bool = False,
                 token_id: int | None = None) -> None:
        self.project = project
        self.read_only = read_only
        self.bearer = bearer
        self.token_id = token_id


def create_app(settings: Settings, run_jobs: bool = True) -> Starlette:
    settings = dataclasses.replace(settings, data=settings.data.resolve(),  # analyses run in their own folder
                                   instance=settings.instance or instance_name())
    settings.make_dirs()
    run_jobs = run_jobs and settings.jobs > 0
    db = Store(settings.database_url)
    runner = JobRunner(settings, db)
    env = _templates()
    env.filters["figure"] = hist.figure
    reports = hist.Reports(settings.reports)
    histories = hist.HistoryCache()

    # -- helpers
    def is_api(request: Request) -> bool:
        return request.url.path.startswith("/api/")

    def refuse(status: int, message: str) -> Refused:
        return Refused(status_code=status, detail=message)

    def access(request: Request) -> Access:
        header = request.headers.get("authorization")
        token, bearer = None, False
        if header is not None:
            scheme, _, value = header.partition(" ")
            if scheme.lower() != "bearer" or not value.strip():
                raise refuse(401, "the Authorization header must be 'Bearer TOKEN'")
            token, bearer = value.strip(), True
        elif request.method in ("GET", "HEAD"):
            token = request.cookies.get("ta_token")
        if token is None:
            return Access()
        found = db.token(token)
        if found is None:
            raise refuse(401, "unknown token (or an expired or revoked one)")
        return Access(found.project, found.read_only, bearer, found.id)

    def may_read(who: Access, project: str) -> bool:
        if who.project is not None:
            return who.project == project
        return not settings.private

    def need_reader(who: Access) -> None:
        if settings.private and who.project is None:
            raise refuse(401, "this service is private: send a token (Authorization: Bearer TOKEN) or log in")

    def run_or_404(request: Request, run_id: str) -> tuple[dict[str, Any], Access]:
        who = access(request)
        need_reader(who)
        row = db.run(run_id) if RUN_ID_RE.match(run_id) else None
        if row is None or not may_read(who, row["project"]):
            raise refuse(404, f"no run {run_id[:40]!r}")
        return row, who

    def base_url(request: Request) -> str:
        return (settings.public_url or str(request.base_url)).rstrip("/")

    def run_json(request: Request, row: dict[str, Any], shas: list[str] | None = None) -> dict[str, Any]:
        base = base_url(request)
        return {"id": row["id"], "project": row["project"], "branch": row["branch"], "commit": row["commit"],
                "status": row["status"], "error": row["error"], "verdict": row["verdict"],
                "step_time_ms": row["step_time_ms"], "gpu_idle": row["gpu_idle"], "size_bytes": row["size_bytes"],
                "files": row["files"], "tries": row["tries"], "created_at": row["created_at"],
                "finished_at": row["finished_at"], "url": f"{base}/runs/{row['id']}",
                "report_json": f"{base}/api/v1/runs/{row['id']}/report.json" if row["status"] == "done" else None,
                "sha256": shas if shas is not None else [f.sha256 for f in db.files(row["id"])],
                "uploaded_by": uploader(row)}

    def uploader(row: dict[str, Any]) -> str | None:
        """The token that uploaded a run: its name and id (never its value)."""
        if row.get("token_id") is None:
            return None
        name = row.get("token_name")
        return f"{name} (token #{row['token_id']})" if name else f"token #{row['token_id']}"

    def login_state(request: Request) -> str | None:
        """'project (token name)' of the browser's login, or None (logged out, or its token revoked)."""
        cookie = request.cookies.get("ta_token")
        if not cookie:
            return None
        try:
            found = db.token(cookie)
        except Exception:
            return None
        if found is None:
            return None
        names = db.token_names([found.id])
        return f"{found.project} · {names.get(found.id, 'token')}"

    def csrf_token(request: Request) -> str:
        return request.cookies.get("ta_csrf") or secrets.token_urlsafe(24)

    def page(request: Request, template: str, status: int = 200, **context: Any) -> HTMLResponse:
        token = csrf_token(request)
        html = env.get_template(template).render(csrf=token, private=settings.private, login=login_state(request),
                                                 **context)
        resp = HTMLResponse(html, status_code=status)
        if request.cookies.get("ta_csrf") != token:
            resp.set_cookie("ta_csrf", token, httponly=True, samesite="strict", path="/")
        return resp

    async def checked_form(request: Request) -> dict[str, str]:
        """A small urlencoded form, after its CSRF check."""
        if request.headers.get("content-type", "").split(";")[0].strip() != "application/x-www-form-urlencoded":
            raise refuse(415, "expected a form (application/x-www-form-urlencoded)")
        origin = request.headers.get("origin")
        if origin is not None and origin.rstrip("/") not in {str(request.base_url).rstrip("/"), base_url(request)}:
            raise refuse(403, "cross-site form refused")
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > 10_000:
                raise refuse(413, "form too large")
        from urllib.parse import parse_qsl

        form = dict(parse_qsl(body.decode("utf-8", "replace")))
        cookie = request.cookies.get("ta_csrf", "")
        if not cookie or not hmac.compare_digest(cookie, form.get("csrf", "")):
            raise refuse(403, "cross-site form refused (missing or wrong CSRF token: reload the page)")
        return form

    # -- uploads
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

    async def upload(request: Request) -> Response:
        project = request.path_params["project"]
        if not PROJECT_RE.match(project):
            raise refuse(400, "bad project name: 1 to 64 of A-Z a-z 0-9 . _ - (starting with a letter or digit)")
        who = await run_in_threadpool(access, request)
        if not who.bearer or who.project is None:
            raise refuse(401, "an upload needs a token: Authorization: Bearer TOKEN "
                              "(traceanalyzer serve token create --project P)")
        if who.project != project:
            raise refuse(403, "this token is not for this project")
        if who.read_only:
            raise refuse(403, "this token is read-only")
        branch = text_param(request.query_params.get("branch"), "branch", 200)
        commit = text_param(request.query_params.get("commit"), "commit", 100)
        order = order_param(request.query_params.get("order"))
        try:
            received, fields = await receive(request, settings)
        except UploadError as exc:
            raise refuse(exc.status, exc.message) from None
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                raise refuse(507, "the server's disk is full: nothing was stored; try again later") from None
            raise
        except ClientDisconnect:  # the client went away mid-upload: what it sent is removed
            raise refuse(400, "the upload was cut off before its end") from None
        try:
            branch = branch or text_param(fields.get("branch"), "branch", 200)
            commit = commit or text_param(fields.get("commit"), "commit", 100)
            order = order if order is not None else order_param(fields.get("order"))
        except Refused:
            for r in received:
                r.tmp.unlink(missing_ok=True)
            raise
        stored = [StoredFile(r.sha256, r.name, r.size_bytes, r.kind) for r in received]
        try:
            run_id = await run_in_threadpool(db.create_run, project, branch, commit, stored, order, who.token_id,
                                             lambda: place(received, settings.traces))
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                raise refuse(507, "the server's disk is full: nothing was stored; try again later") from None
            raise
        finally:
            for r in received:  # a file already there, or a failed upload: its copy goes
                r.tmp.unlink(missing_ok=True)
        runner.wake.set()
        return JSONResponse({"id": run_id, "status": "queued", "url": f"{base_url(request)}/runs/{run_id}"},
                            status_code=201)

    # -- API reads
    def api_run(request: Request) -> Response:
        row, _ = run_or_404(request, request.path_params["run_id"])
        return JSONResponse(run_json(request, row))

    def report_file(request: Request, name: str) -> Path:
        row, _ = run_or_404(request, request.path_params["run_id"])
        if row["status"] != "done":
            raise refuse(409, f"run {row['id']} is {row['status']}: no report yet")
        path = settings.reports / row["id"] / name
        if not path.is_file():
            raise refuse(404, "the report is missing on disk")
        return path

    def api_report_json(request: Request) -> Response:
        return FileResponse(report_file(request, "report.json"), media_type="application/json")

    def report_md(request: Request) -> Response:
        return FileResponse(report_file(request, "report.md"), media_type="text/markdown; charset=utf-8")

    def comment_md(request: Request) -> Response:
        row, _ = run_or_404(request, request.path_params["run_id"])
        base = base_url(request)
        link = f"{base}/runs/{row['id']}"
        head = f"**traceanalyzer** run [{row['id']}]({link})"
        if row["branch"]:
            head += f" on `{_md_code(row['branch'])}`"
        if row["commit"]:
            head += f" at `{_md_code(row['commit'][:12])}`"
        if row["status"] != "done":
            text = f"{head}: {row['status']}" + (f" ({_md_code(row['error'])})" if row["error"] else "") + "\n"
        else:
            body = (settings.reports / row["id"] / "report.md").read_text("utf-8")
            text = (f"{head}: [full report]({link}) · [JSON]({base}/api/v1/runs/{row['id']}/report.json)\n\n"
                    f"{body}")
        return PlainTextResponse(text, media_type="text/markdown; charset=utf-8")

    def api_runs(request: Request) -> Response:
        who = access(request)
        need_reader(who)
        rows, total, filters, page_no = list_runs(request, who)
        shas = db.shas_of([r["id"] for r in rows])
        return JSONResponse({"total": total, "page": page_no, "page_size": PAGE_SIZE,
                             "runs": [run_json(request, r, shas.get(r["id"], [])) for r in rows]})

    def list_runs(request: Request, who: Access) -> tuple[list[dict[str, Any]], int, dict[str, str], int]:
        """The runs a request may see, filtered by project, branch, status, commit (or its start),
        verdict, and upload date (`since`, `until`: YYYY-MM-DD in UTC, both days included)."""
        q = request.query_params
        filters = {k: q.get(k, "").strip()[:200]
                   for k in ("project", "branch", "status", "commit", "verdict", "since", "until")}
        if filters["status"] and filters["status"] not in STATUSES:
            raise refuse(400, f"bad status: one of {', '.join(STATUSES)}")
        if filters["verdict"] and not VERDICT_RE.match(filters["verdict"]):
            raise refuse(400, "bad verdict: a verdict id such as input_bound")
        days = {k: day_param(filters[k], k) for k in ("since", "until")}
        if who.project is not None:
            if filters["project"] and filters["project"] != who.project:
                return [], 0, filters, 1
            filters["project"] = who.project
        try:
            page_no = max(1, min(int(q.get("page", "1")), 10**6))
        except ValueError:
            raise refuse(400, "bad page number") from None
        rows, total = db.list_runs(filters["project"] or None, filters["branch"] or None, filters["status"] or None,
                                   PAGE_SIZE, (page_no - 1) * PAGE_SIZE, commit=filters["commit"] or None,
                                   verdict=filters["verdict"] or None, since=days["since"],
                                   until=None if days["until"] is None else days["until"] + 86400)
        return rows, total, filters, page_no

    def day_param(value: str, name: str) -> float | None:
        if not value:
            return None
        try:
            day = datetime.strptime(value, "%Y-%m-%d").replace(tzinfo=timezone.utc)
        except ValueError:
            raise refuse(400, f"bad {name}: a date, YYYY-MM-DD") from None
        return day.timestamp()

    def download(request: Request) -> Response:
        row, _ = run_or_404(request, request.path_params["run_id"])
        files = db.files(row["id"])
        n = request.path_params["n"]
        if not (n.isascii() and n.isdigit() and int(n) < len(files)):
            raise refuse(404, "no such file in this run")
        f = files[int(n)]
        path = blob_path(settings.traces, f.sha256)
        if not path.is_file():
            raise refuse(410, "this run's trace was removed (the analysis is kept)")
        return FileResponse(path, media_type="application/octet-stream", filename=f.name)

    # -- deleting a run (its trace files too, unless another run has the same content)
    def remove(row: dict[str, Any], who: Access) -> str:
        """Deletes a run (its report, and its trace files unless another run has the same content); a run
        being analysed is canceled: its worker stops the analysis and removes it."""
        if who.project != row["project"] or who.read_only:
            raise refuse(403, "deleting a run needs a token of its project that is not read-only")
        outcome, shas = db.delete_run(row["id"])
        if outcome == "deleted":
            remove_run_files(settings, db, row["id"], shas)
        return outcome

    def api_delete(request: Request) -> Response:
        who = access(request)
        if not who.bearer:
            raise refuse(401, "deleting a run needs a token: Authorization: Bearer TOKEN")
        row, _ = run_or_404(request, request.path_params["run_id"])
        if remove(row, who) == "canceled":
            return JSONResponse({"id": row["id"], "status": "canceled"}, status_code=202)
        return Response(status_code=204)

    async def delete_form(request: Request) -> Response:
        await checked_form(request)
        token = request.cookies.get("ta_token")
        found = await run_in_threadpool(db.token, token) if token else None
        if found is None:
            raise refuse(401, "log in with a token of the run's project to delete it")
        run_id = request.path_params["run_id"]
        row = await run_in_threadpool(db.run, run_id) if RUN_ID_RE.match(run_id) else None
        if row is None or row["project"] != found.project:
            raise refuse(404, f"no run {run_id[:40]!r}")
        await run_in_threadpool(remove, row, Access(found.project, found.read_only, False, found.id))
        return RedirectResponse("/runs", status_code=303)

    # -- pages
    def runs_page(request: Request) -> Response:
        who = access(request)
        if settings.private and who.project is None:
            return RedirectResponse("/login", status_code=303)
        rows, total, filters, page_no = list_runs(request, who)
        pages = max(1, (total + PAGE_SIZE - 1) // PAGE_SIZE)

        def link(n: int) -> str:
            return "/runs?" + urlencode({**{k: v for k, v in filters.items() if v}, "page": n})

        return page(request, "runs.html.j2", runs=rows, total=total, filters=filters, page_no=page_no, pages=pages,
                    prev=link(page_no - 1) if page_no > 1 else None,
                    next=link(page_no + 1) if page_no < pages else None, statuses=STATUSES,
                    projects=[who.project] if who.project else db.project_names())

    def visible_projects(who: Access) -> list[dict[str, Any]]:
        return [p for p in db.project_summaries() if who.project is None or p["name"] == who.project]

    def projects_page(request: Request) -> Response:
        who = access(request)
        if settings.private and who.project is None:
            return RedirectResponse("/login", status_code=303)
        return page(request, "projects.html.j2", projects=visible_projects(who))

    def api_projects(request: Request) -> Response:
        who = access(request)
        need_reader(who)
        return JSONResponse({"projects": visible_projects(who)})

    def project_page(request: Request) -> Response:
        name = request.path_params["project"]
        if not PROJECT_RE.match(name):
            raise refuse(404, "no such project")
        return RedirectResponse("/runs?" + urlencode({"project": name}), status_code=302)

    def run_page(request: Request) -> Response:
        row, _ = run_or_404(request, request.path_params["run_id"])
        return page(request, "run.html.j2", run=row, files=db.files(row["id"]), uploaded_by=uploader(row))

    def report_html(request: Request) -> Response:
        html = report_file(request, "report.html").read_text("utf-8")
        return HTMLResponse(html, headers={"Content-Security-Policy": _report_csp(html)})

    def compare_sides(request: Request) -> tuple[dict[str, Any], dict[str, Any]] | None:
        q = request.query_params
        if not q.get("base") or not q.get("head"):
            return None
        sides = []
        for key in ("base", "head"):
            row, _ = run_or_404(request, q[key])
            if row["status"] != "done":
                raise refuse(409, f"run {row['id']} is {row['status']}: nothing to compare yet")
            sides.append(row)
        return sides[0], sides[1]

    def comparison(base: dict[str, Any], head: dict[str, Any]) -> Any:
        """One run against one: run-to-run variation from the base branch's runs up to the base run (their
        medians), when there are enough, else the default allowance."""
        import traceanalyzer as ta
        from traceanalyzer.compare import compare

        a, b = (ta.load(settings.reports / r["id"] / "report.json") for r in (base, head))
        earlier = db.history(base["project"], base["branch"], hist.LAST_BASES, exclude=base["id"],
                             before=base["created_at"]) if base.get("branch") else []
        history = []
        for r in earlier:
            try:
                history.append(reports.load(r["id"]))
            except Exception:  # a report removed or unreadable: left out of the history
                continue
        return compare(a, b, history=[a, *history] if history else ())

    def compare_page(request: Request) -> Response:
        who = access(request)
        if settings.private and who.project is None:
            return RedirectResponse("/login", status_code=303)
        sides = compare_sides(request)
        return page(request, "compare.html.j2", base=sides[0] if sides else None, head=sides[1] if sides else None,
                    q={k: request.query_params.get(k, "")[:40] for k in ("base", "head")})

    def compare_html(request: Request) -> Response:
        sides = compare_sides(request)
        if sides is None:
            raise refuse(400, "compare needs ?base=RUN&head=RUN")
        from traceanalyzer.report.diff import render_diff_html

        html = render_diff_html(comparison(*sides))
        return HTMLResponse(html, headers={"Content-Security-Policy": _report_csp(html)})

    def api_compare(request: Request) -> Response:
        sides = compare_sides(request)
        if sides is None:
            raise refuse(400, "compare needs ?base=RUN&head=RUN")
        from traceanalyzer.report.diff import render_diff_json

        return Response(render_diff_json(comparison(*sides)), media_type="application/json")

    # -- history: series per figure over a branch's runs, change points, comparison with a branch's last runs
    def project_or_404(request: Request) -> tuple[str, Access]:
        who = access(request)
        need_reader(who)
        name = request.path_params["project"]
        if not PROJECT_RE.match(name) or not may_read(who, name) or name not in db.project_names():
            raise refuse(404, f"no project {name[:64]!r}")
        return name, who

    def history_branch(request: Request, project: str) -> tuple[str | None, list[str]]:
        branches = db.branches(project)
        branch = text_param(request.query_params.get("branch"), "branch", 200)
        if branch is None:
            branch = "main" if "main" in branches else (branches[0] if branches else None)
        return branch, branches

    def history_of(request: Request, project: str, branch: str | None) -> dict[str, Any]:
        try:
            limit = int(request.query_params.get("runs", str(hist.DEFAULT_RUNS)))
        except ValueError:
            raise refuse(400, "bad runs: a number of runs") from None
        if not 2 <= limit <= hist.MAX_RUNS:
            raise refuse(400, f"bad runs: between 2 and {hist.MAX_RUNS}")
        rows = db.history(project, branch, limit)
        base = base_url(request)
        return histories.get(hist.cache_key(project, branch, base, rows),
                             lambda: hist.build(rows, reports, base, project, branch))

    def api_history(request: Request) -> Response:
        project, _ = project_or_404(request)
        branch, _ = history_branch(request, project)
        return JSONResponse(history_of(request, project, branch))

    def history_page(request: Request) -> Response:
        who = access(request)
        if settings.private and who.project is None:
            return RedirectResponse("/login", status_code=303)
        project, _ = project_or_404(request)
        branch, branches = history_branch(request, project)
        data = history_of(request, project, branch)
        return page(request, "history.html.j2", project=project, branch=branch, branches=branches, history=data,
                    charts=hist.charts(data), labels=hist.LABELS)

    def api_run_compare(request: Request) -> Response:
        """The run against the last runs of a branch (`?branch=main&last=5&fail_on=RULE...`): the diff,
        the gates evaluated as `diff --fail-on` does, and the pull-request comment."""
        from ..compare import with_gates
        from ..errors import UsageError
        from ..gates import evaluate_all, parse_rules
        from ..report.diff import render_diff_markdown

        row, _ = run_or_404(request, request.path_params["run_id"])
        if row["status"] != "done":
            raise refuse(409, f"run {row['id']} is {row['status']}: nothing to compare yet")
        q = request.query_params
        branch = text_param(q.get("branch"), "branch", 200) or "main"
        try:
            last = int(q.get("last", str(hist.LAST_BASES)))
        except ValueError:
            raise refuse(400, "bad last: a number of runs") from None
        if not 1 <= last <= 50:
            raise refuse(400, "bad last: between 1 and 50")
        texts = q.getlist("fail_on")
        if len(texts) > 20 or any(len(t) > 200 for t in texts):
            raise refuse(400, "too many or too long fail_on rules")
        try:
            rules = parse_rules(texts)
        except UsageError as exc:
            raise refuse(400, str(exc)) from None
        bases = db.history(row["project"], branch, last, exclude=row["id"],
                           before=row["created_at"] if row["branch"] == branch else None)
        base = base_url(request)
        comparison = markdown = None
        gates: list[dict[str, Any]] = []
        if bases:
            head = reports.load(row["id"])
            comparison = hist.compare_runs([reports.load(b["id"]) for b in bases], [head])
            unconfirmed = q.get("fail_on_unconfirmed", "") in ("1", "true")
            comparison = with_gates(comparison, evaluate_all(rules, head, comparison, fail_on_unconfirmed=unconfirmed))
            markdown = render_diff_markdown(comparison)
            gates = [dataclasses.asdict(g) for g in comparison.gates]
        text = hist.comment(base, row["project"], row, branch, bases, comparison, markdown)
        failed = [g for g in gates if not g["passed"]]
        return JSONResponse({
            "run": row["id"], "branch": branch, "bases": [b["id"] for b in bases],
            "change_verdict": comparison.change_verdict if comparison else None,
            "headline": comparison.headline if comparison else None,
            "comparison": comparison.to_data() if comparison else None, "gates": gates,
            "failed": "gate failed: " + "; ".join(f"{g['rule']} ({g['detail']})" for g in failed) if failed else None,
            "comment": text,
            "links": {"run": f"{base}/runs/{row['id']}",
                      "compare": f"{base}/compare?base={bases[-1]['id']}&head={row['id']}" if bases else None,
                      "history": f"{base}/projects/{row['project']}/history?" + urlencode({"branch": branch})}})

    def upload_page(request: Request) -> Response:
        return page(request, "upload.html.j2", max_upload=settings.max_upload_bytes)

    def login_page(request: Request) -> Response:
        return page(request, "login.html.j2", message=None)

    async def login(request: Request) -> Response:
        form = await checked_form(request)
        token = form.get("token", "").strip()
        found = await run_in_threadpool(db.token, token) if token else None
        if found is None:
            return page(request, "login.html.j2", status=401, message="unknown token")
        resp = RedirectResponse("/runs", status_code=303)
        resp.set_cookie("ta_token", token, httponly=True, samesite="strict", path="/", max_age=30 * 86400)
        return resp

    async def logout(request: Request) -> Response:
        await checked_form(request)
        resp = RedirectResponse("/runs", status_code=303)
        resp.delete_cookie("ta_token", path="/")
        return resp

    def static(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in STATIC:
            raise refuse(404, "not found")
        return Response(_static(name), media_type=STATIC[name], headers={"Cache-Control": "max-age=300"})

    def favicon(request: Request) -> Response:
        return Response(FAVICON, media_type="image/svg+xml", headers={"Cache-Control": "max-age=86400"})

    def health(request: Request) -> Response:
        """What works: the database (a query), the storage (free space in DATA), the jobs (queued, and
        whether this process runs analyses). 503 when the database or the storage is down."""
        out: dict[str, Any] = {"ok": True, "database": "ok", "storage": "ok", "worker": run_jobs}
        try:
            out["queued"] = db.queued()
        except Exception as exc:
            out.update(ok=False, database=f"down: {type(exc).__name__}", queued=None)
        try:
            usage = shutil.disk_usage(settings.data)
            free = usage.free
            out["storage_free_bytes"] = free
            if free < min(MIN_FREE_BYTES, usage.total // 20):
                out.update(ok=False, storage=f"full: {_human(free)} free")
        except OSError as exc:
            out.update(ok=False, storage=f"down: {exc.strerror or type(exc).__name__}")
        return JSONResponse(out, status_code=200 if out["ok"] else 503,
                            headers=None if out["ok"] else {"Retry-After": str(RETRY_AFTER_S)})

    def home(request: Request) -> Response:
        return RedirectResponse("/runs", status_code=302)

    # -- errors: one line, never a traceback
    last_db_log = [0.0]

    def unavailable(request: Request, exc: Exception) -> Response | None:
        """503 + Retry-After while the database is away (one log line every few seconds), 507 when the
        disk is full; None for any other error."""
        import sys

        if is_db_error(exc):
            now = time.monotonic()
            if now - last_db_log[0] > 5:
                last_db_log[0] = now
                print(f"traceanalyzer serve: database unavailable: {type(exc).__name__}: "
                      f"{str(exc).splitlines()[0][:200] if str(exc) else ''}", file=sys.stderr)
            resp = error_response(request, 503, "the database is unavailable: try again shortly")
            resp.headers["Retry-After"] = str(RETRY_AFTER_S)
            return resp
        if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
            return error_response(request, 507, "the server's disk is full: try again later")
        return None

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        message = str(exc.detail) if exc.detail else "error"
        if exc.status_code == 404 and not isinstance(exc, Refused):
            message = "not found"
        if exc.status_code == 405:
            message = f"method {request.method} not allowed here"
        return error_response(request, exc.status_code, message)

    async def internal_error(request: Request, exc: Exception) -> Response:
        import sys

        print(f"traceanalyzer serve: internal error on {request.url.path}: {type(exc).__name__}: {exc}",
              file=sys.stderr)
        return error_response(request, 500, "internal error (logged on the server)")

    def error_response(request: Request, status: int, message: str) -> Response:
        if is_api(request) or "text/html" not in request.headers.get("accept", ""):
            resp: Response = JSONResponse({"error": message}, status_code=status)
        else:
            resp = page(request, "error.html.j2", status=status, status_code=status, message=message)
        if status == 413:
            resp.headers["Connection"] = "close"  # the rest of the body is not read
        return resp

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await run_in_threadpool(startup)
        if run_jobs:
            runner.start()
        try:
            yield
        finally:
            if run_jobs:
                await run_in_threadpool(runner.stop)
            db.close()

    def startup() -> None:
        db.migrate()
        released = clean_leftovers(settings, db)  # what stopped processes of this host left
        backfill_metrics(settings, db)  # runs analysed before the history's figures were stored
        if released:
            print(f"traceanalyzer serve: {released} job(s) of stopped workers queued again",
                  file=__import__("sys").stderr)

    routes = [
        Route("/", home),
        Route("/runs", runs_page),
        Route("/projects", projects_page),
        Route("/projects/{project}", project_page),
        Route("/api/v1/projects", api_projects),
        Route("/projects/{project}/history", history_page),
        Route("/api/v1/projects/{project}/history", api_history),
        Route("/api/v1/runs/{run_id}/compare", api_run_compare),
        Route("/runs/{run_id}", run_page),
        Route("/runs/{run_id}/report.html", report_html),
        Route("/runs/{run_id}/report.md", report_md),
        Route("/runs/{run_id}/comment.md", comment_md),
        Route("/runs/{run_id}/files/{n}", download),
        Route("/compare", compare_page),
        Route("/compare/diff.html", compare_html),
        Route("/upload", upload_page),
        Route("/login", login_page, methods=["GET"]),
        Route("/login", login, methods=["POST"]),
        Route("/logout", logout, methods=["POST"]),
        Route("/static/{name}", static),
        Route("/favicon.ico", favicon),
        Route("/api/v1/health", health),
        Route("/api/v1/runs", api_runs),
        Route("/api/v1/runs/{run_id}", api_run, methods=["GET"]),
        Route("/api/v1/runs/{run_id}", api_delete, methods=["DELETE"]),
        Route("/runs/{run_id}/delete", delete_form, methods=["POST"]),
        Route("/api/v1/runs/{run_id}/report.json", api_report_json),
        Route("/api/v1/compare", api_compare),
        Route("/api/v1/projects/{project}/runs", upload, methods=["POST"]),
    ]
    app = Starlette(routes=routes, lifespan=lifespan,
                    exception_handlers={HTTPException: http_error, Exception: internal_error})
    def cross_site(request: Request) -> Response | None:
        """Every unsafe method (POST, PUT, PATCH, DELETE) without a bearer token is refused when the browser
        says it comes from another site (Sec-Fetch-Site) or another origin (Origin): checked once here, so a
        new form cannot forget it. The forms check their CSRF token besides."""
        if request.method in ("GET", "HEAD", "OPTIONS") or "authorization" in request.headers:
            return None
        site = request.headers.get("sec-fetch-site")
        origin = request.headers.get("origin")
        if site is not None and site not in ("same-origin", "none"):
            return error_response(request, 403, "cross-site request refused")
        if origin is not None and origin.rstrip("/") not in {str(request.base_url).rstrip("/"), base_url(request)}:
            return error_response(request, 403, "cross-site request refused")
        return None

    app.add_middleware(_Unavailable, answer=unavailable)
    app.add_middleware(_SameSite, check=cross_site)
    app.add_middleware(_Headers)
    app.state.store = db
    app.state.runner = runner
    app.state.settings = settings
    return app


class _Headers:
    """Adds the Content-Security-Policy (unless the route set its own) and the other security headers."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                names = {k.lower() for k, _ in headers}
                for k, v in (("Content-Security-Policy", CSP), *SECURITY_HEADERS.items()):
                    if k.lower().encode() not in names:
                        headers.append((k.lower().encode(), v.encode()))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)


class _SameSite:
    """Refuses a cross-site unsafe request before any route runs (see `cross_site` in create_app)."""

    def __init__(self, app: Any, check: Any) -> None:
        self.app = app
        self.check = check

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            refused = self.check(Request(scope))
            if refused is not None:
                await refused(scope, receive, send)
                return
        await self.app(scope, receive, send)


class _Unavailable:
    """Answers a request that failed because the database is away (503 + Retry-After) or the disk is full
    (507) with its one line, before Starlette's last-resort handler (which logs a traceback each time)."""

    def __init__(self, app: Any, answer: Any) -> None:
        self.app = app
        self.answer = answer

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def watch(message: Any) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, watch)
        except Exception as exc:
            resp = None if started else self.answer(Request(scope), exc)
            if resp is None:
                raise
            await resp(scope, receive, send)


def _md_code(text: str) -> str:
    return " ".join(str(text).replace("`", "'").split())[:200]
