"""The library pipeline as notebooks and scripts use it: analyze -> Analysis -> DataFrames, save, load.

A saved JSON report loads back into an Analysis equal to the original, and renders to byte-identical
HTML and Markdown, on every sample trace and (slow) every corpus trace.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import CORPUS, SAMPLES

import traceanalyzer as ta
from traceanalyzer.report import render

SAMPLE_INPUTS = sorted(p for p in SAMPLES.iterdir() if p.name.endswith((".json", ".json.gz"))
                       and not p.name.endswith(".expected.json")) + [SAMPLES / "torch_cpu_logdir",
                                                                     SAMPLES / "dmon" / "idle_runs.log"]


def _corpus_inputs() -> list[Path]:
    if not CORPUS.is_dir():
        return []
    return sorted(f for f in CORPUS.rglob("*") if f.is_file() and f.name.endswith((".json", ".json.gz", ".pb",
                                                                                      ".log", ".csv", ".txt")))


def _roundtrip(path: Path, tmp_path: Path) -> None:
    try:
        original = ta.analyze(path, ta.Options(find_logs_beside=False))
    except ta.InputError:
        return  # not a trace (summaries, look-alikes): the CLI tests cover their messages
    saved = original.save(tmp_path / "r.json")
    loaded = ta.load(saved)
    assert loaded == original
    for fmt in ("html", "md", "json"):
        assert render(loaded, fmt) == render(original, fmt), fmt


@pytest.mark.parametrize("path", SAMPLE_INPUTS, ids=lambda p: p.name)
def test_saved_report_loads_back_equal_and_renders_identically(path, tmp_path):
    _roundtrip(path, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("path", _corpus_inputs(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_corpus_report_roundtrip(path, tmp_path):
    _roundtrip(path, tmp_path)


def test_corpus_roundtrip_inputs_exist():
    if os.environ.get("CI"):
        assert _corpus_inputs(), f"the corpus is missing at {CORPUS} (CI is set)"


def test_notebook_three_lines():
    """The README's notebook example: steps, gaps and kernels of a trace as DataFrames."""
    a = ta.analyze(SAMPLES / "input_bound.json")
    steps, gaps, kernels = a.steps(), a.gaps(), a.kernels()
    assert list(steps["step"]) == [0, 1, 2, 3, 4]
    assert steps["duration_us"].tolist() == [10000.0] * 5
    assert steps["dataloader_wait_us"].sum() == pytest.approx(a.ranks[0].dataloader_wait_us)
    # five gaps under the DataLoader wait; the 750 us tail after the last kernel has no host activity
    assert gaps["cause"].tolist() == ["dataloader"] * 5 + ["unknown"] and len(gaps) == a.ranks[0].devices[0].gaps.count
    assert gaps["duration_us"].sum() == pytest.approx(a.ranks[0].devices[0].gaps.total_us)
    assert kernels["total_us"].iloc[0] * 1000 == a.ranks[0].devices[0].top_kernels[0].total_ns  # held in ns
    findings = a.findings()
    assert findings["id"].iloc[0] == a.diagnosis.primary == "input_bound"
    assert findings["top_host_op"].iloc[0].startswith("enumerate(DataLoader)#")
    devices = a.devices()
    assert devices["gpu_idle_fraction"].iloc[0] == a.summary.gpu_idle_fraction
    assert devices[[c for c in devices.columns if c.startswith("memory_")]].isna().all(axis=None)  # no memory events


def test_options_change_the_figures_and_are_echoed():
    a = ta.analyze(SAMPLES / "input_bound.json", ta.Options(min_gap_ns=10_000_000))
    assert a.options.min_gap_us == 10_000.0
    assert a.ranks[0].devices[0].gaps.count == 0


def test_html_and_markdown_from_the_api(tmp_path):
    a = ta.analyze(SAMPLES / "input_bound.json")
    html = a.to_html(tmp_path / "r.html")
    assert (tmp_path / "r.html").read_text(encoding="utf-8") == html and html.upper().startswith("<!DOCTYPE HTML>")
    assert a.to_markdown().startswith("#") and "Input bound" in a.to_markdown()


def test_public_names():
    assert set(ta.__all__) == {"Analysis", "InputError", "Options", "TraceAnalyzerError", "UsageError",
                               "__version__", "analyze", "load"}
    for name in ta.__all__:
        assert hasattr(ta, name)


def test_load_refuses_what_is_not_a_report(tmp_path):
    trace = SAMPLES / "input_bound.json"
    with pytest.raises(ta.InputError, match="schema"):
        ta.load(trace)
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "traceanalyzer/2", "tool": {"name": "traceanalyzer"}}')
    with pytest.raises(ta.InputError, match="missing field"):
        ta.load(bad)


def test_a_timeline_is_an_input_too():
    from timelines import load_paths

    tl = load_paths([SAMPLES / "input_bound.json"])
    assert ta.analyze(tl) == ta.analyze(SAMPLES / "input_bound.json", ta.Options(find_logs_beside=False))
