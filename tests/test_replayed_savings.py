"""The findings' savings replayed on the median step's dependency graph (diagnosis/savings.py,
analyses/cause_removal.py) where the projection would count time that runs beside the step's path."""

from __future__ import annotations

import pytest
from kineto_builder import KinetoTrace

import traceanalyzer as ta
from traceanalyzer import causes as C


def copy_beside_host_work(steps: int = 9) -> KinetoTrace:
    """Each 920 us step: the host computes 500 us (aten::prep) while a 300 us copy runs alone on the GPU,
    then launches a 400 us kernel. The copy is exposed (no kernel beside it) but off the step's path."""
    t = KinetoTrace()
    s = 10_000.0
    for i in range(steps):
        t.step(i, s, 920)
        t.host("aten::prep", s, 500)
        t.copy(s + 1, 3, s + 10, 300)
        t.launched(s + 505, 5, s + 515, 400)
        s += 920
    return t


def test_an_exposed_copy_beside_the_host_path_saves_nothing_replayed(tmp_path):
    d = ta.analyze(copy_beside_host_work().write(tmp_path / "t.json")).diagnosis
    memcpy = next(f for f in d.findings if f.cause == C.MEMCPY)
    # the projection counts the exposed copy whole; the replay finds the kernel waits for the host, not the copy
    assert memcpy.figures["projected_saving_us"] == pytest.approx(300, abs=0.01)
    assert memcpy.figures["saving_us"] == 0
    assert memcpy.figures["step_us"] == pytest.approx(920, abs=0.01)
    line = next(e for e in memcpy.evidence if e.startswith("removing the memcpy"))
    assert "replayed" in line and "launch overheads kept, queue depth unchanged, memory not modelled" in line
    assert "nothing else fills the freed time" not in line
    host = next(f for f in d.findings if f.cause == C.HOST_COMPUTE)
    # the GPU idles from the copy's end (310 us) to the kernel (515 us); the host time inside that stretch,
    # 190 us of aten::prep and 5 us untraced before the launch, goes; the launch call and its latency stay
    assert host.figures["saving_us"] == pytest.approx(195, abs=0.01)
    # the verdict still ranks by the projection
    assert "removing memcpy would shorten" in (ta.analyze(tmp_path / "t.json").ranks[0].diagnosis.reason or "")


def test_without_a_replay_the_saving_stays_projected_and_says_so(tmp_path):
    """Three steps are too few for the median (ROBUST_MIN_STEPS): the mean step's projection stays, said so."""
    d = ta.analyze(copy_beside_host_work(steps=3).write(tmp_path / "t.json")).diagnosis
    memcpy = next(f for f in d.findings if f.cause == C.MEMCPY)
    assert "projected_saving_us" not in memcpy.figures
    line = next(e for e in memcpy.evidence if e.startswith("removing the memcpy"))
    assert "the mean step" in line and "projected: assumes the rest of the step unchanged" in line
    assert "replayed" not in line
