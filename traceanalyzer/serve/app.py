"""The web app: a JSON API for CI scripts and server-rendered pages beside it (jinja2, autoescaped).

The routes live in `routes/` (one module per area, thin handlers of the app's `Context`); every write is
authorised once, before its route runs, by `guard.Guard` (see `routes` for the kinds of write).

Every response carries a Content-Security-Policy that allows no request outside the service. A stored
report page is served in a sandboxed frame, with its own policy that allows exactly its inline script
and style (by hash). Every refusal is a 4xx with one line (`{"error": "..."}` on /api), never a traceback.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from .context import Context, Refused
from .guard import Guard, Headers, Unavailable
from .jobs import backfill_metrics, clean_leftovers
from .routes import all_routes
from .settings import Settings


def create_app(settings: Settings, run_jobs: bool = True) -> Starlette:
    ctx = Context(settings, run_jobs)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        message = str(exc.detail) if exc.detail else "error"
        if exc.status_code == 404 and not isinstance(exc, Refused):
            message = "not found"
        if exc.status_code == 405:
            message = f"method {request.method} not allowed here"
        return ctx.error_response(request, exc.status_code, message, dict(exc.headers or {}))

    async def internal_error(request: Request, exc: Exception) -> Response:
        print(f"traceanalyzer serve: internal error on {request.url.path}: {type(exc).__name__}: {exc}",
              file=sys.stderr)
        return ctx.error_response(request, 500, "internal error (logged on the server)")

    def startup() -> None:
        ctx.db.migrate()
        released = clean_leftovers(ctx.settings, ctx.db)  # what stopped processes of this host left
        backfill_metrics(ctx.settings, ctx.db)  # runs analysed before the history's figures were stored
        if released:
            print(f"traceanalyzer serve: {released} job(s) of stopped workers queued again", file=sys.stderr)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await run_in_threadpool(startup)
        if ctx.run_jobs:
            ctx.runner.start()
        try:
            yield
        finally:
            if ctx.run_jobs:
                await run_in_threadpool(ctx.runner.stop)
            ctx.db.close()

    app = Starlette(routes=all_routes(ctx), lifespan=lifespan,
                    exception_handlers={HTTPException: http_error, Exception: internal_error})
    # the guard matches requests against the router's own list: a route added later is guarded too
    app.add_middleware(Guard, ctx=ctx, routes=app.router.routes)  # the last added runs first: Headers, ...
    app.add_middleware(Unavailable, ctx=ctx)
    app.add_middleware(Headers)
    app.state.ctx = ctx
    app.state.store = ctx.db
    app.state.runner = ctx.runner
    app.state.settings = ctx.settings
    return app
