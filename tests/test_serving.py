"""Serving loops (vLLM, SGLang, TensorRT-LLM): the phases (prefill, decode, mixed) come only from the engines' own
annotations of their iterations, never from kernel names; the phase mix by time, requests and tokens; advice only
where the dominant phase and the verdict point at a fix and the kernels show the lever material and unused."""

from __future__ import annotations

import pytest
from kineto_builder import KinetoTrace
from test_reconcile import reconcile

import traceanalyzer as ta
from traceanalyzer.analyses.serving import PHASES, _parse, innermost
from traceanalyzer.diagnosis.serving import (
    ATTENTION_ADVICE,
    COMPILE_ADVICE,
    FP8_KV_ADVICE,
    FP32_ADVICE,
    NO_PHASE_ADVICE,
    PRECISION_ADVICE,
    SERVING_PHASES,
)

STEP_US = 1000
FP4_GEMM = "bmm_MxE4m3_MxE2m1MxE4m3_Fp32_t128x16x256u2_s3_et128x16_m128x16x32_cga1x1x1_16dp2"
BF16_GEMM = "nvjet_tst_64x64_64x16_2x1_2cta_v_bz_bias_TNT_bf16"
# FlashInfer's decode kernel: named Prefill, run by decode iterations
FLASHINFER = "BatchPrefillWithPagedKVCacheKernel"
ELEMENTWISE = "void at::native::vectorized_elementwise_kernel<4>"
COMPILED = "## Call CompiledFxGraph fudabc ##"


def _busy_loop(t: KinetoTrace, n: int, kernel: str = "gemm_kernel", start: float = 10_000.0) -> float:
    """`n` steps of 1 ms, each a 950 us kernel queued early (a busy GPU): gpu_bound."""
    s = start
    for i in range(n):
        t.step(i, s, STEP_US)
        t.launched(s + 1, 5, s + 20, 950, kernel)
        s += STEP_US
    return s


def _iterations(t: KinetoTrace, names: list[str], kernels: tuple[tuple[str, float], ...],
                start: float = 10_000.0) -> None:
    """One engine iteration per name, 1 ms apart: its 900 us host range, and inside it the launches of
    `kernels` (name, us), run back to back from 20 us in (950 us of them: a busy GPU)."""
    for i, name in enumerate(names):
        s = start + i * STEP_US
        t.host(name, s, 900, cat="user_annotation")
        gpu = s + 20
        for j, (kernel, dur) in enumerate(kernels):
            t.launched(s + 1 + 2 * j, 1, gpu, dur, kernel)
            gpu += dur


def _serving(a: ta.Analysis):
    return next((f for f in a.diagnosis.findings if f.id == SERVING_PHASES), None)


def _gpu_bound(a: ta.Analysis):
    return next(f for f in a.diagnosis.findings if f.id == "gpu_bound")


@pytest.mark.parametrize(("name", "parsed"), [
    ("execute_context_0(0)_generation_4(4)", (0, "decode", 0, 4, 0, 4)),
    ("execute_context_1(888_788544)_generation_0(0)", (0, "prefill", 1, 0, 888, 0)),
    ("execute_8192_context_9(sq8155sk8430sqsq7475785sqsk7671310)_generation_37(sq37sk34489sqsq37sqsk34489)",
     (0, "mixed", 9, 37, 8155, 37)),
    ("step[DECODE bs=32]", (1, "decode", 0, 32, 0, -1)),
    ("step[EXTEND bs=15 toks=15360]", (1, "prefill", 15, 0, 15360, 0)),
    ("step[MIXED bs=4 toks=100]", (1, "mixed", -1, -1, -1, -1)),
    ("[Executor] _forward_step 12: 3 ctx reqs, 29 gen reqs", (2, "mixed", 3, 29, -1, -1)),
    ("_forward_step: 0 ctx reqs, 8 gen reqs", (2, "decode", 0, 8, -1, -1)),
    ("decode_step_3", (3, "decode", -1, -1, -1, -1)),
    ("prefill", (3, "prefill", -1, -1, -1, -1)),
    ("capture_32_DECODE", None),
    ("execute_context_0(0)_generation_0(0)", None),
    ("BatchPrefillWithPagedKVCacheKernel", None),  # a word inside a name is no phase
])
def test_engine_annotations_parse(name, parsed):
    """Each engine's iteration annotation: (source, phase, prefill requests, decode requests, prefill tokens,
    decode tokens; -1 not written); a graph capture or an empty batch is no iteration."""
    got = _parse(name)
    assert (None if got is None else (got[0], PHASES[got[1]], *got[2:])) == parsed


def test_innermost_ranges_drop_the_harness_range_around_a_step():
    import numpy as np
    ts, end = np.array([0, 10, 10, 600]), np.array([500, 400, 400, 700])
    assert innermost(ts, end).tolist() == [False, False, True, True]  # of two equal ranges, one stays


def test_vllm_decode_with_flashinfer_prefill_named_kernel_is_decode(tmp_path):
    """Five vLLM decode iterations (`execute_context_0(0)_generation_4(4)`) whose attention is FlashInfer's
    `BatchPrefillWithPagedKVCacheKernel` (2 us), GEMMs in NVFP4 (700 us), 248 us elementwise, compiled: decode,
    never prefill; the GEMMs are already in 4 bits and attention is 0.2% of the kernel time, so neither a precision
    nor an attention kernel is advised, nor compilation (torch.compile runs)."""
    t = KinetoTrace()
    t.host(COMPILED, 9_000, 10, cat="user_annotation")
    _iterations(t, ["execute_context_0(0)_generation_4(4)"] * 5,
                ((FP4_GEMM, 700), (FLASHINFER, 2), (ELEMENTWISE, 248)))
    a = ta.analyze(t.write(tmp_path / "vllm_decode.json"))
    assert a.diagnosis.primary == "gpu_bound"
    f = _serving(a)
    assert f is not None and f.title == "Serving loop: decode dominates"
    # each iteration 970 us: its 900 us range to the end of its GPU work (20 us in, 950 us long)
    assert f.figures == {"decode_us": 4850.0, "annotated_us": 4850.0, "gemm_us": 3500.0, "kernel_us": 4750.0,
                         "low_precision_gemm_us": 3500.0, "attention_us": 10.0,
                         # figures.MEMORY_BOUND_KERNEL: the elementwise kernels only (Prefill's `fill` is attention)
                         "memory_bound_kernel_us": 1240.0}
    assert f.evidence[0].startswith("decode 5 iterations, 4.8 ms (20 requests, 20 query tokens), by the engine's "
                                    "annotations (vLLM execute_context_C(...)_generation_G(...);")
    assert f.evidence[1] == ("kernels launched in decode iterations: 4.8 ms; GEMMs and convolutions 74%, 100% of it in 8-bit or "
                             "narrower formats; fp8, fp4 GEMMs by name; attention 0.2% (fused); memory-bound kernels "
                             "26%; torch.compile code runs (by kernel name)")
    assert f.advice == ("Decode dominates a busy GPU: larger decode batches or speculative decoding raise the tokens "
                        "each decode step produces.",)
    advice = " ".join(x for g in a.diagnosis.findings for x in g.advice)
    assert "prefill" not in f.title.lower() and "FP8" not in advice and "FlashAttention" not in advice
    assert COMPILE_ADVICE not in advice and "your own code" not in advice  # an engine's range is not the user's
    assert _gpu_bound(a).advice == ("The GPU is the bottleneck: add GPUs (tensor parallelism) or use a faster GPU.",)
    assert reconcile(a.to_data()) >= 12  # every share quoted, of the figures beside it


def test_bf16_gemms_and_unfused_attention_get_their_levers(tmp_path):
    """Decode iterations with bf16 GEMMs (600 us), softmax and no fused attention kernel (250 us), 100 us
    elementwise, nothing compiled: GEMMs 63% in 16 bits -> the precision lever; attention 26% unfused -> the fused
    attention lever (and an FP8 KV cache for decode on a busy GPU); memory-bound (softmax, elementwise) 37% -> the
    compile lever."""
    t = KinetoTrace()
    _iterations(t, ["step[DECODE bs=8]"] * 5, ((BF16_GEMM, 600), ("softmax_warp_forward", 250), (ELEMENTWISE, 100)))
    a = ta.analyze(t.write(tmp_path / "bf16.json"))
    assert a.diagnosis.primary == "gpu_bound"
    assert _gpu_bound(a).advice[:3] == (PRECISION_ADVICE, ATTENTION_ADVICE, COMPILE_ADVICE)
    f = _serving(a)
    assert f.advice[1:] == (FP8_KV_ADVICE,)
    assert (f.figures["gemm_us"], f.figures["attention_us"], f.figures["kernel_us"]) == (3000.0, 1250.0, 4750.0)


def test_fp32_gemms_get_tf32_not_fp8(tmp_path):
    """FP32 sgemm (700 us of 950): the lever is TF32 / bf16, not FP8 (the tensor cores first)."""
    t = KinetoTrace()
    t.host(COMPILED, 9_000, 10, cat="user_annotation")
    _iterations(t, ["step[DECODE bs=8]"] * 5, (("volta_sgemm_128x64_nn", 700), (ELEMENTWISE, 250)))
    g = _gpu_bound(ta.analyze(t.write(tmp_path / "fp32.json")))
    assert g.advice[0] == FP32_ADVICE and PRECISION_ADVICE not in g.advice
    assert (g.figures["fp32_gemm_us"], g.figures["gemm_us"]) == (3500.0, 3500.0)


@pytest.mark.parametrize(("elementwise_us", "compile_lever"), [(350, True), (150, False)])
def test_memory_bound_kernels_uncompiled_get_the_compile_lever(tmp_path, elementwise_us, compile_lever):
    """Uncompiled fp4 GEMMs beside elementwise kernels: the compile lever only when these are 20% or more of the
    kernel time (350 of 950 us, not 150); never the precision lever (the GEMMs are in 4 bits)."""
    t = KinetoTrace()
    _iterations(t, ["step[DECODE bs=8]"] * 5, ((FP4_GEMM, 950 - elementwise_us), (ELEMENTWISE, elementwise_us)))
    advice = _gpu_bound(ta.analyze(t.write(tmp_path / "eager.json"))).advice
    assert (COMPILE_ADVICE in advice) == compile_lever and PRECISION_ADVICE not in advice


def test_a_mixed_batch_is_mixed(tmp_path):
    """Three vLLM batches with prefill and decode requests (2 + 6 each, 600 + 6 query tokens) and two decode-only:
    mixed 2.9 ms of 4.85 ms (each iteration to the end of its GPU work); requests and tokens summed per phase."""
    t = KinetoTrace()
    names = ["execute_context_2(600_180000)_generation_6(6)"] * 3 + ["execute_context_0(0)_generation_8(8)"] * 2
    _iterations(t, names, ((BF16_GEMM, 950),))
    a = ta.analyze(t.write(tmp_path / "mixed.json"))
    f = _serving(a)
    assert f.title == "Serving loop: mixed batches dominate" and reconcile(a.to_data()) > 0
    assert (f.figures["mixed_us"], f.figures["annotated_us"]) == (2910.0, 4850.0)  # iterations of 970 us
    assert f.shares[:3] == (("mixed_us", "annotated_us"), ("gemm_us", "kernel_us"), ("low_precision_gemm_us", "gemm_us"))
    assert f.evidence[0].startswith("decode 2 iterations, 1.9 ms (16 requests, 16 query tokens); mixed 3 iterations, "
                                    "2.9 ms (24 requests, 1818 query tokens), by the engine's annotations")
    assert f.evidence[0].endswith("mixed is 60% of the annotated time")


def test_sglang_phase_ranges_say_decode_dominates(tmp_path):
    """Five `step[DECODE bs=8]` ranges of 800 us and one `step[EXTEND bs=2 toks=512]` of 900 us: decode 4.0 ms of
    4.9 ms; a busy GPU, so the decode advice of a busy GPU; a graph capture range is no phase; a harness's range
    around the engine's step counts once."""
    t = KinetoTrace()
    _busy_loop(t, 6)
    for i in range(6):
        s = 10_000 + i * STEP_US + 50
        t.host("step[EXTEND bs=2 toks=512]" if i == 0 else "step[DECODE bs=8]", s, 900 if i == 0 else 800,
               cat="user_annotation")
    t.host("execute_8_context_0(sq0sk0sqsq0sqsk0)_generation_8(sq8sk100sqsq8sqsk100)", 11_040, 820,
           cat="user_annotation")
    t.host("capture_32_DECODE", 20_000, 5000, cat="user_annotation")
    a = ta.analyze(t.write(tmp_path / "sglang.json"))
    assert a.diagnosis.primary == "gpu_bound"
    f = _serving(a)
    assert f is not None and f.title == "Serving loop: decode dominates"
    assert f.figures == {"decode_us": 4000.0, "annotated_us": 4900.0}
    assert f.evidence == ("prefill 1 iteration, 900 us (2 requests, 512 query tokens); decode 5 iterations, 4.0 ms "
                          "(40 requests), by the engine's annotations (SGLang step[MODE bs=...]; a batch with prefill "
                          "and decode requests is mixed): decode is 82% of the annotated time",
                          "time per output token as the GPU timeline sees it: 800 us per decode iteration (the median; "
                          "each request in the batch gets one token per iteration); median batch 8: 100 us of "
                          "iteration time per output token of the batch")
    assert f.advice and f.advice[0].startswith("Decode dominates a busy GPU")


@pytest.mark.parametrize("kernel", [FLASHINFER, "paged_attention_v2_kernel"])
def test_attention_kernels_never_name_the_phase(tmp_path, kernel):
    """A serving engine's attention kernels without its annotations: the phase is unknown, and said so."""
    t = KinetoTrace()
    _busy_loop(t, 5, kernel)
    f = _serving(ta.analyze(t.write(tmp_path / "k.json")))
    assert f is not None and f.title == "Serving loop: phase unknown"
    assert "kernel names do not tell it" in f.evidence[0] and f.advice == (NO_PHASE_ADVICE,)
    assert f.figures == {}


def test_no_serving_finding_for_training_or_unnamed_work(tmp_path):
    t = KinetoTrace()
    _busy_loop(t, 5)
    assert _serving(ta.analyze(t.write(tmp_path / "plain.json"))) is None
    t.host("decode", 10_100, 300, cat="user_annotation").host("autograd::engine::evaluate_function: MmBackward0",
                                                              10_500, 100)
    assert _serving(ta.analyze(t.write(tmp_path / "train.json"))) is None
