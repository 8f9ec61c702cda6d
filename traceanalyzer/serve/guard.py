"""The middleware every request goes through, outermost first:

* `Headers`: the Content-Security-Policy (unless the route set its own) and the other security headers;
* `Unavailable`: a request that failed because the database is away gets 503 + Retry-After, a full disk
  507, each with one line (not Starlette's last-resort traceback);
* `Guard`: every write (POST, PUT, PATCH, DELETE) checked once, before any route runs: not cross-site,
  then the token and the CSRF token its route's kind asks for (`routes.writes`). What it checked is in
  `request.state`: `who` (the token's Access) and, for a form, `form` (its fields). A refused write is
  counted against its client and audited (`Context.failed`); a client throttled gets 429 + Retry-After.
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import parse_qsl

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, Route

from . import sessions
from .context import CSP, RETRY_AFTER_S, SECURITY_HEADERS, Access, Context, Refused, refuse
from .routes import BEARER, FORM, OIDC, OPEN_FORM, TOKEN, UNSAFE, write_kind

MAX_FORM_BYTES = 10_000


class Headers:
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


class Unavailable:
    """Answers a request that failed because the database is away (503 + Retry-After, one log line every
    few seconds) or the disk is full (507) with its one line."""

    def __init__(self, app: Any, ctx: Context) -> None:
        self.app = app
        self.ctx = ctx

    def answer(self, request: Request, exc: Exception) -> Response | None:
        import errno
        import sys

        from .blobs import BlobUnavailable
        from .jobs import is_db_error

        if isinstance(exc, BlobUnavailable):  # nothing was recorded: the client tries again
            print(f"traceanalyzer serve: {exc}", file=sys.stderr)
            resp = self.ctx.error_response(request, 503, "the trace store is unavailable: try again shortly")
            resp.headers["Retry-After"] = str(RETRY_AFTER_S)
            return resp
        if is_db_error(exc):
            now = time.monotonic()
            if now - self.ctx.last_db_log > 5:
                self.ctx.last_db_log = now
                print(f"traceanalyzer serve: database unavailable: {type(exc).__name__}: "
                      f"{str(exc).splitlines()[0][:200] if str(exc) else ''}", file=sys.stderr)
            resp = self.ctx.error_response(request, 503, "the database is unavailable: try again shortly")
            resp.headers["Retry-After"] = str(RETRY_AFTER_S)
            return resp
        if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
            return self.ctx.error_response(request, 507, "the server's disk is full: try again later")
        return None

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


class Guard:
    """Checks every write once, before its route runs (see `routes`): a route that does not say how it is
    authorised needs a bearer token that may write."""

    def __init__(self, app: Any, ctx: Context, routes: Sequence[BaseRoute]) -> None:
        self.app = app
        self.ctx = ctx
        self.routes = routes

    def endpoint(self, scope: Any) -> Any:
        """The endpoint of the route that will answer this request, or None (404 or 405 follows)."""
        for route in self.routes:
            match, _ = route.matches(scope)
            if match == Match.FULL:
                return route.endpoint if isinstance(route, Route) else None
        return None

    def cross_site(self, request: Request) -> bool:
        """The browser says the request comes from another site (Sec-Fetch-Site) or origin (Origin). A
        request with a bearer token is not one a browser makes on a page's behalf: not checked."""
        if "authorization" in request.headers:
            return False
        site = request.headers.get("sec-fetch-site")
        origin = request.headers.get("origin")
        return (site is not None and site not in ("same-origin", "none")) or \
            (origin is not None and not self.ctx.same_origin(request, origin))

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] not in UNSAFE:
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        who: Access | None = None
        try:
            self.ctx.check_throttle(request)  # memory only: no thread needed
            if self.cross_site(request):
                raise refuse(403, "cross-site request refused")
            endpoint = self.endpoint(scope)
            if endpoint is not None:
                kind = write_kind(endpoint)
                state = scope.setdefault("state", {})
                if kind in (BEARER, TOKEN):
                    state["who"] = await self.bearer(request, read_only=kind == TOKEN)
                elif kind == OIDC:  # the route verifies the JWT itself (oidc.py)
                    state["who"] = Access()
                else:
                    body = await self.read_form(request, receive)
                    state["form"] = self.checked_form(request, body)
                    state["who"] = await self.cookie(request) if kind == FORM else Access()
                    receive = _replay(body, receive)
                    assert kind in (FORM, OPEN_FORM)
        except Refused as exc:
            if exc.status_code in (401, 403):
                who = getattr(request.state, "refused_who", None)
                await run_in_threadpool(self.ctx.failed, request, "write.refuse", str(exc.detail), who)
            await self.ctx.error_response(request, exc.status_code, str(exc.detail),
                                          dict(exc.headers or {}))(scope, receive, send)
            return
        await self.app(scope, receive, send)

    async def bearer(self, request: Request, read_only: bool = False) -> Access:
        """The request's bearer token; refused when missing or unknown, or read-only unless `read_only`."""
        if "authorization" not in request.headers:
            raise refuse(401, "this needs a token: Authorization: Bearer TOKEN "
                              "(traceanalyzer serve token create --project P)")
        header = request.headers["authorization"]
        scheme, _, value = header.partition(" ")
        if scheme.lower() != "bearer" or not value.strip():
            raise refuse(401, "the Authorization header must be 'Bearer TOKEN'")
        found = await run_in_threadpool(self.ctx.db.token, value.strip())
        if found is None:
            raise refuse(401, "unknown token (or an expired or revoked one)")
        who = Access(found.project, found.read_only, True, found.id)
        if who.read_only and not read_only:
            request.state.refused_who = who
            raise refuse(403, "this token is read-only")
        return who

    async def cookie(self, request: Request) -> Access:
        """The browser's login session (never a token: see sessions.py)."""
        found = await run_in_threadpool(sessions.lookup, self.ctx.db, request.cookies.get(sessions.COOKIE))
        if found is None:
            raise refuse(401, "log in with a token of the run's project that may upload")
        who = Access(found.project, found.read_only, False, found.id)
        if found.read_only:
            request.state.refused_who = who
            raise refuse(403, "this needs a log-in with a token that is not read-only")
        return who

    @staticmethod
    async def read_form(request: Request, receive: Any) -> bytes:
        if request.headers.get("content-type", "").split(";")[0].strip() != "application/x-www-form-urlencoded":
            raise refuse(415, "expected a form (application/x-www-form-urlencoded)")
        body = b""
        while True:
            message = await receive()
            if message["type"] != "http.request":
                raise refuse(400, "the form was cut off before its end")
            body += message.get("body", b"")
            if len(body) > MAX_FORM_BYTES:
                raise refuse(413, "form too large")
            if not message.get("more_body", False):
                return body

    @staticmethod
    def checked_form(request: Request, body: bytes) -> dict[str, str]:
        form = dict(parse_qsl(body.decode("utf-8", "replace")))
        cookie = request.cookies.get("ta_csrf", "")
        if not cookie or not hmac.compare_digest(cookie.encode(), form.get("csrf", "").encode()):
            raise refuse(403, "cross-site form refused (missing or wrong CSRF token: reload the page)")
        return form


def _replay(body: bytes, receive: Any) -> Any:
    """The receive of a request whose body the guard has read: that body once, then the client's."""
    sent = False

    async def replayed() -> Any:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed
