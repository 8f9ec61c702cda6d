"""A job of one file analysed with two threads (`--jobs 2`, the cores it was read with) gives exactly the
analysis of one thread (`--jobs 1`), on every bundled sample and on real traces; the second thread really
ran; an error in either of two analyses run beside each other is raised, not lost."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from conftest import kineto_corpus_files

import traceanalyzer as ta
from traceanalyzer.analyses import _beside

SAMPLES = Path(__file__).resolve().parent.parent / "sample_traces"
SAMPLE_TRACES = sorted(p for p in SAMPLES.glob("*.json") if not p.name.endswith(".expected.json"))


def both(path: Path) -> tuple[dict, dict]:
    one = ta.analyze(path, ta.Options(jobs=1, cache=False)).to_data()
    two = ta.analyze(path, ta.Options(jobs=2, cache=False)).to_data()
    return one, two


def figure_threads_ran() -> bool:
    return any(t.name.startswith("traceanalyzer-figures") for t in threading.enumerate())


# the samples in the fast set; the real traces (the corpus) marked slow
CASES = [pytest.param(p, id=p.name) for p in SAMPLE_TRACES] + [
    pytest.param(p, id=p.parent.name + "/" + p.name, marks=pytest.mark.slow) for p in kineto_corpus_files()[:60]]


@pytest.mark.parametrize("path", CASES)
def test_alike_in_one_and_two_threads(path):
    try:
        one, two = both(path)
    except ta.InputError:
        pytest.skip("not a trace the report reads (a sample of a bad input, a look-alike the corpus keeps)")
    assert one == two
    assert one["ranks"]


def test_the_second_thread_ran_and_the_jobs_1_run_used_none(monkeypatch):
    calls = []
    real = _beside.ThreadPoolExecutor.submit

    def counting(self, fn, *args, **kwargs):
        calls.append(fn)
        return real(self, fn, *args, **kwargs)

    monkeypatch.setattr(_beside.ThreadPoolExecutor, "submit", counting)
    ta.analyze(SAMPLES / "input_bound.json", ta.Options(jobs=1, cache=False))
    assert calls == []
    ta.analyze(SAMPLES / "input_bound.json", ta.Options(jobs=2, cache=False))
    assert len(calls) == 2 and figure_threads_ran()  # the host activity and the causes' evidence
    assert _beside.threads() == 1  # the caller's thread is left as it was


def test_an_error_on_either_side_is_raised():
    _beside.set_threads(2)
    try:
        def fail(what):
            raise ValueError(what)

        with pytest.raises(ValueError, match="second thread"):
            _beside.beside(lambda: fail("second thread"), lambda: 1)
        finished = []

        def slow():
            threading.Event().wait(0.2)
            finished.append(True)
            return 2

        with pytest.raises(ValueError, match="here"):
            _beside.beside(slow, lambda: fail("here"))
        assert finished == [True]  # waited for: nothing runs on behind the caller's error
        assert _beside.beside(lambda: 1, lambda: 2) == (1, 2)
    finally:
        _beside.set_threads(1)
