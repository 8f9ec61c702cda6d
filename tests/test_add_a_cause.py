"""Adding a host-class cause is a registry entry (traceanalyzer/causes.py) and its advice entry
(diagnosis/advice.py): nothing else. Here a `gc` cause (Python garbage collection, `gc.collect`
frames) is added in the test itself, and a small trace with collections inside GPU gaps gets its
idle time attributed to it, to the nanosecond, with a finding and a verdict."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from kineto_builder import KinetoTrace

import traceanalyzer as ta
from traceanalyzer import causes as C
from traceanalyzer.analyses import figures_of
from traceanalyzer.diagnosis import diagnose
from traceanalyzer.diagnosis.advice import ADVICE, GENERIC
from traceanalyzer.formats import ReadOptions, kineto

GC, GC_BOUND = "gc", "gc_bound"
GC_CAUSE = C.Cause(GC, "garbage collection", "#7a5195", GC_BOUND, "in Python garbage collection",
                   host_pattern=re.compile(r"^gc\.collect$"), priority=65, direct=True)
GC_VERDICT = C.Verdict(GC_BOUND, "GC bound", "Python garbage collection stalls the launch queue", GC)
GC_ADVICE = ("Collect less often: gc.freeze() after start-up, or gc.disable() in the training loop and "
             "gc.collect() every N steps.",)

STEPS, STEP_US, GC_US, GAP_US = 5, 10_000, 6_000, 6_010


@pytest.fixture
def gc_cause(monkeypatch: pytest.MonkeyPatch) -> None:
    add_gc_cause(monkeypatch)


def add_gc_cause(monkeypatch: pytest.MonkeyPatch) -> None:
    """The registry with the gc cause and its verdict added (what editing causes.py gives), and its advice."""
    causes, verdicts = (*C.CAUSE_LIST, GC_CAUSE), (*C.VERDICT_LIST, GC_VERDICT)
    monkeypatch.setattr(C, "CAUSE_LIST", causes)
    monkeypatch.setattr(C, "VERDICT_LIST", verdicts)
    monkeypatch.setattr(C, "CAUSE_BY_ID", {c.id: c for c in causes})
    monkeypatch.setattr(C, "VERDICT_BY_ID", {v.id: v for v in verdicts})
    monkeypatch.setattr(C, "CAUSES", tuple(c.id for c in causes))
    monkeypatch.setattr(C, "VERDICTS", tuple(v.id for v in verdicts if v.id != C.UNEXPLAINED))
    monkeypatch.setattr(C, "VERDICT_OF_CAUSE", {c.id: c.verdict for c in causes})
    monkeypatch.setitem(ADVICE, GC_BOUND, {GENERIC: GC_ADVICE})


def gc_trace(path: Path) -> Path:
    """Steps of 10 ms: a 1.98 ms kernel, then 6 ms of gc.collect on the launching thread while the GPU
    waits (a 6.01 ms gap), then the next kernel's launch and a 1.99 ms kernel to the step's end."""
    t = KinetoTrace()
    for i in range(STEPS):
        t0 = 1_000 + i * STEP_US
        t.step(i, t0, STEP_US)
        t.launched(t0 + 10, 5, t0 + 20, 2_000 - 20)
        t.host("gc.collect", t0 + 2_000, GC_US, cat="python_function")
        t.launched(t0 + 8_000, 5, t0 + 8_000 + 10, STEP_US - 8_000 - 10)
    return t.write(path)


def test_a_new_cause_gets_its_idle_time_a_finding_and_the_verdict(tmp_path: Path, gc_cause: None) -> None:
    tl = kineto.read_path(gc_trace(tmp_path / "gc.json"), ReadOptions())
    figures = figures_of(tl)
    rank = figures.ranks[0]
    assert rank.causes is not None
    (device,) = rank.causes.devices
    assert device.idle_by_cause[GC] == STEPS * GAP_US * 1000  # every gc gap, to the nanosecond
    assert device.gaps_by_cause[GC] == STEPS
    # the gap set carries the cause from the moment it is made
    assert list(rank.devices[0].idle.cause).count(GC) == STEPS
    assert [e.name for e in rank.causes.evidence[GC]] == ["gc.collect"]

    d = diagnose(figures).ranks[0]
    assert d.primary == GC_BOUND
    assert d.idle_by_cause[GC] == STEPS * GAP_US * 1000
    finding = next(f for f in d.findings if f.cause == GC)
    assert (finding.id, finding.title, finding.advice) == (GC_BOUND, GC_VERDICT.title, GC_ADVICE)
    assert finding.explains_ns == STEPS * GAP_US * 1000 and finding.gaps == STEPS
    assert finding.host_ops[0].name == "gc.collect"
    assert "in Python garbage collection" in d.headline


def test_the_new_cause_reaches_the_report(tmp_path: Path, gc_cause: None) -> None:
    a = ta.analyze(gc_trace(tmp_path / "gc.json"), ta.Options(cache=False))
    assert a.diagnosis is not None and a.diagnosis.primary == GC_BOUND
    rank = a.ranks[0]
    assert rank.diagnosis is not None and rank.diagnosis.idle_by_cause_us[GC] == STEPS * GAP_US
    device = rank.devices[0]
    assert {g.cause for g in device.gaps.top} == {GC}
    assert device.gap_table is not None and device.gap_table.cause.count(GC) == STEPS
    assert rank.drawing is not None and rank.drawing.timeline["devices"][0]["gaps"]["cause"].count(GC) == STEPS
    assert GC_VERDICT.title in a.to_markdown()


def test_without_the_registry_entry_the_same_gaps_are_host_compute(tmp_path: Path) -> None:
    d = diagnose(figures_of(kineto.read_path(gc_trace(tmp_path / "gc.json"), ReadOptions()))).ranks[0]
    assert GC not in d.idle_by_cause
    assert d.idle_by_cause[C.HOST_COMPUTE] == STEPS * GAP_US * 1000


# --- saved reports do not enumerate the causes: adding one leaves their shape, and the schema tests, as they are
@pytest.mark.parametrize("name", sorted(__import__("test_schema").MADE_FROM))
def test_with_a_new_cause_saved_schema2_reports_still_load_as_the_fresh_analysis(
        name: str, gc_cause: None, monkeypatch: pytest.MonkeyPatch) -> None:
    import test_schema

    assert GC in C.CAUSES
    test_schema.test_a_saved_schema2_report_loads_as_the_fresh_analysis(name, monkeypatch)


@pytest.mark.parametrize("name", sorted(__import__("test_schema").MADE_FROM_3))
def test_with_a_new_cause_saved_schema3_reports_still_load_and_diff(
        name: str, gc_cause: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import test_schema

    test_schema.test_a_saved_schema3_report_loads_as_the_fresh_analysis_and_diffs(name, monkeypatch, tmp_path)


def test_a_new_cause_does_not_change_the_shape_of_saved_reports(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from conftest import SAMPLES

    opts = ta.Options(cache=False, jobs=1)
    before = ta.analyze(SAMPLES / "input_bound.json", opts).save(tmp_path / "before.json")
    with monkeypatch.context() as m:
        add_gc_cause(m)
        assert GC in C.CAUSES
        fresh = ta.analyze(SAMPLES / "input_bound.json", opts)
        after = fresh.save(tmp_path / "after.json")
        assert after.read_bytes() == before.read_bytes()  # no cause the run has no time for is written
        assert ta.load(before) == fresh  # a report saved before the cause existed loads as the fresh one
        rank = fresh.ranks[0].diagnosis
        assert rank is not None and GC not in rank.idle_by_cause_us and rank.idle_by_cause_us["dataloader"] > 0
