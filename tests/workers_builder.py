"""Chrome traces of a whole job in one file, as production training frameworks write them: pid = the
data-parallel worker, tid = pipeline stage x lane (a compute lane and a communication lane), thread
names such as "PP rank 0, TP rank 0, compute", coarse events only (forward, backward, reduce-scatter,
all-gather, send/recv, optimizer; no GPU kernels), each with its step in args.

`workers_trace(compute_scale)`: one scale per worker multiplies its compute (forward, backward,
optimizer); a worker's collectives start when its own compute ends and end when the slowest worker's
has ended (it waits in them), so a slow worker makes the others wait, as in a real job.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

FORWARD_US = 3_000
BACKWARD_US = 6_000
OPTIMIZER_US = 1_000
COMPUTE_US = FORWARD_US + BACKWARD_US + OPTIMIZER_US  # one worker's compute per step at scale 1
REDUCE_SCATTER_US = 1_000  # transfer time of each collective, after the last worker arrives
ALL_GATHER_US = 1_000
SEND_US = 500
STEPS = 3
START_US = 1_000


def workers_trace(compute_scale: list[float], steps: int = STEPS, process_names: bool = True,
                  thread_names: bool = True) -> dict[str, Any]:
    """The job's trace (see the module text); worker k is pid k, its compute lane tid 1, its comm lane tid 2."""
    events: list[dict[str, Any]] = []
    for pid in range(len(compute_scale)):
        if process_names:
            events.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
                           "args": {"name": f"DP rank {pid}"}})
        if thread_names:
            for tid, lane in ((1, "compute"), (2, "comm")):
                events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
                               "args": {"name": f"PP rank 0, TP rank 0, {lane}"}})
    slowest = max(compute_scale)
    step_us = int(round(slowest * COMPUTE_US)) + REDUCE_SCATTER_US + ALL_GATHER_US + SEND_US + 1_000
    for s in range(steps):
        t0 = START_US + s * step_us
        for pid, scale in enumerate(compute_scale):
            fwd, bwd, opt = (int(round(scale * d)) for d in (FORWARD_US, BACKWARD_US, OPTIMIZER_US))
            last = t0 + int(round(slowest * (FORWARD_US + BACKWARD_US)))  # the slowest worker's backward ends

            def ev(name: str, ts: int, dur: int, tid: int, cat: str, pid: int = pid, step: int = s) -> None:
                events.append({"name": name, "ph": "X", "cat": cat, "pid": pid, "tid": tid, "ts": ts, "dur": dur,
                               "args": {"step": step}})

            ev("forward_compute", t0, fwd, 1, "compute")
            ev("backward_compute", t0 + fwd, bwd, 1, "compute")
            ev("send_forward_recv_backward", t0 + fwd, SEND_US, 2, "comm")
            ev("reduce_scatter", t0 + fwd + bwd, last + REDUCE_SCATTER_US - (t0 + fwd + bwd), 2, "comm")
            ev("all_gather", last + REDUCE_SCATTER_US, ALL_GATHER_US, 2, "comm")
            ev("optimizer", last + REDUCE_SCATTER_US + ALL_GATHER_US, opt, 1, "compute")
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def write_workers_trace(path: Path, compute_scale: list[float], **kw: Any) -> Path:
    path.write_text(json.dumps(workers_trace(compute_scale, **kw)))
    return path


SLOW = [1.0, 1.0, 2.35, 1.0]  # worker 2 computes 2.35x the median
TWIN = [1.0, 1.0, 1.0, 1.0]  # the same job without the slow worker
