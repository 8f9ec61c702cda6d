"""What the host was doing: the launching threads of a rank and their events sorted into causes.

Pure function of the Timeline, format-agnostic: it looks only at the `kind` column and at the
original `name` (CUDA/HIP runtime call names, ATen op names), classified once per distinct name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .. import timeline as T
from ..analyses import _intervals as iv
from ..causes import (
    CAUSES,
    CHECKPOINT,
    COMMUNICATION,
    DATALOADER,
    HOST_COMPUTE,
    LAUNCH,
    MEMCPY,
    SYNC,
    UNKNOWN,
)
from ..timeline import Timeline
from .thresholds import LAUNCH_THREAD_MIN_SHARE, READBACK_MAX_BYTES

# --- gap causes: defined once in the registry (traceanalyzer/causes.py) -----------------------------

__all__ = ["CAUSES", "CHECKPOINT", "COMMUNICATION", "DATALOADER", "HOST_COMPUTE", "LAUNCH", "MEMCPY", "SYNC",
           "UNKNOWN", "HostActivity", "host_activity"]

# Host events are claimed by the first class that matches, in this order; a gap's share of each
# class is measured on these disjoint pieces, so nested events count once.
HOST_CLASSES = (DATALOADER, COMMUNICATION, MEMCPY, SYNC, "host")

# Runtime calls that enqueue GPU work (cudaLaunchKernel, cuLaunchKernel, hipExtModuleLaunchKernel,
# cudaGraphLaunch, ...).
LAUNCH_CALL = re.compile(r"launch", re.IGNORECASE)
# Calls that block the host until the GPU catches up: explicit synchronisations, synchronous copy
# APIs (cudaMemcpy without Async, hipMemcpyWithStream) and the ATen ops that read a device scalar
# (`.item()`, `if tensor:`), which are implemented with a copy and a stream synchronisation.
SYNC_CALL = re.compile(
    r"synchroniz|^(cuda|hip)Memcpy(2D|3D)?$|^cuMemcpy(HtoD|DtoH|DtoD)?(_v2)?$|^hipMemcpyWithStream$"
    r"|^aten::(item|_local_scalar_dense|is_nonzero)$", re.IGNORECASE)
# Host-side copy work: every copy API (sync or async: pageable async copies are staged by the host)
# and pinning on the hot loop.
MEMCPY_CALL = re.compile(r"memcpy|^aten::_?pin_memory$", re.IGNORECASE)
# Collectives and waits on them, on the host.
COMM_CALL = re.compile(
    r"^(nccl|rccl|gloo|mpi)[:_]|^(c10d|_c10d_functional|c10d_functional)::|^record_param_comms$"
    r"|^ProcessGroup|torch/distributed/|^torch\.distributed\.", re.IGNORECASE)

# Host kinds that are activity of the thread (steps and the profiler span hold everything: not).
_ACTIVITY_KINDS = (T.DATALOADER, T.CPU_OP, T.ANNOTATION, T.RUNTIME, T.PYTHON, T.OTHER)


@dataclass(frozen=True)
class HostActivity:
    """A rank's launching threads and their activity, as disjoint interval sets per class."""

    threads: tuple[tuple[int, int], ...]  # (pid, tid) of the launching threads; () if none
    basis: str  # how the threads were chosen: "launches" | "runtime" | "steps" | "busiest" | "none"
    events: pd.DataFrame  # the threads' activity events, with an added `klass` column (HOST_CLASSES)
    exclusive: dict[str, iv.IntervalSet]  # per HOST_CLASSES entry, minus every earlier class
    sync_calls: iv.IntervalSet  # union of blocking calls (for "blocked at the gap start")
    copy_calls: iv.IntervalSet  # union of host->device copy calls (pageable ones block the host)
    any_activity: iv.IntervalSet  # union of all the threads' activity
    launch_calls: int  # runtime launch calls on the rank


def _name_flags(frame: pd.DataFrame, pattern: re.Pattern[str]) -> np.ndarray:
    """pattern.search on each distinct name once, spread to rows by category code."""
    names = frame["name"].cat.categories
    hits = np.fromiter((bool(pattern.search(str(n))) for n in names), dtype=bool, count=len(names))
    codes = frame["name"].cat.codes.to_numpy()
    return np.where(codes >= 0, hits[np.clip(codes, 0, None)] if len(hits) else False, False)


def launching_threads(tl: Timeline, rank: int) -> tuple[tuple[tuple[int, int], ...], str, int]:
    """The host threads that enqueue the rank's GPU work.

    The threads issuing >= LAUNCH_THREAD_MIN_SHARE of the launch calls (plus the thread holding the
    steps and DataLoader waits, the training loop); without launch calls: the thread with most runtime
    calls, else the one holding the steps, else the busiest host thread.
    """
    ev = tl.rank_events(rank)
    host = ev[(ev["device"].to_numpy() < 0) & (ev["tid"].to_numpy() >= 0)]
    if not len(host):
        return (), "none", 0
    runtime = host[(host["kind"] == T.RUNTIME).to_numpy()]
    launches = runtime[_name_flags(runtime, LAUNCH_CALL)] if len(runtime) else runtime
    loop = host[host["kind"].isin((T.STEP, T.DATALOADER)).to_numpy()]
    loop_threads = _threads_by_count(loop)
    if len(launches):
        counts = launches.groupby(["pid", "tid"], observed=True).size()
        keep = counts[counts >= LAUNCH_THREAD_MIN_SHARE * counts.sum()].sort_values(ascending=False)
        threads = [(int(p), int(t)) for p, t in keep.index]
        threads += [t for t in loop_threads if t not in threads]
        return tuple(threads), "launches", len(launches)
    for frame, basis in ((runtime, "runtime"), (loop, "steps"),
                         (host[host["kind"].isin(_ACTIVITY_KINDS).to_numpy()], "busiest")):
        ranked = _threads_by_count(frame)
        if ranked:
            return (ranked[0],), basis, 0
    return (), "none", 0


def _threads_by_count(frame: pd.DataFrame) -> list[tuple[int, int]]:
    if not len(frame):
        return []
    counts = frame.groupby(["pid", "tid"], observed=True).size().sort_values(ascending=False, kind="stable")
    return [(int(p), int(t)) for p, t in counts.index]


def host_activity(tl: Timeline, rank: int) -> HostActivity:
    threads, basis, launch_calls = launching_threads(tl, rank)
    ev = tl.rank_events(rank)
    if threads:
        key = ev["pid"].to_numpy() * (1 << 32) + ev["tid"].to_numpy()
        wanted = np.array([p * (1 << 32) + t for p, t in threads], dtype=np.int64)
        mine = np.isin(key, wanted) & ev["kind"].isin(_ACTIVITY_KINDS).to_numpy()
        events = ev[mine].copy()
    else:
        events = ev.iloc[0:0].copy()
    kind = events["kind"].to_numpy()
    is_loader = kind == T.DATALOADER
    is_comm = _name_flags(events, COMM_CALL) & ~is_loader
    is_copy = _name_flags(events, MEMCPY_CALL) & ~is_loader & ~is_comm
    # A copy call whose GPU copy (same correlation id) is a small device-to-host copy is the host reading
    # a result back (.item(), .cpu(), .tolist()): it waits for the GPU, a synchronisation.
    direction, nbytes = linked_copy(ev, events["correlation"].to_numpy())
    readback = is_copy & (direction == "DtoH") & (nbytes < READBACK_MAX_BYTES)
    is_copy &= ~readback
    is_sync_name = _name_flags(events, SYNC_CALL) | readback
    is_sync = is_sync_name & ~is_loader & ~is_comm & ~is_copy
    klass = np.select([is_loader, is_comm, is_copy, is_sync], list(HOST_CLASSES[:4]), default="host")
    events["klass"] = klass
    ts = events["ts_ns"].to_numpy()
    end = ts + events["dur_ns"].to_numpy()
    exclusive: dict[str, iv.IntervalSet] = {}
    claimed = iv.empty()
    for c in HOST_CLASSES:
        mask = klass == c
        u = iv.union(ts[mask], end[mask])
        exclusive[c] = iv.subtract(u, claimed)
        claimed = iv.union(np.r_[claimed[0], u[0]], np.r_[claimed[1], u[1]])
    return HostActivity(threads, basis, events, exclusive, iv.union(ts[is_sync_name], end[is_sync_name]),
                        iv.union(ts[is_copy], end[is_copy]), claimed, launch_calls)


def linked_copy(ev: pd.DataFrame, correlation: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Direction ("" when none) and bytes (-1 when unknown) of the GPU copy linked to each correlation id."""
    copies = ev[(ev["kind"] == T.MEMCPY).to_numpy() & (ev["correlation"].to_numpy() >= 0)]
    copies = copies.drop_duplicates(subset="correlation")
    n = len(correlation)
    if not len(copies) or not n:
        return np.full(n, "", dtype=object), np.full(n, -1, dtype=np.int64)
    corr = copies["correlation"].to_numpy()
    direction = pd.Series(copies["copy_kind"].astype(str).to_numpy(), index=corr).reindex(correlation).to_numpy()
    nbytes = pd.Series(copies["bytes"].to_numpy(), index=corr).reindex(correlation).to_numpy()
    return (np.where(pd.isna(direction), "", direction).astype(object),
            np.where(np.isnan(nbytes.astype(np.float64)), -1, nbytes).astype(np.int64))
