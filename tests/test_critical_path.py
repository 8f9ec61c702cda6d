"""The critical path and its replay (analyses/critical_path.py) on built Kineto traces with known answers:
two streams, a host chain, a blocking call, an event record -> stream wait, a CUDA-graph launch, two ranks
and a collective; and on HTA's own critical-path test traces, beside what HTA's analysis would say."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from kineto_builder import KinetoTrace

from traceanalyzer import timeline as T
from traceanalyzer.analyses import critical_path as CP
from traceanalyzer.formats import ReadOptions, read_file

MS = 1_000_000  # ns
US = 1_000


def timeline(tmp_path: Path, *traces: KinetoTrace) -> T.Timeline:
    parts = [read_file(tr.write(tmp_path / f"rank{i}.json"), ReadOptions()) for i, tr in enumerate(traces)]
    return T.Timeline.concat(parts) if len(parts) > 1 else parts[0]


def saving(tl: T.Timeline, *rules: CP.WhatIfRule, rank: int = 0, peers: tuple[int, ...] = ()) -> int:
    w = CP.what_if(tl, list(rules), rank=rank, peers=peers)
    return w.base_median_ns - w.projected_median_ns


def adds_up(cp: CP.CriticalPath) -> None:
    for step in cp.steps:
        total = sum(s.dur_ns for s in step.segments)
        assert abs(total - step.dur_ns) <= 0.01 * step.dur_ns, (total, step.dur_ns)
        assert sum(ns for _, ns in step.by_kind_ns) == total
        assert abs(sum(step.shares().values()) - 1.0) < 1e-9


def two_streams() -> KinetoTrace:
    """A 10 ms GEMM on stream 7 and a 4 ms elementwise kernel on stream 8, then a device synchronize and
    9.8 ms of host work to the step's end (20 ms)."""
    tr = KinetoTrace()
    tr.step(1, 0, 20_000, gpu_copy=False)
    tr.launched(100, 10, 120, 10_000, "gemm", stream=7)
    tr.launched(200, 10, 220, 4_000, "elementwise", stream=8)
    tr.runtime("cudaDeviceSynchronize", 300, 10_120 - 300 + 5)
    tr.host("post", 10_200, 9_800)
    return tr


def test_two_streams_the_kernel_beside_the_longer_one_saves_nothing(tmp_path: Path) -> None:
    tl = timeline(tmp_path, two_streams())
    assert saving(tl, CP.WhatIfRule.remove("elementwise")) == 0
    # removing the GEMM leaves the elementwise kernel: saves the difference (10.12 - 4.22 ms), not 10 ms
    assert saving(tl, CP.WhatIfRule.remove("gemm")) == 5_900 * US
    assert saving(tl, CP.WhatIfRule.parse_scale("gemm=0.5")) == 5_000 * US
    cp = CP.critical_path(tl, 0)
    adds_up(cp)
    (step,) = cp.steps
    assert (step.step, step.dur_ns) == (1, 20 * MS)
    assert [(s.kind, s.name, s.dur_ns) for s in step.segments] == [
        (CP.IDLE, "", 100 * US), (CP.LAUNCH, "cudaLaunchKernel", 20 * US), (CP.KERNEL, "gemm", 10 * MS),
        (CP.SYNC_WAIT, "cudaDeviceSynchronize", 5 * US), (CP.IDLE, "", 75 * US), (CP.HOST_OP, "post", 9_800 * US)]
    assert "elementwise" not in {s.name for s in step.segments}
    assert cp.assumptions == ()


def preprocess_then_kernel() -> KinetoTrace:
    """5 ms of host preprocessing, then a 3 ms kernel the host waits for (cudaStreamSynchronize)."""
    tr = KinetoTrace()
    tr.step(3, 0, 8_100, gpu_copy=False)
    tr.host("preprocess", 0, 5_000, cat="user_annotation")
    tr.host("aten::mul", 5_000, 30)
    tr.launched(5_010, 10, 5_030, 3_000, "mul_kernel")
    tr.runtime("cudaStreamSynchronize", 5_040, 8_030 - 5_040 + 10)
    return tr


def test_halving_host_preprocessing_before_a_kernel_saves_half_of_it(tmp_path: Path) -> None:
    tl = timeline(tmp_path, preprocess_then_kernel())
    assert saving(tl, CP.WhatIfRule.parse_scale("preprocess=0.5")) == 2_500 * US
    assert saving(tl, CP.WhatIfRule.parse_scale("prep*=0.5"), CP.WhatIfRule.parse_scale("preprocess=0.9")) == 2_500 * US
    cp = CP.critical_path(tl, 0)
    adds_up(cp)
    kinds = dict(cp.steps[0].by_kind_ns)
    assert kinds[CP.HOST_OP] == 5_000 * US + 10 * US  # preprocess, and aten::mul up to its launch
    assert kinds[CP.KERNEL] == 3_000 * US
    # a stream synchronize with no cuda_sync row naming its stream: the assumption is said
    assert dict(cp.assumptions) == {CP.A_STREAM_SYNC: 1}


def test_removing_the_kernel_a_sync_waits_on_saves_its_time(tmp_path: Path) -> None:
    tl = timeline(tmp_path, preprocess_then_kernel())
    # all of it but the 10 us it ran before the host reached the synchronize
    assert saving(tl, CP.WhatIfRule.remove("mul_kernel")) == 2_990 * US
    # removing the operator removes its host time (30 us, its launch call's included) and the work it launched;
    # the launch latency (20 us) stays before the synchronize's release (10 us after the kernel's end)
    assert saving(tl, CP.WhatIfRule.remove("aten::mul")) == 8_040 * US - 5_030 * US


def test_event_record_then_stream_wait_orders_two_streams(tmp_path: Path) -> None:
    """Kernel A (5 ms, stream 7), cudaEventRecord, cudaStreamWaitEvent, kernel B (2 ms, stream 8) starts when A
    ends; then a device synchronize. Without the edge B's start would look like a 5 ms launch latency."""
    tr = KinetoTrace()
    tr.step(1, 0, 7_200, gpu_copy=False)
    tr.launched(10, 10, 30, 5_000, "producer", stream=7)
    tr.runtime("cudaEventRecord", 25, 5)
    tr.runtime("cudaStreamWaitEvent", 35, 5)
    tr.launched(45, 10, 5_030, 2_000, "consumer", stream=8)
    tr.runtime("cudaDeviceSynchronize", 60, 7_030 - 60 + 10)
    tl = timeline(tmp_path, tr)
    cp = CP.critical_path(tl, 0)
    adds_up(cp)
    names = [s.name for s in cp.steps[0].segments]
    assert names.index("producer") < names.index("consumer")
    # B then starts at its launch (45 us) + the rank's launch latency (20 us) instead of at 5.03 ms
    assert saving(tl, CP.WhatIfRule.remove("producer")) == 5_030 * US - 65 * US
    assert saving(tl, CP.WhatIfRule.remove("consumer")) == 2_000 * US
    assert CP.A_EVENT_STREAM in dict(cp.assumptions) and CP.A_WAIT_STREAM in dict(cp.assumptions)


def test_cuda_graph_launch_replays_its_kernels(tmp_path: Path) -> None:
    """One cudaGraphLaunch whose three kernels share its correlation id, back to back on one stream."""
    tr = KinetoTrace()
    tr.step(1, 0, 3_200, gpu_copy=False)
    for k, (start, dur) in enumerate(((20, 1_000), (1_020, 500), (1_520, 1_500))):
        tr.kernel(start, dur, f"graph_kernel_{k}", correlation=99, **{"graph id": 5})
    tr.runtime("cudaGraphLaunch", 10, 15, 99)
    tr.runtime("cudaDeviceSynchronize", 30, 3_020 - 30 + 10)
    tl = timeline(tmp_path, tr)
    cp = CP.critical_path(tl, 0)
    adds_up(cp)
    kernels = [s.name for s in cp.steps[0].segments if s.kind == CP.KERNEL]
    assert kernels == ["graph_kernel_0", "graph_kernel_1", "graph_kernel_2"]
    assert saving(tl, CP.WhatIfRule.remove("graph_kernel_1")) == 500 * US
    assert saving(tl, CP.WhatIfRule.parse_scale("graph_kernel_*=0.5")) == 1_500 * US
    assert cp.assumptions == ()


def two_ranks() -> tuple[KinetoTrace, KinetoTrace]:
    """Rank 0 launches its all-reduce after 1 ms of preprocessing, rank 1 after 6 ms; the all-reduce ends on both
    2 ms after rank 1's start (8.02 ms); each synchronizes, then works on the host to 8.1 ms."""
    out = []
    for rank, pre in ((0, 1_000), (1, 6_000)):
        tr = KinetoTrace(rank=rank)
        tr.step(1, 0, 8_100, gpu_copy=False)
        tr.host("preprocess" if rank == 0 else "preprocess_late", 0, pre, cat="user_annotation")
        tr.launched(pre, 10, pre + 20, 8_020 - (pre + 20), "ncclDevKernel_AllReduce_Sum_f32_RING_LL")
        tr.runtime("cudaDeviceSynchronize", pre + 15, 8_020 - (pre + 15) + 5)
        tr.host("post", 8_025, 75)
        out.append(tr)
    return out[0], out[1]


def test_two_ranks_the_early_rank_waits_for_the_late_one(tmp_path: Path) -> None:
    tl = timeline(tmp_path, *two_ranks())
    alone = CP.critical_path(tl, 0)
    joint = CP.critical_path(tl, 0, peers=(1,))
    adds_up(joint)
    assert joint.steps[0].dur_ns == 8_100 * US
    peer = {s.name: s.dur_ns for s in joint.steps[0].segments if s.kind == CP.PEER_WAIT}
    # rank 0's path runs through rank 1's preprocessing and launch: 6.02 ms of it is waiting for rank 1
    assert peer == {"rank 1": 6_020 * US}
    assert dict(joint.steps[0].by_kind_ns)[CP.KERNEL] == 2_000 * US  # the transfer itself
    # alone, the all-reduce is all kernel time, from its start at 1.02 ms
    assert dict(alone.steps[0].by_kind_ns)[CP.KERNEL] == 7_000 * US
    # rank 1's preprocessing halved: rank 0's step shortens by 3 ms; rank 0's own preprocessing saves nothing
    w = CP.what_if(tl, [CP.WhatIfRule.parse_scale("preprocess_late=0.5")], rank=0, peers=(1,))
    assert w.base_ns == (8_100 * US,) and w.projected_ns == (5_100 * US,)
    assert saving(tl, CP.WhatIfRule.remove("preprocess"), rank=0, peers=(1,)) == 0
    assert saving(tl, CP.WhatIfRule.remove("preprocess"), rank=0) == 1_000 * US  # alone, peers held at their times
    assert CP.A_COLLECTIVE_ORDER in dict(joint.assumptions)


def test_the_replay_of_the_observed_durations_gives_the_observed_steps(tmp_path: Path) -> None:
    tl = timeline(tmp_path, two_streams())
    w = CP.what_if(tl, [CP.WhatIfRule.remove("nothing matches this")])
    assert w.base_ns == w.projected_ns == (20 * MS,)
    assert w.matched == (("nothing matches this", 0),)


def test_a_trace_without_steps_has_one_path_over_its_window(tmp_path: Path) -> None:
    tr = KinetoTrace()
    tr.launched(100, 10, 120, 1_000, "k")
    tr.runtime("cudaDeviceSynchronize", 130, 1_000)
    cp = CP.critical_path(timeline(tmp_path, tr), 0)
    (step,) = cp.steps
    assert step.step is None and step.dur_ns > 0
    adds_up(cp)


@pytest.mark.parametrize("text, message", [
    ("gemm", "expected GLOB=FACTOR"), ("gemm=fast", "not a number"), ("gemm=-1", ">= 0"),
    ("=0.5", "expected GLOB=FACTOR"), ("gemm=nan", ">= 0"), ("[abc=0.5", None)])
def test_bad_rules_are_refused_by_name(text: str, message: str | None) -> None:
    if message is None:  # fnmatch treats an unclosed '[' literally: a valid glob
        assert CP.WhatIfRule.parse_scale(text).glob == "[abc"
        return
    with pytest.raises(CP.RuleError, match=message):
        CP.WhatIfRule.parse_scale(text)
    with pytest.raises(CP.RuleError, match="empty glob"):
        CP.WhatIfRule.remove("  ")


def test_the_median_step_alone_is_the_same_path_as_among_all_steps() -> None:
    """The report builds only the median step's graph (from that step's rows): the same path as the full build."""
    from conftest import ROOT

    tl = read_file(ROOT / "sample_traces" / "sync_bound.json", ReadOptions())
    full = CP.critical_path(tl, 0)
    alone = CP.critical_path(tl, 0, median_only=True)
    assert len(full.steps) == 4 and len(alone.steps) == 1
    assert alone.steps[0] == full.median_step()
    adds_up(alone)


def test_hta_event_sync_trace_the_event_synchronize_waits_for_the_spin_kernel(corpus: Path) -> None:
    """HTA's own critical-path test trace (cuda_event_sync): the host launches a spin kernel, records an event
    and waits on it with cudaEventSynchronize. The cuda_sync row names the record it waits on
    (`wait_on_cuda_event_record_corr_id`, Timeline `wait_corr`) and its stream (`wait_on_stream`): the edge is
    read, no assumption stands in (HTA links the two by the same argument)."""
    tl = read_file(corpus / "hta_cp_event_sync" / "event_sync_trace.json.gz", ReadOptions())
    cp = CP.critical_path(tl, 0)
    adds_up(cp)
    segs = [(s.kind, s.name) for s in cp.steps[0].segments]
    spin = segs.index((CP.KERNEL, "at::cuda::(anonymous namespace)::spin_kernel(long)"))
    assert segs[spin + 1] == (CP.SYNC_WAIT, "cudaEventSynchronize")
    assert dict(cp.steps[0].by_kind_ns)[CP.KERNEL] == 36 * US
    assert CP.A_EVENT_OF_WAIT not in dict(cp.assumptions) and CP.A_EVENT_STREAM not in dict(cp.assumptions)
    ev = tl.events
    assert sorted(ev["wait_corr"][ev["wait_corr"] >= 0].tolist()) == [1533, 1533]
    assert set(ev["wait_stream"][ev["wait_corr"] >= 0].tolist()) == {7}
    # removing the spin kernel saves its time on the path less the host's own calls between its launch and
    # the synchronize, which the kernel overlapped (10 us): 26 us
    assert saving(tl, CP.WhatIfRule.remove("*spin_kernel*")) == 26 * US


def test_hta_simple_add_trace_is_host_bound(corpus: Path) -> None:
    """HTA's simple_add benchmark: a CUDA context's start-up (allocations, a 4 s first launch) on one thread.
    HTA's analysis of it is CPU-bound too; here the path is host work and launch calls, the GPU work beside."""
    tl = read_file(corpus / "hta_cp_simple_add" / "benchmark_result_493459_1694039959_trace.json.gz", ReadOptions())
    cp = CP.critical_path(tl, 0)
    adds_up(cp)
    kinds = dict(cp.steps[0].by_kind_ns)
    assert (kinds[CP.HOST_OP] + kinds[CP.LAUNCH]) / cp.steps[0].dur_ns > 0.99


def test_a_step_s_last_stretch_without_host_events_waits_for_its_gpu_work(tmp_path: Path) -> None:
    """The host launches a 5 ms kernel and records nothing more until the step ends (6 ms): an untraced wait.
    The path runs through the kernel; the stretch after it (0.97 ms) stays as idle."""
    tr = KinetoTrace()
    tr.step(1, 0, 6_000, gpu_copy=False)
    tr.launched(10, 10, 30, 5_000, "k")
    tl = timeline(tmp_path, tr)
    cp = CP.critical_path(tl, 0)
    adds_up(cp)
    assert [(s.kind, s.dur_ns) for s in cp.steps[0].segments] == [
        (CP.IDLE, 10 * US), (CP.LAUNCH, 20 * US), (CP.KERNEL, 5_000 * US), (CP.IDLE, 970 * US)]
    assert dict(cp.assumptions) == {CP.A_TAIL: 1}
    assert saving(tl, CP.WhatIfRule.remove("k")) == 5_000 * US


def test_work_that_starts_as_another_stream_s_work_ends_waited_for_it(tmp_path: Path) -> None:
    """Kernel B is launched at once but starts only when kernel A on another stream ends (an event the trace does
    not record): the inferred wait puts A on the path, and removing A lets B start after its launch."""
    tr = KinetoTrace()
    tr.step(1, 0, 6_100, gpu_copy=False)
    tr.launched(10, 10, 30, 5_000, "allreduce", stream=20)
    tr.launched(20, 5, 5_030, 1_000, "compute", stream=7)
    tr.runtime("cudaDeviceSynchronize", 30, 6_030 - 30 + 5)
    tl = timeline(tmp_path, tr)
    cp = CP.critical_path(tl, 0)
    adds_up(cp)
    assert [s.name for s in cp.steps[0].segments if s.kind == CP.KERNEL] == ["allreduce", "compute"]
    assert dict(cp.assumptions) == {CP.A_IMPLICIT_WAIT: 1}
    # B then starts at its launch (20 us) + the rank's launch latency (20 us): ends at 1.04 ms, not 6.03 ms
    assert saving(tl, CP.WhatIfRule.remove("allreduce")) == 6_030 * US - 1_040 * US


def test_removing_host_time_in_a_stretch_saves_it_only_where_the_path_holds_it(tmp_path: Path) -> None:
    """Removals (what a cause's replayed saving takes out): the host time inside an interval goes from the
    pieces holding it; the step shortens by it when the path runs through it, by nothing when it runs beside."""
    tl = timeline(tmp_path, preprocess_then_kernel())
    t0 = tl.rank_events(0)["ts_ns"].min()  # the step's start
    ns = [t0 + 1_000 * US, t0 + 3_000 * US]  # 2 ms inside the 5 ms of preprocessing, on the path
    beside = [t0 + 5_100 * US, t0 + 7_000 * US]  # inside the synchronize, which waits for the kernel anyway
    removals = {"on_path": CP.Removal(np.array([ns[0]]), np.array([ns[1]])),
                "beside": CP.Removal(np.array([beside[0]]), np.array([beside[1]])),
                "copies": CP.Removal(np.zeros(0, np.int64), np.zeros(0, np.int64), copies=True)}
    cp = CP.critical_path(tl, 0, median_only=True, removals=removals)
    assert dict(cp.savings) == {"on_path": 2_000 * US, "beside": 0, "copies": 0}


def test_an_event_synchronize_waits_on_the_record_its_cuda_sync_row_names(tmp_path: Path) -> None:
    """Two records, on two streams: the synchronize waits on the first (its cuda_sync row says so), not on the
    thread's last record (what stood in before the row's args were read); removing the kernel on the other
    stream saves nothing."""
    tr = KinetoTrace()
    tr.step(1, 0, 2_100, gpu_copy=False)
    tr.launched(10, 5, 20, 2_000, "long_kernel", stream=7)  # recorded by the event the sync waits on
    tr.runtime("cudaEventRecord", 20, 3, correlation=900)
    tr.launched(30, 5, 40, 100, "short_kernel", stream=8)
    tr.runtime("cudaEventRecord", 40, 3, correlation=901)
    tr.runtime("cudaEventSynchronize", 50, 2_030 - 50, correlation=902)
    tr.events.append({"ph": "X", "cat": "cuda_sync", "name": "Event Sync", "pid": 0, "tid": -1, "ts": 2_021,
                      "dur": 2, "args": {"cuda_sync_kind": "Event Sync", "wait_on_stream": 7,
                                         "wait_on_cuda_event_record_corr_id": 900, "stream": -1,
                                         "correlation": 902, "device": 0}})
    tl = timeline(tmp_path, tr)
    cp = CP.critical_path(tl, 0)
    adds_up(cp)
    assert CP.A_EVENT_OF_WAIT not in dict(cp.assumptions)
    segs = [(s.kind, s.name) for s in cp.steps[0].segments]
    assert (CP.KERNEL, "long_kernel") in segs and (CP.KERNEL, "short_kernel") not in segs
    assert saving(tl, CP.WhatIfRule.remove("short_kernel")) == 0
    assert saving(tl, CP.WhatIfRule.remove("long_kernel")) > 1_500 * US
