"""The site's frame: home, projects, static files, the favicon, and the health check."""

from __future__ import annotations

import shutil
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response

from ..blobs import BlobRefused, BlobUnavailable, blobs_of
from ..context import RETRY_AFTER_S, Access, Context, human, refuse, static_file
from ..uploads import PROJECT_RE

MIN_FREE_BYTES = 64 * 1024**2  # less free space in DATA (or 5% of a smaller disk): health says the storage is full
DISK_FULL_SHOWN_S = 60.0  # after an upload found the disk full, health says so this long (unless space was freed)
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


def _storage(ctx: Context) -> str:
    """'ok', or why the storage refuses writes: too little free space, an upload refused for want of
    space lately, or a probe file that cannot be written (a read-only or broken file system)."""
    import os
    import time

    try:
        usage = shutil.disk_usage(ctx.settings.data)
    except OSError as exc:
        return f"down: {exc.strerror or type(exc).__name__}"
    if usage.free < min(MIN_FREE_BYTES, usage.total // 20):
        return f"full: {human(usage.free)} free"
    probe = ctx.settings.tmp / f".health-{os.getpid()}"
    try:
        with open(probe, "wb") as f:
            f.write(b"\0" * 4096)
            f.flush()
            os.fsync(f.fileno())
    except OSError as exc:
        return f"refuses writes: {exc.strerror or type(exc).__name__}"
    finally:
        try:
            probe.unlink(missing_ok=True)
        except OSError:
            pass
    if time.monotonic() - ctx.disk_full_at < DISK_FULL_SHOWN_S and usage.free < ctx.disk_full_free:
        return f"full: an upload was refused for want of space {time.monotonic() - ctx.disk_full_at:.0f} s ago " \
               f"({human(usage.free)} free)"
    return "ok"


def _object_store(ctx: Context) -> str:
    """"ok", or why the object store cannot take traces ("down: ..." unreachable, "refuses: ..." no bucket
    or no right), by the class of failure only: its address and credentials stay out of the answer."""
    try:
        blobs_of(ctx.settings).check()
    except BlobRefused:
        return "refuses: the bucket cannot be read"
    except BlobUnavailable:
        return "down: cannot be reached"
    return "ok"


def health(ctx: Context, request: Request) -> Response:
    """What works: the database (a query), the storage (free space in DATA, and a write), the object store
    when there is one (its bucket), the jobs (queued,
    and whether this process runs analyses). 503 when the database or the storage is down. A private
    service tells a client without a token only up or down."""
    out: dict[str, Any] = {"ok": True, "database": "ok", "storage": "ok", "worker": ctx.run_jobs}
    try:
        out["queued"] = ctx.db.queued()
    except Exception as exc:
        out.update(ok=False, database=f"down: {type(exc).__name__}", queued=None)
    try:
        usage = shutil.disk_usage(ctx.settings.data)
        out["storage_free_bytes"] = usage.free
    except OSError:
        pass
    out["storage"] = _storage(ctx)
    if out["storage"] != "ok":
        out["ok"] = False
    if ctx.settings.blob_store:  # traces and reports live in an object store: a look at its bucket
        out["object_store"] = _object_store(ctx)
        if out["object_store"] != "ok":
            out["ok"] = False
    if ctx.settings.private and out["database"] == "ok":
        try:
            who = ctx.access(request)
        except Exception:
            who = Access()
        if who.project is None:
            out = {"ok": out["ok"]}
    elif ctx.settings.private:  # no database to check a token against: up or down only
        out = {"ok": out["ok"]}
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
