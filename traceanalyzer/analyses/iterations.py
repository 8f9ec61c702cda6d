"""Iterations without step markers: the repeating unit of a rank's work, used as its steps.

`find_steps` returns a rank's steps and where they came from. Step markers (`ProfilerStep#N`, Keras
batches) always define the steps when the trace has any: one marker is one step, however much repeating
work it holds. Iterations are looked for in the work itself only without markers (they are then the
steps), and inside a single marker, where they are only reported (`StepSource.iterations`: sub-iterations
of the step, never replacing it). They are found in this order:

1. **annotation**: a host annotation (`record_function`) that recurs on one thread, each occurrence
   ending before the next starts and covering at least ANNOTATION_MIN_COVER of the time to the next one
   (a user's `record_function("iteration")`, a compiled graph called once per denoising step) and, when
   the rank waits for a DataLoader, holding those waits (else it is a part of the loop). An
   iteration runs from one occurrence's start to the next's; the last one to its own end.
2. **kernel sequence**: the period p of the sequence of GPU operation names (kernels, copies, memsets)
   of the busiest device, in launch order (on a rank without GPU work, "host operations": the
   top-level framework ops, annotations and DataLoader waits of its busiest thread): the smallest p
   at which the operations repeat over the most of the trace. Candidate periods are the distances
   between successive operations of one name (an operation that runs once per iteration recurs every
   p operations), at most MAX_CANDIDATES of them, each checked in O(n) with numpy. The iteration
   starts at the DataLoader wait when the period holds one (host operations), else at the operation
   after the GPU's longest idle stretch when one stands out, else at the first repetition's start.
   An iteration runs from that operation's launch (host clock) to the next one's, the last to its
   last operation's end on the GPU; a warm-up head that does not repeat and a partial last
   iteration are left out.

Either way an iteration also holds the DataLoader wait that ends just before it, as a step marker
wrapping `next(loader)` would.

Either kind is a loop, and its iterations the steps, only when it is one:

* **at the top level**: a loop's iterations start at the top level of the thread that runs them. Blocks
  that start inside one host call that holds several of them (a framework op, an annotation, the Python
  frame of a module call: `nn.Module: Model`, a `forward`) are that call's parts, the layers of one
  forward pass, never steps, whatever they show: one call holding the starts of at least NESTED_MIN_SHARE
  of the iterations makes them its blocks. Iterations that each wait for the DataLoader or step the
  optimizer are a loop wherever they run (a forward's layers do neither).
* **with a boundary**: at least MIN_ITERATIONS iterations and a boundary with the outside world: in at
  least half the iterations a host<->device copy, a host synchronisation or a DataLoader wait, or (GPU
  work) the GPU idle before each iteration's first operation for clearly longer than between its
  operations. On a rank without GPU work the host's own pauses count only between the occurrences of a
  recurring annotation: between bare host operations Python pauses inside a forward pass too.

Without either, the capture has no steps: its figures are over the whole window.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .. import causes as C
from .. import timeline as T
from ..timeline import Timeline
from .figures import Steps, launch_times

# At least this many iterations before repeating work is taken for a loop (two could be chance).
MIN_ITERATIONS = 3
# Candidate periods checked, the strongest first (distance x how often it recurs).
MAX_CANDIDATES = 24
# A block of p operations repeats when at least this share of its names equals the next block's (one
# kernel swapped for another, as autotuning or a data-dependent choice can do, still repeats).
MATCH_MIN = 0.9
# An iteration's operation count may differ from the period by this share (an extra or missing operation).
LENGTH_TOLERANCE = 0.1
# The GPU's idle before an iteration is a boundary when its median is this many times the median idle
# between operations inside iterations ...
BOUNDARY_GAP_FACTOR = 5.0
# ... and at least this long.
BOUNDARY_GAP_MIN_NS = 20_000
# Share of the iterations that must show a copy, a synchronisation or a DataLoader wait.
EVIDENCE_MIN_SHARE = 0.5
# A recurring annotation must cover at least this share of the time from its start to the next's (a
# short call made now and then, such as `nccl:all_reduce`, is not the loop).
ANNOTATION_MIN_COVER = 0.8
# An iteration of the kernel sequence has at least this many operations, and the iterations together
# hold at least MIN_COVER of the device's operations (a run of one kernel repeated is not a loop).
MIN_PERIOD = 2
MIN_COVER = 0.5
# Two candidate periods whose iterations cover operation counts within this share are equal: the smaller wins.
COVER_TIE = 0.01

# Iterations are one call's blocks when one host call holds the starts of at least this share of them.
NESTED_MIN_SHARE = 0.5
# Host calls that hold one call's work: framework ops and annotations, and the Python frames of a module
# call (torch.profiler with_stack: `nn.Module: Name_0`, a `forward` method). (Iterations that each wait
# for the DataLoader or call the optimizer, causes.OPTIMIZER_CALLS, are a loop wherever they run.)
CALL_KINDS = (T.CPU_OP, T.ANNOTATION)
MODULE_FRAME = re.compile(r"^nn\.Module: |\): forward$")

# A rank without GPU work: the host events whose top-level sequence is searched instead.
HOST_SEQUENCE_KINDS = (T.CPU_OP, T.ANNOTATION, T.DATALOADER)
# Host calls that wait for the GPU (runtime / driver API names).
SYNC_CALL = re.compile(r"Synchroni[sz]e|^(?:cuda|hip)Memcpy$|^cuMemcpy(?:DtoH|HtoD)(?:_v2)?$")


@dataclass(frozen=True)
class StepSource:
    """Where a rank's steps came from. With kind "markers", `basis`, `period_ns` and `iterations` (when set)
    describe the iterations found inside a single marker: sub-iterations of the one step."""

    kind: str  # "markers" | "detected" | "window"
    basis: str | None = None  # iterations found: "kernel sequence" or "annotation <name>"
    period_ns: int | None = None  # iterations found: median iteration length on the host clock
    iterations: int = 0  # iterations found: how many (inside the marker, for kind "markers")


def find_steps(tl: Timeline, rank: int, markers: Steps) -> tuple[Steps, StepSource]:
    """The rank's steps: its markers when it has any (one marker is one step; the iterations found inside
    a single marker are reported as its sub-iterations); else the iterations found in its work; else none."""
    if len(markers) >= 2:
        return markers, StepSource("markers")
    found = detect_iterations(tl, rank)
    if not len(markers):
        return found if found is not None else (markers, StepSource("window"))
    if found is None:
        return markers, StepSource("markers")
    its, src = found
    inside = (its.start_ns >= markers.start_ns[0]) & (its.end_ns <= markers.end_ns[0])
    if int(inside.sum()) < MIN_ITERATIONS:
        return markers, StepSource("markers")
    period = int(np.median(its.end_ns[inside] - its.start_ns[inside]))
    return markers, StepSource("markers", src.basis, period, int(inside.sum()))


def detect_iterations(tl: Timeline, rank: int) -> tuple[Steps, StepSource] | None:
    """Iterations found from a recurring annotation, else from the kernel sequence; None when nothing
    repeats with a boundary."""
    ev = tl.rank_events(rank)
    ops = _Ops.of(tl, rank, ev)
    host = _HostMarks.of(ev)
    for finder in (_annotation_iterations, _sequence_iterations):
        found = finder(ev, ops, host)
        if found is not None:
            start, end, basis = found
            start, end = _with_waits(start, end, ops, host)
            number = np.arange(len(start), dtype=np.int64)
            period = int(np.median(end - start))
            return Steps(number, start, end), StepSource("detected", basis, period, len(start))
    return None


# --- what the detectors read ------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Ops:
    """The GPU operations of the rank's busiest device, in launch order."""

    code: np.ndarray  # name codes
    host_ns: np.ndarray  # launch time on the host (the GPU start when the launch is not in the trace)
    gpu_start_ns: np.ndarray
    gpu_end_ns: np.ndarray
    copy: np.ndarray  # bool: a host<->device copy
    idle_before_ns: np.ndarray  # GPU idle just before the operation (0 when work still runs)
    on_gpu: bool = True  # False: host operations of a rank without GPU work
    wait: np.ndarray | None = None  # host operations: bool, a DataLoader wait
    tid: np.ndarray | None = None  # the host thread that launched (ran) each operation, -1 unknown

    def __len__(self) -> int:
        return len(self.code)

    def thread_at(self, host_ns: np.ndarray) -> np.ndarray:
        """The thread of the operation launched at each of these host times (-1: unknown)."""
        if self.tid is None or not len(self.tid):
            return np.full(len(host_ns), -1, dtype=np.int64)
        at = np.clip(np.searchsorted(self.host_ns, host_ns, side="left"), 0, len(self.tid) - 1)
        return np.where(self.host_ns[at] == host_ns, self.tid[at], -1)

    def copies_before(self) -> np.ndarray:
        """copies_before()[i]: host<->device copies among the first i operations."""
        return np.concatenate(([0], np.cumsum(self.copy)))

    @staticmethod
    def of(tl: Timeline, rank: int, ev: pd.DataFrame) -> _Ops:
        work = tl.gpu_work(rank)
        if not len(work):
            return _Ops.of_host(ev)
        devices, counts = np.unique(work["device"].to_numpy(), return_counts=True)
        w = work[work["device"].to_numpy() == devices[int(np.argmax(counts))]]
        start = w["ts_ns"].to_numpy().astype(np.int64)
        end = start + w["dur_ns"].to_numpy()
        launch = launch_times(ev, w["correlation"].to_numpy(), start)
        order = np.lexsort((start, launch))
        start, end, launch = start[order], end[order], launch[order]
        tid = _launch_threads(ev, w["correlation"].to_numpy()[order])
        copy = w["copy_kind"].isin(("HtoD", "DtoH")).to_numpy()[order]
        done = np.maximum.accumulate(end)
        idle = np.zeros(len(start), dtype=np.int64)
        idle[1:] = np.clip(start[1:] - done[:-1], 0, None)
        code = w["name"].cat.codes.to_numpy().astype(np.int64)[order]
        return _Ops(code, launch, start, end, copy, idle, tid=tid)

    @staticmethod
    def of_host(ev: pd.DataFrame) -> _Ops:
        """A rank without GPU work (a CPU-only capture): the top-level host operations (framework ops,
        annotations, DataLoader waits not inside another) of the thread that runs the most, in order."""
        mask = T.category_mask(ev["kind"], HOST_SEQUENCE_KINDS) & (ev["device"].to_numpy() < 0)
        h = ev[mask]
        if not len(h):
            empty = np.zeros(0, dtype=np.int64)
            return _Ops(empty, empty, empty, empty, np.zeros(0, dtype=bool), empty)
        tids, counts = np.unique(h["tid"].to_numpy(), return_counts=True)
        busiest = int(tids[int(np.argmax(counts))])
        h = h[h["tid"].to_numpy() == busiest]
        start = h["ts_ns"].to_numpy().astype(np.int64)
        dur = h["dur_ns"].to_numpy().astype(np.int64)
        order = np.lexsort((-dur, start))  # an enclosing op before the ops it holds
        start, end = start[order], start[order] + dur[order]
        code = h["name"].cat.codes.to_numpy().astype(np.int64)[order]
        wait = (h["kind"] == T.DATALOADER).to_numpy()[order]
        done = np.maximum.accumulate(end)
        top = np.ones(len(start), dtype=bool)
        top[1:] = start[1:] >= done[:-1]
        start, end, code, done, wait = start[top], end[top], code[top], done[top], wait[top]
        idle = np.zeros(len(start), dtype=np.int64)
        idle[1:] = np.clip(start[1:] - done[:-1], 0, None)
        return _Ops(code, start, start, end, np.zeros(len(start), dtype=bool), idle, False, wait,
                    np.full(len(start), busiest, dtype=np.int64))


@dataclass(frozen=True)
class _Calls:
    """Host calls by thread and start (an enclosing call before its parts)."""

    tid: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray

    @staticmethod
    def of(ev: pd.DataFrame, mask: np.ndarray) -> _Calls:
        tid, start = ev["tid"].to_numpy()[mask], ev["ts_ns"].to_numpy()[mask].astype(np.int64)
        end = start + ev["dur_ns"].to_numpy()[mask]
        by = np.lexsort((-end, start, tid))
        return _Calls(tid[by], start[by], end[by])

    def top(self, tid: int) -> tuple[np.ndarray, np.ndarray]:
        """The outermost calls of one thread: (starts, ends), sorted; a call that overlaps the one before it
        belongs to it."""
        lo, hi = np.searchsorted(self.tid, tid, side="left"), np.searchsorted(self.tid, tid, side="right")
        start, end = self.start_ns[lo:hi], self.end_ns[lo:hi]
        if not len(start):
            return start, end
        done = np.maximum.accumulate(end)
        first = np.flatnonzero(np.r_[True, start[1:] >= done[:-1]])
        return start[first], np.maximum.reduceat(end, first)


@dataclass(frozen=True)
class _HostMarks:
    """Start times (sorted) of the host's synchronising calls and DataLoader waits; the waits' spans
    (sorted by end); the start times (sorted) of what only a loop does (DataLoader waits, optimizer
    calls); the host calls that can hold a call's blocks (CALL_KINDS and module frames), and the module
    frames alone."""

    ts_ns: np.ndarray
    wait_start_ns: np.ndarray
    wait_end_ns: np.ndarray
    loop_ns: np.ndarray
    calls: _Calls
    modules: _Calls

    @staticmethod
    def of(ev: pd.DataFrame) -> _HostMarks:
        kind = ev["kind"]
        rt = ev[(kind == T.RUNTIME).to_numpy()]
        sync = rt["ts_ns"].to_numpy()[_name_flags(rt["name"], SYNC_CALL)] if len(rt) else np.zeros(0, np.int64)
        is_wait = (kind == T.DATALOADER).to_numpy()
        wait = ev["ts_ns"].to_numpy()[is_wait].astype(np.int64)
        wait_end = wait + ev["dur_ns"].to_numpy()[is_wait]
        order = np.argsort(wait_end, kind="stable")
        on_host = ev["device"].to_numpy() < 0
        call = T.category_mask(kind, CALL_KINDS) & on_host
        optimizer = call & _name_flags(ev["name"], C.OPTIMIZER_CALLS) if call.any() else call
        module = (kind == T.PYTHON).to_numpy() & on_host
        if module.any():
            module &= _name_flags(ev["name"], MODULE_FRAME)
        loop = np.sort(np.concatenate([wait, ev["ts_ns"].to_numpy()[optimizer].astype(np.int64)]))
        return _HostMarks(np.sort(np.concatenate([sync, wait]).astype(np.int64)), wait[order], wait_end[order],
                          loop, _Calls.of(ev, call | module), _Calls.of(ev, module))


def _launch_threads(ev: pd.DataFrame, corr: np.ndarray) -> np.ndarray:
    """The host thread of each GPU operation's launch call (the runtime call with the same correlation id),
    -1 when the launch is not in the trace."""
    rt = ev[(ev["kind"] == T.RUNTIME).to_numpy() & (ev["correlation"].to_numpy() != -1)]
    out = np.full(len(corr), -1, dtype=np.int64)
    if not len(rt):
        return out
    rt_corr, rt_tid = rt["correlation"].to_numpy(), rt["tid"].to_numpy()
    order = np.argsort(rt_corr, kind="stable")
    rt_corr, rt_tid = rt_corr[order], rt_tid[order]
    pos = np.clip(np.searchsorted(rt_corr, corr), 0, len(rt_corr) - 1)
    found = (corr != -1) & (rt_corr[pos] == corr)
    out[found] = rt_tid[pos[found]]
    return out


def _with_waits(start: np.ndarray, end: np.ndarray, ops: _Ops,
                host: _HostMarks) -> tuple[np.ndarray, np.ndarray]:
    """Each iteration starting with the DataLoader wait that ends just before it (no GPU operation launched
    between the two), as a step marker wrapping `next(loader)` would; the iteration before it then ends there."""
    if not len(host.wait_end_ns):
        return start, end
    j = np.searchsorted(host.wait_end_ns, start, side="right") - 1  # the last wait ending by the start
    lo = np.searchsorted(ops.host_ns, start, side="left")
    last_launch = np.where(lo > 0, ops.host_ns[np.maximum(lo - 1, 0)], np.iinfo(np.int64).min)
    ok = (j >= 0) & (host.wait_end_ns[np.maximum(j, 0)] >= last_launch)
    new_start = np.where(ok, np.minimum(start, host.wait_start_ns[np.maximum(j, 0)]), start)
    new_start[1:] = np.maximum(new_start[1:], start[:-1] + 1)  # never before the previous iteration's start
    new_end = end.copy()
    joined = end[:-1] == start[1:]  # contiguous iterations stay contiguous
    new_end[:-1][joined] = new_start[1:][joined]
    return new_start, new_end


def _name_flags(names: pd.Series, pattern: re.Pattern[str]) -> np.ndarray:
    """pattern.search on each row's name, looking at each name used once."""
    codes = names.cat.codes.to_numpy()
    categories = names.cat.categories
    used = np.unique(codes[codes >= 0])
    hits = np.zeros(len(categories) + 1, dtype=bool)  # the last slot: code -1 (missing) -> False
    hits[used] = np.fromiter((bool(pattern.search(str(categories[c]))) for c in used), dtype=bool, count=len(used))
    return hits[codes]


def _is_loop(start: np.ndarray, end: np.ndarray, tid: np.ndarray, ops: _Ops, host: _HostMarks,
             annotated: bool = False) -> bool:
    """Are the iterations [start, end) (host clock; `tid`: the thread each starts on) a loop: each waiting for
    the DataLoader or calling the optimizer, or else not one call's blocks and with a boundary? `annotated`:
    they are a recurring annotation's occurrences."""
    held = np.searchsorted(host.loop_ns, end, side="left") - np.searchsorted(host.loop_ns, start, side="left")
    if len(start) and float(np.mean(held > 0)) >= EVIDENCE_MIN_SHARE:
        return True
    return not _one_call(start, end, tid, host) and _has_boundary(start, end, ops, host, annotated)


def _one_call(start: np.ndarray, end: np.ndarray, tid: np.ndarray, host: _HostMarks) -> bool:
    """Are the iterations [start, end) one call's blocks: does one outermost call of a thread (an op, an
    annotation, a module call) hold the starts of several of them, NESTED_MIN_SHARE of them in all? A loop's
    iterations each start at the top level, or in a call of their own. Inside an annotation that wraps a
    whole loop (`model_inference`), iterations that each make an outermost module call of their own (one
    model call per denoising step) are still a loop."""
    shared = own_model_call = 0
    for t in np.unique(tid[tid != -1]).tolist():
        mine = tid == t
        shared += _sharing(start[mine], *host.calls.top(int(t)))
        m_start, _ = host.modules.top(int(t))
        held = np.searchsorted(m_start, end[mine], side="left") - np.searchsorted(m_start, start[mine], side="left")
        own_model_call += int((held > 0).sum())
    if not len(start) or shared < NESTED_MIN_SHARE * len(start):
        return False
    return own_model_call < EVIDENCE_MIN_SHARE * len(start)


def _sharing(start: np.ndarray, c_start: np.ndarray, c_end: np.ndarray) -> int:
    """How many of these starts lie in a call (of the sorted, disjoint calls [c_start, c_end)) that holds
    another of them."""
    if not len(c_start) or not len(start):
        return 0
    k = np.searchsorted(c_start, start, side="right") - 1
    k = k[(k >= 0) & (c_end[np.maximum(k, 0)] > start)]
    _, counts = np.unique(k, return_counts=True)
    return int(counts[counts >= 2].sum())


def _has_boundary(start: np.ndarray, end: np.ndarray, ops: _Ops, host: _HostMarks, annotated: bool = False) -> bool:
    """Do the iterations [start, end) (host clock) show a boundary with the outside world? On a rank without
    GPU work the host's own pauses between its top-level operations are one only between the occurrences
    of a recurring annotation (`annotated`: the caller's loop runs there); between bare operations Python
    pauses inside a forward pass as it does between iterations."""
    lo = np.searchsorted(ops.host_ns, start, side="left")
    hi = np.searchsorted(ops.host_ns, end, side="left")
    copies = ops.copies_before()
    has_copy = (copies[hi] - copies[lo]) > 0
    marks = np.searchsorted(host.ts_ns, end, side="left") - np.searchsorted(host.ts_ns, start, side="left")
    if float(np.mean(has_copy | (marks > 0))) >= EVIDENCE_MIN_SHARE:
        return True
    # the GPU idle before each iteration's first operation against the idle between its operations
    with_ops = (hi > lo) & (lo > 0)
    if (not ops.on_gpu and not annotated) or with_ops.sum() < MIN_ITERATIONS - 1 or not len(ops):
        return False
    boundary = float(np.median(ops.idle_before_ns[lo[with_ops]]))
    inside = np.zeros(len(ops) + 1, dtype=np.int64)
    np.add.at(inside, lo[with_ops] + 1, 1)
    np.add.at(inside, hi[with_ops], -1)
    inner = np.cumsum(inside)[:-1] > 0  # operations of an iteration other than its first
    if not inner.any():
        return False
    typical = float(np.median(ops.idle_before_ns[inner]))
    return boundary >= BOUNDARY_GAP_MIN_NS and boundary >= BOUNDARY_GAP_FACTOR * typical


# --- 1. a recurring annotation --------------------------------------------------------------------------
def _annotation_iterations(ev: pd.DataFrame, ops: _Ops,
                           host: _HostMarks) -> tuple[np.ndarray, np.ndarray, str] | None:
    ann = ev[(ev["kind"] == T.ANNOTATION).to_numpy() & (ev["device"].to_numpy() < 0)]
    if len(ann) < MIN_ITERATIONS:
        return None
    tid, code = ann["tid"].to_numpy(), ann["name"].cat.codes.to_numpy().astype(np.int64)
    ts = ann["ts_ns"].to_numpy().astype(np.int64)
    order = np.lexsort((ts, code, tid))  # by thread, name, start: each (thread, name) one run
    tid, code, ts = tid[order], code[order], ts[order]
    end = ts + ann["dur_ns"].to_numpy()[order]
    first = np.flatnonzero(np.r_[True, (tid[1:] != tid[:-1]) | (code[1:] != code[:-1])])
    last = np.r_[first[1:], len(ts)]
    candidates = []  # (time from first start to last end, start index, stop index), loop-like runs only
    for i, j in zip(first.tolist(), last.tolist()):
        if j - i < MIN_ITERATIONS:
            continue
        s, e = ts[i:j], end[i:j]
        if (s[1:] < e[:-1]).any():  # nested or overlapping occurrences: not a loop body
            continue
        cover = (e[:-1] - s[:-1]) / np.maximum(s[1:] - s[:-1], 1)
        if float(np.median(cover)) >= ANNOTATION_MIN_COVER:
            candidates.append((int(e[-1] - s[0]), int((e - s).sum()), i, j))
    # the longest first; only the few longest are checked for a boundary
    for _, _, i, j in sorted(candidates, reverse=True)[:MAX_CANDIDATES]:
        s, e = ts[i:j], end[i:j]
        if len(host.wait_start_ns) >= MIN_ITERATIONS and not _holds_waits(s, e, host):
            continue  # a part of the loop (its post-processing, say), not the loop: the waits are outside
        start, stop = s, np.concatenate([s[1:], e[-1:]])
        if _is_loop(start, stop, tid[i:j], ops, host, annotated=True):
            name = str(ann["name"].cat.categories[int(code[i])])
            return start.astype(np.int64), stop.astype(np.int64), f"annotation {name}"
    return None


def _holds_waits(s: np.ndarray, e: np.ndarray, host: _HostMarks) -> bool:
    """Do at least half of the occurrences [s, e) hold the start of a DataLoader wait?"""
    waits = np.sort(host.wait_start_ns)
    inside = np.searchsorted(waits, e, side="left") - np.searchsorted(waits, s, side="left")
    return float(np.mean(inside > 0)) >= EVIDENCE_MIN_SHARE


# --- 2. the period of the kernel sequence ----------------------------------------------------------------
def _sequence_iterations(ev: pd.DataFrame, ops: _Ops,
                         host: _HostMarks) -> tuple[np.ndarray, np.ndarray, str] | None:
    n = len(ops)
    if n < MIN_ITERATIONS:
        return None
    best: tuple[int, int, np.ndarray, np.ndarray] | None = None  # (covered ops, period, start, end)
    for p in candidate_periods(ops.code, n // MIN_ITERATIONS):
        found = iterations_at(ops, int(p))
        if found is None:
            continue
        covered, start, end = found
        if covered < MIN_COVER * n or len(start) < MIN_ITERATIONS or not _is_loop(start, end, ops.thread_at(start),
                                                                                    ops, host):
            continue
        better = best is None or covered > best[0] * (1 + COVER_TIE) or (
            covered >= best[0] * (1 - COVER_TIE) and p < best[1])
        if better:
            best = (covered, int(p), start, end)
    if best is None:
        return None
    return best[2], best[3], "kernel sequence" if ops.on_gpu else "host operations"


def candidate_periods(code: np.ndarray, max_period: int) -> np.ndarray:
    """Distances between successive operations of one name, the strongest first (distance x count),
    those recurring at least MIN_ITERATIONS - 1 times, at most MAX_CANDIDATES."""
    if max_period < 1 or len(code) < 2:
        return np.zeros(0, dtype=np.int64)
    order = np.argsort(code, kind="stable")
    same = code[order][1:] == code[order][:-1]
    dist = np.diff(order)[same]
    dist = dist[dist <= max_period]
    if not len(dist):
        return np.zeros(0, dtype=np.int64)
    values, counts = np.unique(dist, return_counts=True)
    keep = counts >= MIN_ITERATIONS - 1
    values, counts = values[keep], counts[keep]
    rank = np.lexsort((values, -(values * counts)))  # strongest first; ties: the shorter period
    return values[rank[:MAX_CANDIDATES]].astype(np.int64)


def iterations_at(ops: _Ops, p: int) -> tuple[int, np.ndarray, np.ndarray] | None:
    """The iterations of period p (operations): (operations covered, host start, host end), or None."""
    code = ops.code
    n = len(code)
    if p < MIN_PERIOD or n < 2 * p:
        return None
    eq = code[:-p] == code[p:]
    csum = np.concatenate(([0], np.cumsum(eq)))
    block = (csum[p:] - csum[:-p])[: n - 2 * p + 1]  # block[i]: matches of code[i:i+p] with the next p
    good = (block >= MATCH_MIN * p) & eq[: len(block)]
    if not good.any():
        return None
    s0 = int(np.argmax(good))  # the first repetition
    ref = code[s0:s0 + p]
    anchor = s0 + _phase(ops, s0, p)
    a = code[anchor]
    per = int((ref == a).sum())  # how often the anchor's name runs per period
    occ = np.flatnonzero(code == a)
    at = occ[int(np.searchsorted(occ, anchor)) % per::per]  # its occurrences at the anchor's place in each period
    length = np.diff(np.concatenate([at, [n]]))
    used = np.minimum(length, p)  # a block followed by other work: its first p operations
    shape = np.arange(p)
    idx = np.minimum(at[:, None] + shape[None, :], n - 1)
    refa = code[anchor:anchor + p]
    inside = shape[None, :] < used[:, None]
    match = ((code[idx] == refa[None, :]) & inside).sum(axis=1) / np.maximum(used, 1)
    valid = (length >= (1 - LENGTH_TOLERANCE) * p) & (used >= (1 - LENGTH_TOLERANCE) * p) & (match >= MATCH_MIN)
    if valid.sum() < MIN_ITERATIONS:
        return None
    at, used = at[valid], used[valid]
    start = ops.host_ns[at]
    after = at + used
    inner = after < n
    end = np.empty(len(at), dtype=np.int64)
    end[inner] = ops.host_ns[after[inner]]  # the launch of what follows
    if (~inner).any():  # the block that ends the GPU work: to its last operation's end on the GPU
        end[~inner] = np.maximum(int(ops.gpu_end_ns[int(at[~inner][0]):].max()), start[~inner])
    ok = end > start
    if ok.sum() < MIN_ITERATIONS:
        return None
    return int(used[ok].sum()), start[ok].astype(np.int64), end[ok]


def _phase(ops: _Ops, s0: int, p: int) -> int:
    """Where in the period an iteration starts (offset from s0): at the DataLoader wait of a host
    sequence; else after the GPU's longest idle stretch when that stands out (median over the
    repetitions); else at the first repetition's start."""
    if ops.wait is not None and ops.wait[s0:s0 + p].any():
        return int(np.argmax(ops.wait[s0:s0 + p]))
    reps = (len(ops) - s0) // p
    if reps < 2:
        return 0
    idx = s0 + np.arange(reps)[:, None] * p + np.arange(p)[None, :]
    gaps = np.median(ops.idle_before_ns[idx], axis=0)
    top = int(np.argmax(gaps))
    if gaps[top] >= BOUNDARY_GAP_MIN_NS and gaps[top] >= BOUNDARY_GAP_FACTOR * float(np.median(gaps)):
        return top
    return 0


__all__ = ["MIN_ITERATIONS", "StepSource", "candidate_periods", "detect_iterations", "find_steps", "iterations_at"]
