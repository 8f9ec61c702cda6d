"""Uploads: the API a CI job posts its trace to, and the page that does the same from a browser."""

from __future__ import annotations

import errno

from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response

from ..blobs import blobs_of
from ..body import receive
from ..context import RUN_ID_RE, Access, Context, Refused, order_param, refuse, text_param
from ..store import StoredFile
from ..uploads import PROJECT_RE, UploadError
from . import BEARER, writes

DISK_FULL = "the server's disk is full: nothing was stored; try again later"
BUSY_RETRY_S = 2  # Retry-After of an upload refused because --max-uploads are under way


@writes(BEARER)
async def upload(ctx: Context, request: Request) -> Response:
    """A run: its files (the body, or a multipart form), its branch, commit and order, its setting label
    and the run it repeats (`setting`, `repeat_of`: runs of one setting, for run-to-run variation), from
    the query or the form."""
    project = request.path_params["project"]
    if not PROJECT_RE.match(project):
        raise refuse(400, "bad project name: 1 to 64 of A-Z a-z 0-9 . _ - (starting with a letter or digit)")
    who = ctx.access(request)  # checked by the guard: a bearer token that may upload
    if who.project != project:
        raise refuse(403, "this token is not for this project")
    # at most --max-uploads handled at once (counted on the event loop): the pages stay fast under a flood;
    # the rest are told when to come back before their body is read
    if ctx.uploads_active >= ctx.settings.max_uploads:
        raise refuse(503, f"{ctx.uploads_active} uploads are under way: try again in {BUSY_RETRY_S} s",
                     {"Retry-After": str(BUSY_RETRY_S), "Connection": "close"})
    ctx.uploads_active += 1
    try:
        return await _upload(ctx, request, project, who)
    finally:
        ctx.uploads_active -= 1


async def _upload(ctx: Context, request: Request, project: str, who: Access) -> Response:
    branch = text_param(request.query_params.get("branch"), "branch", 200)
    commit = text_param(request.query_params.get("commit"), "commit", 100)
    order = order_param(request.query_params.get("order"))
    setting = text_param(request.query_params.get("setting"), "setting", 100)
    repeat_of = request.query_params.get("repeat_of") or None
    try:
        received, fields = await receive(request, ctx.settings)
    except UploadError as exc:
        raise refuse(exc.status, exc.message) from None
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            ctx.disk_full()
            raise refuse(507, DISK_FULL) from None
        raise
    except ClientDisconnect:  # the client went away mid-upload: what it sent is removed
        raise refuse(400, "the upload was cut off before its end") from None
    try:
        branch = branch or text_param(fields.get("branch"), "branch", 200)
        commit = commit or text_param(fields.get("commit"), "commit", 100)
        order = order if order is not None else order_param(fields.get("order"))
        setting = setting or text_param(fields.get("setting"), "setting", 100)
        repeat_of = repeat_of or fields.get("repeat_of") or None
        if repeat_of is not None:  # the run it repeats: of this project; recorded as its setting's first run
            found = await run_in_threadpool(ctx.db.repeat_root, project, repeat_of) \
                if RUN_ID_RE.match(repeat_of) else None
            if found is None:
                raise refuse(400, f"bad repeat_of: no run {repeat_of[:40]!r} in project {project}")
            repeat_of = found
    except Refused:
        for r in received:
            r.tmp.unlink(missing_ok=True)
        raise
    stored = [StoredFile(r.sha256, r.name, r.size_bytes, r.kind) for r in received]
    blobs = blobs_of(ctx.settings)
    try:
        actor = await run_in_threadpool(ctx.actor, request, who)
        await run_in_threadpool(blobs.stage, received)  # to an object store: before any database lock is held
        run_id = await run_in_threadpool(ctx.db.create_run, project, branch, commit, stored, order, who.token_id,
                                         lambda: blobs.place(received), actor, setting, repeat_of)
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            ctx.disk_full()
            raise refuse(507, DISK_FULL) from None
        raise
    finally:
        for r in received:  # a file already there, or a failed upload: its copy goes
            r.tmp.unlink(missing_ok=True)
    ctx.runner.wake.set()
    return JSONResponse({"id": run_id, "status": "queued", "url": f"{ctx.base_url(request)}/runs/{run_id}"},
                        status_code=201)


def upload_page(ctx: Context, request: Request) -> Response:
    return ctx.page(request, "upload.html.j2", max_upload=ctx.settings.max_upload_bytes)


ROUTES = [
    ("/upload", upload_page, None),
    ("/api/v1/projects/{project}/runs", upload, ["POST"]),
]
