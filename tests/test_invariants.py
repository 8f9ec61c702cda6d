"""The invariants of `tests/invariants.py` on every trace the tests have: the samples, every input of the corpus
(`../shared/corpus`: absent, skip; absent under CI, fail) and the fetched traces when present
(`$TRACEANALYZER_FETCHED`, else `corpus_fetched` beside the corpus; absent, skip).

One test per (trace, invariant). A break known today is listed in `KNOWN` with its figures, as a strict xfail:
the fix that removes it shows as an unexpected pass, and the row is then deleted. The checks themselves are
never weakened to pass a trace. Inputs that are not traces (summaries, look-alikes) skip. Corpus files from
FAST_BYTES up and every fetched file run with the full suite only (`slow`).
"""

from __future__ import annotations

import copy
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

import invariants as I
import pandas as pd
import pytest
from conftest import CORPUS, SAMPLES, corpus_path

import traceanalyzer as ta
from traceanalyzer import timeline as T

FETCHED = Path(os.environ.get("TRACEANALYZER_FETCHED", CORPUS.parent / "corpus_fetched"))
SUFFIXES = (".json", ".json.gz", ".pb", ".log", ".csv", ".txt")
FAST_BYTES = 30_000  # corpus inputs below this run in the fast set (the fast set stays under ~20 s)


def _inputs(base: Path, skip: tuple[str, ...] = ()) -> list[Path]:
    if not base.is_dir():
        return []
    return sorted(p for p in base.rglob("*") if p.is_file() and p.name.endswith(SUFFIXES)
                  and not p.name.endswith(".expected.json") and not any(part in skip for part in p.parts))


SOURCES = {"samples": SAMPLES, "corpus": CORPUS, "fetched": FETCHED}
TRACES = ([("samples", p) for p in _inputs(SAMPLES, skip=("bad",))]
          + [("corpus", p) for p in _inputs(CORPUS)] + [("fetched", p) for p in _inputs(FETCHED)])

# Breaks found on 2026-12-07 (issue 43 item 9a), by (trace, invariant): why, with the figures.
KNOWN: dict[tuple[str, str], str] = {
}


def _id(source: str, path: Path) -> str:
    return f"{source}/{path.relative_to(SOURCES[source]).as_posix()}"


def _params() -> list[Any]:
    out = []
    for source, path in TRACES:
        tid = _id(source, path)
        for name in I.CHECKS:
            marks = []
            if (tid, name) in KNOWN:
                marks.append(pytest.mark.xfail(strict=True, reason=KNOWN[(tid, name)]))
            if source == "fetched" or (source == "corpus" and path.stat().st_size >= FAST_BYTES):
                marks.append(pytest.mark.slow)
            out.append(pytest.param(source, path, name, id=f"{tid}:{name}", marks=marks))
    return out


@lru_cache(maxsize=2)
def _result(path: Path) -> dict[str, Any] | str:
    """The result's JSON data, or why the input is not a trace."""
    try:
        return ta.analyze(path, ta.Options(find_logs_beside=False)).without_drawing().to_data()
    except ta.InputError as exc:
        return str(exc)


@lru_cache(maxsize=1)
def _timeline(path: Path) -> T.Timeline:
    from timelines import load_paths

    return load_paths([path])


@pytest.mark.parametrize(("source", "path", "name"), _params())
def test_invariant(source: str, path: Path, name: str) -> None:
    if source == "corpus":
        corpus_path()  # absent under CI: fail
    data = _result(path)
    if isinstance(data, str):
        pytest.skip(f"not a trace: {data[:120]}")
    events = None
    if name == "steps_top_level" and I.needs_events(data):
        tl = _timeline(path)
        events = tl.rank_events
    broken = I.check(name, data, events)
    assert not broken, "\n".join(str(v) for v in broken)


def test_known_rows_name_traces_and_checks_the_tests_have() -> None:
    """A row of KNOWN names a check and, where its source is here, a trace the tests run (a stale row fails)."""
    have = {_id(s, p) for s, p in TRACES}
    for tid, name in KNOWN:
        assert name in I.CHECKS, name
        if SOURCES[tid.split("/", 1)[0]].is_dir():
            assert tid in have, tid


def test_corpus_present_under_ci() -> None:
    if os.environ.get("CI"):
        assert any(s == "corpus" for s, _ in TRACES), f"the corpus is missing at {CORPUS} (CI is set)"


# --- each check can fail: a sample's result broken by hand ---------------------------------------------------
@pytest.fixture(scope="module")
def input_bound() -> dict[str, Any]:
    data = _result(SAMPLES / "input_bound.json")
    assert isinstance(data, dict)
    return data


def _rank_diag(data: dict[str, Any]) -> dict[str, Any]:
    return data["ranks"][0]["diagnosis"]  # type: ignore[no-any-return]


def test_the_sample_holds_every_invariant(input_bound):
    for name in I.RESULT_CHECKS:
        assert I.check(name, input_bound) == [], name


def test_material_cost_fails_on_an_immaterial_cause(input_bound):
    d = copy.deepcopy(input_bound)
    dg = _rank_diag(d)
    dg["idle_by_cause_us"]["dataloader"] = 0.04 * dg["window_us"]  # 4% of the window: not material ...
    assert I.material_cost(d) == []  # ... while removing it would still shorten the median step by 68.5%
    dg["findings"][0]["figures"]["saving_us"] = 400.0  # 4% of the 10 ms step
    (v,) = I.material_cost(d)
    assert v.where == "ranks[0].diagnosis primary" and v.figures.startswith(
        "input_bound: dataloader lost 2000.0 us of a 50000.0 us window (4.00% < 5.00%), saving 4.00% of the median")


def test_saturated_gpu_bound_fails_on_a_busy_gpu_given_a_cause(input_bound):
    d = copy.deepcopy(input_bound)
    _rank_diag(d)["lost_us"] = 0.04 * _rank_diag(d)["window_us"]
    (v,) = I.saturated_gpu_bound(d)
    assert "input_bound with the GPU busy 96.00% of its window" in v.figures


def test_within_window_fails_on_a_duration_beyond_its_window(input_bound):
    d = copy.deepcopy(input_bound)
    d["ranks"][0]["per_step"][1]["gpu_busy_us"] = 10_000.5  # the step lasts 10,000 us
    d["ranks"][0]["devices"][0]["gpu_idle_fraction"] = 1.2
    _rank_diag(d)["headline"] = "The GPU loses 33.5 ms (167.0% of the 50.0 ms window)"
    found = {(v.where, v.figures.split(" ")[0]) for v in I.within_window(d)}
    assert found == {("ranks[0].per_step[1]", "gpu_busy_us"), ("ranks[0].devices[0].gpu_idle_fraction", "share"),
                     ("ranks[0].diagnosis.headline", "167.0%")}


def test_leak_needs_steps_fails_on_a_leak_over_few_steps(input_bound):
    d = copy.deepcopy(input_bound)
    d["ranks"][0]["steps"] = 4
    _rank_diag(d)["findings"].append({"id": "memory_leak", "title": "Memory grows every step on cuda:0: a leak"})
    (v,) = I.leak_needs_steps(d)
    assert "with 4 steps" in v.figures


def test_headline_in_findings_fails_on_a_number_no_finding_has(input_bound):
    d = copy.deepcopy(input_bound)
    _rank_diag(d)["headline_figures"]["dataloader_lost_us"] = 33_400.0
    found = [v.figures.split(" (")[0] for v in I.headline_in_findings(d)]
    assert found == ["headline figure dataloader_lost_us=33400.0 is in no finding's figures",
                     "the headline's share dataloader_lost_us/window_us = 66.80% is no finding's share"]


def _events(rows: list[tuple[str, str, int, int]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["kind", "name", "ts_ns", "dur_ns"])


def test_steps_top_level_fails_on_steps_inside_one_call():
    """Three detected steps of 1 ms from t = 1 ms: inside one `nn.Module: Model_0` forward they are nested; a
    training loop's own python frame around them (not a module's forward) is no call that nests them."""
    steps = [{"step": k, "start_us": 1000.0 * k, "duration_us": 1000.0} for k in range(3)]
    data = {"ranks": [{"window_start_ns": 1_000_000, "per_step": steps,
                       "step_source": {"kind": "detected", "basis": "kernel sequence"}}]}
    loop = ("python", "train.py(12): main", 0, 10_000_000)
    assert I.steps_top_level(data, lambda i: _events([loop])) == []
    forward = ("python", "nn.Module: Model_0", 1_500_000, 2_000_000)  # holds the starts at 2 ms and 3 ms
    (v,) = I.steps_top_level(data, lambda i: _events([loop, forward]))
    assert "holds 2" in v.figures and "nn.Module: Model_0" in v.figures
    op = ("cpu_op", "aten::linear", 999_000, 3_000_000)  # holds the starts at 1 ms, 2 ms and 3 ms
    (v,) = I.steps_top_level(data, lambda i: _events([op]))
    assert "holds 3" in v.figures
