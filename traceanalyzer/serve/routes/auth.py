"""Logging in and out in a browser: a login makes a server-side session (sessions.py) whose random id
is the cookie (HttpOnly, SameSite=Strict, Secure behind https); the token never is. A login rotates the
id (the browser's previous session ends), a logout ends the session on the server. A failed login
counts against the client (throttle.py) and is audited. Both forms carry their page's CSRF token,
checked by the guard."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response

from .. import sessions
from ..context import Context, refuse
from ..uploads import PROJECT_RE
from . import OIDC, OPEN_FORM, writes

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


@writes(OIDC)
def oidc_token(ctx: Context, request: Request) -> Response:
    """A CI job's OIDC token (the bearer) for a short-lived token of the project, if the project's policy
    takes it (oidc.py). A refusal counts against the client (throttle.py) and is audited."""
    from ..oidc import OidcError

    project = request.path_params["project"]
    if not PROJECT_RE.match(project):
        raise refuse(400, "bad project name")
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    try:
        if scheme.lower() != "bearer":
            raise OidcError(401, "send the CI job's OIDC token: Authorization: Bearer JWT")
        given = ctx.oidc.exchange(project, value.strip(), ctx.client(request))
    except OidcError as exc:
        if exc.status in (401, 403):
            ctx.failed(request, "oidc.fail", exc.message)
        raise refuse(exc.status, exc.message) from None
    return JSONResponse(given, status_code=201, headers={"Cache-Control": "no-store"})


ROUTES = [
    ("/login", login_page, ["GET"]),
    ("/login", login, ["POST"]),
    ("/logout", logout, ["POST"]),
    ("/api/v1/projects/{project}/oidc-token", oidc_token, ["POST"]),
]
