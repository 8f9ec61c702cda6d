"""`GET /metrics`: the service's figures for Prometheus (serve/metrics.py). In private mode it needs a
token (any: the figures are counts of the whole service, no project's names)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from ..context import Context
from ..metrics import CONTENT_TYPE, exposition


def metrics(ctx: Context, request: Request) -> Response:
    ctx.need_reader(ctx.access(request))
    return Response(exposition(ctx.db), media_type=CONTENT_TYPE, headers={"Cache-Control": "no-store"})


ROUTES = [
    ("/metrics", metrics, None),
]
