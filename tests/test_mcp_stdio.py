"""`traceanalyzer mcp` as an agent client meets it: the official SDK's client over stdio spawns
`python -m traceanalyzer mcp --root sample_traces`, lists the tools, asks for the verdict of the bundled
sample and gets the lost time the library's headline quotes in under 2 KB; bad paths are tool errors of
one line, and the server answers on after them."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest
from conftest import ROOT, SAMPLES

import traceanalyzer as ta
from traceanalyzer.units import format_us

pytestmark = pytest.mark.slow


def server_params(mcp, *extra: str):
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return mcp.StdioServerParameters(command=sys.executable, cwd=str(ROOT), env=env,
                                     args=["-m", "traceanalyzer", "mcp", "--root", "sample_traces", *extra])


async def session_calls(calls):
    """Each (tool, arguments) called in one session: the tool names, then (text, is_error) per call."""
    mcp = pytest.importorskip("mcp")  # here, not at collection: importing the SDK takes seconds
    async with mcp.Client(mcp.stdio_client(server_params(mcp)), read_timeout_seconds=120) as client:
        tools = [t.name for t in (await client.list_tools()).tools]
        out = []
        for name, args in calls:
            r = await client.call_tool(name, args)
            out.append((r.content[0].text, bool(r.is_error)))
        return tools, out


def test_an_agent_gets_the_verdict_and_the_lost_time_of_the_sample_in_under_2_kb(tmp_path):
    not_a_trace = SAMPLES / "README.md"
    tools, answers = asyncio.run(session_calls([
        ("analyze", {"path": "sample_traces/input_bound.json"}),
        ("analyze", {"path": str(tmp_path / "outside.json")}),
        ("analyze", {"path": "sample_traces/no_such_trace.json"}),
        ("analyze", {"path": str(not_a_trace)}),
        ("explain", {"path": "sample_traces/input_bound.json"}),
    ]))
    assert tools == ["analyze", "explain", "steps", "gaps", "kernels", "operators", "compare", "define"]
    (text, failed), outside, missing, junk, (explained, explain_failed) = answers
    assert not failed and len(text.encode()) < 2048
    got = json.loads(text)
    d = ta.analyze(SAMPLES / "input_bound.json", ta.Options(cache=False)).diagnosis
    lost = next(k for k in d.headline_figures if k.endswith("lost_us"))
    assert got["verdict"] == d.primary == "input_bound"
    assert got["lost"] == format_us(d.headline_figures[lost])  # the headline's "loses 33.5 ms"
    assert got["lost"] in got["headline"] == d.headline
    for (line, is_error), said in ((outside, "outside the folders"), (missing, "no such file"),
                                   (junk, "not a supported trace")):
        assert is_error and said in line and "\n" not in line and line.startswith("error: "), line
    assert not explain_failed and json.loads(explained)["id"] == "input_bound"  # still serving after them
    report = Path(got["more"]["report"])  # the saved report went to the session's temporary folder, now removed
    assert report.parent.name.startswith("traceanalyzer-mcp-") and not report.parent.exists()
