"""A serving engine's iterations (`serving.iterations` of a rank's result) and its phases' medians: built traces
with known answers (vLLM decode with CUDA-graph replays, an SGLang decode step, a mixed capture with scheduling
gaps), and real engine captures whose truth a small script over the raw JSON gave (see the figures below)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from kineto_builder import HOST_PID, HOST_TID, KinetoTrace

import traceanalyzer as ta

ROOT = Path(__file__).resolve().parent.parent
CORPUS = Path(os.environ.get("TRACEANALYZER_CORPUS", ROOT.parent / "shared" / "corpus"))
FETCHED = Path(os.environ.get("TRACEANALYZER_FETCHED", CORPUS.parent / "corpus_fetched"))

GEMM = "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTT_bf16"
ATTENTION = "flash_fwd_splitkv_kernel"
NORM = "void at::native::vectorized_elementwise_kernel<4>"


def graph_replay(t: KinetoTrace, launch_ts: float, gpu_ts: float, kernels: tuple[tuple[str, float], ...],
                 graph: int = 7) -> float:
    """One CUDA-graph replay: a cudaGraphLaunch call and its nodes, back to back, all with the launch's correlation
    (as CUPTI writes them); returns the replay's GPU end."""
    t._corr += 1
    corr = t._corr
    for name, dur in kernels:
        t.events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": gpu_ts, "dur": dur,
                         "args": {"device": 0, "stream": 7, "correlation": corr, "graph id": graph}})
        gpu_ts += dur
    t.events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "pid": HOST_PID, "tid": HOST_TID,
                     "ts": launch_ts, "dur": 20, "args": {"correlation": corr}})
    return gpu_ts


# 10 decode iterations of 77 ms: a graph replay of 8 GEMMs of 8 ms, attention 6 ms, norms 5.46 ms (75.46 ms of
# GPU work: 98% of the iteration), from 1.5 ms into each range; the next range starts as the previous ends.
DECODE_KERNELS = ((GEMM, 8_000),) * 8 + ((ATTENTION, 6_000), (NORM, 5_460))


def vllm_decode(n: int = 10, iteration_us: float = 77_000, batch: int = 32,
                kernels: tuple[tuple[str, float], ...] = DECODE_KERNELS) -> KinetoTrace:
    t = KinetoTrace()
    for i in range(n):
        s = 10_000 + i * iteration_us
        t.host(f"execute_context_0(0)_generation_{batch}({batch})", s, iteration_us, cat="user_annotation")
        graph_replay(t, s + 10, s + 1_500, kernels)
    return t


def test_vllm_decode_iterations_with_graph_replays(tmp_path):
    """10 iterations, each 77 ms with 75.46 ms of GPU work from one graph replay: decode (never prefill, whatever
    the kernels), batch 32, median 77 ms, GPU busy 98%, 1.54 ms with no GPU work before each (1.5 ms into the
    range + 40 us between the GPU work's end and the range's end), one replay each; 77 / 32 = 2.406 ms per token."""
    a = ta.analyze(vllm_decode().write(tmp_path / "vllm.json"))
    s = a.ranks[0].serving
    assert s is not None and s.sources == ("vllm",)
    (p,) = s.phases
    assert (p.phase, p.iterations, p.median_iteration_us, p.gpu_busy_share) == ("decode", 10, 77_000.0, 0.98)
    assert (p.median_host_gap_us, p.host_gap_us, p.graph_replays) == (1_540.0, 9 * 1_540.0, 10)
    assert (p.median_batch_size, p.median_us_per_token, p.gpu_bubble_us) == (32.0, 2_406.25, 0.0)
    assert len(s.iterations) == 10
    first, second = s.iterations[:2]
    assert (first.phase, first.batch_size, first.tokens, first.duration_us, first.gpu_busy_us) == (
        "decode", 32, 32, 77_000.0, 75_460.0)
    assert (first.host_gap_before_us, second.host_gap_before_us, first.graph_replays) == (None, 1_540.0, 1)
    assert second.start_us - first.start_us == 77_000.0
    # the JSON edge: the same figures under serving.iterations, in microseconds
    data = a.to_data()["ranks"][0]["serving"]
    assert data["iterations"][1]["host_gap_before_us"] == 1_540.0 and data["phases"][0]["gpu_busy_share"] == 0.98
    assert ta.load(a.save(tmp_path / "r.json")).ranks[0].serving == s
    df = a.iterations()  # the notebook's view: the same rows
    assert len(df) == 10 and df["host_gap_before_us"].iloc[1] == 1_540.0 and (df["phase"] == "decode").all()


def test_sglang_decode_step_is_one_decode_iteration_with_its_batch(tmp_path):
    """One `step[DECODE bs=32]` of 20 ms whose kernels, launched one by one, run 12 ms with a 1 ms bubble between
    them; the step inside a harness's vLLM-style range counts once (innermost): decode, batch 32, no tokens
    written, busy 12 ms of 20, bubble 1 ms."""
    t = KinetoTrace()
    t.host("execute_32_context_0(sq0sk0sqsq0sqsk0)_generation_32(sq32sk100sqsq32sqsk100)", 9_000, 22_000,
           cat="user_annotation")
    t.host("step[DECODE bs=32]", 10_000, 20_000, cat="user_annotation")
    t.launched(10_100, 10, 11_000, 6_000, GEMM)
    t.launched(10_200, 10, 18_000, 6_000, GEMM)
    a = ta.analyze(t.write(tmp_path / "sglang.json"))
    s = a.ranks[0].serving
    assert s.sources == ("sglang",)
    (it,) = s.iterations
    assert (it.phase, it.batch_size, it.tokens, it.duration_us, it.gpu_busy_us, it.gpu_bubble_us) == (
        "decode", 32, None, 20_000.0, 12_000.0, 1_000.0)
    assert (it.host_gap_before_us, it.graph_replays) == (None, 0)
    assert s.phases[0].median_us_per_token == 625.0  # 20 ms / 32


def mixed_capture() -> KinetoTrace:
    t = KinetoTrace()
    t.host("execute_context_2(600_1000)_generation_0(0)", 0, 10_200, cat="user_annotation")
    t.launched(10, 5, 100, 10_000, GEMM)  # GPU work 100 .. 10_100
    starts = (11_000, 15_000, 20_000)  # gaps: 10_100 -> 11_100, 14_100 -> 15_100, 18_100 -> 20_100
    for s in starts:
        t.host("execute_context_0(0)_generation_8(8)", s, 4_000, cat="user_annotation")
        t.launched(s + 10, 5, s + 100, 3_000, GEMM)
    t.launched(19_200, 5, 19_300, 500, NORM)  # outside every range: work in the last gap
    t.host("execute_context_1(100_100)_generation_7(7)", 24_000, 5_000, cat="user_annotation")
    t.launched(24_010, 5, 24_100, 4_000, GEMM)
    return t


def test_mixed_capture_splits_its_phases_and_scheduling_gaps(tmp_path):
    """A prefill (2 requests, 600 tokens, 10 ms of GPU work), then 3 decode iterations of 4 ms (3 ms of GPU work
    each) with 1 ms, 1 ms and 2 ms of no GPU work before them, one of them partly filled by a kernel launched
    outside any iteration (500 us: counted as work, not as scheduling), then a mixed batch: each phase its own
    iterations and medians."""
    t = mixed_capture()
    a = ta.analyze(t.write(tmp_path / "mixed.json"))
    s = a.ranks[0].serving
    by = {p.phase: p for p in s.phases}
    assert [p.phase for p in s.phases] == ["prefill", "decode", "mixed"]
    assert [i.phase for i in s.iterations] == ["prefill", "decode", "decode", "decode", "mixed"]
    assert [i.host_gap_before_us for i in s.iterations] == [None, 1_000.0, 1_000.0, 1_500.0, 1_000.0]
    assert (by["prefill"].iterations, by["prefill"].median_iteration_us, by["prefill"].median_batch_size) == (
        1, 10_200.0, 2.0)
    assert s.iterations[0].tokens == 600 and s.iterations[4].batch_size == 8
    d = by["decode"]
    assert (d.iterations, d.median_iteration_us, d.gpu_busy_share, d.median_host_gap_us) == (3, 4_000.0, 0.75, 1_000.0)
    assert d.median_us_per_token == 500.0 and by["mixed"].median_us_per_token is None


def _fetched(name: str) -> Path:
    files = sorted((FETCHED / name).glob("*.json*")) if (FETCHED / name).is_dir() else []
    if not files:
        pytest.skip(f"fetched trace absent (run benchmarks/verdicts/fetch_traces.py): {name}")
    return files[0]


@pytest.mark.parametrize(("row", "phase", "batch", "duration_us", "busy_us", "replays"), [
    # truth: /work/serving_truth/truth_iters.py over the raw JSON (innermost annotation, work launched inside)
    ("tl_vllm_decode_graph_exec", "decode", 32, 19_114.059, 10_717.708, 1),
    ("tl_sglang_decode", "decode", 32, 473_555.52, 9_694.013, 1),
])
def test_real_engine_captures(row, phase, batch, duration_us, busy_us, replays):
    """One iteration each: vLLM's full-graph decode step (execute_32_context_0(...)_generation_32(...)) and SGLang's
    step[DECODE bs=32] inside a harness's vLLM-style range: phase, batch, span, busy and graph replays as the raw
    events give them."""
    a = ta.analyze(_fetched(row))
    (it,) = a.ranks[0].serving.iterations
    assert (it.phase, it.batch_size, it.graph_replays) == (phase, batch, replays)
    assert it.duration_us == pytest.approx(duration_us, abs=0.002)
    assert it.gpu_busy_us == pytest.approx(busy_us, abs=0.002)


def test_faces_say_one_line_per_phase(tmp_path):
    """Markdown and the terminal say each phase in the one line `serving_line` makes; the Markdown lists the
    iterations."""
    a = ta.analyze(vllm_decode().write(tmp_path / "vllm.json"))
    line = ("decode: 10 iterations, median 77.0 ms, GPU busy 98.0%, 1.5 ms scheduling between iterations (median), "
            "median batch 32, 2.4 ms per output token, 10 graph replays")
    md = a.to_markdown()
    assert f"- {line}\n" in md and "| 1 | decode | 32 | 32 | 77.0 ms | 77.0 ms | 75.5 ms | 1.5 ms | 1 |" in md
    assert "serving decode: 10 iterations, median 77.0 ms" in a.to_text()


def _finding(a: ta.Analysis, fid: str):
    return next((f for f in a.diagnosis.findings if f.id == fid), None)


def test_gpu_bound_decode_by_kernel_class(tmp_path):
    """The 10 decode iterations of 77 ms, 98% busy: decode is GPU-bound (75.46 ms busy of 77 ms + 1.54 ms before
    each but the first: 96%), dense GEMMs 64 of 75.46 ms = 85% of its kernel time, in bf16: the batch lever and
    quantisation; no scheduling finding (1.54 ms is 2% of an iteration), no bubbles; TPOT 77 ms per iteration,
    2.4 ms per output token of a batch of 32."""
    a = ta.analyze(vllm_decode().write(tmp_path / "vllm.json"))
    f = _finding(a, "serving_decode_gpu_bound")
    assert f.title == "Decode is GPU-bound: dense GEMMs take 85% of its kernel time"
    assert f.evidence[1] == "kernels launched in them (754.6 ms): dense GEMMs 85%, attention 8.0% (by kernel name)"
    assert f.figures["decode_gpu_busy_us"] == 754_600.0 and f.figures["decode_loop_us"] == 770_000.0 + 9 * 1_540.0
    assert f.advice[0].startswith("Dense GEMMs set decode's pace") and f.advice[1].startswith("Weight quantisation")
    assert all(_finding(a, x) is None for x in ("serving_scheduling", "serving_graph_bubbles", "serving_sampling"))
    assert a.diagnosis.primary == "gpu_bound" and "prefill" not in " ".join(x.title for x in a.diagnosis.findings)
    phases = _finding(a, "serving_phases")
    assert phases.evidence[-1] == ("time per output token as the GPU timeline sees it: 77.0 ms per decode iteration "
                                   "(the median; each request in the batch gets one token per iteration); median "
                                   "batch 32: 2.4 ms of iteration time per output token of the batch")
    from test_reconcile import reconcile
    assert reconcile(a.to_data()) > 0  # every share quoted, of the figures beside it


def scheduling_bound() -> KinetoTrace:
    """10 SGLang decode steps 10 ms apart, each 6.2 ms with 6 ms of GPU work: fused MoE 3 ms, an all-reduce 1 ms,
    FlashInfer sampling 1 ms, the KV-cache write 1 ms; 4 ms with no GPU work before each."""
    t = KinetoTrace()
    for i in range(10):
        s = 10_000 + i * 10_000
        t.host("step[DECODE bs=16]", s, 6_200, cat="user_annotation")
        t.launched(s + 10, 5, s + 100, 3_000, "fused_moe_kernel")
        t.launched(s + 20, 5, s + 3_100, 1_000, "ncclDevKernel_AllReduce_Sum_bf16_RING_LL")
        t.launched(s + 30, 5, s + 4_100, 1_000, "flashinfer::sampling::TopKTopPSamplingFromProbKernel")
        t.launched(s + 40, 5, s + 5_100, 1_000, "reshape_and_cache_flash_kernel")
    return t


def test_scheduling_sampling_and_kv_cache_findings(tmp_path):
    """4 ms with no GPU work before each 6.2 ms decode step: scheduling, 65% of a median iteration; the GPU busy
    60 of 62 + 36 ms (61%) of the decode loop: no GPU-bound decode; sampling and the KV-cache write 1 of 6 ms
    each (17%): their findings (the sampler and `reshape_and_cache_flash` are not attention)."""
    a = ta.analyze(scheduling_bound().write(tmp_path / "sched.json"))
    assert _finding(a, "serving_decode_gpu_bound") is None
    f = _finding(a, "serving_scheduling")
    assert f.title == ("Scheduling between decode iterations: 4.0 ms with no GPU work before each (65% of a median "
                       "iteration)")
    assert f.evidence == ("36.0 ms with no GPU work at all before decode iterations that follow another, median "
                          "4.0 ms; median iteration 6.2 ms",)
    of = "17% of the kernel time of decode iterations"
    assert _finding(a, "serving_sampling").title == f"Sampling and logits processing take {of}"
    assert _finding(a, "serving_kv_cache_copies").title == f"KV-cache writes and copies take {of}"
    assert _finding(a, "serving_phases").evidence[1].startswith(
        "kernels launched in decode iterations: 60.0 ms; GEMMs and convolutions 50%, 0% of it in 8-bit or narrower "
        "formats; attention 0% (no fused kernel)")


def test_moe_and_communication_classes(tmp_path):
    """The same steps back to back (no scheduling gap): GPU-bound decode whose largest class is the MoE kernels
    (3 of 6 ms), then communication (1 ms)."""
    t = KinetoTrace()
    for i in range(10):
        s = 10_000 + i * 6_200
        t.host("step[DECODE bs=16]", s, 6_200, cat="user_annotation")
        t.launched(s + 10, 5, s + 100, 3_000, "fused_moe_kernel")
        t.launched(s + 20, 5, s + 3_100, 2_000, "ncclDevKernel_AllReduce_Sum_bf16_RING_LL")
        t.launched(s + 30, 5, s + 5_100, 1_000, GEMM)
    f = _finding(ta.analyze(t.write(tmp_path / "moe.json")), "serving_decode_gpu_bound")
    assert f.title == "Decode is GPU-bound: mixture-of-experts kernels take 50% of its kernel time"
    assert f.evidence[1] == ("kernels launched in them (60.0 ms): mixture-of-experts kernels 50%, communication 33%, "
                             "dense GEMMs 17% (by kernel name)")
    assert f.advice[0].startswith("Expert (MoE) kernels set decode's pace")


def test_graph_bubbles(tmp_path):
    """Decode iterations of 10 ms replaying a graph of 8 kernels of 800 us with 400 us between them (2.8 ms of
    bubbles in 10 ms: 28%): the graph-bubble finding."""
    t = KinetoTrace()
    for i in range(5):
        s = 10_000 + i * 10_000
        t.host("execute_context_0(0)_generation_4(4)", s, 10_000, cat="user_annotation")
        t._corr += 1
        for j in range(8):
            t.events.append({"ph": "X", "cat": "kernel", "name": GEMM, "pid": 0, "tid": 7, "ts": s + 100 + j * 1_200,
                             "dur": 800, "args": {"device": 0, "stream": 7, "correlation": t._corr, "graph id": 3}})
        t.runtime("cudaGraphLaunch", s + 10, 20, t._corr)
    a = ta.analyze(t.write(tmp_path / "bubbles.json"))
    assert a.ranks[0].serving.iterations[0].gpu_bubble_us == 2_800.0
    f = _finding(a, "serving_graph_bubbles")
    assert f.title == "GPU bubbles inside decode iterations, which replay CUDA graphs: 28% of their time"


def test_diff_compares_median_iteration_per_phase(tmp_path):
    """Base: 10 decode iterations of 77 ms; head: 10 of 70 ms (GEMMs of 7 ms, not 8): decode's median
    iteration 77.0 ms -> 70.0 ms (-9.1%), in the comparison and its faces; a phase on one side only has no change."""
    from traceanalyzer.compare import compare
    from traceanalyzer.report.diff import render_diff_html, render_diff_markdown, render_diff_text

    base = ta.analyze(vllm_decode().write(tmp_path / "base.json"))
    head_trace = vllm_decode(iteration_us=70_000, kernels=((GEMM, 7_000),) * 8 + DECODE_KERNELS[8:])
    head_trace.host("execute_context_1(500_500)_generation_0(0)", 2_000_000, 30_000, cat="user_annotation")
    head = ta.analyze(head_trace.write(tmp_path / "head.json"))
    c = compare(base, head)
    prefill, decode = c.serving  # the engines' phase order
    assert (decode.phase, decode.base_iterations, decode.head_iterations) == ("decode", 10, 10)
    assert (decode.base_median_iteration_us, decode.head_median_iteration_us, decode.change) == (
        77_000.0, 70_000.0, -0.090909)
    assert (prefill.phase, prefill.base_median_iteration_us, prefill.head_median_iteration_us, prefill.change) == (
        "prefill", None, 30_000.0, None)
    line = "decode: median iteration 77.0 ms -> 70.0 ms (-9.1%), 10 vs 10 iterations"
    assert "- " + line.replace(">", "\\>") in render_diff_markdown(c)  # Markdown's escape: it shows "->"
    assert line.replace(">", "&gt;") in render_diff_html(c)
    assert "serving decode: median iteration 77.0 ms -> 70.0 ms (-9.1%)" in render_diff_text(c)
    assert c.to_data()["serving"][1]["head_median_iteration_us"] == 70_000.0


@pytest.mark.slow
def test_vllm_model_runner_iterations_of_unknown_phase():
    """traceMap's vLLM V1 capture on H100 (no execute_context annotation; with_stack frames): 11 iterations from the
    model runner's execute_model frames, phase unknown (never guessed from kernels). Truth from the raw JSON: the
    first 91.438 ms (no graph), then 9 of ~18.7 ms with 81 graph replays each, the last 122.5 us with no GPU work;
    median 18.690 ms, busy 88.95% of their time, 729 replays, 557.687 us with no GPU work before the second."""
    a = ta.analyze(_fetched("tmap_vllm_h100"))
    s = a.ranks[0].serving
    assert s.sources == ("vllm_model_runner",) and len(s.iterations) == 11
    (p,) = s.phases
    assert (p.phase, p.iterations, p.median_iteration_us, p.graph_replays) == ("unknown", 11, 18_690.09, 729)
    assert p.gpu_busy_share == pytest.approx(0.8895, abs=1e-4)
    first, second = s.iterations[:2]
    assert (first.duration_us, first.gpu_busy_us, first.graph_replays) == (91_438.444, 83_914.526, 0)
    assert (second.host_gap_before_us, second.graph_replays) == (557.687, 81)
    f = next(f for f in a.diagnosis.findings if f.id == "serving_phases")
    assert f.title == "Serving loop: phase unknown" and f.evidence[0].startswith("11 iterations of vLLM's model runner")


def test_iteration_arrays_edges():
    """Without GPU work an iteration spans its range and its gaps run from/to its range; work that starts before its
    range (clock skew) counts from the range's start; overlapping work counts once; a replay's nodes one replay."""
    import numpy as np

    from traceanalyzer.analyses.serving import _iteration_arrays

    ts, end = np.array([0, 1_000, 3_000]), np.array([500, 1_500, 3_200])
    # iteration 0: two overlapping kernels 100..400 and 200..600 of graph 5 (one launch); iteration 1: none;
    # iteration 2: a kernel from 2_900 (before its range) to 3_400; a stray kernel 2_000..2_100 outside all
    w_ts, w_end = np.array([100, 200, 2_900, 2_000]), np.array([400, 600, 3_400, 2_100])
    owner, graph, corr = np.array([0, 0, 2, -1]), np.array([5, 5, -1, -1]), np.array([9, 9, 10, 11])
    span, busy, bubble, gap, replays = _iteration_arrays(ts, end, w_ts, w_end, owner, graph, corr)
    assert span.tolist() == [600, 500, 400] and busy.tolist() == [500, 0, 400]
    assert bubble.tolist() == [0, 0, 0] and replays.tolist() == [1, 0, 0]
    # before 1: 600 (work end of 0) .. 1_000 (its range start); before 2: 1_500 (range end of 1) .. 3_000 (its
    # first work, clipped to its start) less the GPU work in it: the stray kernel's 100 and 2_900 .. 3_000
    assert gap.tolist() == [-1, 400, 1_300]
