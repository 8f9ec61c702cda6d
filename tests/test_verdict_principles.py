"""Verdicts that weigh what a cause costs (issue 43): materiality, start-up then the steady state, and a
model run on the CPU beside a GPU. Synthetic traces with known answers; the same rules are checked on every
real trace by the invariants (tests/test_invariants.py) and the verdict benchmark."""

from __future__ import annotations

import re

import pytest
from kineto_builder import KinetoTrace

import traceanalyzer as ta
from traceanalyzer.diagnosis.thresholds import MATERIAL_MIN_SHARE, SATURATED_BUSY_SHARE

GEMM = "ampere_fp16_s16816gemm_fp16_128x128"


def _gemms(t: KinetoTrace, start_us: float, n: int, dur_us: float, gap_us: float, name: str = GEMM) -> float:
    ts = start_us
    for _ in range(n):
        t.launched(ts, 10, ts + 20, dur_us, name=name, op="aten::mm")
        ts += dur_us + gap_us
    return ts


@pytest.mark.parametrize("with_step", [True, False])
def test_a_short_setup_before_saturated_gemms_is_not_start_up(tmp_path, with_step):
    """Five back-to-back 117 ms GEMMs after 2.3 ms of host set-up (a first cudaMalloc): the set-up is real
    but 0.4% of the capture, under MATERIAL_MIN_SHARE: the GPU, busy > 99%, is the verdict."""
    t = KinetoTrace()
    if with_step:
        t.step(1, 0, 2300 + 5 * 117025 + 50)
    t.host("aten::mm", 10, 2300)
    t.runtime("cudaMalloc", 20, 2200, correlation=900)
    _gemms(t, 2300, 5, 117000, 25)
    a = ta.analyze(t.write(tmp_path / "gemm.json"))
    r = a.ranks[0].diagnosis
    assert a.diagnosis.primary == "gpu_bound"
    assert 1 - r.idle_us / r.window_us >= SATURATED_BUSY_SHARE
    assert 2300 / (r.window_us + 2300) < MATERIAL_MIN_SHARE  # the rule's premise, measured
    assert "start-up" not in a.diagnosis.headline.lower()


def test_a_material_start_up_leads_and_the_steady_state_follows(tmp_path):
    """A 320 ms first call (cudaFree inside the first aten::linear) before 40 fp32 GEMMs 81% busy: start-up
    is the verdict (25% of the capture), and the rest's own verdict (gpu_bound, FP32 on the tensor cores'
    side) leads the findings with its own advice."""
    t = KinetoTrace()
    t.host("aten::linear", 0, 321000)
    t.runtime("cudaFree", 100, 320000, correlation=900)
    _gemms(t, 320200, 40, 20000, 4700, name="sgemm_128x64_nn")
    a = ta.analyze(t.write(tmp_path / "lazy.json"))
    d = a.diagnosis
    assert d.primary == "startup_dominated"
    assert "320.0 ms of the" in d.headline and "capture" in d.headline  # said against the capture, not the loss
    first = d.findings[0]
    assert first.id == "steady_state"
    assert "GPU busy 81.4% of the window" in first.evidence[0]
    assert any("FP32 matrix kernels" in e for e in first.evidence)
    assert any("TF32" in x or "bf16" in x for x in first.advice)
    # every percentage of the finding has its figures
    assert sum(e.count("%") for e in first.evidence) == len(first.shares)


def test_a_model_run_on_the_cpu_beside_a_gpu_says_so(tmp_path):
    """The runtime was traced (device queries with correlation ids), no kernel launch or copy: the model ran
    on the CPU. Not "GPU events missing"."""
    t = KinetoTrace()
    for i, q in enumerate(["cudaGetDeviceCount", "cudaGetDevice", "cudaDeviceGetAttribute"] * 2):
        t.runtime(q, i * 10, 2, correlation=100 + i)
    ts = 100
    for _ in range(300):
        t.host("aten::addmm", ts, 500)
        ts += 510
    a = ta.analyze(t.write(tmp_path / "cpu.json"))
    d = a.diagnosis
    assert d.primary == "cpu_compute_bound"
    ids = [f.id for f in d.findings]
    assert ids[0] == "model_on_cpu" and "capture_incomplete" not in ids
    assert "6 GPU runtime calls" in d.findings[0].evidence[0]
    assert any("model.to('cuda')" in x for x in d.findings[0].advice)


def test_launches_without_kernels_are_events_missing_not_a_cpu_run(tmp_path):
    t = KinetoTrace()
    ts = 100
    for i in range(50):
        t.host("aten::add", ts, 500)
        t.runtime("cudaLaunchKernel", ts + 10, 5, correlation=200 + i)
        ts += 510
    a = ta.analyze(t.write(tmp_path / "lost.json"))
    d = a.diagnosis
    assert d.primary == "undetermined"
    assert d.findings[0].id == "capture_incomplete"
    assert "50 GPU launches" in d.findings[0].evidence[0]


def test_a_cause_under_the_materiality_line_is_never_the_verdict(tmp_path):
    """8 steps, the GPU 88% busy: 12% idle split between a DataLoader wait (3%), host work between launches
    (4.5%) and a synchronisation (4%): the DataLoader, the one cause a GPU this busy could still be bound by, loses
    under MATERIAL_MIN_SHARE of the window, so no cause is named and the reason says why."""
    t = KinetoTrace()
    s = 0.0
    for i in range(8):
        t.step(i, s, 10000)
        t.dataloader(s, 300)
        t.launched(s + 300, 5, s + 310, 4000, op="aten::mm")
        t.host("aten::index", s + 4315, 440)
        t.launched(s + 4755, 5, s + 4760, 2000, op="aten::mm")
        t.host("aten::item", s + 4765, 2395)
        t.runtime("cudaStreamSynchronize", s + 4770, 1990)
        t.launched(s + 7160, 5, s + 7165, 2830, op="aten::mm")
        s += 10000
    a = ta.analyze(t.write(tmp_path / "spread.json"))
    r = a.ranks[0].diagnosis
    busy = 1 - r.idle_us / r.window_us
    assert 0.85 < busy < 0.9, r.idle_by_cause_us
    assert 0 < r.idle_by_cause_us["dataloader"] < MATERIAL_MIN_SHARE * r.window_us
    assert a.diagnosis.primary == "gpu_bound"
    assert "dataloader not counted (2.5 ms): it loses under" in r.reason


def test_a_stall_every_fifth_step_costs_its_mean_not_the_median_step(tmp_path):
    """20 steps of 10 ms compute; every step copies its batch (a 400 us exposed HtoD copy); every 5th step
    the DataLoader stalls 8 ms (4 of 20 steps). The median step holds no stall, but the stall costs 1.6 ms per
    step on average, four times the copy: the run is input-bound, not memcpy-bound."""
    t = KinetoTrace()
    s = 0.0
    for i in range(20):
        wait = 8000.0 if i % 5 == 4 else 20.0
        t.step(i, s, wait + 10_450)
        t.dataloader(s, wait)
        c = s + wait
        t.launched(c, 5, c + 10, 400, name="Memcpy HtoD (Pinned -> Device)", cat="gpu_memcpy", op="aten::copy_")
        t.launched(c + 15, 5, c + 420, 10_000, op="aten::mm")
        s += wait + 10_450
    a = ta.analyze(t.write(tmp_path / "periodic.json"))
    r = a.ranks[0].diagnosis
    assert a.diagnosis.primary == "input_bound", (r.reason, r.idle_by_cause_us)
    assert "mean step" in r.reason


def test_the_first_thing_to_try_follows_the_straggler_that_leads(tmp_path):
    """8 ranks waiting for rank 5: the first thing to try is to make rank 5 faster (the finding that leads),
    never to overlap or compress communication, which that finding says cannot help; the wait the others
    spend is said per rank and per step, never summed over the 7 ranks beside a step time."""
    from test_stragglers import write_job

    from traceanalyzer.report.verdict import top_advice

    a = ta.analyze(write_job(tmp_path))
    d = a.diagnosis
    advice = top_advice(d)
    assert advice is not None and advice.startswith("Make rank 5 faster first")
    assert "each of the other 7 ranks waits" in d.headline
    waits_ms = float(re.search(r"waits ([\d.]+) ms per step", d.headline).group(1))
    assert waits_ms * 1000 <= a.ranks[0].diagnosis.window_us / max(a.ranks[0].steps, 1)
    top = d.findings[0]
    assert top.share_of_window is not None and 0 < top.share_of_window <= 1


def test_host_time_before_a_detected_steps_first_launch_is_the_steps(tmp_path):
    """A loop annotated by the user (`record_function("train_step")`, no ProfilerStep): each 10 ms step spends
    4 ms in host work before its first launch, then 6 ms of kernels. The window is the steps' span, so the
    first step's 4 ms of host work is in every figure: 40% of the window is lost to host work, and the
    verdict is host-bound."""
    t = KinetoTrace()
    s = 0.0
    for _ in range(6):
        t.host("train_step", s, 10_000, cat="user_annotation")
        t.host("preprocess", s + 10, 3_980)
        t.host("aten::copy_", s + 3_995, 4)  # a blocking copy of the batch: the loop's boundary with the host
        t.runtime("cudaMemcpy", s + 3_995, 3, correlation=-1)
        t.launched(s + 4_000, 5, s + 4_005, 5_990, op="aten::mm")
        s += 10_000
    a = ta.analyze(t.write(tmp_path / "annotated.json"))
    r = a.ranks[0]
    assert r.step_source.kind == "detected" and r.steps == 6
    d = r.diagnosis
    assert d.window_us == pytest.approx(60_000, abs=10)
    assert d.idle_us == pytest.approx(6 * 4_005, abs=50)
    assert a.diagnosis.primary == "host_bound"


def test_start_up_names_the_call_that_stalled_and_the_operator_that_made_it(tmp_path):
    """The first step's aten::linear spends 998 ms in two cudaFree calls (the caching allocator set up on first
    use); the start-up verdict names both the call that stalled and the operator that made it."""
    t = KinetoTrace()
    s = 0.0
    for i in range(6):
        first = i == 0
        dur = 1_010_000 if first else 10_000
        t.step(i, s, dur)
        c = s + 10
        t.host("aten::linear", c, (1_000_000 if first else 0) + 2000)
        if first:
            t.runtime("cudaFree", c + 5, 499_000)
            t.runtime("cudaFree", c + 500_000, 499_000)
            c += 1_000_000
        t.launched(c + 100, 5, c + 110, 1500)
        t.host("aten::nll_loss", c + 2100, 300)
        t.launched(c + 2150, 5, c + 2160, 7000, name="nll_loss_kernel")
        s += dur
    d = ta.analyze(t.write(tmp_path / "first_call.json")).diagnosis
    assert d.primary == "startup_dominated"
    assert "aten::linear" in d.headline and "cudaFree" in d.headline and "nll_loss" not in d.headline
    startup = next(f for f in d.findings if f.cause == "startup")
    names = {e.name: e.time_us for e in startup.host_ops}
    assert names["cudaFree"] == pytest.approx(998_000, abs=1_000)


def test_communication_kernels_of_every_library_are_never_compute(tmp_path):
    """A busy GPU whose longest kernel is DeepEP's combine under a fork's namespace (`dpsk::ep::internode::`),
    beside bf16 GEMMs: the combine kernel is communication (never named as the GPU's own work), and a run
    already in bf16 is not told to use autocast or TF32."""
    from traceanalyzer.names import is_comm_kernel

    assert is_comm_kernel("void dpsk::ep::internode::combine<false, 8, __nv_bfloat16>(int4*, float*)")
    assert is_comm_kernel("deep_ep::internode_ll::dispatch")
    assert not is_comm_kernel("void cutlass::device_kernel<dpsk::grouped_gemm::cuda::fp8_ptp128c::GemmKernel>")
    t = KinetoTrace()
    s = 0.0
    for i in range(6):
        t.step(i, s, 10_000)
        t.launched(s + 5, 5, s + 10, 4_990, name="ampere_bf16_s16816gemm_bf16_256x128_ldg8_f2f_tn", op="aten::mm")
        t.launched(s + 12, 5, s + 20, 4_900, name="void dpsk::ep::internode::combine<false, 8>(int4*)",
                   stream=8)  # beside the GEMMs, as expert-parallel dispatch/combine overlap compute
        t.launched(s + 30, 5, s + 5_005, 4_990, name="ampere_bf16_s16816gemm_bf16_256x128_ldg8_f2f_tn", op="aten::mm")
        s += 10_000
    d = ta.analyze(t.write(tmp_path / "ep.json")).diagnosis
    assert d.primary == "gpu_bound"
    gpu = next(f for f in d.findings if f.id == "gpu_bound")
    assert not any("internode" in e for e in gpu.evidence if e.startswith("top kernel"))
    assert not any("autocast" in a or "TF32" in a for f in d.findings for a in f.advice)


# Every bundled sample's verdict, pinned: a rule that moves one must say so here (issue 43: verdicts on the
# samples and corpus unchanged except intended moves; the corpus's are the verdict benchmark's rows).
SAMPLE_VERDICTS = {
    "basic.json": "undetermined",
    "basic_2021.json": "undetermined",
    "basic_float_us.json": "undetermined",
    "comm_rank0.json": "communication_bound",
    "comm_rank1.json": "communication_bound",
    "cpu_only.json": "cpu_input_bound",
    "gpu_bound.json": "gpu_bound",
    "host_bound.json": "host_bound",
    "hostile_names.json": "undetermined",
    "input_bound.json": "input_bound",
    "launch_bound.json.gz": "launch_bound",
    "memcpy_bound.json": "memcpy_bound",
    "periodic_stall.json": "periodic_stall",
    "sync_bound.json": "sync_bound",
    "torch214_cpu_input_bound.json.gz": "cpu_input_bound",
    "torch214_cpu_well_fed.json.gz": "cpu_compute_bound",
    "torch_cpu_host_bound.json.gz": "cpu_compute_bound",
    "torch_cpu_input_bound.json.gz": "cpu_input_bound",
    "torch_cpu_multiworker.json.gz": "cpu_input_bound",
    "torch_cpu_postprocess.json.gz": "cpu_compute_bound",
    "torch_cpu_stack.json.gz": "cpu_compute_bound",
    "torch_cpu_well_fed.json.gz": "cpu_compute_bound",
    "torch_cpu_zero_grad_item.json.gz": "cpu_compute_bound",
    "torch_memory_leak.json.gz": "cpu_compute_bound",
    "torch_memory_steady.json.gz": "cpu_compute_bound",
}


@pytest.mark.parametrize("name", sorted(SAMPLE_VERDICTS))
def test_sample_verdicts_are_pinned(name):
    from conftest import ROOT

    assert ta.analyze(ROOT / "sample_traces" / name).diagnosis.primary == SAMPLE_VERDICTS[name]


def test_memory_bound_kernels_by_name_leave_prefill_attention_out():
    """FlashInfer's attention kernels are named `...Prefill...`: attention, not a memory-bound fill."""
    from traceanalyzer.analyses.figures import MEMORY_BOUND_KERNEL

    assert not MEMORY_BOUND_KERNEL.search("flashinfer::BatchPrefillWithPagedKVCacheKernel<128>")
    assert MEMORY_BOUND_KERNEL.search("at::native::vectorized_elementwise_kernel<4, FillFunctor<float>>")
    assert MEMORY_BOUND_KERNEL.search("fill_kernel_cuda")
