"""What the host was doing: the launching threads of a rank and their events sorted into causes.

Pure function of the Timeline, format-agnostic: it looks only at the `kind` column and at the
original `name` (CUDA/HIP runtime call names, ATen op names), classified once per distinct name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .. import intervals as iv
from .. import timeline as T
from ..causes import (
    ALLOCATOR,
    CAUSES,
    CHECKPOINT,
    COMMUNICATION,
    DATALOADER,
    HOST_COMPUTE,
    LAUNCH,
    MEMCPY,
    STARTUP,
    SYNC,
    UNKNOWN,
)
from ..names import name_flags
from ..timeline import Timeline
from .thresholds import (
    COPY_WAIT_MAX_GPU_SHARE,
    COPY_WAIT_MIN_NS,
    LAUNCH_THREAD_MIN_SHARE,
    READBACK_MAX_BYTES,
    STARTUP_FIRST_FACTOR,
    STARTUP_MIN_CALLS,
    STARTUP_MIN_NS,
)

# --- gap causes: defined once in the registry (traceanalyzer/causes.py) -----------------------------

__all__ = ["ALLOCATOR", "CAUSES", "CHECKPOINT", "COMMUNICATION", "DATALOADER", "HOST_COMPUTE", "LAUNCH", "MEMCPY",
           "STARTUP", "SYNC", "UNKNOWN", "HostActivity", "host_activity"]

# Host events are claimed by the first class that matches, in this order; a gap's share of each
# class is measured on these disjoint pieces, so nested events count once.
HOST_CLASSES = (STARTUP, DATALOADER, COMMUNICATION, ALLOCATOR, MEMCPY, SYNC, "host")

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
# Synchronous device-memory allocation and release (stream-ordered *Async variants do not block).
ALLOC_CALL = re.compile(
    r"^(cuda|hip)(Malloc|Free|MallocHost|FreeHost|HostAlloc|MallocManaged|MallocPitch|Malloc3D)$"
    r"|^cuMem(Alloc|Free|AllocHost|FreeHost|AllocManaged|AllocPitch)(_v2)?$", re.IGNORECASE)
# Calls that only start-up makes: context, stream and event creation, module loading, library handle
# creation, autotuning, torch.compile / XLA compilation.
STARTUP_CALL = re.compile(
    r"^cu(Init|CtxCreate|DevicePrimaryCtxRetain|ModuleLoad\w*|LibraryLoad\w*)(_v\d)?$"
    r"|^(cuda|hip)(StreamCreate\w*|EventCreate\w*|GetDeviceProperties\w*|ModuleLoad\w*|Init)$"
    r"|^(cublas|cublasLt|cudnn|cusparse|cufft|hipblas|hipblasLt|miopen|rocblas)(Create|_create)\w*$"
    r"|cudnnFind|Autotun|autotune|torch/_dynamo/convert_frame|torch/_inductor/compile|compile_fx"
    r"|^TorchDynamo Compil|^Torch-Compiled Region: \d+/\d+ \(compil|XlaCompile|jit_compile|CompileModule",
    re.IGNORECASE)
# Collectives and waits on them, on the host.
COMM_CALL = re.compile(
    r"^(nccl|rccl|gloo|mpi)[:_]|^(c10d|_c10d_functional|c10d_functional)::|^record_param_comms$"
    r"|^ProcessGroup|torch/distributed/|^torch\.distributed\.", re.IGNORECASE)

# Host kinds that are activity of the thread (steps and the profiler span hold everything: not).
_ACTIVITY_KINDS = (T.DATALOADER, T.CPU_OP, T.ANNOTATION, T.RUNTIME, T.PYTHON, T.OTHER)
# The columns of those events that causes and evidence read.
_HOST_EVENT_COLUMNS = ("ts_ns", "dur_ns", "name", "kind", "correlation")


@dataclass(frozen=True)
class HostActivity:
    """A rank's launching threads and their activity, as disjoint interval sets per class."""

    threads: tuple[tuple[int, int], ...]  # (pid, tid) of the launching threads; () if none
    basis: str  # how the threads were chosen: "launches" | "runtime" | "steps" | "busiest" | "none"
    events: pd.DataFrame  # the threads' activity events (_HOST_EVENT_COLUMNS) and their `klass` (HOST_CLASSES)
    exclusive: dict[str, iv.IntervalSet]  # per HOST_CLASSES entry, minus every earlier class
    sync_calls: iv.IntervalSet  # union of blocking calls (for "blocked at the gap start")
    copy_calls: iv.IntervalSet  # union of host->device copy calls (pageable ones block the host)
    any_activity: iv.IntervalSet  # union of all the threads' activity
    launch_calls: int  # runtime launch calls on the rank
    # what evidence computes once per device and reuses for every cause (see attribution)
    cache: dict = field(default_factory=dict, compare=False, repr=False)


def launching_threads(tl: Timeline, rank: int) -> tuple[tuple[tuple[int, int], ...], str, int]:
    """The host threads that enqueue the rank's GPU work.

    The threads issuing >= LAUNCH_THREAD_MIN_SHARE of the launch calls (plus the thread holding the
    steps and DataLoader waits, the training loop); without launch calls: the thread with most runtime
    calls, else the one holding the steps, else the busiest host thread.
    """
    ev = tl.rank_events(rank)
    kind = ev["kind"]
    host = (ev["device"].to_numpy() < 0) & (ev["tid"].to_numpy() >= 0)
    if not host.any():
        return (), "none", 0
    # Thread ids only (the whole table has twenty-odd columns): a small frame per selection.
    pid, tid = ev["pid"].to_numpy(), ev["tid"].to_numpy()

    def threads_of(mask: np.ndarray) -> pd.DataFrame:
        return pd.DataFrame({"pid": pid[mask], "tid": tid[mask]})

    runtime = host & (kind == T.RUNTIME).to_numpy()
    launches = threads_of(runtime & name_flags(ev, LAUNCH_CALL)) if runtime.any() else threads_of(runtime)
    loop_threads = _threads_by_count(threads_of(host & T.category_mask(kind, (T.STEP, T.DATALOADER))))
    if len(launches):
        counts = launches.groupby(["pid", "tid"], observed=True).size()
        keep = counts[counts >= LAUNCH_THREAD_MIN_SHARE * counts.sum()].sort_values(ascending=False)
        threads = [(int(p), int(t)) for p, t in keep.index]
        threads += [t for t in loop_threads if t not in threads]
        return tuple(threads), "launches", len(launches)
    for mask, basis in ((runtime, "runtime"), (host & T.category_mask(kind, (T.STEP, T.DATALOADER)), "steps"),
                        (host & T.category_mask(kind, _ACTIVITY_KINDS), "busiest")):
        ranked = _threads_by_count(threads_of(mask))
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
        # (pid, tid) pairs matched as pairs (pid * 2^32 + tid overflows int64 on hostile ids): one
        # comparison pass per thread, a handful of them
        pid, tid = ev["pid"].to_numpy(), ev["tid"].to_numpy()
        mine = np.zeros(len(ev), dtype=bool)
        for p, t in threads:
            mine |= (pid == p) & (tid == t)
        mine &= T.category_mask(ev["kind"], _ACTIVITY_KINDS)
        rows = np.flatnonzero(mine)
    else:
        rows = np.zeros(0, dtype=np.intp)
    # Only the columns the causes read, taken once (the whole table has twenty-odd columns).
    events = pd.DataFrame({c: ev[c].array.take(rows) if ev[c].dtype == "category" else ev[c].to_numpy()[rows]
                           for c in _HOST_EVENT_COLUMNS})
    kind = events["kind"]
    # First-call costs only among operators and runtime calls: python frames and annotations nest under
    # one name (the outermost `_call_impl` spans the whole model), so their first call is not an outlier.
    is_startup = name_flags(events, STARTUP_CALL) | (first_call_costs(events)
                                                     & T.category_mask(kind, (T.CPU_OP, T.RUNTIME)))
    is_loader = (kind == T.DATALOADER).to_numpy() & ~is_startup
    is_comm = name_flags(events, COMM_CALL) & ~is_loader & ~is_startup
    is_alloc = name_flags(events, ALLOC_CALL) & ~is_startup & ~is_comm
    is_copy = name_flags(events, MEMCPY_CALL) & ~is_loader & ~is_comm & ~is_startup & ~is_alloc
    # A copy call whose GPU copy (same correlation id) is a small device-to-host copy is the host reading
    # a result back (.item(), .cpu(), .tolist()): it waits for the GPU, a synchronisation. So is a copy
    # call that lasts far longer than its GPU copy: the host waited for earlier GPU work, then copied.
    direction, nbytes, gpu_ns = linked_copy(ev, events["correlation"].to_numpy())
    readback = is_copy & np.asarray(direction == "DtoH") & (nbytes < READBACK_MAX_BYTES)
    call_ns = events["dur_ns"].to_numpy()
    waiting = is_copy & (gpu_ns >= 0) & (call_ns >= COPY_WAIT_MIN_NS) & (gpu_ns < COPY_WAIT_MAX_GPU_SHARE * call_ns)
    is_copy &= ~readback & ~waiting
    is_sync_name = name_flags(events, SYNC_CALL) | readback | waiting
    is_sync = is_sync_name & ~is_loader & ~is_comm & ~is_copy & ~is_startup & ~is_alloc
    code = np.select([is_startup, is_loader, is_comm, is_alloc, is_copy, is_sync], list(range(6)),
                     default=len(HOST_CLASSES) - 1).astype(np.int8)
    events["klass"] = pd.Categorical.from_codes(code, categories=HOST_CLASSES)
    ts = events["ts_ns"].to_numpy()
    end = ts + call_ns
    exclusive: dict[str, iv.IntervalSet] = {}
    claimed = iv.empty()
    for i, c in enumerate(HOST_CLASSES):
        mask = code == i
        u = iv.union(ts[mask], end[mask])
        exclusive[c] = iv.subtract(u, claimed)
        claimed = iv.union(np.r_[claimed[0], u[0]], np.r_[claimed[1], u[1]])
    return HostActivity(threads, basis, events, exclusive, iv.union(ts[is_sync_name], end[is_sync_name]),
                        iv.union(ts[is_copy], end[is_copy]), claimed, launch_calls)


def first_call_costs(events: pd.DataFrame) -> np.ndarray:
    """Each name's first call when it lasts far longer than its later calls (a one-off start-up cost).

    Per name with at least STARTUP_MIN_CALLS calls: the earliest call is flagged when it lasts at
    least STARTUP_FIRST_FACTOR x the median of the others and at least STARTUP_MIN_NS. Vectorized
    over names: one sort by (name, time); the medians only for names whose first call is long.
    """
    n = len(events)
    out = np.zeros(n, dtype=bool)
    if n < STARTUP_MIN_CALLS:
        return out
    code = events["name"].cat.codes.to_numpy()
    ts, dur = events["ts_ns"].to_numpy(), events["dur_ns"].to_numpy()
    rows = np.flatnonzero(code >= 0)
    if not len(rows):
        return out
    rows = rows[np.lexsort((ts[rows], code[rows]))]  # by name, then time (stable: ties keep row order)
    c = code[rows]
    starts = np.flatnonzero(np.r_[True, c[1:] != c[:-1]])
    counts = np.diff(np.r_[starts, len(c)])
    first_rows = rows[starts]
    candidate = (counts >= STARTUP_MIN_CALLS) & (dur[first_rows] >= STARTUP_MIN_NS)
    if not candidate.any():
        return out
    # the later calls of the candidate names, sorted by (name, duration): medians by position
    later = np.ones(len(rows), dtype=bool)
    later[starts] = False
    later &= np.repeat(candidate, counts)
    rest_code, rest_dur = c[later], dur[rows[later]]
    order = np.lexsort((rest_dur, rest_code))
    rest_dur = rest_dur[order]
    m = counts[candidate] - 1
    lo = np.r_[0, np.cumsum(m)[:-1]]
    median = (rest_dur[lo + (m - 1) // 2] + rest_dur[lo + m // 2]) / 2
    first_dur = dur[first_rows[candidate]]
    out[first_rows[candidate][first_dur >= STARTUP_FIRST_FACTOR * median]] = True
    return out


def linked_copy(ev: pd.DataFrame, correlation: np.ndarray) -> tuple[pd.Categorical, np.ndarray, np.ndarray]:
    """Direction (a Categorical, missing when none), bytes (-1 when unknown) and GPU duration (-1 when
    no copy) of the GPU copy linked to each correlation id."""
    copies = ev[(ev["kind"] == T.MEMCPY).to_numpy() & (ev["correlation"].to_numpy() >= 0)]
    copies = copies.drop_duplicates(subset="correlation")
    n = len(correlation)
    if not len(copies) or not n:
        return (pd.Categorical.from_codes(np.full(n, -1), T.COPY_KINDS), np.full(n, -1, dtype=np.int64),
                np.full(n, -1, dtype=np.int64))
    at = pd.Index(copies["correlation"].to_numpy()).get_indexer(correlation)  # one hash lookup per call
    found = at >= 0
    pick = np.where(found, at, 0)
    kinds = copies["copy_kind"].array  # a Categorical: codes gathered, not a million strings
    direction = pd.Categorical.from_codes(np.where(found, kinds.codes[pick], -1), kinds.categories)
    nbytes = np.where(found, copies["bytes"].to_numpy()[pick], -1).astype(np.int64)
    dur = np.where(found, copies["dur_ns"].to_numpy()[pick], -1).astype(np.int64)
    return direction, nbytes, dur
