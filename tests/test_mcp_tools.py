"""The agent tools as plain functions (no MCP): their figures are the library's, every answer fits its
byte budget, paths stay inside the allowed folders, each failure is one line, nothing is written
outside the session's temporary folder; the JSON-RPC subset the service speaks; the command without
the SDK."""

from __future__ import annotations

import json
import os
import sys

import pytest
from conftest import SAMPLES

import traceanalyzer as ta
from traceanalyzer.agents import answers as A
from traceanalyzer.agents.protocol import FORBIDDEN, INVALID_PARAMS, Param, ToolSpec, call, handle
from traceanalyzer.agents.tools import LocalTools
from traceanalyzer.compare import compare
from traceanalyzer.report.verdict import verdict_finding
from traceanalyzer.units import format_us

INPUT_BOUND = SAMPLES / "input_bound.json"


def number_ms(text: str) -> float:
    """'33.5 ms' / '850 us' / '1.20 s' -> milliseconds."""
    value, unit = text.split()
    return float(value) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[unit]


@pytest.fixture(scope="module")
def box(tmp_path_factory):
    work = tmp_path_factory.mktemp("mcp-work")
    return LocalTools([SAMPLES], workdir=work)


@pytest.fixture(scope="module")
def analysis():
    return ta.analyze(INPUT_BOUND, ta.Options(cache=False))


def answer(box, tool, **args):
    text, failed = call(box, tool, args)
    assert not failed, text
    return json.loads(text), text


@pytest.mark.slow
def test_analyze_gives_the_verdict_and_the_headlines_lost_time_within_2_kb(box, analysis):
    got, text = answer(box, "analyze", path=str(INPUT_BOUND.relative_to(SAMPLES.parent)))
    d = analysis.diagnosis
    assert got["verdict"] == d.primary == "input_bound"
    assert got["headline"] == d.headline
    lost_key = next(k for k in d.headline_figures if k.endswith("lost_us"))
    assert got["headline_figures"][lost_key.removesuffix("_us")] == format_us(d.headline_figures[lost_key])
    # the lost time the headline quotes, with its unit, is the library's figure
    assert number_ms(got["lost"]) == pytest.approx(d.headline_figures[lost_key] / 1000, abs=0.05)
    assert got["lost"] == format_us(verdict_finding(d).explains_us)
    top = d.findings[0]
    assert got["findings"][0]["id"] == top.id and got["findings"][0]["lost"] == format_us(top.explains_us)
    assert format_us(top.figures["saving_us"]) in got["findings"][0]["saving"]  # what removing it saves
    assert got["figures"]["median_step"] == format_us(analysis.summary.step_time_median_us)
    assert got["definitions"]["summary"] and got["more"]["report"].endswith(".report.json")
    assert len(text.encode()) < 2048
    # the pointer for the rest is the saved report, which loads to the same figures
    assert ta.load(got["more"]["report"]).summary == analysis.summary


@pytest.mark.slow
def test_the_tables_are_the_dataframes_top_rows_in_ms(box, analysis):
    got, _ = answer(box, "steps", path=str(INPUT_BOUND), top=3)
    steps = analysis.steps().sort_values(["duration_us", "step"], ascending=[False, True])
    assert got["steps"] == len(steps) and len(got["rows"]) == 3
    i = got["columns"].index("duration_ms")
    assert [r[i] for r in got["rows"]] == [round(x / 1000, 3) for x in steps["duration_us"][:3]]
    assert got["median_step"] == format_us(float(steps["duration_us"].median()))

    got, _ = answer(box, "gaps", path=str(INPUT_BOUND), top=2, cause="dataloader")
    gaps = analysis.gaps()
    mine = gaps[gaps["cause"] == "dataloader"].sort_values("duration_us", ascending=False)
    assert got["gaps"] == len(mine) and got["total"] == format_us(float(mine["duration_us"].sum()))
    assert [r[got["columns"].index("duration_ms")] for r in got["rows"]] == [round(x / 1000, 3)
                                                                            for x in mine["duration_us"][:2]]

    got, _ = answer(box, "kernels", path=str(INPUT_BOUND), name="sgemm")
    kernels = analysis.kernels(top=None)
    kernels = kernels[kernels["name"].str.contains("sgemm", case=False, regex=False)]
    assert got["kernels"] == len(kernels) >= 1
    assert got["total"] == format_us(float(kernels["total_us"].sum()))

    got, _ = answer(box, "operators", path=str(INPUT_BOUND), sort="idle", top=1)
    ops = analysis.ops().sort_values("idle_us", ascending=False)
    assert got["rows"][0][got["columns"].index("name")] == ops["name"].iloc[0]
    assert got["rows"][0][got["columns"].index("idle_ms")] == round(ops["idle_us"].iloc[0] / 1000, 3)


@pytest.mark.slow
def test_explain_gives_the_findings_evidence_as_the_report_writes_it(box, analysis):
    f = verdict_finding(analysis.diagnosis)
    got, _ = answer(box, "explain", path=str(INPUT_BOUND), limit=16384)
    assert got["id"] == f.id and got["evidence"] == list(f.evidence) and got["advice"] == list(f.advice)
    assert got["figures"]["lost"] == format_us(f.figures["lost_us"])
    assert got["host_ops"][0]["name"] == f.host_ops[0].name
    small, text = answer(box, "explain", path=str(INPUT_BOUND))  # the default budget cuts, and says so
    assert len(text.encode()) <= A.DEFAULT_LIMIT and small["cut"] and small["evidence"]
    text, failed = call(box, "explain", {"path": str(INPUT_BOUND), "finding": "nonsense"})
    assert failed and text.startswith("error: no finding 'nonsense'") and f.id in text


@pytest.mark.slow
def test_compare_reads_traces_and_saved_reports_alike(box, analysis, tmp_path):
    saved = SAMPLES / f".mcp-test-{os.getpid()}.report.json"  # a saved report inside the allowed folder
    try:
        analysis.save(saved, drawing=False)
        got, text = answer(box, "compare", base=str(saved), head=str(INPUT_BOUND))
    finally:
        saved.unlink(missing_ok=True)
    c = compare(analysis, analysis)
    assert got["change"] == c.change_verdict == "unchanged"
    assert got["step_time"]["base_median"] == format_us(c.step_time.base_median_us)
    assert got["verdicts"] == {"base": "input_bound", "head": "input_bound"}
    assert got["more"]["base_report"] == str(saved) and len(text.encode()) <= A.DEFAULT_LIMIT


@pytest.mark.slow
def test_every_answer_fits_its_budget_and_counts_what_it_cut(box):
    for limit in (512, 1024, 2048):
        for name, args in [("analyze", {}), ("steps", {"top": 200}), ("gaps", {"top": 200}),
                           ("kernels", {"top": 200}), ("operators", {"top": 200}), ("explain", {})]:
            text, failed = call(box, name, {"path": str(INPUT_BOUND), "limit": limit, **args})
            assert not failed and len(text.encode()) <= limit, (name, limit, len(text.encode()))
    got = json.loads(call(box, "steps", {"path": str(INPUT_BOUND), "limit": 512})[0])
    assert got["cut"]["definitions"] >= 1 and "limit" in got["cut"]["why"]


def test_fit_cuts_rows_then_definitions_then_prose():
    answer_ = {"rows": [[i, "x" * 40] for i in range(100)], "definitions": {"a": "d" * 300, "b": "e" * 300},
               "evidence": ["f" * 300] * 3, "more": {"report": "r.json"}}
    text = A.fit(answer_, 1500)
    got = json.loads(text)
    assert len(text.encode()) <= 1500
    assert len(got["rows"]) == 1 and got["cut"]["rows"] == 99  # tables first, down to one row
    assert got["more"] == {"report": "r.json"}  # the pointer is never cut
    assert A.fit({"rows": [1, 2]}, 512) == '{"rows":[1,2]}'  # within budget: as it is


def test_a_path_outside_the_roots_a_missing_file_and_a_bad_argument_are_one_line_errors(box, tmp_path):
    outside = tmp_path / "trace.json"
    outside.write_bytes(INPUT_BOUND.read_bytes())
    link = SAMPLES / f".mcp-test-link-{os.getpid()}.json"
    cases = {str(outside): "outside the folders", "../README.md": "outside the folders",
             str(SAMPLES / ".." / "pyproject.toml"): "outside the folders",
             str(SAMPLES / "no_such_trace.json"): "no such file", "": "empty path"}
    try:
        link.symlink_to(outside)  # a link inside the root to a file outside it
        cases[str(link)] = "outside the folders"
        for path, said in cases.items():
            text, failed = call(box, "analyze", {"path": path})
            assert failed and said in text and "\n" not in text and text.startswith("error: "), (path, text)
    finally:
        link.unlink(missing_ok=True)
    for bad in ({"path": 3}, {}, {"path": "x", "top": 0}, {"path": "x", "bogus": 1}):
        text, failed = call(box, "steps", bad)
        assert failed and "\n" not in text and text.startswith("error: steps: "), text
    text, failed = call(box, "delete", {})
    assert failed and text.startswith("error: no tool 'delete'")


@pytest.mark.slow
def test_a_non_trace_is_the_readers_one_line_and_nothing_is_written_outside_the_work_folder(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    (root / "notes.json").write_text('{"hello": "world"}')
    (root / "trace.json").write_bytes(INPUT_BOUND.read_bytes())
    work, cache = tmp_path / "work", os.environ["TRACEANALYZER_CACHE_DIR"]
    before = sorted(os.listdir(cache))
    local = LocalTools([root], workdir=work)
    text, failed = call(local, "analyze", {"path": str(root / "notes.json")})
    assert failed and "\n" not in text and "notes.json" in text
    with pytest.raises(ta.InputError) as refused:  # the same error as the command line's
        ta.analyze(root / "notes.json", ta.Options(cache=False))
    assert str(refused.value) in text
    text, failed = call(local, "analyze", {"path": "trace.json"})  # relative to a root
    assert not failed and json.loads(text)["verdict"] == "input_bound"
    assert sorted(p.name for p in root.iterdir()) == ["notes.json", "trace.json"]
    assert [p.parent for p in work.iterdir()] == [work] and sorted(os.listdir(cache)) == before


def test_a_folder_linking_outside_the_roots_is_refused(tmp_path):
    root, elsewhere = tmp_path / "root", tmp_path / "elsewhere"
    (root / "job").mkdir(parents=True)
    elsewhere.mkdir()
    (elsewhere / "rank1.json").write_text("{}")
    (root / "job" / "rank1.json").symlink_to(elsewhere / "rank1.json")
    text, failed = call(LocalTools([root], workdir=tmp_path / "work"), "analyze", {"path": str(root / "job")})
    assert failed and "a link to outside the folders" in text


@pytest.mark.slow
def test_the_size_limit_is_the_command_lines(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    (root / "trace.json").write_bytes(INPUT_BOUND.read_bytes())
    small = LocalTools([root], ta.Options(max_input_bytes=1000, jobs=1), workdir=tmp_path / "work")
    text, failed = call(small, "analyze", {"path": "trace.json"})
    assert failed and "\n" not in text and "larger than the input limit of 1000 bytes" in text, text


# --- the JSON-RPC subset -------------------------------------------------------------------------
class Echo:
    """A toolbox of two tools, one that writes (the protocol's own interface, no MCP involved)."""

    def specs(self):
        return [ToolSpec("read", "reads", (Param("x", "integer", "x", required=True),)),
                ToolSpec("write", "writes", (), read_only=False)]

    def function(self, name):
        return {"read": lambda x: json.dumps({"x": x}), "write": lambda: "{}"}[name]


def rpc(method, id_=1, **params):
    return {"jsonrpc": "2.0", "id": id_, "method": method, "params": params}


def test_the_json_rpc_subset_lists_calls_and_refuses_in_one_line():
    read_only = lambda spec: None if spec.read_only else f"read-only token: {spec.name}"  # noqa: E731
    r = handle(rpc("initialize", protocolVersion="2025-06-18", capabilities={}), Echo(), read_only)
    assert r.message["result"]["protocolVersion"] == "2025-06-18" and "tools" in r.message["result"]["capabilities"]
    r = handle(rpc("initialize", protocolVersion="1999-01-01"), Echo(), read_only)
    assert r.message["result"]["protocolVersion"] == "2025-11-25"  # the newest it speaks
    r = handle(rpc("tools/list"), Echo(), read_only)
    assert [t["name"] for t in r.message["result"]["tools"]] == ["read"]  # what this token may call
    assert r.message["result"]["tools"][0]["inputSchema"]["required"] == ["x"]
    r = handle(rpc("tools/call", name="read", arguments={"x": 7}), Echo(), read_only)
    assert r.message["result"] == {"content": [{"type": "text", "text": '{"x": 7}'}], "isError": False}
    r = handle(rpc("tools/call", name="read", arguments={"x": "7"}), Echo(), read_only)
    assert r.message["result"]["isError"] and r.message["result"]["content"][0]["text"] == \
        "error: read: x must be an integer"
    r = handle(rpc("tools/call", name="write"), Echo(), read_only)
    assert r.message["error"] == {"code": FORBIDDEN, "message": "read-only token: write"}
    r = handle(rpc("tools/call", name="drop"), Echo(), read_only)
    assert r.message["error"]["code"] == INVALID_PARAMS and "no tool 'drop'" in r.message["error"]["message"]
    assert handle({"jsonrpc": "2.0", "method": "notifications/initialized"}, Echo(), read_only).status == 202
    assert handle([rpc("ping")], Echo(), read_only).status == 400
    assert handle(rpc("resources/list"), Echo(), read_only).message["error"]["code"] == -32601


def test_the_command_without_the_sdk_says_how_to_install_it_in_one_line(monkeypatch):
    from click.testing import CliRunner

    from traceanalyzer.commands import main

    monkeypatch.setitem(sys.modules, "mcp", None)  # as if the extra were not installed
    result = CliRunner().invoke(main, ["mcp", "--root", str(SAMPLES)])
    assert result.exit_code == 2
    assert result.output.strip() == ("traceanalyzer: error: the MCP server needs the SDK: "
                                      "pip install 'traceanalyzer-ml[mcp]'")
