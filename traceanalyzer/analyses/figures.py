"""The figures: pure functions of a Timeline (and an explicit window) -> frozen results.

Every figure's definition, in words a user can check, is in `traceanalyzer.definitions`; the
code here implements exactly those words. Times are int64 nanoseconds throughout.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .. import intervals as iv
from .. import timeline as T
from ..timeline import Timeline
from .thresholds import SHORT_KERNEL_NS

# Gap-length histogram bins (ns): [0,10us) [10us,100us) ... [1s, inf)
GAP_HISTOGRAM_EDGES_NS = (0, 10_000, 100_000, 1_000_000, 10_000_000, 100_000_000, 1_000_000_000)
DEFAULT_MIN_GAP_NS = 100_000
TOP_GAPS = 10
TOP_KERNELS = 15  # shown in the report
KERNEL_TABLE_ROWS = 200  # kept per device for comparisons (by time)


# --- windows ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Window:
    start_ns: int
    end_ns: int
    basis: str  # "steps" | "gpu_activity" | "host_events" | "empty" | "custom"

    @property
    def dur_ns(self) -> int:
        return max(self.end_ns - self.start_ns, 0)


@dataclass(frozen=True)
class Steps:
    """A rank's host step spans, sorted by start."""

    number: np.ndarray  # int step numbers (ProfilerStep#N -> N)
    start_ns: np.ndarray
    end_ns: np.ndarray

    def __len__(self) -> int:
        return len(self.number)


def steps(tl: Timeline, rank: int) -> Steps:
    """The rank's step spans. `rank_figures` finds them once per rank (`RankAnalysis.spans`) and hands
    them to every figure that needs them (`st=`); a figure asked alone finds them itself."""
    ev = tl.rank_events(rank)
    st = ev[(ev["kind"] == T.STEP).to_numpy()]
    order = np.argsort(st["ts_ns"].to_numpy(), kind="stable")
    start = st["ts_ns"].to_numpy()[order]
    return Steps(st["step"].to_numpy()[order].astype(np.int64), start,
                 start + st["dur_ns"].to_numpy()[order])


def _gpu_work(tl: Timeline, rank: int, device: int | None = None,
              kinds: tuple[str, ...] = T.GPU_WORK_KINDS) -> pd.DataFrame:
    work = tl.gpu_work(rank)
    mask = T.category_mask(work["kind"], kinds) if set(kinds) != set(T.GPU_WORK_KINDS) else None
    if device is not None:
        on_device = work["device"].to_numpy() == device
        mask = on_device if mask is None else mask & on_device
    return work if mask is None else work[mask]


def _span(frame: pd.DataFrame) -> tuple[int, int] | None:
    if not len(frame):
        return None
    ts = frame["ts_ns"].to_numpy()
    return int(ts.min()), int((ts + frame["dur_ns"].to_numpy()).max())


def rank_window(tl: Timeline, rank: int, st: Steps | None = None) -> Window:
    """Host step span; else first to last GPU work on any device; else the host events' span."""
    st = steps(tl, rank) if st is None else st
    if len(st):
        return Window(int(st.start_ns.min()), int(st.end_ns.max()), "steps")
    span = _span(_gpu_work(tl, rank))
    if span:
        return Window(*span, "gpu_activity")
    ev = tl.rank_events(rank)
    host = ev[(ev["device"].to_numpy() < 0) & (ev["kind"] != T.TRACE_SPAN).to_numpy()]
    span = _span(host)
    if span:
        return Window(*span, "host_events")
    return Window(0, 0, "empty")


def device_window(tl: Timeline, rank: int, device: int, st: Steps | None = None) -> Window:
    """The rank's step span; without steps, first to last GPU work on this device."""
    st = steps(tl, rank) if st is None else st
    if len(st):
        return Window(int(st.start_ns.min()), int(st.end_ns.max()), "steps")
    span = _span(_gpu_work(tl, rank, device))
    return Window(*span, "gpu_activity") if span else Window(0, 0, "empty")


def work_union(tl: Timeline, rank: int, device: int | None = None,
               kinds: tuple[str, ...] = T.GPU_WORK_KINDS, comm: bool | None = None) -> iv.IntervalSet:
    """Union of GPU activity intervals (optionally one device, some kinds, comm or not)."""
    w = _gpu_work(tl, rank, device, kinds)
    if comm is not None:
        w = w[w["comm"].to_numpy() == comm]
    ts = w["ts_ns"].to_numpy()
    return iv.union(ts, ts + w["dur_ns"].to_numpy())


# --- GPU busy -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class DeviceBusy:
    device: int
    window: Window
    busy_ns: int
    idle_fraction: float | None  # None when the window is empty
    kernel_ns: int  # union of kernels alone
    comm_ns: int  # union of communication kernels
    exposed_comm_ns: int  # communication kernels running while no other GPU work runs
    # The device's GPU work (kernels, copies, memsets) merged, over the whole trace: what the job's counter
    # logs are aligned and cross-checked with (`counters.merge_busy_sets` joins the ranks').
    work: iv.IntervalSet = field(default_factory=iv.empty, compare=False, repr=False)


def device_busy(tl: Timeline, rank: int, device: int, window: Window) -> DeviceBusy:
    lo, hi = window.start_ns, window.end_ns
    work = work_union(tl, rank, device)
    busy = iv.clip(work, lo, hi)
    busy_ns = iv.total(busy)
    kernel_ns = iv.total(iv.clip(work_union(tl, rank, device, (T.KERNEL,)), lo, hi))
    comm = iv.clip(work_union(tl, rank, device, (T.KERNEL,), comm=True), lo, hi)
    other = iv.clip(work_union(tl, rank, device, comm=False), lo, hi)
    exposed = iv.total(iv.subtract(comm, other))
    idle = 1.0 - busy_ns / window.dur_ns if window.dur_ns > 0 else None
    return DeviceBusy(device, window, busy_ns, idle, kernel_ns, iv.total(comm), exposed, work)


# --- idle gaps ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Gap:
    start_ns: int
    dur_ns: int
    step: int | None  # the host step whose span holds the gap start
    index: int  # position in the device's idle set (every gap, any length): where its cause is


@dataclass(frozen=True)
class GapBin:
    lo_ns: int
    hi_ns: int | None  # None: no upper bound
    count: int
    total_ns: int


@dataclass(frozen=True)
class GapStats:
    min_gap_ns: int
    count: int
    total_ns: int
    largest_ns: int
    histogram: tuple[GapBin, ...]
    top: tuple[Gap, ...]  # longest first


def idle_intervals(tl: Timeline, rank: int, device: int, window: Window,
                   min_gap_ns: int = DEFAULT_MIN_GAP_NS) -> iv.IntervalSet:
    """Maximal idle intervals of the device in the window, at least `min_gap_ns` long."""
    if window.dur_ns <= 0:
        return iv.empty()
    starts, ends = iv.complement(work_union(tl, rank, device), window.start_ns, window.end_ns)
    keep = (ends - starts) >= max(min_gap_ns, 1)
    return starts[keep], ends[keep]


def gap_stats(tl: Timeline, rank: int, device: int, window: Window,
              min_gap_ns: int = DEFAULT_MIN_GAP_NS, top_n: int = TOP_GAPS,
              idle: iv.IntervalSet | None = None, st: Steps | None = None) -> GapStats:
    """Gap figures over the gaps of at least `min_gap_ns` of the device's idle set.

    `idle` is the device's idle set (every gap, any length; `idle_intervals(..., min_gap_ns=0)`),
    computed once per device and shared with the gap attribution and the drawn timeline; each top
    gap keeps its index in that set.
    """
    all_starts, all_ends = idle if idle is not None else idle_intervals(tl, rank, device, window, 0)
    keep = np.flatnonzero((all_ends - all_starts) >= max(min_gap_ns, 1))
    starts, ends = all_starts[keep], all_ends[keep]
    lengths = ends - starts
    edges = np.array(GAP_HISTOGRAM_EDGES_NS + (np.iinfo(np.int64).max,), dtype=np.int64)
    which = np.searchsorted(edges, lengths, side="right") - 1
    bins = tuple(
        GapBin(int(edges[i]), None if i == len(edges) - 2 else int(edges[i + 1]),
               int((which == i).sum()), int(lengths[which == i].sum()))
        for i in range(len(edges) - 1))
    st = steps(tl, rank) if st is None else st
    order = np.argsort(-lengths, kind="stable")[:top_n]
    step_idx = iv.locate(starts[order], st.start_ns, st.end_ns) if len(st) else np.full(len(order), -1)
    top = tuple(Gap(int(starts[i]), int(lengths[i]), int(st.number[j]) if j >= 0 else None, int(keep[i]))
                for i, j in zip(order, step_idx))
    return GapStats(min_gap_ns, len(lengths), int(lengths.sum()),
                    int(lengths.max()) if len(lengths) else 0, bins, top)


# --- memory copies ------------------------------------------------------------------------------
@dataclass(frozen=True)
class CopyDirection:
    direction: str  # "HtoD", "DtoH", "DtoD", "PtoP", "HtoH" or "unknown"
    count: int
    union_ns: int
    bytes: int  # sum over copies whose size the trace records
    bytes_known: int  # how many copies record their size
    bandwidth_gbps: float | None  # bytes / summed duration of the copies with a size, to 0.001 GB/s
    pageable: int
    pinned: int


@dataclass(frozen=True)
class MemcpyStats:
    union_ns: int
    share_of_busy: float | None
    share_of_window: float | None
    directions: tuple[CopyDirection, ...]
    memset_ns: int
    memset_count: int
    memset_bytes: int


def memcpy_stats(tl: Timeline, rank: int, device: int, window: Window, busy_ns: int) -> MemcpyStats:
    lo, hi = window.start_ns, window.end_ns
    copies = _gpu_work(tl, rank, device, (T.MEMCPY,))
    ts = copies["ts_ns"].to_numpy()
    end = ts + copies["dur_ns"].to_numpy()
    inside = (end > lo) & (ts < hi) if window.dur_ns > 0 else np.zeros(len(ts), bool)
    copies = copies[inside]
    union_ns = iv.total(iv.clip(iv.union(ts[inside], end[inside]), lo, hi))
    directions = []
    dir_values = copies["copy_kind"].astype(str).replace("", "unknown").to_numpy()
    for d in sorted(set(dir_values), key=_direction_order):
        c = copies[dir_values == d]
        cts = c["ts_ns"].to_numpy()
        cend = cts + c["dur_ns"].to_numpy()
        nbytes = c["bytes"].to_numpy()
        known = nbytes >= 0
        dur_known = c["dur_ns"].to_numpy()[known].sum()
        total_bytes = int(nbytes[known].sum())
        directions.append(CopyDirection(
            d, len(c), iv.total(iv.clip(iv.union(cts, cend), lo, hi)), total_bytes, int(known.sum()),
            round(float(total_bytes / dur_known), 3) if dur_known > 0 else None,  # bytes/ns == GB/s
            int((c["pinned"].to_numpy() == 0).sum()), int((c["pinned"].to_numpy() == 1).sum())))
    sets = _gpu_work(tl, rank, device, (T.MEMSET,))
    sts = sets["ts_ns"].to_numpy()
    send = sts + sets["dur_ns"].to_numpy()
    in_w = (send > lo) & (sts < hi) if window.dur_ns > 0 else np.zeros(len(sts), bool)
    sbytes = sets["bytes"].to_numpy()[in_w]
    return MemcpyStats(
        union_ns, union_ns / busy_ns if busy_ns else None,
        union_ns / window.dur_ns if window.dur_ns else None, tuple(directions),
        iv.total(iv.clip(iv.union(sts[in_w], send[in_w]), lo, hi)), int(in_w.sum()),
        int(sbytes[sbytes >= 0].sum()))


def _direction_order(d: str) -> int:
    order = ("HtoD", "DtoH", "DtoD", "PtoP", "HtoH", "unknown")
    return order.index(d) if d in order else len(order)


# --- data loading -------------------------------------------------------------------------------
def dataloader_union(tl: Timeline, rank: int) -> iv.IntervalSet:
    ev = tl.rank_events(rank)
    dl = ev[(ev["kind"] == T.DATALOADER).to_numpy()]
    ts = dl["ts_ns"].to_numpy()
    return iv.union(ts, ts + dl["dur_ns"].to_numpy())


def dataloader_waits(tl: Timeline, rank: int, window: Window) -> iv.IntervalSet:
    """The rank's DataLoader waits inside the window, merged."""
    return iv.clip(dataloader_union(tl, rank), window.start_ns, window.end_ns)


def dataloader_wait_ns(tl: Timeline, rank: int, window: Window) -> int:
    return iv.total(dataloader_waits(tl, rank, window))


# --- per step -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class StepFigures:
    step: int
    start_ns: int
    dur_ns: int
    gpu_busy_ns: int  # union of GPU work on all the rank's devices inside the step
    memcpy_ns: int
    dataloader_ns: int
    idle_ns: int  # dur - gpu_busy
    comm_ns: int = 0  # union of communication kernels inside the step
    exposed_comm_ns: int = 0  # communication with no other GPU work running, inside the step


def per_step(tl: Timeline, rank: int, st: Steps | None = None) -> tuple[StepFigures, ...]:
    st = steps(tl, rank) if st is None else st
    if not len(st):
        return ()
    busy = iv.overlap_per_window(work_union(tl, rank), st.start_ns, st.end_ns)
    copy = iv.overlap_per_window(work_union(tl, rank, kinds=(T.MEMCPY,)), st.start_ns, st.end_ns)
    wait = iv.overlap_per_window(dataloader_union(tl, rank), st.start_ns, st.end_ns)
    comm_set = work_union(tl, rank, kinds=(T.KERNEL,), comm=True)
    comm = iv.overlap_per_window(comm_set, st.start_ns, st.end_ns)
    exposed = iv.overlap_per_window(iv.subtract(comm_set, work_union(tl, rank, comm=False)), st.start_ns, st.end_ns)
    dur = st.end_ns - st.start_ns
    return tuple(StepFigures(int(n), int(s), int(d), int(b), int(c), int(w), int(d - b), int(m), int(x))
                 for n, s, d, b, c, w, m, x in zip(st.number, st.start_ns, dur, busy, copy, wait, comm, exposed))


# --- kernels ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class KernelRow:
    """Kernels of one name: how many ran and their summed duration."""

    name: str
    count: int
    total_ns: int
    comm: bool  # a communication kernel (NCCL/RCCL and the like)

    @property
    def mean_ns(self) -> float:
        return self.total_ns / self.count if self.count else 0.0


def top_kernels(tl: Timeline, rank: int, device: int, window: Window,
                top_n: int = TOP_KERNELS) -> tuple[KernelRow, ...]:
    """Kernels that start inside the window, grouped by name, by summed duration (ties: count, name)."""
    k = _gpu_work(tl, rank, device, (T.KERNEL,))
    ts = k["ts_ns"].to_numpy()
    k = k[(ts >= window.start_ns) & (ts < window.end_ns)]
    if not len(k):
        return ()
    g = k.groupby("name", observed=True, sort=False).agg(
        n=("dur_ns", "size"), total_ns=("dur_ns", "sum"), comm=("comm", "max"))
    g["key"] = g.index.astype(str)
    # Ties broken by count, then name: the order never depends on the order of events in the file.
    g = g.sort_values(["total_ns", "n", "key"], ascending=[False, False, True], kind="stable").head(top_n)
    return tuple(KernelRow(str(name), int(n), int(total), bool(comm))
                 for name, n, total, comm in zip(g.index, g["n"], g["total_ns"], g["comm"]))


# Kernel-name families (informative only): memory-bound kernels and FP32 matrix kernels.
MEMORY_BOUND_KERNEL = re.compile(
    r"elementwise|reduce|norm|softmax|copy|(?<!pre)fill|cat_|index|gather|scatter|transpose|pool|embedding|dropout"
    r"|adam|sgd|memset|unrolled|vectorized", re.IGNORECASE)
FP32_MATMUL_KERNEL = re.compile(r"sgemm|f32f32|fp32.*(?:gemm|conv)|(?:gemm|conv).*fp32|scudnn", re.IGNORECASE)


@dataclass(frozen=True)
class KernelTotals:
    """Every kernel of the rank (all devices, the whole trace), summed."""

    count: int
    total_ns: int
    median_ns: float | None  # None without kernels
    short_share: float | None  # share of kernels shorter than SHORT_KERNEL_NS
    memory_bound_ns: int  # in kernels whose names say memory-bound (MEMORY_BOUND_KERNEL)
    fp32_matmul_ns: int  # in FP32 matrix kernels by name (FP32_MATMUL_KERNEL)


def kernel_totals(tl: Timeline, rank: int) -> KernelTotals:
    k = _gpu_work(tl, rank, kinds=(T.KERNEL,))
    durs = k["dur_ns"].to_numpy()
    if not len(durs):
        return KernelTotals(0, 0, None, None, 0, 0)
    return KernelTotals(len(durs), int(durs.sum()), float(np.median(durs)), float((durs < SHORT_KERNEL_NS).mean()),
                        # communication kernels (an all-reduce, an all-gather) are communication, not memory-bound work
                        int(durs[_used_name_flags(k, MEMORY_BOUND_KERNEL) & ~k["comm"].to_numpy(dtype=bool)].sum()),
                        int(durs[_used_name_flags(k, FP32_MATMUL_KERNEL)].sum()))


def _used_name_flags(frame: pd.DataFrame, pattern: re.Pattern[str]) -> np.ndarray:
    """`name_flags` looking only at the names the rows use (the category holds every name of the trace,
    host ops included: thousands, against a few hundred kernel names)."""
    codes = frame["name"].cat.codes.to_numpy()
    categories = frame["name"].cat.categories
    used = np.unique(codes[codes >= 0])
    hits = np.zeros(len(categories) + 1, dtype=bool)  # the last slot: code -1 (missing) -> False
    hits[used] = np.fromiter((bool(pattern.search(str(categories[c]))) for c in used), dtype=bool, count=len(used))
    return hits[codes]


def pageable_htod_copies(tl: Timeline, rank: int) -> int:
    """Host-to-device copies from pageable memory on the rank (all devices, the whole trace)."""
    c = _gpu_work(tl, rank, kinds=(T.MEMCPY,))
    return int(((c["pinned"].to_numpy() == 0) & (c["copy_kind"] == "HtoD").to_numpy()).sum())


def gpu_events(tl: Timeline, rank: int, device: int, window: Window) -> int:
    """GPU activities (kernels, copies, memsets) of the device starting inside the window."""
    w = _gpu_work(tl, rank, device)
    ts = w["ts_ns"].to_numpy()
    return int(((ts >= window.start_ns) & (ts < window.end_ns)).sum())


def range_profiler_capture(tl: Timeline, rank: int) -> bool:
    """A CUPTI range-profiler capture: GPU work recorded as ranges, not kernels."""
    ev = tl.rank_events(rank)
    ann = ev[(ev["kind"] == T.GPU_ANNOTATION).to_numpy()]
    return bool(len(ann) and (ann["category"].astype(str) == "cuda_profiler_range").any())


def launch_times(ev: pd.DataFrame, corr: np.ndarray, gpu_start: np.ndarray, end: bool = False) -> np.ndarray:
    """Start of each GPU operation's launch call on the host (the runtime call with the same correlation
    id), else the operation's own GPU start (`gpu_start`): when the host asked for it. `end`: the call's
    end instead (when the work was queued: the call had returned)."""
    rt = ev[(ev["kind"] == T.RUNTIME).to_numpy() & (ev["correlation"].to_numpy() != -1)]
    if not len(rt) or not (corr != -1).any():
        return gpu_start
    rt_corr = rt["correlation"].to_numpy()
    rt_ts = rt["ts_ns"].to_numpy() + (rt["dur_ns"].to_numpy() if end else 0)
    order = np.argsort(rt_corr, kind="stable")
    rt_corr, rt_ts = rt_corr[order], rt_ts[order]
    pos = np.clip(np.searchsorted(rt_corr, corr), 0, len(rt_corr) - 1)
    found = (corr != -1) & (rt_corr[pos] == corr)
    return np.where(found, rt_ts[pos], gpu_start).astype(np.int64)
