"""Logging in and out in a browser: the login cookie holds a token (httponly, SameSite=Strict). Both
forms carry their page's CSRF token, checked by the guard."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ..context import Context
from . import OPEN_FORM, writes

LOGIN_DAYS = 30


def login_page(ctx: Context, request: Request) -> Response:
    return ctx.page(request, "login.html.j2", message=None)


@writes(OPEN_FORM)
def login(ctx: Context, request: Request) -> Response:
    token = request.state.form.get("token", "").strip()
    found = ctx.db.token(token) if token else None
    if found is None:
        return ctx.page(request, "login.html.j2", status=401, message="unknown token")
    resp = RedirectResponse("/runs", status_code=303)
    resp.set_cookie("ta_token", token, httponly=True, samesite="strict", path="/", max_age=LOGIN_DAYS * 86400)
    return resp


@writes(OPEN_FORM)
def logout(ctx: Context, request: Request) -> Response:
    resp = RedirectResponse("/runs", status_code=303)
    resp.delete_cookie("ta_token", path="/")
    return resp


ROUTES = [
    ("/login", login_page, ["GET"]),
    ("/login", login, ["POST"]),
    ("/logout", logout, ["POST"]),
]
