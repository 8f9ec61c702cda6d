"""What the host was doing: the launching threads of a rank and their events sorted into classes,
one per host-class cause of the registry (traceanalyzer/causes.py), plus "host" for the rest.

Pure function of the Timeline, format-agnostic: it looks only at the `kind` column and at the
original `name` (CUDA/HIP runtime call names, ATen op names), classified once per distinct name.
A class's events are those its cause's `host_pattern` (or `host_kind`) matches that no class of lower
`priority` claimed; two refinements are by duration, not name: a name's slow first call is start-up,
and a copy call that only waits for the GPU (a small read-back, or a call far longer than its copy)
is a synchronisation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .. import causes as C
from .. import intervals as iv
from .. import timeline as T
from ..names import name_flags
from ..timeline import Timeline
from .graphs import capture_mask
from .thresholds import (
    COPY_WAIT_MAX_GPU_SHARE,
    COPY_WAIT_MIN_NS,
    LAUNCH_THREAD_MIN_SHARE,
    READBACK_MAX_BYTES,
    STARTUP_FIRST_FACTOR,
    STARTUP_MIN_CALLS,
    STARTUP_MIN_NS,
)

__all__ = ["OTHER_HOST", "HostActivity", "HostShares", "first_call_costs", "host_activity", "host_shares",
           "launching_threads", "linked_copy"]

# The class of the launching threads' events that no cause claims (framework ops, python frames).
OTHER_HOST = "host"
# Runtime calls that enqueue GPU work (cudaLaunchKernel, cuLaunchKernel, hipExtModuleLaunchKernel,
# cudaGraphLaunch, ...).
LAUNCH_CALL = re.compile(r"launch", re.IGNORECASE)
# Named annotations measured one by one for the host loop's breakdown (those with the most time).
ANNOTATIONS_MEASURED = 50

# Host kinds that are activity of the thread (steps and the profiler span hold everything: not).
ACTIVITY_KINDS = (T.DATALOADER, T.CPU_OP, T.ANNOTATION, T.RUNTIME, T.PYTHON, T.OTHER)
# The columns of those events that causes and evidence read.
HOST_EVENT_COLUMNS = ("ts_ns", "dur_ns", "name", "kind", "correlation")


@dataclass(frozen=True)
class HostActivity:
    """A rank's launching threads and their activity, as disjoint interval sets per class."""

    threads: tuple[tuple[int, int], ...]  # (pid, tid) of the launching threads; () if none
    basis: str  # how the threads were chosen: "launches" | "runtime" | "steps" | "busiest" | "none"
    classes: tuple[str, ...]  # host-class cause ids in claiming order, then OTHER_HOST
    events: pd.DataFrame  # the threads' activity events (HOST_EVENT_COLUMNS) and their `klass` (`classes`)
    exclusive: dict[str, iv.IntervalSet]  # per class, minus every earlier class
    sync_calls: iv.IntervalSet  # union of blocking calls (for "blocked at the gap start")
    copy_calls: iv.IntervalSet  # union of host->device copy calls (pageable ones block the host)
    launch_calls: int  # runtime launch calls on the rank


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
                        (host & T.category_mask(kind, ACTIVITY_KINDS), "busiest")):
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
        mine &= T.category_mask(ev["kind"], ACTIVITY_KINDS)
        rows = np.flatnonzero(mine)
    else:
        rows = np.zeros(0, dtype=np.intp)
    # Only the columns the causes read, taken once (the whole table has twenty-odd columns); the taken
    # arrays are the frame's own (copy=False: not stacked into a second copy).
    events = pd.DataFrame({c: ev[c].array.take(rows) if ev[c].dtype == "category" else ev[c].to_numpy()[rows]
                           for c in HOST_EVENT_COLUMNS}, copy=False)
    kind = events["kind"]
    host_causes = C.host_causes()
    classes = (*(c.id for c in host_causes), OTHER_HOST)
    matches = {c.id: _matches(c, events) for c in host_causes}
    # First-call costs only among operators and runtime calls: python frames and annotations nest under
    # one name (the outermost `_call_impl` spans the whole model), so their first call is not an outlier.
    first = first_call_costs(events) & T.category_mask(kind, (T.CPU_OP, T.RUNTIME))
    # Making a CUDA graph (capture, instantiate) is a one-off cost, apart from its replays.
    matches[C.STARTUP] |= capture_mask(events)
    # A copy call whose GPU copy (same correlation id) is a small device-to-host copy is the host reading
    # a result back (.item(), .cpu(), .tolist()): it waits for the GPU, a synchronisation. So is a copy
    # call that lasts far longer than its GPU copy: the host waited for earlier GPU work, then copied.
    direction, nbytes, gpu_ns = linked_copy(ev, events["correlation"].to_numpy())
    call_ns = events["dur_ns"].to_numpy()
    readback = np.asarray(direction == "DtoH") & (nbytes < READBACK_MAX_BYTES)
    waiting = (gpu_ns >= 0) & (call_ns >= COPY_WAIT_MIN_NS) & (gpu_ns < COPY_WAIT_MAX_GPU_SHARE * call_ns)
    waits = matches[C.MEMCPY] & (readback | waiting)
    matches[C.MEMCPY] = matches[C.MEMCPY] & ~waits
    sync_names = matches[C.SYNC]
    matches[C.SYNC] = sync_names | waits
    # A long first call that waits for the GPU (a synchronisation, a read-back, a copy call that waited), or
    # that spends most of its time in such a wait (an `aten::copy_` around a blocking read-back), is a wait,
    # not a one-off start-up cost: only the start-up names themselves stay start-up.
    waiting_calls = sync_names | waits
    if first.any() and waiting_calls.any():
        ts0, end0 = events["ts_ns"].to_numpy(), events["ts_ns"].to_numpy() + call_ns
        inside = iv.overlap_per_window(iv.union(ts0[waiting_calls], end0[waiting_calls]), ts0[first], end0[first])
        first[np.flatnonzero(first)[inside >= 0.5 * call_ns[first]]] = False
    matches[C.STARTUP] = (matches[C.STARTUP] | first) & ~(waiting_calls & ~_matches(C.CAUSE_BY_ID[C.STARTUP], events))
    # Each event to the first class (lowest priority) that matches it; the rest is OTHER_HOST.
    code = np.full(len(events), len(classes) - 1, dtype=np.int8)
    claimed = np.zeros(len(events), dtype=bool)
    for i, c in enumerate(classes[:-1]):
        mine = matches[c] & ~claimed
        code[mine] = i
        claimed |= mine
    events["klass"] = pd.Categorical.from_codes(code, categories=classes)
    ts = events["ts_ns"].to_numpy()
    end = ts + call_ns
    exclusive: dict[str, iv.IntervalSet] = {}
    taken = iv.empty()
    for i, c in enumerate(classes):
        mask = code == i
        u = iv.union(ts[mask], end[mask])
        exclusive[c] = iv.subtract(u, taken)
        taken = iv.union(np.r_[taken[0], u[0]], np.r_[taken[1], u[1]])
    # Blocking calls by name, and the copy calls that turned out to wait (unless an earlier class took them).
    blocking = sync_names | (waits & (code == classes.index(C.SYNC)))
    copying = code == classes.index(C.MEMCPY)
    return HostActivity(threads, basis, classes, events, exclusive, iv.union(ts[blocking], end[blocking]),
                        iv.union(ts[copying], end[copying]), launch_calls)


def _matches(cause: C.Cause, events: pd.DataFrame) -> np.ndarray:
    """The events a host-class cause's pattern or kind recognises (before the priority exclusions)."""
    out = np.zeros(len(events), dtype=bool)
    if cause.host_pattern is not None:
        out |= name_flags(events, cause.host_pattern)
    if cause.host_kind is not None:
        out |= (events["kind"] == cause.host_kind).to_numpy()
    return out


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
    copies = ev[(ev["kind"] == T.MEMCPY).to_numpy() & (ev["correlation"].to_numpy() != -1)]
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


# --- what the rules say about the host ------------------------------------------------------------------
def blocking_calls(host: HostActivity) -> tuple[tuple[str, int], ...]:
    """The launching threads' events of the sync class: each name with its count, most frequent first."""
    syncs = host.events[(host.events["klass"] == C.SYNC).to_numpy()]
    counts = syncs["name"].astype(str).value_counts()
    return tuple((str(n), int(k)) for n, k in counts.items())


def sync_copy_calls(host: HostActivity) -> tuple[int, str | None]:
    """How many of the launching threads' events are synchronous copy API calls, and the first one's name."""
    ev = host.events
    rows = np.flatnonzero(name_flags(ev, C.SYNC_COPY_CALLS)) if len(ev) else np.zeros(0, dtype=np.intp)
    return len(rows), (str(ev["name"].iloc[rows[0]]) if len(rows) else None)


@dataclass(frozen=True)
class HostShares:
    """Where the host loop's step time went (what CPU-only ranks are judged by), in disjoint parts
    claimed in this order: DataLoader wait, optimizer (step / zero_grad ranges and ops), named
    annotations (the user's record_function ranges), model ops (framework operators), elsewhere."""

    total_ns: int
    data_wait_ns: int
    model_ops_ns: int
    other_ns: int  # elsewhere: step time in none of the parts above (untraced Python, the loop itself)
    optimizer_ns: int = 0
    annotations_ns: int = 0
    steps: tuple[int, ...] = ()  # step numbers of the per-step parts (empty: no steps, the window)
    # per step (same order as `steps`): data wait, optimizer, annotations, model ops, elsewhere
    per_step: tuple[tuple[int, int, int, int, int], ...] = ()
    top_annotations: tuple[tuple[str, int], ...] = ()  # named annotations by their time in the part, largest first
    # what other threads of the rank ran during the loop's "elsewhere" time (name, time), largest first
    elsewhere_others: tuple[tuple[str, int], ...] = ()


def host_shares(wait_set: iv.IntervalSet, st_start_ns: np.ndarray, st_end_ns: np.ndarray, window_start_ns: int,
                window_end_ns: int, host: HostActivity, st_number: np.ndarray | None = None,
                others: pd.DataFrame | None = None) -> HostShares | None:
    """Step time (or the window without steps) split into data wait (`wait_set`: the DataLoader
    waits), the optimizer, named annotations, model ops (the launching threads' operators outside the
    earlier parts) and the rest (elsewhere)."""
    lo, hi = ((st_start_ns, st_end_ns) if len(st_start_ns)
              else (np.array([window_start_ns]), np.array([window_end_ns])))
    total = int((hi - lo).sum())
    if total <= 0:
        return None
    ev = host.events
    kind = ev["kind"].to_numpy()
    ts = ev["ts_ns"].to_numpy()
    end = ts + ev["dur_ns"].to_numpy()
    optimizer = name_flags(ev, C.OPTIMIZER_CALLS) & ((kind == T.CPU_OP) | (kind == T.ANNOTATION)) \
        if len(ev) else np.zeros(0, dtype=bool)
    annotation = (kind == T.ANNOTATION) & ~optimizer
    op = kind == T.CPU_OP
    claimed = wait_set
    parts = []
    for rows in (optimizer, annotation, op):
        part = iv.subtract(iv.union(ts[rows], end[rows]), claimed)
        parts.append(part)
        claimed = iv.union(np.concatenate([claimed[0], part[0]]), np.concatenate([claimed[1], part[1]]))
    opt_set, ann_set, model_set = parts
    per = [iv.overlap_per_window(s, lo, hi).astype(np.int64) for s in (wait_set, opt_set, ann_set, model_set)]
    rest = (hi - lo) - per[0] - per[1] - per[2] - per[3]
    wait, opt, ann, model = (int(x.sum()) for x in per)
    top: list[tuple[str, int]] = []
    if annotation.any():
        rows_all = np.flatnonzero(annotation)
        for code, rows in _largest_names(ev["name"].cat.codes.to_numpy()[rows_all], (end - ts)[rows_all]):
            name = ev["name"].cat.categories[code]
            inside = iv.intersect(iv.union(ts[rows_all[rows]], end[rows_all[rows]]), ann_set)
            top.append((str(name), int(iv.overlap_per_window(inside, lo, hi).sum())))
        top = sorted((t for t in top if t[1] > 0), key=lambda t: (-t[1], t[0]))[:5]
    elsewhere: list[tuple[str, int]] = []
    if others is not None and len(others):  # the loop's thread ran no traced op: what did the others run?
        rest_set = iv.subtract(iv.union(lo, hi), claimed)
        o_ts = others["ts_ns"].to_numpy()
        o_end = o_ts + others["dur_ns"].to_numpy()
        for code, rows in _largest_names(others["name"].cat.codes.to_numpy(), o_end - o_ts):
            spent = iv.total(iv.intersect(iv.union(o_ts[rows], o_end[rows]), rest_set))
            if spent > 0:
                elsewhere.append((str(others["name"].cat.categories[code]), int(spent)))
        elsewhere = sorted(elsewhere, key=lambda t: (-t[1], t[0]))[:3]
    steps = tuple(int(n) for n in st_number) if st_number is not None and len(st_start_ns) else ()
    per_step = tuple((int(a), int(b), int(c), int(d), int(e))
                     for a, b, c, d, e in zip(per[0], per[1], per[2], per[3], rest)) if steps else ()
    return HostShares(total, wait, model, total - wait - opt - ann - model, opt, ann, steps, per_step, tuple(top),
                      tuple(elsewhere))


def _largest_names(codes: np.ndarray, dur: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """The ANNOTATIONS_MEASURED name codes with the most summed duration, each with its rows (one sort,
    not one pass per name: a trace may hold thousands of distinct names and millions of events)."""
    if not len(codes):
        return []
    order = np.argsort(codes, kind="stable")
    sorted_codes = codes[order]
    starts = np.flatnonzero(np.r_[True, sorted_codes[1:] != sorted_codes[:-1]])
    totals = np.add.reduceat(dur[order], starts)
    ends = np.r_[starts[1:], len(order)]
    pick = np.argsort(-totals, kind="stable")[:ANNOTATIONS_MEASURED]
    return [(int(sorted_codes[starts[i]]), order[starts[i]:ends[i]]) for i in pick]


def other_threads(tl: Timeline, rank: int, host: HostActivity) -> pd.DataFrame:
    """The rank's operators and named ranges on host threads other than the launching ones (collective
    worker threads, DataLoader threads): `ts_ns`, `dur_ns`, `name`."""
    ev = tl.rank_events(rank)
    pid, tid = ev["pid"].to_numpy(), ev["tid"].to_numpy()
    theirs = (ev["device"].to_numpy() < 0) & (tid >= 0) & T.category_mask(ev["kind"], (T.CPU_OP, T.ANNOTATION))
    for p, t in host.threads:
        theirs &= ~((pid == p) & (tid == t))
    rows = np.flatnonzero(theirs)
    return pd.DataFrame({"ts_ns": ev["ts_ns"].to_numpy()[rows], "dur_ns": ev["dur_ns"].to_numpy()[rows],
                         "name": ev["name"].array.take(rows)}, copy=False)
