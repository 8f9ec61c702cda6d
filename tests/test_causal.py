"""Causal gap attribution and what fixing each cause would save (issue 32), on traces built here with
known answers: a gap whose next GPU work was queued before it began is never the host's; a DataLoader
wait of W on the critical path projects a saving of exactly W; a busy GPU with small launch gaps is
GPU-bound; start-up before the first GPU work is counted."""

from __future__ import annotations

import re

import numpy as np
import pytest
from kineto_builder import KinetoTrace

import traceanalyzer as ta
from traceanalyzer import causes as C
from traceanalyzer.diagnosis.thresholds import BUSY_NEVER_HOST_SHARE

STEP_US = 1000


def _only_gap_cause(a: ta.Analysis, lo_us: float, hi_us: float) -> str:
    """The cause of the one listed gap that starts in [lo_us, hi_us) of the device's window."""
    (gap,) = [g for g in a.ranks[0].diagnosis.gaps if lo_us <= g.start_us < hi_us]
    return gap.cause


HOST_ACTIVITIES = {
    "dataloader": lambda t, s, d: t.dataloader(s, d),
    "sync": lambda t, s, d: t.runtime("cudaStreamSynchronize", s, d),
    "host_compute": lambda t, s, d: t.host("postprocess_masks", s, d, cat="user_annotation"),
    "nothing": lambda t, s, d: t,
}


@pytest.mark.parametrize("host", sorted(HOST_ACTIVITIES))
def test_a_gap_whose_next_work_was_queued_before_it_began_is_never_the_hosts(tmp_path, host):
    """Per step: kernel A (0..300 us), then a 400 us gap while the host does `host`, then kernel B. B's launch
    call returned 50 us before the gap began (it waited on the device side), so the gap is
    device_dependency whatever the host did; in steps whose B is launched during the gap, the same host
    activity gets the gap."""
    t = KinetoTrace()
    for i in range(6):
        s = 10_000 + i * STEP_US
        t.step(i, s, STEP_US)
        t.launched(s + 2, 5, s + 10, 290)  # A: 10..300
        HOST_ACTIVITIES[host](t, s + 310, 380)
        queued = i % 2 == 0  # even steps: B queued before the gap; odd: launched inside it
        t.launched(s + 240 if queued else s + 695, 5, s + 700, 290)  # B: 700..990
    a = ta.analyze(t.write(tmp_path / f"{host}.json"))
    r = a.ranks[0].diagnosis
    steps = {g.step: g.cause for g in r.gaps if g.duration_us == pytest.approx(400)}
    assert set(steps) == set(range(6))
    for n, cause in steps.items():
        if n % 2 == 0:
            assert cause == C.DEPENDENCY
        else:
            assert cause == (C.UNKNOWN if host == "nothing" else host)
    # three 400 us device-side gaps, counted as such; the host causes hold only the other steps' gaps
    assert r.idle_by_cause_us[C.DEPENDENCY] == pytest.approx(3 * 400)


def test_a_dataloader_wait_on_the_critical_path_saves_exactly_its_length(tmp_path):
    """Steps of varying compute, each starting with a 300 us DataLoader wait (the GPU idle, nothing
    queued) and holding a 50 us device-side wait: removing the DataLoader wait shortens the median step
    by exactly 300 us, and the device-side wait is no part of it."""
    wait = 300
    t = KinetoTrace()
    s = 10_000.0
    rng = np.random.default_rng(3)
    durations = []
    for i in range(9):
        compute = 600 + float(rng.integers(0, 200))
        dur = wait + compute + 60
        t.step(i, s, dur).dataloader(s, wait)
        t.launched(s + wait - 8, 5, s + wait, compute / 2)  # launched at the wait's end
        mid = s + wait + compute / 2
        t.launched(s + wait - 4, 2, mid + 50, compute / 2)  # queued long before: a 50 us device-side wait
        t.launched(mid + compute / 2 + 50, 5, mid + compute / 2 + 55, 5)  # a tail kernel, launched late
        durations.append(dur)
        s += dur
    a = ta.analyze(t.write(tmp_path / "dl.json"))
    d = a.diagnosis
    assert d.primary == "input_bound"
    f = next(f for f in d.findings if f.cause == C.DATALOADER)
    # the median step replayed without the wait: its first kernel still starts 8 us after its launch call
    # begins (launch overheads kept), so the step shortens by the wait less that lead; the projection said
    # the whole wait
    assert f.figures["saving_us"] == pytest.approx(wait - 8, abs=0.01)
    assert f.figures["projected_saving_us"] == pytest.approx(wait, abs=0.01)
    assert f.figures["step_us"] == pytest.approx(float(np.median(durations)), abs=0.01)
    assert any(re.search(r"removing the DataLoader wait would shorten the median step by ≈ 292 us .*replayed.*"
                         r"\(projected: ≈ 300 us\)", e) for e in f.evidence)
    dep = next(f for f in d.findings if f.cause == C.DEPENDENCY)
    assert dep.figures["saving_us"] == pytest.approx(50, abs=0.01)
    assert d.findings[0].cause == C.DATALOADER  # ordered by saving
    assert "removing dataloader would shorten the median step" in a.ranks[0].diagnosis.reason


def test_a_busy_gpu_with_small_launch_gaps_is_gpu_bound(tmp_path):
    """86% busy: each step 25 kernels of 34.4 us with 5.6 us launch gaps (the host launches each kernel
    after the last ended). Every gap is launch overhead; all of them together are 14% of the step, more
    than the old 10% line, but a GPU this busy is never launch-bound."""
    t = KinetoTrace()
    s = 10_000.0
    for i in range(8):
        t.step(i, s, STEP_US)
        for j in range(25):
            k = s + j * 40
            t.launched(k - 4, 3.5, k, 34.4, "vectorized_elementwise_kernel", op="aten::add")
        s += STEP_US
    a = ta.analyze(t.write(tmp_path / "busy.json"))
    r = a.ranks[0].diagnosis
    busy = 1 - r.idle_us / r.window_us
    assert 0.85 < busy < 0.87 and busy >= BUSY_NEVER_HOST_SHARE
    assert r.idle_by_cause_us[C.LAUNCH] > 0.13 * r.window_us
    assert a.diagnosis.primary == "gpu_bound"
    assert "launch not counted" in r.reason
    assert any(f.cause == C.LAUNCH for f in a.diagnosis.findings)  # still a finding, not the verdict


def test_a_sync_while_the_gpu_is_busy_costs_only_the_idle_it_causes(tmp_path):
    """The host blocks 900 us in cudaStreamSynchronize while a 890 us kernel runs, then launches the next
    10 us after the kernel ends: the sync costs 10 us of idle per step, not 900."""
    t = KinetoTrace()
    for i in range(6):
        s = 10_000 + i * STEP_US
        t.step(i, s, STEP_US)
        t.launched(s + 1, 5, s + 100, 890)  # 100..990
        t.runtime("cudaStreamSynchronize", s + 10, 985)  # returns at 995
        t.host("aten::add", s + 996, 4)
    a = ta.analyze(t.write(tmp_path / "sync.json"))
    r = a.ranks[0].diagnosis
    # between steps 990..1100 (the next kernel at +100): 110 us, not the sync's 985 us; plus the first
    # step's 100 us before its kernel and the last one's 10 us after it (the sync covers both)
    assert r.idle_by_cause_us[C.SYNC] == pytest.approx(5 * 110 + 100 + 10) == r.idle_us


def _addmm_capture(t: KinetoTrace, first_kernel_us: float) -> None:
    """The first aten::addmm holds two cudaFree calls (the context's creation), then kernels follow."""
    t.host("aten::addmm", 100, first_kernel_us - 90)
    t.runtime("cudaFree", 110, first_kernel_us / 2 - 200)
    t.runtime("cudaFree", first_kernel_us / 2, first_kernel_us / 2 - 100)
    at = first_kernel_us
    for _ in range(40):
        t.launched(at - 15, 5, at, 400)
        at += 500


def test_start_up_before_the_first_gpu_work_is_counted_without_steps(tmp_path):
    """No step markers: the window starts at the first GPU work, after ~20 ms of cudaFree (context
    creation); that start-up is counted (the window's figures stay the GPU activity's)."""
    t = KinetoTrace()
    _addmm_capture(t, 20_000)
    a = ta.analyze(t.write(tmp_path / "nomarkers.json"))
    r = a.ranks[0].diagnosis
    assert r.window_us == pytest.approx(40 * 500 - 100)  # the window: first to last GPU work
    assert r.startup_us == pytest.approx(9_800 + 9_900)  # the two cudaFree calls
    assert a.diagnosis.primary == "startup_dominated"
    assert "before the window, which starts at the first GPU work" in r.reason


def test_idle_before_the_first_gpu_work_filled_by_allocator_calls_is_start_up(tmp_path):
    """With steps: the first step's idle before its first kernel is the cudaFree calls: start-up, not
    the allocator-bound verdict."""
    t = KinetoTrace()
    t.step(0, 0, 40_000)
    _addmm_capture(t, 20_000)
    a = ta.analyze(t.write(tmp_path / "markers.json"))
    r = a.ranks[0].diagnosis
    assert r.idle_by_cause_us[C.STARTUP] > 19_000 and r.idle_by_cause_us.get(C.ALLOCATOR, 0) == 0
    assert a.diagnosis.primary == "startup_dominated"


@pytest.mark.parametrize(("name", "comm"), [
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", True),
    ("void ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", True),
    ("void deep_ep::internode::dispatch<true, 8, 3, 24, 4>(int4*, float*)", True),
    ("void deep_ep::internode_ll::combine<false, 7168>(void*, void const*)", True),
    ("mscclKernel_Sum_bfloat16_LL128(int, int, mscclAlgo*, mscclWork*)", True),
    ("void mscclpp::allreduce8<__nv_bfloat16>(int)", True),
    ("void nvshmemi_proxy_progress_kernel()", True),
    ("void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*)", True),
    ("void tensorrt_llm::kernels::oneShotAllReduceKernel<half, 8>(AllReduceParams)", True),
    ("ampere_sgemm_128x64_nn", False),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>", False),
    ("void gather_nccl_like_kernel()", False),
])
def test_communication_kernels_of_the_common_libraries_are_recognised(name, comm):
    from traceanalyzer.names import is_comm_kernel

    assert is_comm_kernel(name) is comm


def test_a_deepep_kernel_is_exposed_communication(tmp_path):
    t = KinetoTrace()
    for i in range(4):
        s = 10_000 + i * STEP_US
        t.step(i, s, STEP_US)
        t.launched(s + 2, 5, s + 10, 400)
        t.launched(s + 8, 5, s + 420, 500, "void deep_ep::internode::dispatch<true, 8>(int4*, float*)")
    a = ta.analyze(t.write(tmp_path / "deepep.json"))
    assert a.ranks[0].diagnosis.exposed_communication_us == pytest.approx(4 * 500)


def _stalls(path, every: int, steps: int, stall_op: str):
    """`steps` steps of 1 ms (GPU busy), every `every`-th one with a 4 ms host stall in `stall_op`."""
    t = KinetoTrace()
    s = 10_000.0
    for i in range(steps):
        stall = i % every == every - 1
        dur = STEP_US + (4000 if stall else 0)
        t.step(i, s, dur)
        for j in range(8):
            k = s + 30 + j * 120
            t.launched(k - 20, 5, k, 118)
        if stall:
            t.host(stall_op, s + STEP_US + 20, 3900, cat="user_annotation")
        s += dur
    return ta.analyze(t.write(path))


def test_periodic_stalls_without_a_checkpoint_get_no_checkpoint_advice(tmp_path):
    a = _stalls(tmp_path / "p.json", 4, 12, "flush_tensorboard_summaries")
    assert a.diagnosis.primary == "periodic_stall"
    f = next(f for f in a.diagnosis.findings if f.id == "periodic_stall")
    assert not any("checkpoints" in x for x in f.advice)  # no "save checkpoints asynchronously"
    assert any("Find what the slow steps do" in x for x in f.advice)
    b = _stalls(tmp_path / "c.json", 4, 12, "save_checkpoint")
    g = next(f for f in b.diagnosis.findings if f.id == "periodic_stall")
    assert any("checkpoints asynchronously" in x for x in g.advice)


def test_two_slow_steps_make_no_period(tmp_path):
    a = _stalls(tmp_path / "p.json", 4, 8, "save_checkpoint")  # slow steps 3 and 7 only
    assert a.diagnosis.primary != "periodic_stall"
    assert a.ranks[0].diagnosis.idle_by_cause_us.get(C.CHECKPOINT, 0) == 0


@pytest.mark.parametrize("training", [False, True])
def test_inference_gets_no_training_loop_advice(tmp_path, training):
    """A host-bound serving loop (post-processing after each step's kernels, 40 framework ops a step, no
    backward and no optimizer) gets serving advice; the same loop with a backward op gets the training
    loop's (image writing, logging off the hot loop)."""
    t = KinetoTrace()
    for i in range(6):
        s = 10_000 + i * STEP_US
        t.step(i, s, STEP_US)
        for j in range(4):
            t.launched(s + 10 + j * 90, 5, s + 20 + j * 90, 85, op="aten::linear")
        for j in range(36):
            t.host("aten::argmax", s + 400 + j * 15, 10)
        if training:
            t.host("autograd::engine::evaluate_function: AddmmBackward0", s + 390, 5)
    a = ta.analyze(t.write(tmp_path / "serve.json"))
    assert a.diagnosis.primary == "host_bound"
    f = next(f for f in a.diagnosis.findings if f.id == "host_bound")
    text = " ".join(f.advice)
    assert ("image writing" in text) is training
    assert ("serving loop" in text) is not training


def test_a_job_waiting_for_a_late_rank_names_it_first(tmp_path):
    """8 ranks; rank 5 waits 30 ms per step for its DataLoader and starts the all-reduce 30 ms late, so the
    others spend 30 of their 40 ms of exposed communication per step waiting: the straggler leads the
    headline, the findings and the advice, ahead of overlapping or compressing communication."""
    from test_stragglers import write_job

    a = ta.analyze(write_job(tmp_path))
    d = a.diagnosis
    assert d.primary == "communication_bound"
    assert d.headline.startswith("Waiting for a straggler: rank 5 is late by 30.0 ms per step")
    top = d.findings[0]
    assert top.id == "straggler" and top.explains_us == 30_000.0
    assert top.figures == {"wait_us": 30_000.0, "exposed_communication_us": 40_000.0}
    assert top.advice[0].startswith("Make rank 5 faster first") and "DataLoader" in top.advice[0]
    assert "num_workers" in top.advice[1]  # rank 5's own cause's advice
    assert "mostly waiting" in d.verdict_note


def test_a_job_without_a_straggler_keeps_the_communication_advice(tmp_path):
    from test_stragglers import write_job

    d = ta.analyze(write_job(tmp_path, slow=None)).diagnosis
    assert d.primary == "communication_bound" and d.findings[0].id != "straggler"
    assert not d.headline.startswith("Waiting for a straggler")


def _smi_log(path, utils: list[int], used_mib: int, total_mib: int = 81_559):
    lines = ["timestamp, index, name, utilization.gpu [%], memory.total [MiB], memory.used [MiB]"]
    for i, u in enumerate(utils):
        lines.append(f"2024/11/23 12:{i // 60:02d}:{i % 60:02d}.000, 0, NVIDIA H100, {u} %, {total_mib} MiB, "
                     f"{used_mib} MiB")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_log_of_a_gpu_busy_little_while_holding_memory_is_underused(tmp_path):
    """27% SM utilisation on average, never at 0%, 91.6% of the memory held: underused, said with both."""
    a = ta.analyze(_smi_log(tmp_path / "smi.csv", [20, 34] * 30, 74_708))
    d = a.diagnosis
    assert d.primary == "gpu_underused"
    (f,) = d.findings
    assert f.title == "GPU 0 is underused: memory held, little computed"
    assert "SM utilisation 27.0% on average" in f.evidence[0] and "(91.6% of 81559 MiB)" in f.evidence[0]
    assert f.figures["memory_used_max_mib"] == 74_708 and f.figures["sm_util_mean_pct"] == 27.0


def test_a_log_of_a_busy_gpu_says_how_few_samples_were_idle(tmp_path):
    d = ta.analyze(_smi_log(tmp_path / "smi.csv", [90] * 25 + [0] * 5 + [90] * 30, 74_708)).diagnosis
    assert d.primary == "gpu_bound"
    assert "8.3% of samples at 0% (under 25%), the longest run 5 s" in d.headline and "no long idle runs" not in d.headline
    # the same 5 idle samples after the job are its idle tail: set apart, and said so
    d = ta.analyze(_smi_log(tmp_path / "tail.csv", [90] * 55 + [0] * 5, 74_708)).diagnosis
    assert "no sample at 0%" in d.headline and "The log's last 5 s is idle on every GPU" in d.headline_detail


def test_a_long_first_read_back_is_a_sync_not_start_up(tmp_path):
    """A decode-like loop: each step a kernel, then (from step 3 on) a 256-byte device-to-host read-back. The
    first read-back holds the host 60 ms with the GPU idle (nothing queued); later ones 20 us. Though the
    first call of its name and far longer than the others, it is the host waiting on a read-back: sync,
    not start-up."""
    t = KinetoTrace()
    s = 10_000.0
    for i in range(8):
        hold = 60_000 if i == 3 else 20
        dur = 500 + hold + 100
        t.step(i, s, dur)
        t.launched(s + 5, 5, s + 20, 400)
        if i >= 3:
            t.copy(s + 430, hold, s + 430 + hold - 3, 2, "Memcpy DtoH (Device -> Pageable)", nbytes=256)
        s += dur
    a = ta.analyze(t.write(tmp_path / "readback.json"))
    r = a.ranks[0].diagnosis
    assert r.idle_by_cause_us.get(C.STARTUP, 0) == 0
    assert r.idle_by_cause_us[C.SYNC] > 60_000
    assert a.diagnosis.primary != "startup_dominated"


def _queued_wait_trace(wait_us: float, record_event: bool = False) -> KinetoTrace:
    """A serving step as SGLang's overlap scheduler records it: kernel A (1000..1010 us), a stream made to wait
    on an event, kernel K launched at 1040 (its call returns at 1045) that runs only at 1045 + `wait_us`, and
    the host blocked meanwhile in a first `aten::copy_` (a small read-back copy) until K has run; then six
    kernels back to back. The event is recorded in the capture only when `record_event`."""
    t = KinetoTrace()
    t.launched(990, 5, 1000, 10, "elementwise_kernel")
    if record_event:
        t.runtime("cudaEventRecord", 985, 2)
    t.runtime("cudaStreamWaitEvent", 1020, 10)
    k = 1045 + wait_us
    t.launched(1040, 5, k, 10, "resolve_future_token_ids_kernel")
    t.host("aten::copy_", 1060, k + 100 - 1060)
    t.copy(1062, k + 90 - 1062, k + 20, 5, name="Memcpy DtoH (Device -> Pageable)", nbytes=256, api="cudaMemcpy")
    s = k + 110
    for j in range(6):
        t.launched(s + j * 30, 5, s + j * 30 + 10, 20, op="aten::mm")
        t.host("aten::copy_", s + j * 30 + 6, 3)
    return t


def test_a_long_wait_on_an_event_from_outside_the_capture_is_neither_start_up_nor_the_hosts(tmp_path):
    """The GPU idles 400 ms with K queued: the 35 us before K's launch returned are the host's, the rest is a
    device-side wait on an event no call in the capture recorded. The long first `aten::copy_` only waits with
    it (no start-up), and since that wait is most of the time lost, the verdict is undetermined and says what
    was not measured."""
    wait = 400_000 - 45
    a = ta.analyze(_queued_wait_trace(wait).write(tmp_path / "serve.json"))
    r = a.ranks[0].diagnosis
    assert a.diagnosis.primary == "undetermined"
    assert r.idle_by_cause_us.get(C.STARTUP, 0) == 0
    assert r.idle_by_cause_us[C.DEPENDENCY] == pytest.approx(wait, abs=0.01)
    host_part = [g for g in r.gaps if g.cause != C.DEPENDENCY and g.duration_us == pytest.approx(35)]
    assert len(host_part) == 1  # the gap's part before K was queued (1010..1045 us) stays the host's
    assert "outside the capture" in a.diagnosis.headline and len(a.diagnosis.headline) <= 200
    dep = next(f for f in a.diagnosis.findings if f.cause == C.DEPENDENCY)
    assert dep.figures["unseen_wait_us"] == pytest.approx(wait, abs=0.01)
    assert any("1 stream wait on an event, and no event recorded in the capture" in e for e in dep.evidence)
    assert dep.advice[0].startswith("Capture the work the GPU waits for")
    # the event recorded in the capture: the same wait, without the claim that no event was recorded
    b = ta.analyze(_queued_wait_trace(wait, record_event=True).write(tmp_path / "recorded.json"))
    assert b.diagnosis.primary == "undetermined"
    dep = next(f for f in b.diagnosis.findings if f.cause == C.DEPENDENCY)
    assert not any("no event recorded" in e for e in dep.evidence)


def test_work_queued_shortly_before_it_runs_leaves_the_gap_the_hosts(tmp_path):
    """K starts 500 us after its launch returned (under QUEUED_WAIT_MIN_NS): the gap stays whole and the host's,
    and no device-side wait is counted."""
    a = ta.analyze(_queued_wait_trace(500).write(tmp_path / "short.json"))
    r = a.ranks[0].diagnosis
    assert r.idle_by_cause_us.get(C.DEPENDENCY, 0) < 1
    assert any(g.duration_us == pytest.approx(535) and g.cause != C.DEPENDENCY for g in r.gaps)


def test_removing_a_named_annotation_saves_its_idle_time_on_the_critical_path(tmp_path):
    """Steps of varying compute, each with a `postprocess` record_function range of L_i between kernel A's end
    and kernel B's launch (the GPU idle, nothing queued): removing it would shorten the median step by
    exactly median(step) - median(step - L), its time with the GPU idle per step."""
    t = KinetoTrace()
    s = 10_000.0
    lengths = [400, 900, 250, 700, 300, 650, 500]
    computes = [800, 300, 950, 400, 700, 500, 600]
    durations = []
    for i, (length, a) in enumerate(zip(lengths, computes, strict=True)):
        dur = 10 + a + length + 5 + 200 + 10
        t.step(i, s, dur)
        t.launched(s + 2, 5, s + 10, a)  # A
        t.host("postprocess", s + 10 + a, length, cat="user_annotation")
        t.launched(s + 10 + a + length, 5, s + 10 + a + length + 5, 200)  # B, launched when it ends
        durations.append(dur)
        s += dur
    a = ta.analyze(t.write(tmp_path / "post.json"))
    d = a.diagnosis
    dur, x = np.array(durations, dtype=float), np.array(lengths, dtype=float)
    expected = float(np.median(dur) - np.median(dur - x))
    host = next(f for f in d.findings if f.cause == C.HOST_COMPUTE)
    assert host.figures["top_op_saving_us"] == pytest.approx(expected, abs=0.01)
    assert host.figures["top_op_step_us"] == pytest.approx(float(np.median(dur)), abs=0.01)
    line = next(e for e in host.evidence if e.startswith("removing postprocess's time"))
    assert re.search(r"shorten the median step \(over 7 steady steps\) by ≈ \d", line) and "basis:" in line
    assert "limits:" in line


def test_removing_a_user_python_frame_saves_its_self_time_in_host_idle(tmp_path):
    """As above, with the host work a user Python frame (with_stack=True) instead of a range: its self time with
    the GPU idle per step gives the saving, median(step) - median(step - L)."""
    t = KinetoTrace()
    s = 10_000.0
    lengths = [400, 900, 250, 700, 300]
    computes = [800, 300, 950, 400, 700]
    durations = []
    for i, (length, a) in enumerate(zip(lengths, computes, strict=True)):
        dur = 10 + a + length + 5 + 200 + 10
        t.step(i, s, dur)
        t.launched(s + 2, 5, s + 10, a)
        t.host("train.py(12): postprocess", s + 10 + a, length, cat="python_function")
        t.launched(s + 10 + a + length, 5, s + 10 + a + length + 5, 200)
        durations.append(dur)
        s += dur
    a = ta.analyze(t.write(tmp_path / "frames.json"))
    dur, x = np.array(durations, dtype=float), np.array(lengths, dtype=float)
    host = next(f for f in a.diagnosis.findings if f.cause == C.HOST_COMPUTE)
    assert host.figures["frame_saving_us"] == pytest.approx(float(np.median(dur) - np.median(dur - x)), abs=0.01)
    assert any(e.startswith("removing train.py:12 postprocess's time with the GPU idle would shorten the median")
               for e in host.evidence)
