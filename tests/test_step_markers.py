"""Step markers always define the steps (analyses/iterations.py `find_steps`): one marker is one step, however
much repeating work it holds; iterations found inside it are its sub-iterations, never its replacement. `diff`
compares like with like (both sides by markers, or both detected) and says which."""

from __future__ import annotations

import json

import pytest
from iterations_builder import PATTERN, loop_trace

import traceanalyzer as ta
from traceanalyzer.compare import basis_mismatch, compare
from traceanalyzer.report.diff import render_diff_markdown, render_diff_text

OPTS = ta.Options(cache=False, find_logs_beside=False)
# Three denoising-like iterations of six kernels each, about 41 ms a kernel: one ProfilerStep of ~742 ms.
KERNEL_US = 41_000.0


def _marker_us(path) -> float:
    """The ProfilerStep's duration as the file records it (us)."""
    doc = json.loads(path.read_text())
    (dur,) = [e["dur"] for e in doc["traceEvents"] if e["name"].startswith("ProfilerStep#") and e["cat"] != "gpu_user_annotation"]
    return float(dur)


def test_one_marker_around_three_denoising_iterations_is_one_step(tmp_path):
    path = loop_trace(tmp_path / "one.json", iterations=3, kernel_us=KERNEL_US, wait_us=0, one_marker=True)
    marker = _marker_us(path)
    assert marker == pytest.approx(742_000, rel=0.01)
    r = ta.analyze(path, OPTS).ranks[0]
    assert r.steps == 1 and len(r.per_step) == 1
    assert r.per_step[0].duration_us == pytest.approx(marker, abs=0.001)
    src = r.step_source
    # the three iterations are reported inside the step, not as steps
    assert (src.kind, src.basis, src.iterations) == ("markers", "kernel sequence", 3)
    assert src.period_us == pytest.approx(marker / 3, rel=0.01)
    a = ta.analyze(path, OPTS)
    assert a.summary.steps == 1
    line = "one step marker, the step: it holds 3 iterations detected from the kernel sequence"
    for text in (a.to_markdown(), a.to_text()):
        assert line in " ".join(text.split())


def test_without_the_marker_the_iterations_are_the_steps(tmp_path):
    path = loop_trace(tmp_path / "none.json", iterations=3, kernel_us=KERNEL_US, wait_us=0)
    r = ta.analyze(path, OPTS).ranks[0]
    assert (r.step_source.kind, r.steps) == ("detected", 3)


def test_diff_of_one_marker_a_side_measures_the_marker(tmp_path):
    """The same pipeline with a slower attention kernel (+5.6% of the step): one step a side, both by markers;
    the change is the step's, not that of a marker against a detected iteration."""
    base = ta.analyze(loop_trace(tmp_path / "base.json", iterations=3, kernel_us=KERNEL_US, wait_us=0,
                                 one_marker=True), OPTS)
    slow = (PATTERN[0], PATTERN[1], PATTERN[2] + "_slow", *PATTERN[3:])
    head_path = loop_trace(tmp_path / "head.json", iterations=3, kernel_us=KERNEL_US * 1.056, wait_us=0,
                           one_marker=True, pattern=slow)
    head = ta.analyze(head_path, OPTS)
    c = compare(base, head)
    assert (c.base.step_basis, c.head.step_basis) == ("markers", "markers")
    assert (c.step_time.base_steps, c.step_time.head_steps) == (1, 1)
    assert c.step_time.change == pytest.approx(_marker_us(head_path) / _marker_us(tmp_path / "base.json") - 1,
                                               abs=1e-4)
    assert c.step_time.change == pytest.approx(0.056, abs=0.002)
    assert c.change_verdict == "inconclusive" and c.reason == "too_few_steps"
    assert "| steps measured | 1 (by step markers) | 1 (by step markers) | |" in render_diff_markdown(c)
    assert "(1 vs 1 steps, by step markers on both sides)" in render_diff_text(c)


def test_diff_of_markers_against_detected_iterations_is_not_judged(tmp_path):
    base = ta.analyze(loop_trace(tmp_path / "base.json", iterations=6, markers=True), OPTS)
    head = ta.analyze(loop_trace(tmp_path / "head.json", iterations=6, wait_us=900), OPTS)
    assert head.ranks[0].step_source.kind == "detected"
    c = compare(base, head)
    assert (c.base.step_basis, c.head.step_basis) == ("markers", "detected")
    assert (c.change_verdict, c.reason) == ("inconclusive", "step_basis_differs")
    assert c.warnings[0].startswith("steps by step markers on the base, detected from repeating work on the head")
    assert "steps of different kinds (base by step markers, head detected from repeating work)" in c.headline
    # like with like: both detected is judged
    again = compare(ta.analyze(loop_trace(tmp_path / "b2.json", iterations=8, wait_us=100), OPTS), head)
    assert again.reason != "step_basis_differs" and again.base.step_basis == "detected"


def test_basis_mismatch_rules():
    assert basis_mismatch("markers", "markers") is None
    assert basis_mismatch("detected", "detected") is None
    assert basis_mismatch("", "detected") is None  # a saved report from before the basis was recorded
    assert basis_mismatch("markers", "detected") is not None
    assert basis_mismatch("mixed", "mixed") is not None
