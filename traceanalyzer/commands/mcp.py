"""`traceanalyzer mcp`: the analysis as tools for coding agents (a Model Context Protocol server over
stdio; needs pip install 'traceanalyzer-ml[mcp]')."""

from __future__ import annotations

import os
from pathlib import Path

import click

from ._options import MAX_JOBS, MIN_GAP_RANGE_NS, DurationType, SizeType

MCP_HELP = """Serve the analysis to a coding agent: a Model Context Protocol server on standard input and
output (an agent client starts it; see docs/agents.md for a config snippet).

\b
Examples:
  traceanalyzer mcp --root ~/traces
  traceanalyzer mcp --root runs --root /data/profiles --server https://perf.example.com --project resnet

\b
Tools: analyze (the verdict, the time lost, the top findings with what removing each would save),
explain (one finding's evidence), steps, gaps, kernels, operators (top N, filtered), compare (did a
change make it slower), define (a figure's definition); with --server and $TRACEANALYZER_TOKEN also
runs and history of a project on a `traceanalyzer serve` service. Each answer is small (2 KB unless
the agent asks for more) and says where the rest is.

\b
Paths are confined to the --root folders (default: the current directory); inputs obey the same
limits and errors as `report`. Nothing is written outside a temporary folder (the analyses' JSON
reports, removed when the server stops); the cache of decoded traces is not used.
"""


@click.command("mcp", help=MCP_HELP)
@click.option("--root", "roots", multiple=True, type=click.Path(file_okay=False, path_type=Path),
              help="A folder the agent may read traces from (repeatable). Default: the current directory.")
@click.option("--max-input-size", "max_input_bytes", type=SizeType(), default="16GiB", show_default=True,
              help="Refuse an input whose (decompressed) content is larger, as `report --max-input-size`.")
@click.option("--min-gap", "min_gap_ns", type=DurationType(*MIN_GAP_RANGE_NS), default="100us", show_default=True,
              help="Shortest GPU idle stretch counted as a gap, as `report --min-gap`.")
@click.option("-j", "--jobs", type=click.IntRange(min=1, max=MAX_JOBS), default=1, show_default=True, metavar="N",
              help="Rank files of one job read and analysed in N parallel processes.")
@click.option("--server", metavar="URL", help="A `traceanalyzer serve` service: adds the runs and history tools "
                                              "(the token is read from $TRACEANALYZER_TOKEN).")
@click.option("--project", metavar="P", help="The service's project the runs and history tools ask about by default.")
def mcp_command(roots: tuple[Path, ...], max_input_bytes: int, min_gap_ns: int, jobs: int, server: str | None,
                project: str | None) -> None:
    """Serve the analysis over MCP on stdio (the help text is MCP_HELP)."""
    import shutil
    import tempfile

    from ..errors import UsageError
    from ..pipeline import Options
    from .upload import TOKEN_ENV

    try:
        import mcp  # noqa: F401
    except ImportError:
        raise UsageError("the MCP server needs the SDK: pip install 'traceanalyzer-ml[mcp]'") from None
    from ..agents.mcp_server import serve_stdio
    from ..agents.tools import LocalTools

    token = os.environ.get(TOKEN_ENV, "").strip() or None
    if server and not token:
        raise UsageError(f"--server needs a token: set {TOKEN_ENV} (traceanalyzer serve token create --project P "
                         f"--read-only)")
    workdir = Path(tempfile.mkdtemp(prefix="traceanalyzer-mcp-"))
    try:
        box = LocalTools(list(roots) or [Path.cwd()], Options(min_gap_ns=min_gap_ns, max_input_bytes=max_input_bytes,
                                                              jobs=jobs, cache=False),
                         server=server, token=token, project=project, workdir=workdir)
        serve_stdio(box)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
