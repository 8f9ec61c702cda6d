"""A process with no GPU work and only Python frames (a server's frontend) says what it is and which trace to
analyse; advice never asks for a profiler option the trace already shows on (with_stack: Python frames)."""

from __future__ import annotations

from pathlib import Path

import pytest
from kineto_builder import KinetoTrace

import traceanalyzer as ta
from traceanalyzer.diagnosis.advice import ADVICE, ALREADY_CAPTURED, PYTORCH, without_captured
from traceanalyzer.diagnosis.serving import FRONTEND_ADVICE, FRONTEND_HEADLINE, FRONTEND_PROCESS


def _frontend(path: Path, gpus_listed: bool) -> Path:
    """Three threads, each 20 times waiting 4.8 ms on a future (`result` holding a `wait`): python_function
    events only."""
    t = KinetoTrace()
    if not gpus_listed:
        t.header.pop("deviceProperties")
    for tid in (1, 2, 3):
        for i in range(20):
            s = 1000 + i * 5000
            t.host("concurrent/futures/_base.py(451): result", s - 10, 4820, cat="python_function", tid=tid)
            t.host("threading.py(355): wait", s, 4800, cat="python_function", tid=tid)
    return t.write(path)


@pytest.mark.parametrize("gpus_listed", [True, False])
def test_frontend_process_says_what_it_is(tmp_path, gpus_listed):
    """120 frames on 3 threads over 990 us .. 100.8 ms; the innermost frames (the waits) hold 60 x 4.8 ms. No host
    loop verdict, no GPU advice, no with_stack advice, whether or not the trace lists a GPU."""
    a = ta.analyze(_frontend(tmp_path / "frontend.json", gpus_listed))
    d = a.diagnosis
    assert (d.primary, d.host_primary, d.headline) == ("undetermined", None, FRONTEND_HEADLINE)
    assert [f.id for f in d.findings] == [FRONTEND_PROCESS]
    f = d.findings[0]
    assert f.evidence == ("120 Python frames on 3 threads over 99.8 ms; no GPU work, no framework operators and no "
                          "GPU runtime calls in this process",
                          "innermost frames with the most time: threading.py(355): wait 288.0 ms")
    assert f.advice == (FRONTEND_ADVICE,)


def test_a_process_with_operators_is_no_frontend(tmp_path):
    """The same frames beside framework operators: the host loop's verdict, as before."""
    t = KinetoTrace()
    t.header.pop("deviceProperties")
    for i in range(4):
        s = 10_000 + i * 1000
        t.step(i, s, 1000, gpu_copy=False)
        t.host("aten::mm", s + 10, 800)
        t.host("train.py(12): step", s + 5, 900, cat="python_function")
    d = ta.analyze(t.write(tmp_path / "cpu.json")).diagnosis
    assert d.primary == "cpu_compute_bound" and FRONTEND_PROCESS not in [f.id for f in d.findings]


def _gpu_loop(path: Path, frames: bool) -> Path:
    """Six 1 ms steps: a 100 us kernel, then 780 us idle with nothing traced on the host, then a 50 us kernel
    (unexplained idle); `frames`: one Python frame per step."""
    t = KinetoTrace()
    s = 10_000
    for i in range(6):
        t.step(i, s, 1000)
        t.launched(s + 1, 5, s + 20, 100, "gemm_kernel")
        t.launched(s + 900, 5, s + 905, 50, "gemm_kernel")
        if frames:
            t.host("train.py(12): step", s, 10, cat="python_function")
        s += 1000
    return t.write(path)


def _cpu_loop(path: Path, frames: bool) -> Path:
    """A CPU-only loop: 200 us of aten::mm in each 1 ms step, the rest outside any op."""
    t = KinetoTrace()
    t.header.pop("deviceProperties")
    s = 10_000
    for i in range(4):
        t.step(i, s, 1000, gpu_copy=False)
        t.host("aten::mm", s + 10, 200)
        if frames:
            t.host("train.py(12): step", s + 300, 10, cat="python_function")
        s += 1000
    return t.write(path)


@pytest.mark.parametrize(("build", "finding"), [(_gpu_loop, "unexplained_idle"), (_cpu_loop, "cpu_elsewhere")])
def test_advice_never_asks_for_stacks_the_trace_has(tmp_path, build, finding):
    """Without Python frames the advice asks for with_stack=True; with them it never does, and says where the
    frames are instead."""
    def advice(frames: bool) -> tuple[str, ...]:
        d = ta.analyze(build(tmp_path / f"t{frames}.json", frames)).diagnosis
        return next(f.advice for f in d.findings if f.id == finding)

    without, with_ = advice(False), advice(True)
    assert any("with_stack=True" in x for x in without)
    assert not any("with_stack" in x for x in with_)
    assert with_ == (ALREADY_CAPTURED[ADVICE[finding][PYTORCH][0]],)


def test_without_captured_drops_lines_with_no_replacement():
    line = "Record Python stacks (torch.profiler.profile(with_stack=True)) to see which lines inside X take the time."
    assert without_captured((line, "keep"), frozenset({"with_stack"})) == ("keep",)
    assert without_captured((line,), frozenset({"profile_memory"})) == (line,)
    memory = "Profile with torch.profiler.profile(profile_memory=True)."
    assert without_captured((memory,), frozenset({"profile_memory"})) == ()
