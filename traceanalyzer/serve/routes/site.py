"""The site's frame: home, projects, static files, the favicon, and the health check."""

from __future__ import annotations

import shutil
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response

from ..context import RETRY_AFTER_S, Access, Context, human, refuse, static_file
from ..uploads import PROJECT_RE

MIN_FREE_BYTES = 64 * 1024**2  # less free space in DATA (or 5% of a smaller disk): health says the storage is full
STATIC = {"serve.css": "text/css; charset=utf-8", "upload.js": "text/javascript; charset=utf-8",
          "history.js": "text/javascript; charset=utf-8", "frames.js": "text/javascript; charset=utf-8",
          "perfetto.js": "text/javascript; charset=utf-8"}
FAVICON = (b'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16"><rect width="16" height="16" rx="3" '
           b'fill="#1f6feb"/><path d="M3 12h2V7H3zm4 0h2V4H7zm4 0h2V9h-2z" fill="#fff"/></svg>')


def home(ctx: Context, request: Request) -> Response:
    return RedirectResponse("/runs", status_code=302)


def visible_projects(ctx: Context, who: Access) -> list[dict[str, Any]]:
    return [p for p in ctx.db.project_summaries() if who.project is None or p["name"] == who.project]


def projects_page(ctx: Context, request: Request) -> Response:
    who = ctx.access(request)
    if ctx.settings.private and who.project is None:
        return RedirectResponse("/login", status_code=303)
    return ctx.page(request, "projects.html.j2", projects=visible_projects(ctx, who))


def api_projects(ctx: Context, request: Request) -> Response:
    who = ctx.access(request)
    ctx.need_reader(who)
    return JSONResponse({"projects": visible_projects(ctx, who)})


def project_page(ctx: Context, request: Request) -> Response:
    name = request.path_params["project"]
    if not PROJECT_RE.match(name):
        raise refuse(404, "no such project")
    return RedirectResponse("/runs?" + urlencode({"project": name}), status_code=302)


def static(ctx: Context, request: Request) -> Response:
    name = request.path_params["name"]
    if name not in STATIC:
        raise refuse(404, "not found")
    return Response(static_file(name), media_type=STATIC[name], headers={"Cache-Control": "max-age=300"})


def favicon(ctx: Context, request: Request) -> Response:
    return Response(FAVICON, media_type="image/svg+xml", headers={"Cache-Control": "max-age=86400"})


def health(ctx: Context, request: Request) -> Response:
    """What works: the database (a query), the storage (free space in DATA), the jobs (queued, and
    whether this process runs analyses). 503 when the database or the storage is down."""
    out: dict[str, Any] = {"ok": True, "database": "ok", "storage": "ok", "worker": ctx.run_jobs}
    try:
        out["queued"] = ctx.db.queued()
    except Exception as exc:
        out.update(ok=False, database=f"down: {type(exc).__name__}", queued=None)
    try:
        usage = shutil.disk_usage(ctx.settings.data)
        free = usage.free
        out["storage_free_bytes"] = free
        if free < min(MIN_FREE_BYTES, usage.total // 20):
            out.update(ok=False, storage=f"full: {human(free)} free")
    except OSError as exc:
        out.update(ok=False, storage=f"down: {exc.strerror or type(exc).__name__}")
    return JSONResponse(out, status_code=200 if out["ok"] else 503,
                        headers=None if out["ok"] else {"Retry-After": str(RETRY_AFTER_S)})


ROUTES = [
    ("/", home, None),
    ("/projects", projects_page, None),
    ("/projects/{project}", project_page, None),
    ("/api/v1/projects", api_projects, None),
    ("/static/{name}", static, None),
    ("/favicon.ico", favicon, None),
    ("/api/v1/health", health, None),
]
