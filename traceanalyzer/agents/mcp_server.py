"""`traceanalyzer mcp`'s server: the tools' table (`protocol`) on the official MCP SDK's low-level server,
over stdio. The SDK (`pip install 'traceanalyzer-ml[mcp]'`) is imported here only.

Each call runs in a worker thread (an analysis takes seconds; the server keeps answering pings) and is
answered as one text block holding the answer's JSON, or one line with `isError` when it failed.
Standard output is the protocol's: the library writes its notes and warnings on standard error.
"""

from __future__ import annotations

from typing import Any

from .._version import __version__
from .protocol import INSTRUCTIONS, SERVER_NAME, Toolbox, call


def build(box: Toolbox) -> Any:
    """The SDK's low-level Server serving `box`'s tools."""
    import anyio
    from mcp import types
    from mcp.server import Server

    async def list_tools(ctx: Any, params: Any) -> Any:
        return types.ListToolsResult(tools=[types.Tool.model_validate(s.listing()) for s in box.specs()])

    async def call_tool(ctx: Any, params: Any) -> Any:
        text, failed = await anyio.to_thread.run_sync(call, box, params.name, params.arguments)
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=failed)

    return Server(SERVER_NAME, version=__version__, instructions=INSTRUCTIONS, on_list_tools=list_tools,
                  on_call_tool=call_tool)


def serve_stdio(box: Toolbox) -> None:
    """Serve `box` on standard input and output until the client closes them."""
    import anyio
    from mcp.server.stdio import stdio_server

    server = build(box)

    async def main() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(main)
