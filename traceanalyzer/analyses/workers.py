"""Workers traced without GPU kernels (one file, many workers: `formats.workers`): each worker's compute,
communication and waits over its span, from its host-side events (figures, whole ns).

Per worker (a rank with no GPU work):
* communication: events named as collectives or transfers (send/recv, all-reduce, reduce-scatter,
  all-gather, all-to-all, broadcast, barrier, NCCL/Gloo calls);
* compute: every other event except steps, DataLoader waits, the profiler's own span, and events named
  as waits or bubbles; counted as the union of its lanes (nested or parallel events once);
* exposed communication: communication with no compute beside it; wait: the worker's span (its first
  event's start to its last event's end) with neither running; so compute + comm + wait = span;
* steps: its step markers (ProfilerStep, or the step spans its events' step args give: `formats.workers`),
  else its optimizer events (one per training step), else 1.

`result.workers` makes the per-rank table of them; `run.workers` finds the stragglers (the job stage).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from .. import intervals as iv
from .. import timeline as T
from ..timeline import Timeline

COMM_NAMES = re.compile(r"send|recv|all[-_ ]?reduce|reduce[-_ ]?scatter|all[-_ ]?gather|all[-_ ]?to[-_ ]?all|"
                        r"broadcast|barrier|nccl|gloo|\bp2p\b|collective", re.IGNORECASE)
WAIT_NAMES = re.compile(r"wait|bubble|idle", re.IGNORECASE)
OPTIMIZER_NAMES = re.compile(r"optim", re.IGNORECASE)
NOT_WORK_KINDS = (T.STEP, T.DATALOADER, T.TRACE_SPAN)


@dataclass(frozen=True)
class WorkerFacts:
    """One worker's totals over its span (whole ns) and its step count."""

    compute_ns: int
    comm_ns: int  # exposed: with no compute beside it
    wait_ns: int
    span_ns: int
    steps: int


def worker_facts(tl: Timeline, rank: int) -> WorkerFacts | None:
    """A rank's worker figures (module text); None when it has GPU work or no events."""
    ev = tl.events
    mine = ev["rank"].to_numpy() == rank
    codes = ev["kind"].cat.codes.to_numpy()
    gpu_codes = [i for i, k in enumerate(ev["kind"].cat.categories) if k in T.GPU_WORK_KINDS]
    if not mine.any() or np.isin(codes[mine], gpu_codes).any():
        return None
    kinds = ev["kind"].to_numpy()[mine].astype(str)
    names = ev["name"].to_numpy()[mine].astype(str)
    starts = ev["ts_ns"].to_numpy()[mine]
    ends = starts + ev["dur_ns"].to_numpy()[mine]
    unique, inverse = np.unique(names, return_inverse=True)
    is_comm = np.array([bool(COMM_NAMES.search(n)) for n in unique], dtype=bool)[inverse]
    is_wait = np.array([bool(WAIT_NAMES.search(n)) for n in unique], dtype=bool)[inverse]
    is_optimizer = np.array([bool(OPTIMIZER_NAMES.search(n)) for n in unique], dtype=bool)[inverse]
    work = ~np.isin(kinds, NOT_WORK_KINDS)
    comm_mask = work & is_comm
    compute_mask = work & ~is_comm & ~is_wait
    timed = kinds != T.TRACE_SPAN
    if not timed.any():
        return None
    lo, hi = int(starts[timed].min()), int(ends[timed].max())
    compute = iv.union(starts[compute_mask], ends[compute_mask])
    comm = iv.subtract(iv.union(starts[comm_mask], ends[comm_mask]), compute)
    compute_ns, comm_ns = iv.total(compute), iv.total(comm)
    optimizer_steps = int((work & is_optimizer & ~is_comm).sum())
    steps = int((kinds == T.STEP).sum()) or optimizer_steps or 1
    return WorkerFacts(compute_ns, comm_ns, max(0, hi - lo - compute_ns - comm_ns), hi - lo, steps)


__all__ = ["COMM_NAMES", "OPTIMIZER_NAMES", "WAIT_NAMES", "WorkerFacts", "worker_facts"]
