"""Answers an agent can use: the analysis, the service's stored runs and the comparison of two runs as
small tools (Model Context Protocol).

* `answers`: an Analysis (or a Comparison) -> a small JSON-ready answer: numbers with their units, the
  definitions of the figures it quotes, and a pointer to the rest; every answer fits a byte budget.
* `tools`: the tools of `traceanalyzer mcp` over files (paths confined to the folders the user allows),
  plain functions returning dicts, testable without MCP; `service`: the same tools over the service's
  stored results (run ids, the token's project; never re-analysing a trace).
* `protocol`: the tools' table (names, input schemas, read-only or not) and the JSON-RPC subset of MCP
  (initialize, tools/list, tools/call) the service answers on `/mcp`; `http`: that route.
* `mcp_server`: the stdio server of `traceanalyzer mcp` on the official SDK (the optional `mcp` extra).
"""
