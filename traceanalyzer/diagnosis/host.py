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
from ..analyses._names import name_flags
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
    launches = runtime[name_flags(runtime, LAUNCH_CALL)] if len(runtime) else runtime
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
        # (pid, tid) pairs matched as pairs (pid * 2^32 + tid overflows int64 on hostile ids): one
        # comparison pass per thread, a handful of them
        pid, tid = ev["pid"].to_numpy(), ev["tid"].to_numpy()
        mine = np.zeros(len(ev), dtype=bool)
        for p, t in threads:
            mine |= (pid == p) & (tid == t)
        mine &= ev["kind"].isin(_ACTIVITY_KINDS).to_numpy()
        events = ev[mine]  # a new table (no deep copy: that would also re-stack every column)
    else:
        events = ev.iloc[0:0]
    kind = events["kind"].to_numpy()
    # First-call costs only among operators and runtime calls: python frames and annotations nest under
    # one name (the outermost `_call_impl` spans the whole model), so their first call is not an outlier.
    is_startup = name_flags(events, STARTUP_CALL) | (first_call_costs(events) & np.isin(kind, (T.CPU_OP, T.RUNTIME)))
    is_loader = (kind == T.DATALOADER) & ~is_startup
    is_comm = name_flags(events, COMM_CALL) & ~is_loader & ~is_startup
    is_alloc = name_flags(events, ALLOC_CALL) & ~is_startup & ~is_comm
    is_copy = name_flags(events, MEMCPY_CALL) & ~is_loader & ~is_comm & ~is_startup & ~is_alloc
    # A copy call whose GPU copy (same correlation id) is a small device-to-host copy is the host reading
    # a result back (.item(), .cpu(), .tolist()): it waits for the GPU, a synchronisation. So is a copy
    # call that lasts far longer than its GPU copy: the host waited for earlier GPU work, then copied.
    direction, nbytes, gpu_ns = linked_copy(ev, events["correlation"].to_numpy())
    readback = is_copy & (direction == "DtoH") & (nbytes < READBACK_MAX_BYTES)
    call_ns = events["dur_ns"].to_numpy()
    waiting = is_copy & (gpu_ns >= 0) & (call_ns >= COPY_WAIT_MIN_NS) & (gpu_ns < COPY_WAIT_MAX_GPU_SHARE * call_ns)
    is_copy &= ~readback & ~waiting
    is_sync_name = name_flags(events, SYNC_CALL) | readback | waiting
    is_sync = is_sync_name & ~is_loader & ~is_comm & ~is_copy & ~is_startup & ~is_alloc
    klass = np.select([is_startup, is_loader, is_comm, is_alloc, is_copy, is_sync], list(HOST_CLASSES[:6]),
                      default="host")
    events = events.assign(klass=klass)
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


def first_call_costs(events: pd.DataFrame) -> np.ndarray:
    """Each name's first call when it lasts far longer than its later calls (a one-off start-up cost).

    Per name with at least STARTUP_MIN_CALLS calls: the earliest call is flagged when it lasts at
    least STARTUP_FIRST_FACTOR x the median of the others and at least STARTUP_MIN_NS. Vectorized
    over names (one sort and two groupbys).
    """
    n = len(events)
    out = np.zeros(n, dtype=bool)
    if n < STARTUP_MIN_CALLS:
        return out
    code = events["name"].cat.codes.to_numpy()
    frame = pd.DataFrame({"code": code, "ts": events["ts_ns"].to_numpy(), "dur": events["dur_ns"].to_numpy(),
                          "row": np.arange(n)})
    frame = frame[frame["code"] >= 0].sort_values(["code", "ts"], kind="stable")
    first = ~frame["code"].duplicated().to_numpy()
    counts = frame.groupby("code")["dur"].transform("size").to_numpy()
    rest_median = frame[~first].groupby("code")["dur"].median()
    med = rest_median.reindex(frame["code"]).to_numpy()
    dur = frame["dur"].to_numpy()
    hit = first & (counts >= STARTUP_MIN_CALLS) & (dur >= STARTUP_MIN_NS) & (dur >= STARTUP_FIRST_FACTOR * med)
    out[frame["row"].to_numpy()[hit]] = True
    return out


def linked_copy(ev: pd.DataFrame, correlation: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Direction ("" when none), bytes (-1 when unknown) and GPU duration (-1 when no copy) of the GPU
    copy linked to each correlation id."""
    copies = ev[(ev["kind"] == T.MEMCPY).to_numpy() & (ev["correlation"].to_numpy() >= 0)]
    copies = copies.drop_duplicates(subset="correlation")
    n = len(correlation)
    if not len(copies) or not n:
        return np.full(n, "", dtype=object), np.full(n, -1, dtype=np.int64), np.full(n, -1, dtype=np.int64)
    corr = copies["correlation"].to_numpy()
    direction = pd.Series(copies["copy_kind"].astype(str).to_numpy(), index=corr).reindex(correlation).to_numpy()
    nbytes = pd.Series(copies["bytes"].to_numpy(), index=corr).reindex(correlation).to_numpy()
    dur = pd.Series(copies["dur_ns"].to_numpy(), index=corr).reindex(correlation).to_numpy()
    return (np.where(pd.isna(direction), "", direction).astype(object),
            np.where(np.isnan(nbytes.astype(np.float64)), -1, nbytes).astype(np.int64),
            np.where(np.isnan(dur.astype(np.float64)), -1, dur).astype(np.int64))
