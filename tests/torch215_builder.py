"""Builds small traces in the layout of torch 2.15's own Chrome-trace exporter (the Kineto code now lives in
PyTorch; its Python exporter streams the trace and can bake CUDA-graph annotations into it), times in us:

- the envelope flag "cudaGraphInlineAnnotated": true (before traceEvents) when annotations were baked in;
- graphed kernels carry "graph id" and "graph node id" (uint64, here above 2^63), and their annotation's
  fields spliced into args as strings;
- with graph lanes "all", graphed work moves to the lane its annotation names (else lane 7): its tid and
  args.stream name the lane, args.original_stream the stream it ran on, and the lane's thread_name
  (written after the events) is the annotation's "Process Group Description" when it has one;
- with graph lanes "none", nothing moves: a lane asked for is args.annotated_stream;
- correlation and "Comms Id" are uint64 (here above 2^63).
Each scenario returns the trace and the figures it was built with.
"""

from __future__ import annotations

from typing import Any

from kineto2026_builder import Kineto2026

DEFAULT_LANE = 7  # the exporter's default_stream
COMPUTE_STREAM, COMM_STREAM = 13, 22  # the streams the graph executor really used
COMM_LANE, COMM_PG = 40, "tp_pg"  # the lane a comms wrapper asked for, and its process group
GRAPH_ID = 2**63 + 9
FIRST_CORRELATION = 2**63 + 100
FIRST_NODE = 2**64 - 100
COMMS_ID = 2**64 - 3
STEPS = 4
STEP_US = 1000.0
COMPUTE_KERNELS, COMPUTE_US = 3, 100.0  # per replay, on COMPUTE_STREAM
COMM_KERNELS, COMM_US = 2, 50.0  # per replay, on COMM_STREAM, annotated with their lane and group
COMM_KERNEL = "cross_device_reduce_1stage"  # a custom all-reduce kernel: only its annotation says comms


class Torch215(Kineto2026):
    def __init__(self, lanes: str, **kw: Any) -> None:
        super().__init__(**kw)
        self.lanes = lanes
        self.moved: dict[int, str | None] = {}  # lane -> its name, for thread_name after the events
        self.annotated = False

    def graphed(self, ts: float, dur: float, correlation: int, name: str, stream: int, node: int,
                annotation: dict[str, Any] | None = None, **extra: Any) -> Torch215:
        """A kernel a graph replay ran on `stream`, with `annotation` baked in as the exporter does."""
        args: dict[str, Any] = {"queued": 0, "device": 0, "context": 1, "stream": stream, "correlation": correlation,
                                "registers per thread": 32, "shared memory": 0, "grid": [132, 1, 1],
                                "block": [128, 1, 1], "graph id": GRAPH_ID, "graph node id": node, **extra}
        tid = stream
        if annotation:
            self.annotated = True
            lane = annotation.get("stream")
            args.update({k: str(v) for k, v in annotation.items() if k != "stream"})
            if self.lanes == "all":
                tid = lane if lane is not None else DEFAULT_LANE
                if tid != stream:
                    self.moved[tid] = annotation.get("Process Group Description", self.moved.get(tid))
                    args["stream"] = tid
                    args["original_stream"] = stream
            elif lane is not None:
                args["annotated_stream"] = lane
        self.events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": tid, "ts": ts, "dur": dur,
                            "args": args})
        self._note(ts, dur)
        return self

    def document(self) -> dict[str, Any]:
        doc = super().document()
        if self.annotated:
            events = doc.pop("traceEvents")
            doc["cudaGraphInlineAnnotated"] = True
            doc["traceEvents"] = events
        lanes = [{"ph": "M", "name": "thread_name", "ts": 0.0, "pid": 0, "tid": lane,
                  "args": {"name": name or f"stream {lane} "}} for lane, name in sorted(self.moved.items())]
        doc["traceEvents"][-2:-2] = lanes  # after the events, before the span and the window end
        return doc


def graph_lanes(lanes: str) -> Torch215:
    """STEPS steps, each one cudaGraphLaunch (correlation FIRST_CORRELATION + step) replaying graph GRAPH_ID:
    COMPUTE_KERNELS kernels of COMPUTE_US on COMPUTE_STREAM (annotated with a name only: lane 7 with "all"),
    then COMM_KERNELS custom all-reduce kernels of COMM_US on COMM_STREAM, annotated with lane COMM_LANE and
    process group COMM_PG. The host thread also runs an NCCL all-reduce launch per step whose kernel
    carries a uint64 "Comms Id"."""
    t = Torch215(lanes)
    ts = 100.0
    node = FIRST_NODE
    for n in range(STEPS):
        t.step(n, ts, STEP_US)
        corr = t.runtime("cudaGraphLaunch", ts + 10, 15, correlation=FIRST_CORRELATION + n)
        k = ts + 50
        for i in range(COMPUTE_KERNELS):
            t.graphed(k, COMPUTE_US, corr, f"gemm_{i}", COMPUTE_STREAM, node, {"name": f"layer{i}"})
            k += COMPUTE_US + 1
            node += 1
        for _ in range(COMM_KERNELS):
            t.graphed(k, COMM_US, corr, COMM_KERNEL, COMM_STREAM, node,
                      {"stream": COMM_LANE, "Process Group Description": COMM_PG})
            k += COMM_US + 1
            node += 1
        nccl = t.runtime("cudaLaunchKernel", ts + 30, 5)
        t.kernel(ts + 700, 80.0, nccl, name="ncclDevKernel_AllReduce_Sum_bf16_RING_LL", **{
            "Collective name": "allreduce", "In msg nelems": 1024, "Out msg nelems": 1024, "Group size": 2,
            "dtype": "BFloat16", "Process Group Name": "0", "Process Group Description": "default_pg",
            "Process Group Ranks": "[0, 1]", "Seq": n, "Comms Id": COMMS_ID - n})
        ts += STEP_US
    return t
