"""Logging in and out in a browser: a login makes a server-side session (sessions.py) whose random id
is the cookie (HttpOnly, SameSite=Strict, Secure behind https); the token never is. A login rotates the
id (the browser's previous session ends), a logout ends the session on the server. A failed login
counts against the client (throttle.py) and is audited. Both forms carry their page's CSRF token,
checked by the guard."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from .. import sessions
from ..context import Context
from . import OPEN_FORM, writes

OLD_COOKIE = "ta_token"  # what a login cookie was before sessions (it held the token): removed at login and logout


def login_page(ctx: Context, request: Request) -> Response:
    return ctx.page(request, "login.html.j2", message=None)


def _secure(ctx: Context, request: Request) -> bool:
    return request.url.scheme == "https" or (ctx.settings.public_url or "").startswith("https://")


@writes(OPEN_FORM)
def login(ctx: Context, request: Request) -> Response:
    token = request.state.form.get("token", "").strip()
    found = ctx.db.token(token) if token else None
    if found is None:
        ctx.failed(request, "login.fail", "a login with an unknown, expired or revoked token")
        return ctx.page(request, "login.html.j2", status=401, message="unknown token")
    sid = sessions.create(ctx.db, found.id, ctx.settings.session_s, ctx.client(request),
                          replaces=request.cookies.get(sessions.COOKIE))
    resp = RedirectResponse("/runs", status_code=303)
    resp.set_cookie(sessions.COOKIE, sid, httponly=True, samesite="strict", path="/",
                    max_age=int(ctx.settings.session_s), secure=_secure(ctx, request))
    resp.delete_cookie(OLD_COOKIE, path="/")
    return resp


@writes(OPEN_FORM)
def logout(ctx: Context, request: Request) -> Response:
    sessions.revoke(ctx.db, request.cookies.get(sessions.COOKIE))
    resp = RedirectResponse("/runs", status_code=303)
    resp.delete_cookie(sessions.COOKIE, path="/")
    resp.delete_cookie(OLD_COOKIE, path="/")
    return resp


ROUTES = [
    ("/login", login_page, ["GET"]),
    ("/login", login, ["POST"]),
    ("/logout", logout, ["POST"]),
]
