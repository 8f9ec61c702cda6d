"""The service's `/mcp` (MCP's streamable HTTP transport): a real `traceanalyzer serve` on loopback, a
run uploaded and analysed, then the official SDK's HTTP client with a read-only token lists the tools
and reads the run (`runs`, `analyze`: the stored analysis' figures); a request without a token, with an
unknown token, another project's token, and a tool that is not there are refused. In process (the app
with Starlette's test client): what the guard lets through to `/mcp`."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from serve_helpers import SAMPLES, Server

import traceanalyzer as ta
from traceanalyzer.units import format_us

pytest.importorskip("starlette")

pytestmark = pytest.mark.slow

LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}


def call(name: str, **arguments) -> dict:
    return {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": name, "arguments": arguments}}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    server = Server(tmp_path_factory.mktemp("mcp-serve") / "data", None).start()
    try:
        writer = server.token("demo")
        up = server.upload(writer, SAMPLES / "input_bound.json", branch="main", commit="abc123")
        assert up.status_code == 201, up.text
        run = server.wait(up.json()["id"])
        assert run["status"] == "done", run
        yield server, run
    finally:
        server.stop()


async def sdk_session(url: str, token: str, calls):
    mcp = pytest.importorskip("mcp")  # here, not at collection: importing the SDK takes seconds
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=120)
    async with mcp.Client(streamable_http_client(url, http_client=http)) as client:
        tools = [t.name for t in (await client.list_tools()).tools]
        out = []
        for name, args in calls:
            try:
                r = await client.call_tool(name, args)
                out.append((r.content[0].text, bool(r.is_error)))
            except mcp.MCPError as exc:  # a protocol error: an unknown tool
                out.append((str(exc), None))
        return tools, out


def test_an_agent_reads_a_stored_run_over_mcp_with_a_read_only_token(served):
    server, run = served
    reader = server.token("demo", read_only=True)
    tools, answers = asyncio.run(sdk_session(f"{server.url}/mcp", reader, [
        ("runs", {}), ("analyze", {"run": run["id"]}), ("delete_run", {"run": run["id"]}),
        ("analyze", {"run": "0123456789ab"}), ("compare", {"base": run["id"], "head": run["id"]}),
        ("gaps", {"run": run["id"], "top": 1})]))
    assert {"analyze", "runs", "history", "compare", "explain"} <= set(tools)
    (runs, runs_failed), (analysed, failed), (unknown, kind), (missing, missing_failed), (compared, _), \
        (gaps, _) = answers
    got = json.loads(runs)
    assert not runs_failed and got["runs"] == 1 and got["project"] == "demo"
    row = dict(zip(got["columns"], got["rows"][0]))
    assert row["id"] == run["id"] and row["verdict"] == run["verdict"] == "input_bound"
    assert row["step_time_ms"] == round(run["step_time_ms"], 3) and row["commit"] == "abc123"
    assert got["more"]["runs"].startswith(server.url)
    a = json.loads(analysed)
    d = ta.analyze(SAMPLES / "input_bound.json", ta.Options(cache=False)).diagnosis
    lost = next(k for k in d.headline_figures if k.endswith("lost_us"))
    assert not failed and a["verdict"] == "input_bound" and a["lost"] == format_us(d.headline_figures[lost])
    assert a["more"]["run"] == f"{server.url}/runs/{run['id']}" and len(analysed.encode()) < 2048
    assert kind is None and "no tool 'delete_run'" in unknown  # refused, not run
    assert missing_failed and missing == "error: no run '0123456789ab' in project demo"
    assert json.loads(compared)["change"] == "unchanged"  # a run against itself, from the stored analyses
    stored = ta.load(server.data / "reports" / run["id"] / "report.json").gaps()
    assert json.loads(gaps)["rows"][0][4] == round(stored["duration_us"].max() / 1000, 3)


def test_the_stdio_server_asks_the_service_for_runs_and_history(served, tmp_path):
    from traceanalyzer.agents.protocol import call
    from traceanalyzer.agents.tools import LocalTools

    server, run = served
    local = LocalTools([SAMPLES], server=server.url, token=server.token("demo", read_only=True), project="demo",
                       workdir=tmp_path / "work")
    assert {"runs", "history"} <= {s.name for s in local.specs()}
    text, failed = call(local, "runs", {"branch": "main"})
    got = json.loads(text)
    assert not failed and got["rows"][0][0] == run["id"] and got["more"]["runs"].startswith(server.url)
    text, failed = call(local, "history", {})
    got = json.loads(text)
    assert not failed and got["branch"] == "main" and got["runs"] == 1
    assert got["latest"]["verdict"] == "input_bound" and got["latest"]["gpu_idle"] == f"{100 * run['gpu_idle']:.1f}%"
    text, failed = call(local, "runs", {"project": "other"})  # the token's project only
    assert not failed and json.loads(text)["runs"] == 0
    away = LocalTools([SAMPLES], server="http://127.0.0.1:9", token="ta_x", project="demo", workdir=tmp_path / "w3")
    text, failed = call(away, "runs", {})
    assert failed and "\n" not in text and "cannot reach the service" in text
    assert "runs" not in {s.name for s in LocalTools([SAMPLES], workdir=tmp_path / "w2").specs()}


def test_mcp_refuses_a_request_without_a_valid_token_and_other_projects_runs(served):
    server, run = served
    url = f"{server.url}/mcp"
    r = httpx.post(url, json=LIST, timeout=30)
    assert r.status_code == 401 and "needs a token" in r.json()["error"]
    r = httpx.post(url, json=LIST, headers={"Authorization": "Bearer ta_not_a_token"}, timeout=30)
    assert r.status_code == 401 and "unknown token" in r.json()["error"]
    r = httpx.post(url, json=call("runs"), headers={"Origin": "https://evil.example"}, timeout=30)
    assert r.status_code == 403  # a browser on another site, without a token
    other = server.token("other", read_only=True)
    r = httpx.post(url, json=call("analyze", run=run["id"]), headers={"Authorization": f"Bearer {other}"},
                   timeout=30)
    result = r.json()["result"]
    assert result["isError"] and result["content"][0]["text"] == f"error: no run '{run['id']}' in project other"
    r = httpx.post(url, json=call("runs"), headers={"Authorization": f"Bearer {other}"}, timeout=30)
    assert json.loads(r.json()["result"]["content"][0]["text"])["runs"] == 0
    assert httpx.get(url, headers={"Authorization": f"Bearer {other}"}, timeout=30).status_code == 405


def test_a_read_only_token_may_call_read_tools_only(tmp_path):
    from starlette.testclient import TestClient

    from traceanalyzer.agents.http import may_call
    from traceanalyzer.agents.protocol import ToolSpec
    from traceanalyzer.serve.app import create_app
    from traceanalyzer.serve.context import Access
    from traceanalyzer.serve.settings import Settings

    writes = ToolSpec("write_something", "a tool that would write", (), read_only=False)
    reads = ToolSpec("read_something", "a tool that reads", ())
    assert may_call(Access("demo", read_only=True))(writes) == \
        "this token is read-only: write_something needs a token of the project that may upload"
    assert may_call(Access("demo", read_only=True))(reads) is None
    assert may_call(Access("demo", read_only=False))(writes) is None
    app = create_app(Settings(data=tmp_path / "data"), run_jobs=False)
    with TestClient(app, base_url="http://testserver") as client:
        reader = app.state.ctx.db.create_token("demo", True)
        auth = {"Authorization": f"Bearer {reader}"}
        tools = client.post("/mcp", json=LIST, headers=auth).json()["result"]["tools"]
        assert tools and all(t["annotations"]["readOnlyHint"] for t in tools)  # every tool it lists reads
        assert client.post("/mcp", content=b"{}", headers={**auth, "Content-Type": "text/plain"}).status_code == 415
        r = client.post("/mcp", content=b"{not json", headers={**auth, "Content-Type": "application/json"})
        assert r.status_code == 400 and r.json()["error"]["code"] == -32700
