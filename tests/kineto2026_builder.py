"""Builds small torch.profiler traces in the 2026 Kineto layout (libkineto/src/output_json.cpp as of
2026), times in us: the metadata with "host_name" and no WARNING/ERROR arrays, kernels and copies with
"graph id" / "graph node id" (0 outside graphs), "Stream Sync" events on the virtual thread
stream + 1000000 named "stream N (sync)", hardware counters ("ph": "C") on the string pid
"GPU N Counters" with their value under the args key "", NCCL kernels with "Seq", and the closing
"Record Window End" instant. Each scenario function returns the trace and the figures it was built with.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

PID, TID = 5151, 5152
STREAM = 7
SYNC_TID_OFFSET = 1_000_000


class Kineto2026:
    def __init__(self, rank: int | None = None, world: int = 2, host: str | None = "node-a",
                 base_ns: int = 1_780_000_000_000_000_000) -> None:
        self.header: dict[str, Any] = {
            "schemaVersion": 1,
            "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85031714816}],
            "cuda_runtime_version": 12080, "with_flops": 0, "cupti_version": 26, "cuda_driver_version": 12080,
            "profile_memory": 0, "with_stack": 0, "record_shapes": 0, "trace_id": "0F6E3D2A1B",
        }
        if host is not None:
            self.header["host_name"] = host
        if rank is not None:
            self.header["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": world,
                                              "pg_count": 1, "nccl_version": "2.27.5"}
        self.header["displayTimeUnit"] = "ms"
        self.header["baseTimeNanoseconds"] = base_ns
        self.events: list[dict[str, Any]] = [
            {"ph": "M", "name": "process_name", "ts": 0.0, "pid": PID, "tid": 0, "args": {"name": "python"}},
            {"ph": "M", "name": "process_name", "ts": 0.0, "pid": 0, "tid": 0, "args": {"name": "python"}},
            {"ph": "M", "name": "process_labels", "ts": 0.0, "pid": 0, "tid": 0, "args": {"labels": "GPU 0"}},
            {"ph": "M", "name": "thread_name", "ts": 0.0, "pid": 0, "tid": STREAM, "args": {"name": f"stream {STREAM} "}},
        ]
        self._corr = 0
        self._sync_named: set[int] = set()
        self.end = 0.0

    def _note(self, ts: float, dur: float = 0.0) -> None:
        self.end = max(self.end, ts + dur)

    def host(self, name: str, ts: float, dur: float, cat: str = "cpu_op") -> Kineto2026:
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": PID, "tid": TID, "ts": ts, "dur": dur,
                            "args": {"External id": len(self.events)}})
        self._note(ts, dur)
        return self

    def step(self, n: int, ts: float, dur: float) -> Kineto2026:
        return self.host(f"ProfilerStep#{n}", ts, dur, cat="user_annotation")

    def runtime(self, name: str, ts: float, dur: float, correlation: int | None = None) -> int:
        """A CUDA runtime call on the host thread; returns its correlation id (a new one unless given)."""
        if correlation is None:
            self._corr += 1
            correlation = self._corr
        self.events.append({"ph": "X", "cat": "cuda_runtime", "name": name, "pid": PID, "tid": TID, "ts": ts,
                            "dur": dur, "args": {"cbid": 211, "correlation": correlation}})
        self._note(ts, dur)
        return correlation

    def kernel(self, ts: float, dur: float, correlation: int, name: str = "sm90_gemm_kernel", graph: int = 0,
               node: int = 0, cat: str = "kernel", **extra: Any) -> Kineto2026:
        args = {"queued": 0, "device": 0, "context": 1, "stream": STREAM, "correlation": correlation,
                "registers per thread": 32, "shared memory": 0, "blocks per SM": 1.0, "warps per SM": 4.0,
                "grid": [132, 1, 1], "block": [128, 1, 1], "est. achieved occupancy %": 25,
                "graph id": graph, "graph node id": node, **extra}
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": STREAM, "ts": ts, "dur": dur,
                            "args": args})
        self._note(ts, dur)
        return self

    def stream_sync(self, ts: float, dur: float, correlation: int) -> Kineto2026:
        """A "Stream Sync" activity on its virtual thread (with its thread_name metadata, once)."""
        tid = STREAM + SYNC_TID_OFFSET
        if tid not in self._sync_named:
            self._sync_named.add(tid)
            self.events.append({"name": "thread_name", "ph": "M", "ts": ts, "pid": 0, "tid": tid,
                                "args": {"name": f"stream {STREAM} (sync)"}})
            self.events.append({"name": "thread_sort_index", "ph": "M", "ts": ts, "pid": 0, "tid": tid,
                                "args": {"sort_index": STREAM}})
        self.events.append({"ph": "X", "cat": "cuda_sync", "name": "Stream Sync", "pid": 0, "tid": tid, "ts": ts,
                            "dur": dur, "args": {"cuda_sync_kind": "Stream Sync", "stream": STREAM,
                                                 "correlation": correlation, "device": 0, "context": 1}})
        self._note(ts, dur)
        return self

    def counter(self, ts: float, metric: str, value: float, device: int = 0) -> Kineto2026:
        self.events.append({"ph": "C", "cat": "hardware_counters", "name": metric, "pid": f"GPU {device} Counters",
                            "tid": 0, "ts": ts, "args": {"": value}})
        return self

    def nccl(self, ts: float, dur: float, seq: int, launch_ts: float, nelems: int = 1 << 20,
             ranks: str = "[0, 1]", with_seq: bool = True) -> Kineto2026:
        corr = self.runtime("cudaLaunchKernel", launch_ts, 5)
        return self.kernel(ts, dur, corr, name="ncclDevKernel_AllReduce_Sum_f32_RING_LL", **{
            "Collective name": "allreduce", "In msg nelems": nelems, "Out msg nelems": nelems, "Group size": 2,
            "dtype": "Float", "Process Group Name": "0", "Process Group Description": "default_pg",
            "Process Group Ranks": ranks, **({"Seq": seq} if with_seq else {})})

    def document(self) -> dict[str, Any]:
        span = {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", "tid": "PyTorch Profiler",
                "ts": 0.0, "dur": self.end, "args": {"Op count": 0}}
        window_end = {"ph": "i", "s": "g", "name": "Record Window End", "pid": "", "tid": "", "ts": self.end + 1}
        return {**self.header, "traceEvents": [*self.events, span, window_end], "traceName": "trace.pt.trace.json"}

    def write(self, path: Path) -> Path:
        data = json.dumps(self.document()).encode()
        path.write_bytes(gzip.compress(data, mtime=0) if path.name.endswith(".gz") else data)
        return path


# --- scenarios with known answers ---------------------------------------------------------------------------
GRAPH_ID = 3
DECODE_KERNELS = 200
DECODE_KERNEL_US = 20.0
GRAPH_GAP_US = 0.5  # GPU-side gap between nodes of a graph
GRAPH_STEP_US = 4300.0  # a decode step: one cudaGraphLaunch, then 200 x 20.5 us of graph work
EAGER_LAUNCH_US = 40.0  # one cudaLaunchKernel (with the Python and dispatcher around it) per kernel


def decode_loop(graphs: bool, steps: int = 12, capture: bool = True) -> Kineto2026:
    """A decode loop of `steps` steps, each 200 kernels of 20 us. `graphs`: step 0 captures the graph
    (200 launches with no GPU work, then cudaGraphInstantiate) and every later step replays it with one
    cudaGraphLaunch (GPU busy 4000 / 4300 us = 93%); else the eager twin: 200 cudaLaunchKernel of
    40 us each, the GPU idle 20 us between kernels (busy 50%)."""
    t = Kineto2026()
    t.end = 0.0
    ts = 100.0
    first = 0
    if graphs and capture:
        t.step(0, ts, 3000.0)
        t.runtime("cudaStreamBeginCapture", ts + 10, 5)
        for i in range(DECODE_KERNELS):
            t.runtime("cudaLaunchKernel", ts + 20 + i * 10, 8)
        t.runtime("cudaStreamEndCapture", ts + 2050, 20)
        t.runtime("cudaGraphInstantiateWithFlags", ts + 2100, 800)
        ts += 3000.0
        first = 1
    for n in range(first, steps):
        if graphs:
            t.step(n, ts, GRAPH_STEP_US)
            corr = t.runtime("cudaGraphLaunch", ts + 50, 15)
            k = ts + 100
            for i in range(DECODE_KERNELS):
                t.kernel(k, DECODE_KERNEL_US, corr, name=f"decode_kernel_{i % 8}", graph=GRAPH_ID, node=i + 1)
                k += DECODE_KERNEL_US + GRAPH_GAP_US
            ts += GRAPH_STEP_US
        else:
            dur = DECODE_KERNELS * EAGER_LAUNCH_US + 100
            t.step(n, ts, dur)
            for i in range(DECODE_KERNELS):
                launch = ts + 50 + i * EAGER_LAUNCH_US
                corr = t.runtime("cudaLaunchKernel", launch, EAGER_LAUNCH_US - 2)
                t.kernel(launch + 15, DECODE_KERNEL_US, corr, name=f"decode_kernel_{i % 8}")
            ts += dur
    return t


SYNC_STEP_US = 2000.0
SYNC_WAIT_US = 600.0  # the GPU idle after the kernels, while the host finishes the blocked sync and reads back


def sync_loop(steps: int = 8) -> Kineto2026:
    """Each step: 10 kernels of 100 us launched quickly, then cudaStreamSynchronize (host blocked until
    the GPU drains, its "Stream Sync" on the virtual thread of stream 7), then the GPU idle for
    SYNC_WAIT_US + the rest of the step while the host is held by the sync: a sync-bound loop."""
    t = Kineto2026()
    ts = 100.0
    for n in range(steps):
        t.step(n, ts, SYNC_STEP_US)
        k = ts + 60
        for i in range(10):
            corr = t.runtime("cudaLaunchKernel", ts + 10 + i * 4, 3)
            t.kernel(k, 100.0, corr, name="matmul_kernel")
            k += 100.0
        # the host blocks in the sync from +60 us until the GPU is done (+1060) and SYNC_WAIT_US after
        corr = t.runtime("cudaStreamSynchronize", ts + 60, 1000 + SYNC_WAIT_US)
        t.stream_sync(ts + 60, 1000 + SYNC_WAIT_US, corr)
        t.host("aten::item", ts + 1060 + SYNC_WAIT_US, 20)
        ts += SYNC_STEP_US
    return t


COUNTER_METRICS = ("sm__throughput.avg.pct_of_peak_sustained_elapsed", "dram__bytes_read.sum.per_second")


def counters_trace() -> Kineto2026:
    """Kernels on cuda:0 and 10 PM samples of two metrics on "GPU 0 Counters": values 10, 20, ... 100
    and 1e9, 2e9, ... 1e10 (means 55 and 5.5e9)."""
    t = Kineto2026()
    ts = 100.0
    for n in range(4):
        t.step(n, ts, 1000.0)
        for i in range(8):
            corr = t.runtime("cudaLaunchKernel", ts + 5 + i * 3, 2)
            t.kernel(ts + 30 + i * 110, 100.0, corr)
        ts += 1000.0
    for i in range(10):
        t.counter(100.0 + i * 400, COUNTER_METRICS[0], 10.0 * (i + 1))
        t.counter(100.0 + i * 400, COUNTER_METRICS[1], 1e9 * (i + 1))
    return t


NCCL_LATE_US = 1200.0  # rank 1 reaches every all-reduce this much after rank 0
NCCL_US = 400.0
NCCL_STEP_US = 6000.0


def nccl_pair(steps: int = 6, first_steps: tuple[int, int] = (10, 20),
              with_seq: bool = True) -> tuple[Kineto2026, Kineto2026]:
    """Two ranks on two hosts (each its own clock origin, epoch), two all-reduces per step with NCCL
    sequence numbers 100 + 2 * step + i. Rank 1 computes NCCL_LATE_US longer before each, so rank 0 waits
    NCCL_LATE_US in every collective. The two captures number their steps differently
    (first_steps: ProfilerStep#10.. on rank 0, #20.. on rank 1): only the sequence numbers match them."""
    out = []
    for rank in (0, 1):
        t = Kineto2026(rank=rank, host=f"node-{rank}", base_ns=1_780_000_000_000_000_000 + rank * 37_000)
        ts = 100.0
        for s in range(steps):
            t.step(first_steps[rank] + s, ts, NCCL_STEP_US)
            late = NCCL_LATE_US if rank == 1 else 0.0
            for i in range(2):
                compute = ts + 50 + i * 2500
                corr = t.runtime("cudaLaunchKernel", compute, 5)
                t.kernel(compute + 10, 500.0 + late, corr, name="gemm_kernel")
                start = compute + 10 + 500.0 + NCCL_LATE_US  # everyone leaves once rank 1 arrived
                arrive = compute + 10 + 500.0 + late
                t.nccl(arrive, start + NCCL_US - arrive, 100 + 2 * s + i, compute + 20, with_seq=with_seq)
            ts += NCCL_STEP_US
        out.append(t)
    return out[0], out[1]
