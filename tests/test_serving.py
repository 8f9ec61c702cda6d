"""Serving loops (vLLM, SGLang, TensorRT-LLM): prefill and decode recognised by the names their traces carry
(phase ranges, serving batches' request counts, phase-specific attention kernels), which phase dominates, and
advice only where the dominant phase and the verdict together point at a fix."""

from __future__ import annotations

import pytest
from kineto_builder import KinetoTrace

import traceanalyzer as ta
from traceanalyzer.diagnosis.rules import SERVING_PHASES

STEP_US = 1000


def _busy_loop(t: KinetoTrace, n: int, kernel: str = "gemm_kernel", start: float = 10_000.0) -> float:
    """`n` steps of 1 ms, each a 950 us kernel queued early (a busy GPU): gpu_bound."""
    s = start
    for i in range(n):
        t.step(i, s, STEP_US)
        t.launched(s + 1, 5, s + 20, 950, kernel)
        s += STEP_US
    return s


def _serving(a: ta.Analysis):
    return next((f for f in a.diagnosis.findings if f.id == SERVING_PHASES), None)


def test_sglang_phase_ranges_say_decode_dominates(tmp_path):
    """Five `step[DECODE bs=8]` ranges of 800 us and one `step[EXTEND bs=2 toks=512]` of 900 us: decode 4.0 ms of
    4.9 ms; a busy GPU, so the decode advice of a busy GPU; a graph capture range is no phase."""
    t = KinetoTrace()
    _busy_loop(t, 6)
    for i in range(6):
        s = 10_000 + i * STEP_US + 50
        t.host("step[EXTEND bs=2 toks=512]" if i == 0 else "step[DECODE bs=8]", s, 900 if i == 0 else 800,
               cat="user_annotation")
    t.host("capture_32_DECODE", 20_000, 5000, cat="user_annotation")
    a = ta.analyze(t.write(tmp_path / "sglang.json"))
    assert a.diagnosis.primary == "gpu_bound"
    f = _serving(a)
    assert f is not None and f.title == "Serving loop: decode dominates"
    assert f.figures == {"decode_us": 4000.0, "phases_us": 4900.0}
    assert f.evidence == ("decode 4.0 ms (5), prefill 900 us (1) by host ranges named for the phase: decode is "
                          "82% of it",)
    assert f.advice and f.advice[0].startswith("Decode dominates a busy GPU")


@pytest.mark.parametrize(("kernel", "phase"), [("BatchPrefillWithPagedKVCacheKernel", "prefill"),
                                               ("paged_attention_v2_kernel", "decode")])
def test_attention_kernels_name_the_phase_without_ranges(tmp_path, kernel, phase):
    t = KinetoTrace()
    _busy_loop(t, 5, kernel)
    f = _serving(ta.analyze(t.write(tmp_path / "k.json")))
    assert f is not None and f.title == f"Serving loop: {phase} dominates"
    assert f.figures == {f"{phase}_us": 4750.0, "phases_us": 4750.0}
    assert "GPU time of the phase's own attention kernels" in f.evidence[0]


def test_serving_batches_weigh_query_tokens(tmp_path):
    """One batch of 9 prefill requests (8155 query tokens) and 37 decode requests (37 tokens): prefill dominates
    the tokens though decode has more requests."""
    t = KinetoTrace()
    _busy_loop(t, 5)
    t.host("execute_8192_context_9(sq8155sk8430sqsq7475785sqsk7671310)_generation_37(sq37sk37000sqsq37sqsk37000)",
           10_000, 5000, cat="user_annotation")
    f = _serving(ta.analyze(t.write(tmp_path / "b.json")))
    assert f is not None and f.title == "Serving loop: prefill dominates"
    assert f.figures == {"prefill_query_tokens": 8155.0, "query_tokens": 8192.0}


def test_no_serving_finding_for_training_or_unnamed_work(tmp_path):
    t = KinetoTrace()
    _busy_loop(t, 5)
    assert _serving(ta.analyze(t.write(tmp_path / "plain.json"))) is None
    t.host("decode", 10_100, 300, cat="user_annotation").host("autograd::engine::evaluate_function: MmBackward0",
                                                              10_500, 100)
    assert _serving(ta.analyze(t.write(tmp_path / "train.json"))) is None
