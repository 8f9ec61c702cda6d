"""The service's routes, one module per area; each handler is a plain function `handler(ctx, request)`
of the app's `Context` (its shared state), bound to it by `bind`.

A write (POST, PUT, PATCH, DELETE) is authorised once, by `guard.Guard`, before its handler runs; the
handler says how with `@writes(...)`, and a handler that says nothing gets the strictest kind, so a new
route cannot forget it:
* `BEARER` (the default): an `Authorization: Bearer TOKEN` header with a token that is not read-only
  (a browser never sends one on its own, so no CSRF token is needed);
* `FORM`: a page's form (urlencoded, with the page's CSRF token) from a browser logged in with a token
  that is not read-only;
* `OPEN_FORM`: a page's form that needs no login (log in, log out), still with its CSRF token;
* `TOKEN`: a bearer token of any role, read-only included (the MCP endpoint, whose calls mostly read:
  the route decides what a read-only token may call);
* `OIDC`: a CI job's OIDC token as the bearer, which the route verifies itself against the project's
  policy (`oidc.py`: the exchange for a short-lived token).
Whatever the kind, a request that its browser says is cross-site (Sec-Fetch-Site, Origin) is refused
unless it carries a bearer token.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from starlette.requests import Request
from starlette.routing import Route

from ..context import Context

BEARER, FORM, OPEN_FORM, TOKEN, OIDC = "bearer", "form", "open form", "token", "oidc"
WRITE_KINDS = (BEARER, FORM, OPEN_FORM, TOKEN, OIDC)
UNSAFE = ("POST", "PUT", "PATCH", "DELETE")


def writes(kind: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """How a write route is authorised (see the module's docstring)."""
    assert kind in WRITE_KINDS, kind

    def mark(fn: Callable[..., Any]) -> Callable[..., Any]:
        fn.writes = kind  # type: ignore[attr-defined]
        return fn

    return mark


def write_kind(endpoint: Any) -> str:
    return str(getattr(endpoint, "writes", BEARER))


def bind(ctx: Context, handler: Callable[..., Any]) -> Callable[[Request], Any]:
    """`handler(ctx, request)` as a Starlette endpoint (async stays async; a plain one runs in a thread)."""
    if inspect.iscoroutinefunction(handler):
        async def endpoint(request: Request) -> Any:
            return await handler(ctx, request)
    else:
        def endpoint(request: Request) -> Any:  # type: ignore[misc]
            return handler(ctx, request)
    functools.update_wrapper(endpoint, handler)  # its name, and its `writes`
    return endpoint


def all_routes(ctx: Context) -> list[Route]:
    from ...agents import http as agents
    from . import auth, compare, history, metrics, runs, site, uploads

    table: list[tuple[str, Callable[..., Any], list[str] | None]] = [
        *site.ROUTES, *runs.ROUTES, *uploads.ROUTES, *compare.ROUTES, *history.ROUTES, *auth.ROUTES,
        *agents.ROUTES, *metrics.ROUTES,
    ]
    return [Route(path, bind(ctx, handler), methods=methods) for path, handler, methods in table]
