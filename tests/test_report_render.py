"""Renderers: structure, escaping, determinism and size limits (not the figures: see test_report_data)."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import orjson
import pytest
from conftest import ROOT
from markdown_it import MarkdownIt
from report_fixtures import HOSTILE, cpu_only, empty, hostile, multi_rank, report_for, single_gpu

from traceanalyzer.report import RENDERERS, render
from traceanalyzer.report.html import render_html
from traceanalyzer.report.markdown import MAX_CHARS, render_markdown
from traceanalyzer.report.text import WIDTH, render_text
from traceanalyzer.result import Analysis, analysis_from_data
from traceanalyzer.result.types import DiagnosisResult, FindingResult

SECTIONS = ("verdict", "figures", "ranks", "timeline", "steps", "gaps", "memcpy", "kernels", "inputs", "definitions")
CASES = {
    "empty": lambda tmp: [empty(tmp / "empty.json")],
    "cpu_only": lambda tmp: [cpu_only(tmp / "cpu.json")],
    "single_gpu": lambda tmp: [single_gpu(tmp / "one.json")],
    "multi_rank": lambda tmp: [multi_rank(tmp / "job", ranks=3)],
}


def md_tables(text: str) -> list[list[int]]:
    """Parse as GitHub would (CommonMark + tables + raw HTML); the cell count of every row per table."""
    tokens = MarkdownIt("commonmark", {"html": True}).enable("table").parse(text)
    tables: list[list[int]] = []
    cells = 0
    for tok in tokens:
        if tok.type == "table_open":
            tables.append([])
        elif tok.type == "tr_open":
            cells = 0
        elif tok.type in ("th_open", "td_open"):
            cells += 1
        elif tok.type == "tr_close":
            tables[-1].append(cells)
    return tables


def assert_tables_well_formed(text: str, expect_tables: bool = True) -> None:
    tables = md_tables(text)
    if expect_tables:
        assert tables, "no table token"
    for rows in tables:
        assert len(set(rows)) == 1, f"rows with different cell counts: {rows}"


def markdown_html(text: str) -> str:
    return MarkdownIt("commonmark", {"html": True}).enable("table").render(text)


@pytest.mark.parametrize("diagnosed", [False, True], ids=["plain", "diagnosed"])
@pytest.mark.parametrize("case", list(CASES))
def test_every_section_renders(tmp_path, case, diagnosed):
    report = report_for(CASES[case](tmp_path), diagnosed=diagnosed)
    html = render_html(report)
    for section in SECTIONS:
        assert f'<section id="{section}"' in html, section
    assert ('<section id="findings"' in html) == diagnosed
    from traceanalyzer.report.html import shown_definitions

    shown = dict(shown_definitions(report))
    assert {"window", "gpu_busy", "idle_gaps", "summary"} <= set(shown)
    for name in report.definitions:  # only the definitions of figures this report has
        assert (f'id="def-{name}"' in html) == (name in shown), name
    assert html.count("<script") == 2 and html.count("</script>") == 2  # the data block and our code
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html), "external resource"
    md = render_markdown(report)
    assert len(md) <= MAX_CHARS
    assert_tables_well_formed(md)
    text = render_text(report)
    assert all(len(line) <= WIDTH for line in text.splitlines())
    if diagnosed:
        assert "Primary bottleneck: input_bound" in text and "Input bound" in md and "Findings" in html


def test_hostile_names_are_text_everywhere(tmp_path):
    report = report_for([hostile(tmp_path / "h.json")], diagnosed=True, evidence_name=HOSTILE[1])
    html = render_html(report)
    assert html.count("<script") == 2 and html.count("</script>") == 2
    assert "<img" not in html and "alert(1)</script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "&#34;&gt;&lt;img src=x onerror=alert(2)&gt;" in html
    assert "{{ 7*7 }}" in html and ">49<" not in html  # not evaluated as a template
    data = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', html, re.DOTALL).group(1)
    assert "<" not in data and ">" not in data  # tojson escapes them inside the data block
    md = render_markdown(report)
    out = markdown_html(md)
    assert "<script" not in out and "<img" not in out and 'href="javascript' not in out
    assert_tables_well_formed(md)
    text = render_text(report)
    assert "\x1b" not in text


def test_html_is_byte_identical_for_the_same_input(tmp_path):
    trace = [multi_rank(tmp_path / "job", ranks=2)]
    first = render_html(report_for(trace, diagnosed=True)).encode()
    second = render_html(report_for(trace, diagnosed=True)).encode()
    assert first == second
    assert render_markdown(report_for(trace)) == render_markdown(report_for(trace))


def test_html_degrades_with_an_unknown_verdict(tmp_path):
    """A saved report from a newer version may name a verdict this one does not know."""
    report = report_for([single_gpu(tmp_path / "one.json")])
    finding = FindingResult("x", None, "only a title", "low", 0.0, 0.0, (), ())
    report = dataclasses.replace(report, diagnosis=DiagnosisResult("something_new", None, "", (finding,)))
    html = render_html(report)
    assert "only a title" in html and "Undetermined" in html
    assert render_markdown(report) and render_text(report)


@pytest.mark.slow
def test_markdown_fits_a_github_comment_however_large(tmp_path):
    report = report_for([single_gpu(tmp_path / "one.json", steps=50)], diagnosed=True)
    (rank,), (source,) = report.ranks, report.inputs
    big = dataclasses.replace(
        report, ranks=tuple(dataclasses.replace(rank, rank=i) for i in range(600)),
        inputs=tuple(dataclasses.replace(source, path=f"/traces/rank{i}.json", warnings=("x" * 300,) * 5)
                     for i in range(600)))
    md = render_markdown(big)
    assert len(md) <= MAX_CHARS
    assert "more rows not shown" in md or "more rank(s)" in md
    assert_tables_well_formed(md)
    text = render_text(big)
    assert len(text.splitlines()) < 60 and all(len(line) <= WIDTH for line in text.splitlines())


LARGE = ("tl_xdit_sd35/profile_trace_rank_0.json.gz",
         "tl_h100/google_owlv2-large-patch14-ensemble__1016001.json.gz",
         "tl_mi300/google_owlv2-large-patch14-ensemble__1016001.json.gz")


@pytest.mark.parametrize("name", LARGE)
@pytest.mark.slow
def test_large_corpus_traces_fit(corpus, name):
    report = report_for([corpus / name], diagnosed=True)
    md = render_markdown(report)
    assert len(md) <= MAX_CHARS
    assert_tables_well_formed(md)
    html = render_html(report).encode()
    assert len(html) <= 3 * 1024 * 1024
    assert html == render_html(report_for([corpus / name], diagnosed=True)).encode()


def test_cli_writes_html_and_prints_the_summary(tmp_path):
    from click.testing import CliRunner

    from traceanalyzer.commands import main

    trace = single_gpu(tmp_path / "one.json")
    res = CliRunner().invoke(main, ["report", str(trace), "-o", str(tmp_path / "r.html")])
    assert res.exit_code == 0, res.output
    assert "GPU idle" in (tmp_path / "r.html").read_text() and "idle 47.0%" in res.output
    # the summary fits 80 columns (the last line names the output file, however long its path)
    assert all(len(line) <= WIDTH for line in res.output.splitlines() if not line.startswith("Report ("))
    res = CliRunner().invoke(main, ["report", str(trace), "--format", "md", "-o", "-"])
    assert res.exit_code == 0 and res.stdout.startswith("## traceanalyzer")
    assert Path(tmp_path / "r.html").stat().st_size < 3 * 1024 * 1024


@pytest.mark.parametrize("diagnosed", [False, True], ids=["plain", "diagnosed"])
@pytest.mark.parametrize("case", list(CASES))
def test_every_renderer_reads_the_typed_result_and_json_round_trips(tmp_path, case, diagnosed):
    """Every renderer of the registry renders the typed result; the JSON loads back to an equal result,
    which renders to the same bytes in every format (mappings are listed in the saved report's order)."""
    analysis = report_for(CASES[case](tmp_path), diagnosed=diagnosed)
    assert set(RENDERERS) == {"html", "json", "md", "text", "bmf"}
    out = {name: render(analysis, name) for name in RENDERERS}
    assert all(out.values())
    assert out["text"].decode() == analysis.to_text() and out["md"].decode() == analysis.to_markdown()
    assert out["html"].decode() == analysis.to_html() and out["json"] == analysis.to_json()
    loaded = analysis_from_data(orjson.loads(out["json"]))
    assert isinstance(loaded, Analysis) and loaded == analysis
    assert {name: render(loaded, name) for name in RENDERERS} == out
    if diagnosed:  # the fake diagnosis reaches every format through the typed ranks
        rank = analysis.ranks[0]
        assert rank.diagnosis is not None and analysis.speaking_rank is rank
        if rank.diagnosis.gaps:
            assert "Longest gaps and their causes" in out["html"].decode()
            assert "| rank | device | start | length | step | cause | evidence |" in out["md"].decode()


def test_renderers_name_their_extension():
    from traceanalyzer.report.diff import RENDERERS as DIFF_RENDERERS

    for registry, extra in ((RENDERERS, {"bmf": "bmf.json"}), (DIFF_RENDERERS, {})):
        assert {name: r.extension for name, r in registry.items()} == {"html": "html", "json": "json", "md": "md",
                                                                       "text": "txt", **extra}
        assert all(r.name == name for name, r in registry.items())


def test_only_the_json_renderers_serialize():
    """The renderers read the typed result by attribute; only the JSON ones turn it into plain data."""
    serializing = set()
    for path in sorted((ROOT / "traceanalyzer" / "report").glob("*.py")):
        for fn in ast.walk(ast.parse(path.read_text())):
            if isinstance(fn, ast.FunctionDef) and any(
                    isinstance(n, ast.Attribute) and n.attr == "to_data" for n in ast.walk(fn)):
                serializing.add((path.name, fn.name))
    assert serializing == {("jsonout.py", "render_json"), ("diff.py", "render_diff_json")}


def test_no_private_name_crosses_a_report_module():
    """The renderers share helpers by public names (`_format.md`, not `_md`)."""
    for path in sorted((ROOT / "traceanalyzer" / "report").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                private = [a.name for a in node.names if a.name.startswith("_")]
                assert private == [], f"{path.name} imports {private} from {node.module}"
