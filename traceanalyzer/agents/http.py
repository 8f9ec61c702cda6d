"""`/mcp`: the tools of the service over MCP's streamable HTTP transport, stateless: each POST carries one
JSON-RPC message and gets its answer as application/json (`protocol.handle`); a GET (the optional
stream of server messages) is 405, as the transport allows.

Every request needs a bearer token (checked by the guard before this runs, `routes.TOKEN`: any role); a
read-only token may call the tools that only read (all of them today; a tool that writes would need a
token that may upload), and every tool sees that token's project only. The tool calls run in a worker
thread: they read the database and the saved reports.
"""

from __future__ import annotations

from collections.abc import Callable

import orjson
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..serve.context import Context, refuse
from ..serve.routes import TOKEN, writes
from .protocol import PARSE_ERROR, ToolSpec, handle
from .service import ServiceTools

MAX_MESSAGE_BYTES = 1024**2


def may_call(who: object) -> Callable[[ToolSpec], str | None]:
    """Whether the token may call a tool: None, or why not (one line)."""

    def check(spec: ToolSpec) -> str | None:
        if spec.read_only or not getattr(who, "read_only", True):
            return None
        return f"this token is read-only: {spec.name} needs a token of the project that may upload"

    return check


@writes(TOKEN)
async def mcp_post(ctx: Context, request: Request) -> Response:
    who = ctx.access(request)  # the guard's: a valid bearer token, of any role
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
        raise refuse(415, "expected one JSON-RPC message (Content-Type: application/json)")
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_MESSAGE_BYTES:
            raise refuse(413, f"a message is at most {MAX_MESSAGE_BYTES} bytes")
    try:
        message = orjson.loads(body)
    except orjson.JSONDecodeError:
        return JSONResponse({"jsonrpc": "2.0", "id": None, "error": {"code": PARSE_ERROR, "message": "not JSON"}},
                            status_code=400)
    box = ServiceTools(ctx, who, ctx.base_url(request))
    reply = await run_in_threadpool(handle, message, box, may_call(who))
    if reply.message is None:
        return Response(status_code=reply.status)
    return JSONResponse(reply.message, status_code=reply.status, headers=reply.headers)


ROUTES = [("/mcp", mcp_post, ["POST"])]
