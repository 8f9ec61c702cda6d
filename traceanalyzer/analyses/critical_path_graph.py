"""The dependency graph of each step (analyses/critical_path.py walks and replays it).

Built only from what the trace holds, per step (the window without steps):

* each launching host thread's time, cut into pieces at its runtime calls and top-level operators (a
  piece outside every event is the thread's own untraced time), one after the other;
* each launch call -> the GPU work with its correlation id (a CUDA-graph launch -> every replayed kernel);
* each stream's GPU work in its order;
* an event record -> the stream made to wait on it (cudaStreamWaitEvent);
* each blocking call (device / stream / event synchronize, a blocking copy; `.item()` is its copy and
  stream synchronize) -> the GPU work it waited for: the call ends no earlier than that work;
* with several ranks, each collective kernel -> the same collective on the other ranks (by `comm_seq`,
  else order in its group): it ends no earlier than the last rank's start plus its own transfer time.

Where the trace does not hold an edge, an assumption stands in (the `A_*` texts), counted per use. Lags
(launch latency, a stream's gap) are kept as observed, so replaying the graph with the observed durations
gives back the observed times.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .. import timeline as T
from ..timeline import Timeline
from . import figures as F
from .host import launching_threads
from .iterations import find_steps
from .thresholds import CRITICAL_PATH_UNEXPLAINED_WAIT_NS, SYNC_TOLERANCE_NS

# --- segment kinds --------------------------------------------------------------------------------
HOST_OP = "host op"  # host time inside an operator, annotation or runtime call other than a launch or sync
LAUNCH = "launch"  # a launch (or async copy) call, and the latency from it to its GPU work's start
KERNEL = "kernel"  # a kernel or memset on the GPU
COPY = "copy"  # a memory copy on the GPU
SYNC_WAIT = "sync wait"  # a blocking call's own time, or its wait on work outside the step
PEER_WAIT = "peer wait"  # another rank's work this rank's collective waited for
IDLE = "idle"  # a launching thread outside every recorded event, or a stream's unexplained gap
SEGMENT_KINDS = (HOST_OP, LAUNCH, KERNEL, COPY, SYNC_WAIT, PEER_WAIT, IDLE)

# Runtime calls by role (CUDA runtime and driver, HIP).
SYNC_DEVICE = re.compile(r"^(cuda|hip)(Device|Thread)Synchronize$|^cuCtxSynchronize$", re.IGNORECASE)
SYNC_STREAM = re.compile(r"^(cuda|hip)StreamSynchronize$|^cuStreamSynchronize$", re.IGNORECASE)
SYNC_EVENT = re.compile(r"^(cuda|hip)EventSynchronize$|^cuEventSynchronize$", re.IGNORECASE)
BLOCKING_COPY = re.compile(r"^(cuda|hip)Memcpy(2D|3D)?$|^hipMemcpyWithStream$|^cuMemcpy(DtoH|HtoD|DtoD)?(_v2)?$",
                           re.IGNORECASE)
EVENT_RECORD = re.compile(r"^(cuda|hip)EventRecord\w*$|^cuEventRecord\w*$", re.IGNORECASE)
STREAM_WAIT = re.compile(r"^(cuda|hip)StreamWaitEvent\w*$|^cuStreamWaitEvent\w*$", re.IGNORECASE)
# Kineto's cuda_sync rows (GPU_ANNOTATION on the stream concerned), sharing the call's correlation id.
SYNC_ROW = re.compile(r"^(Stream Sync|Stream Wait Event)$")

# Host kinds whose names a what-if glob matches (and whose time they scale): not steps, not the capture span.
GLOB_HOST_KINDS = (T.CPU_OP, T.ANNOTATION, T.DATALOADER, T.RUNTIME, T.PYTHON, T.OTHER)
# Host kinds that cut a thread's time into named pieces (their outermost rows).
NAMED_HOST_KINDS = (T.CPU_OP, T.ANNOTATION, T.DATALOADER, T.OTHER)

# Assumptions that stand in for edges the trace does not hold (the keys of `CriticalPath.assumptions`).
A_STREAM_SYNC = "a stream synchronize with no stream recorded waits for every stream of the rank"
A_EVENT_STREAM = "an event is recorded on the stream of the thread's previous launch"
A_EVENT_OF_WAIT = "a wait or event synchronize is on the thread's previous event record"
A_WAIT_STREAM = "a stream wait with no stream recorded applies to the stream of the thread's next launch"
A_NO_LAUNCH = ("GPU work without its launch call in the trace follows its stream predecessor after the observed gap "
               "(the stream's first keeps its observed start)")
A_OUTSIDE = "a wait on work of an earlier step keeps its observed end"
A_THREAD = "a launching thread other than the step's wakes when the step's thread reached the same time"
A_COLLECTIVE_ORDER = "collectives without a sequence number are matched across ranks by their order"
A_RANK_START = "each rank's step starts at its observed time"
A_TAIL = ("the step's thread's last stretch with no event is an untraced wait for the step's other work "
          "(it ends as long after that work as it did)")
A_IMPLICIT_WAIT = ("GPU work that starts, after a wait its launch and stream do not explain, as work on another "
                   "stream ends waited for that work (an event the trace does not show)")
A_CONTRADICTED = "an inferred edge the observed times contradict was left out"
A_NOT_CONVERGED = "the replay stopped before every time settled (a cycle in the inferred edges)"

START, END = 0, 1
_BIG = np.int64(1) << np.int64(62)


# --- the graph ------------------------------------------------------------------------------------
@dataclass
class Graph:
    """Nodes sorted by (group, chain, start): chains are contiguous runs of one group."""

    s0: np.ndarray  # observed start, ns relative to `origin`
    e0: np.ndarray  # observed end
    d: np.ndarray  # own duration (a sync's own part; a collective's transfer part)
    kind: np.ndarray  # index into SEGMENT_KINDS
    name: np.ndarray  # object array of names
    rank: np.ndarray  # index into Timeline.ranks
    group: np.ndarray  # index into `groups`
    chain_first: np.ndarray  # bool: first node of its chain in its group
    clag: np.ndarray  # lag after the chain predecessor's end
    floor_s: np.ndarray  # start no earlier than
    floor_e: np.ndarray  # end no earlier than (fixed waits)
    glob_kind: np.ndarray  # 0 host piece, 1 GPU work (how rules reach it)
    # cross edges: src, dst, src point, dst point (START/END), lag
    src: np.ndarray
    dst: np.ndarray
    sp: np.ndarray
    dp: np.ndarray
    lag: np.ndarray
    groups: list[tuple[int, int | None, int, int]]  # (rank, step number, start, end) relative to origin
    origin: int
    assumptions: dict[str, int]
    # what-if: per node, the host interval its factor is read over ((thread key, lo, hi), lo == hi: a point)
    thread_key: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    span_lo: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    span_hi: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    gpu_rows: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # event row per GPU node (-1)
    launch_cap: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # the rank's usual launch latency
    # the step's thread's last stretch without an event, to the step's end: not a sink (see `_sinks`)
    trailing: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))


def step_threads(tl: Timeline, rank: int) -> tuple[tuple[tuple[int, int], ...], tuple[int, int] | None]:
    """The launching threads, the step's thread (the one holding the step markers, else the busiest launcher)
    first among them."""
    threads, _, _ = launching_threads(tl, rank)
    ev = tl.rank_events(rank)
    step_rows = (ev["kind"] == T.STEP).to_numpy() & (ev["tid"].to_numpy() >= 0)
    if step_rows.any():
        at = int(np.flatnonzero(step_rows)[0])
        main: tuple[int, int] | None = (int(ev["pid"].to_numpy()[at]), int(ev["tid"].to_numpy()[at]))
    else:
        main = threads[0] if threads else None
    if main is not None:
        threads = (main,) + tuple(x for x in threads if x != main)
    return tuple(threads), main


def note_assumption(assumptions: dict[str, int], text: str, n: int) -> None:
    if n > 0:
        assumptions[text] = assumptions.get(text, 0) + int(n)


def _steps_of(tl: Timeline, rank: int, st: F.Steps | None) -> tuple[list[tuple[int | None, int, int]], bool]:
    if st is None:
        st, _ = find_steps(tl, rank, F.steps(tl, rank))
    if len(st):
        return [(int(n), int(a), int(b)) for n, a, b in zip(st.number, st.start_ns, st.end_ns) if b > a], True
    w = F.rank_window(tl, rank, st)
    return ([(None, w.start_ns, w.end_ns)] if w.dur_ns > 0 else []), False


def _flags(names: pd.Categorical, pattern: re.Pattern[str], rows: np.ndarray | None = None) -> np.ndarray:
    """Rows whose name matches `pattern`; only the names of `rows` are tried (a trace has many thousand names,
    its runtime calls a few dozen)."""
    codes = names.codes.to_numpy() if hasattr(names.codes, "to_numpy") else np.asarray(names.codes)
    used = np.unique(codes[rows]) if rows is not None else np.arange(len(names.categories))
    used = used[used >= 0]
    table = np.zeros(len(names.categories) + 1, bool)
    cats = names.categories
    table[used] = [bool(pattern.search(str(cats[c]))) for c in used]
    return table[codes]


def _rank_nodes(tl: Timeline, rank: int, spans: list[tuple[int | None, int, int]], group0: int,
                origin: int, assumptions: dict[str, int], chain0: int, narrow: bool) -> dict[str, np.ndarray]:
    """One rank's nodes and cross edges (indices local to the rank's node list); `narrow`: only the rows that
    overlap the spans are read (a few steps of a long trace)."""
    ev = tl.rank_events(rank)
    base_rows = None
    if narrow and spans:
        w_lo, w_hi = min(a for _, a, _ in spans), max(b for _, _, b in spans)
        start = ev["ts_ns"].to_numpy()
        base_rows = np.flatnonzero((start < w_hi) & (start + ev["dur_ns"].to_numpy() > w_lo))
        ev = ev.iloc[base_rows]
    ts = ev["ts_ns"].to_numpy() - origin
    end = ts + ev["dur_ns"].to_numpy()
    kind = ev["kind"]
    tid = ev["tid"].to_numpy()
    pid = ev["pid"].to_numpy()
    dev = ev["device"].to_numpy()
    corr = ev["correlation"].to_numpy()
    names = ev["name"].cat
    name_codes = names.codes.to_numpy()
    categories = np.asarray(names.categories, dtype=object)
    g_start = np.array([a - origin for _, a, _ in spans], dtype=np.int64)
    g_end = np.array([b - origin for _, _, b in spans], dtype=np.int64)

    def group_of(t: np.ndarray) -> np.ndarray:
        i = np.searchsorted(g_start, t, side="right") - 1
        ok = (i >= 0) & (t < g_end[np.clip(i, 0, None)]) if len(g_start) else np.zeros(len(t), bool)
        return np.where(ok, i, -1)

    threads, main = step_threads(tl, rank)

    # --- host pieces ---
    host = (dev < 0) & (tid >= 0)
    runtime = host & (kind == T.RUNTIME).to_numpy()
    named = host & T.category_mask(kind, NAMED_HOST_KINDS)
    gpu = T.category_mask(kind, T.GPU_WORK_KINDS) & (dev >= 0)
    gpu_corr = np.unique(corr[gpu & (corr >= 0)])
    is_launch = runtime & np.isin(corr, gpu_corr) & (corr >= 0)
    rt_at = np.flatnonzero(runtime)
    f_dev, f_stream, f_event = (_flags(names, x, rt_at) for x in (SYNC_DEVICE, SYNC_STREAM, SYNC_EVENT))
    f_copy, f_record, f_wait = (_flags(names, x, rt_at) for x in (BLOCKING_COPY, EVENT_RECORD, STREAM_WAIT))
    is_sync = runtime & (f_dev | f_stream | f_event | f_copy)
    piece: dict[str, list[np.ndarray]] = {k: [] for k in ("s", "e", "kind", "name", "thread", "first", "clag",
                                                         "fs", "group", "rt", "trail")}
    anchors: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (piece local idx, main-thread time, -)
    thread_keys = []
    main_pieces: tuple[np.ndarray, np.ndarray] | None = None
    n_before = 0
    for k, (p, t) in enumerate(threads):
        on = host & (pid == p) & (tid == t)
        rt_rows = np.flatnonzero(on & runtime)
        rt_rows = rt_rows[np.lexsort((-end[rt_rows], ts[rt_rows]))]
        nm_rows = np.flatnonzero(on & named)
        nm_rows = nm_rows[np.lexsort((-end[nm_rows], ts[nm_rows]))]
        cuts = np.unique(np.concatenate([ts[rt_rows], end[rt_rows], ts[nm_rows], end[nm_rows], g_start, g_end]))
        if len(cuts) < 2:
            continue
        lo, hi = cuts[:-1], cuts[1:]
        grp = group_of(lo)
        keep = (grp >= 0) & (hi > lo)
        lo, hi, grp = lo[keep], hi[keep], grp[keep]
        # the runtime call and the innermost named row over each piece (pieces are cut at every row's ends)
        at_rt = _innermost(ts[rt_rows], end[rt_rows], lo)
        rt_of = np.where(at_rt >= 0, rt_rows[np.clip(at_rt, 0, None)] if len(rt_rows) else -1, -1)
        at_nm = _innermost(ts[nm_rows], end[nm_rows], lo)
        nm_of = np.where(at_nm >= 0, nm_rows[np.clip(at_nm, 0, None)] if len(nm_rows) else -1, -1)
        pk = np.full(len(lo), SEGMENT_KINDS.index(IDLE), np.int64)
        pk[nm_of >= 0] = SEGMENT_KINDS.index(HOST_OP)
        pk[rt_of >= 0] = SEGMENT_KINDS.index(HOST_OP)
        rtc = np.clip(rt_of, 0, None)
        pk[(rt_of >= 0) & is_launch[rtc]] = SEGMENT_KINDS.index(LAUNCH)
        pk[(rt_of >= 0) & is_sync[rtc]] = SEGMENT_KINDS.index(SYNC_WAIT)
        label_row = np.where(rt_of >= 0, rt_of, nm_of)
        pname = np.where(label_row >= 0, categories[np.clip(name_codes[np.clip(label_row, 0, None)], 0, None)]
                         if len(categories) else "", "")
        first = np.ones(len(lo), bool)
        first[1:] = grp[1:] != grp[:-1]
        gap_before = np.zeros(len(lo), bool)
        gap_before[1:] = lo[1:] > hi[:-1]
        is_main = (p, t) == main
        trail = np.zeros(len(lo), bool)
        if is_main:
            # the step's thread: its untraced time is a piece of its own (already among the pieces, as idle);
            # but its last stretch without an event, up to the step's end, is an untraced wait (`_sinks`)
            fs = np.where(first, lo, g_start[grp])
            main_pieces = (lo, hi)
            last = np.ones(len(lo), bool)
            last[:-1] = grp[1:] != grp[:-1]
            trail = last & (pk == SEGMENT_KINDS.index(IDLE)) & (hi == g_end[grp])
        else:
            # another thread: outside its events it waits for the step's thread (an anchor edge below)
            idle = pk == SEGMENT_KINDS.index(IDLE)
            lo, hi, grp, pk, pname, rt_of = lo[~idle], hi[~idle], grp[~idle], pk[~idle], pname[~idle], rt_of[~idle]
            trail = np.zeros(len(lo), bool)
            first = np.ones(len(lo), bool)
            first[1:] = grp[1:] != grp[:-1]
            gap_before = np.zeros(len(lo), bool)
            gap_before[1:] = lo[1:] > hi[:-1]
            fs = g_start[grp].copy()
            woke = first | gap_before
            anchors.append((np.flatnonzero(woke) + n_before, lo[woke], grp[woke]))
        piece["s"].append(lo)
        piece["e"].append(hi)
        piece["kind"].append(pk)
        piece["name"].append(pname.astype(object))
        piece["thread"].append(np.full(len(lo), chain0 + k, np.int64))
        piece["first"].append(first)
        piece["clag"].append(np.zeros(len(lo), np.int64))
        piece["fs"].append(fs)
        piece["group"].append(grp)
        piece["rt"].append(rt_of)
        piece["trail"].append(trail)
        thread_keys.append(np.full(len(lo), k, np.int64))
        n_before += len(lo)

    def cat(k: str, dtype: object) -> np.ndarray:
        return np.concatenate(piece[k]).astype(dtype) if piece[k] else np.zeros(0, dtype)  # type: ignore[call-overload]

    hs, he, hk, hn = cat("s", np.int64), cat("e", np.int64), cat("kind", np.int64), cat("name", object)
    hchain, hfirst, hclag, hfs, hgrp, hrt = (cat("thread", np.int64), cat("first", bool), cat("clag", np.int64),
                                             cat("fs", np.int64), cat("group", np.int64), cat("rt", np.int64))
    hkey = np.concatenate(thread_keys) if thread_keys else np.zeros(0, np.int64)
    nh = len(hs)
    hd = he - hs
    hfe = np.full(nh, np.iinfo(np.int64).min // 4, np.int64)
    src: list[np.ndarray] = []
    dst: list[np.ndarray] = []
    sp: list[np.ndarray] = []
    dp: list[np.ndarray] = []
    lag: list[np.ndarray] = []

    def edge(a: np.ndarray, b: np.ndarray, pa: int, pb: int, lg: np.ndarray) -> None:
        src.append(np.asarray(a, np.int64))
        dst.append(np.asarray(b, np.int64))
        sp.append(np.full(len(a), pa, np.int8))
        dp.append(np.full(len(a), pb, np.int8))
        lag.append(np.asarray(lg, np.int64))

    # anchors: another thread's piece after its idle time starts when the step's thread reached that time
    for idx, t_obs, grp in anchors:
        if main_pieces is None or not len(idx):
            continue
        main_idx = np.flatnonzero(hchain == chain0 + threads.index(main))  # type: ignore[arg-type]
        m_end = he[main_idx]
        j = np.searchsorted(m_end, t_obs, side="right") - 1
        ok = j >= 0
        ok[ok] &= hgrp[main_idx[j[ok]]] == grp[ok]
        edge(main_idx[j[ok]], idx[ok], END, START, t_obs[ok] - m_end[j[ok]])
        hfs[idx[~ok]] = t_obs[~ok]
        note_assumption(assumptions, A_THREAD, int(ok.sum()))

    # --- GPU nodes ---
    grows = np.flatnonzero(gpu)
    gs, ge = ts[grows], end[grows]
    gstream = ev["stream"].to_numpy()[grows]
    gdev = dev[grows]
    gcorr = corr[grows]
    # the launch call of each GPU row: the runtime row with its correlation (pieces: the call's first piece)
    rt_all = np.flatnonzero(runtime & (corr >= 0))
    rt_sorted = rt_all[np.argsort(corr[rt_all], kind="stable")]
    at = np.searchsorted(corr[rt_sorted], gcorr)
    has = (gcorr >= 0) & (at < len(rt_sorted))
    has[has] &= corr[rt_sorted[at[has]]] == gcorr[has]
    launch_row = np.where(has, rt_sorted[np.clip(at, 0, max(len(rt_sorted) - 1, 0))] if len(rt_sorted) else -1, -1)
    # the host piece where each runtime row starts / ends (pieces carry their runtime row)
    piece_of_start: dict[int, int] = {}
    piece_of_end: dict[int, int] = {}
    if nh:
        # a call's first and last pieces inside a step (a call cut by the step's edge keeps its part inside)
        with_rt = np.flatnonzero(hrt >= 0)
        rows_rt = hrt[with_rt]
        piece_of_start = dict(zip(rows_rt[::-1].tolist(), with_rt[::-1].tolist()))
        piece_of_end = dict(zip(rows_rt.tolist(), with_rt.tolist()))
    rt_first = pd.Series(piece_of_start, dtype=np.int64)

    def lookup(series: pd.Series, rows: np.ndarray) -> np.ndarray:
        if not len(series):
            return np.full(len(rows), -1, np.int64)
        return series.reindex(rows).fillna(-1).to_numpy(np.int64)

    launch_piece = lookup(rt_first, launch_row)
    launch_t = np.where(launch_row >= 0, ts[np.clip(launch_row, 0, None)], gs)
    ggrp = group_of(launch_t)
    keep = ggrp >= 0
    grows, gs, ge, gstream, gdev, ggrp, launch_piece, launch_t = (
        grows[keep], gs[keep], ge[keep], gstream[keep], gdev[keep], ggrp[keep], launch_piece[keep], launch_t[keep])
    ng = len(grows)
    gkind = np.where(T.category_mask(kind, (T.MEMCPY,))[grows], SEGMENT_KINDS.index(COPY), SEGMENT_KINDS.index(KERNEL))
    gname = categories[np.clip(name_codes[grows], 0, None)] if len(categories) else np.full(ng, "", object)
    # streams: chain ids after the threads'
    stream_key = gdev.astype(np.int64) * (1 << 40) + gstream
    skeys, sidx = np.unique(stream_key, return_inverse=True)
    gchain = chain0 + len(threads) + sidx
    order = np.lexsort((ge, gs, ggrp, gchain))
    grows, gs, ge, gstream, gdev, ggrp, launch_piece, launch_t, gkind, gname, gchain = (
        a[order] for a in (grows, gs, ge, gstream, gdev, ggrp, launch_piece, launch_t, gkind, gname, gchain))
    gfirst = np.ones(ng, bool)
    gfirst[1:] = (gchain[1:] != gchain[:-1]) | (ggrp[1:] != ggrp[:-1])
    prev_e = np.empty(ng, np.int64)
    prev_e[1:] = ge[:-1]
    prev_e[:1] = np.iinfo(np.int64).min // 4
    # work still running from an earlier step on the same stream: held at its observed end
    same_stream_before = np.zeros(ng, bool)
    same_stream_before[1:] = gchain[1:] == gchain[:-1]
    carried = gfirst & same_stream_before
    gfs = g_start[ggrp].copy()
    gfs[carried] = np.maximum(gfs[carried], prev_e[carried])
    no_launch = launch_piece < 0
    # without its launch, work follows its stream predecessor after the observed gap; a stream's first held
    gfs[no_launch & gfirst] = gs[no_launch & gfirst]
    note_assumption(assumptions, A_NO_LAUNCH, int(no_launch.sum()))

    # --- event record -> stream wait; blocking calls -> the work they wait for ---
    # each stream's work in launch order: "the last work launched on stream X before t"
    by_launch = np.lexsort((launch_t, gchain))
    bl_chain, bl_t = gchain[by_launch], launch_t[by_launch]

    def last_launched(chain: np.ndarray, t: np.ndarray) -> np.ndarray:
        key_lo = np.searchsorted(bl_chain, chain, side="left")
        key_hi = np.searchsorted(bl_chain, chain, side="right")
        out = np.full(len(t), -1, np.int64)
        for c in np.unique(chain):
            m = chain == c
            a, b = key_lo[m][0], key_hi[m][0]
            j = np.searchsorted(bl_t[a:b], t[m], side="right") - 1
            out[m] = np.where(j >= 0, by_launch[a + np.clip(j, 0, None)], -1)
        return out

    def next_launched(chain: np.ndarray, t: np.ndarray) -> np.ndarray:
        out = np.full(len(t), -1, np.int64)
        for c in np.unique(chain):
            m = chain == c
            a, b = np.searchsorted(bl_chain, c, "left"), np.searchsorted(bl_chain, c, "right")
            j = np.searchsorted(bl_t[a:b], t[m], side="left")
            out[m] = np.where(j < b - a, by_launch[a + np.clip(j, 0, max(b - a - 1, 0))], -1)
        return out

    # Kineto's cuda_sync rows name the stream a stream synchronize / stream wait was on
    stream_col = ev["stream"].to_numpy()
    ann = T.category_mask(kind, (T.GPU_ANNOTATION,))
    ann &= _flags(names, SYNC_ROW, np.flatnonzero(ann)) & (corr >= 0) & (stream_col >= 0)
    ann_key = pd.Series(dev[ann].astype(np.int64) * (1 << 40) + stream_col[ann], index=corr[ann])
    ann_key = ann_key[~ann_key.index.duplicated()]
    key_chain = dict(zip(skeys.tolist(), (chain0 + len(threads) + np.arange(len(skeys))).tolist()))
    gpu_of_corr = pd.Series(np.arange(ng), index=corr[grows]) if ng else pd.Series(dtype=np.int64)
    gpu_of_corr = gpu_of_corr[~gpu_of_corr.index.duplicated(keep="last")]
    all_chains = np.unique(gchain) if ng else np.zeros(0, np.int64)
    waited_record = _waited_records(ev, kind, host & runtime & f_record, corr, ts, dev, key_chain)
    sync_src: list[int] = []
    sync_dst: list[int] = []
    sync_fixed: list[tuple[int, int]] = []  # (piece, observed end) for waits on work outside the step
    wait_src: list[int] = []
    wait_dst: list[int] = []
    for p, t in threads:
        on = host & (pid == p) & (tid == t) & runtime
        lr = np.flatnonzero(on & is_launch)
        lr = lr[np.argsort(ts[lr], kind="stable")]
        lg = lookup(gpu_of_corr, corr[lr]) if len(lr) else np.zeros(0, np.int64)
        lchain = np.where(lg >= 0, gchain[np.clip(lg, 0, None)], -1) if ng and len(lr) else np.full(len(lr), -1)
        rec = np.flatnonzero(on & f_record)
        rec = rec[np.argsort(ts[rec], kind="stable")]
        calls = np.flatnonzero(on & (f_dev | f_stream | f_event | f_copy | f_wait))
        calls = calls[np.argsort(ts[calls], kind="stable")]
        for r in calls.tolist():
            waits_on: list[int] = []  # the GPU nodes the call waits for
            if f_dev[r] or f_copy[r] or f_stream[r]:
                chains = all_chains
                if f_stream[r]:
                    key = ann_key.get(corr[r]) if corr[r] >= 0 else None
                    if key is not None and int(key) in key_chain:
                        chains = np.array([key_chain[int(key)]])
                    else:
                        note_assumption(assumptions, A_STREAM_SYNC, 1)
                if len(chains):
                    got = last_launched(chains, np.full(len(chains), ts[r] + 1))
                    waits_on = [int(x) for x in got if x >= 0]
                if f_copy[r] and corr[r] >= 0 and corr[r] in gpu_of_corr.index:
                    waits_on.append(int(gpu_of_corr[corr[r]]))
            else:  # an event synchronize or a stream wait: on the event record its cuda_sync row names, else
                # on the thread's last event record
                named = waited_record.get(int(corr[r])) if corr[r] >= 0 else None
                if named is not None:
                    ch, rec_ts = named
                else:
                    j = np.searchsorted(ts[rec], ts[r], side="right") - 1
                    if j < 0:
                        continue
                    note_assumption(assumptions, A_EVENT_OF_WAIT, 1)
                    k = np.searchsorted(ts[lr], ts[rec[j]], side="right") - 1
                    if k < 0 or lchain[k] < 0:
                        continue
                    note_assumption(assumptions, A_EVENT_STREAM, 1)
                    ch, rec_ts = int(lchain[k]), int(ts[rec[j]])
                producer = int(last_launched(np.array([ch]), np.array([rec_ts + 1]))[0])
                if producer < 0:
                    continue
                if f_event[r]:
                    waits_on = [producer]
                else:
                    key = ann_key.get(corr[r]) if corr[r] >= 0 else None
                    if key is not None and int(key) in key_chain:
                        wch = key_chain[int(key)]
                    else:
                        nxt = np.searchsorted(ts[lr], ts[r], side="right")
                        wch = int(lchain[nxt]) if nxt < len(lr) else -1
                        note_assumption(assumptions, A_WAIT_STREAM, 1)
                    if wch < 0 or wch == ch:
                        continue
                    consumer = int(next_launched(np.array([wch]), np.array([ts[r]]))[0])
                    if consumer >= 0:
                        wait_src.append(producer)
                        wait_dst.append(consumer)
                    continue
            last_piece = piece_of_end.get(int(r), -1)
            if not waits_on or last_piece < 0:
                continue
            w = np.array(waits_on, np.int64)
            inside = ggrp[w] == hgrp[last_piece]
            if (~inside).any():
                sync_fixed.append((last_piece, int(ge[w[~inside]].max())))
                note_assumption(assumptions, A_OUTSIDE, int((~inside).sum()))
            sync_src.extend(w[inside].tolist())
            sync_dst.extend([last_piece] * int(inside.sum()))

    # a blocking call's own part: its end after the latest work it waited for (or its whole time, no wait)
    if sync_dst:
        sd = np.array(sync_dst, np.int64)
        ss = np.array(sync_src, np.int64)
        waited_end = pd.Series(ge[ss]).groupby(sd).max()
        tails = he[waited_end.index.to_numpy()] - np.maximum(hs[waited_end.index.to_numpy()], waited_end.to_numpy())
        hd[waited_end.index.to_numpy()] = np.clip(tails, 0, None)
        tail_of = pd.Series(hd[waited_end.index.to_numpy()], index=waited_end.index)
        edge(nh + ss, sd, END, END, tail_of.reindex(sd).to_numpy(np.int64))
    for piece_i, e_obs in sync_fixed:
        hfe[piece_i] = max(hfe[piece_i], min(e_obs, he[piece_i]))
    # work that starts, after a wait neither its launch nor its stream explains, as work on another stream ends
    # waited for it (an event the trace does not show: a compute stream after an all-reduce)
    implicit_src, implicit_dst = _implicit_waits(gs, ge, gdev, gchain, ggrp, np.where(gfirst, np.iinfo(np.int64).min
                                                                                       // 4, prev_e),
                                                 np.where(no_launch, gs, launch_t), set(zip(wait_src, wait_dst)))
    note_assumption(assumptions, A_IMPLICIT_WAIT, len(implicit_src))
    wait_src += implicit_src
    wait_dst += implicit_dst
    # Each GPU node's start: the latest of its launch, its stream predecessor's end and the work its stream
    # was made to wait for sets it (that constraint's lag is what was observed); the others keep their
    # minimal lag (no wait after the predecessor; the rank's median launch latency).
    waited = np.full(ng, np.iinfo(np.int64).min // 4, np.int64)
    if wait_src:
        ws, wd = np.array(wait_src, np.int64), np.array(wait_dst, np.int64)
        np.maximum.at(waited, wd, ge[ws])
    launch_at = np.where(no_launch, np.iinfo(np.int64).min // 4, launch_t)
    queue_bound = ~gfirst & (((prev_e >= launch_at) & (prev_e >= waited)) | (no_launch & (prev_e >= waited)))
    wait_bound = ~queue_bound & (waited >= launch_at)
    launch_bound = ~no_launch & ~queue_bound & ~wait_bound
    gclag = np.where(queue_bound, gs - prev_e, 0)
    latency = gs - launch_t
    typical = int(np.median(latency[launch_bound])) if launch_bound.any() else 0
    llag = np.where(launch_bound, latency, np.clip(np.minimum(latency, typical), 0, None))
    gi = nh + np.arange(ng)
    ok = ~no_launch
    edge(launch_piece[ok], gi[ok], START, START, llag[ok])
    if wait_src:
        edge(nh + ws, nh + wd, END, START, np.where(wait_bound[wd], gs[wd] - waited[wd], 0))

    n = nh + ng
    out = {
        "s0": np.concatenate([hs, gs]), "e0": np.concatenate([he, ge]), "d": np.concatenate([hd, ge - gs]),
        "kind": np.concatenate([hk, gkind]), "name": np.concatenate([hn, gname.astype(object)]),
        "rank": np.full(n, rank, np.int64), "group": np.concatenate([hgrp, ggrp]) + group0,
        "chain": np.concatenate([hchain, gchain]), "first": np.concatenate([hfirst, gfirst]),
        "clag": np.concatenate([hclag, gclag]), "fs": np.concatenate([hfs, gfs]),
        "fe": np.concatenate([hfe, np.full(ng, np.iinfo(np.int64).min // 4, np.int64)]),
        "glob_kind": np.concatenate([np.zeros(nh, np.int64), np.ones(ng, np.int64)]),
        "trail": np.concatenate([cat("trail", bool), np.zeros(ng, bool)]),
        "launch_cap": np.full(n, typical, np.int64),
        "thread_key": np.concatenate([hkey, np.full(ng, -1, np.int64)]),
        "span_lo": np.concatenate([hs, np.where(launch_piece >= 0, launch_t, -1)]),
        "span_hi": np.concatenate([he, np.where(launch_piece >= 0, launch_t, -1)]),
        "launch_key": np.concatenate([np.full(nh, -1, np.int64),
                                      np.where(launch_piece >= 0, hkey[np.clip(launch_piece, 0, None)]
                                               if nh else -1, -1)]),
        "gpu_row": np.concatenate([np.full(nh, -1, np.int64), grows if base_rows is None else base_rows[grows]]),
        "comm": np.concatenate([np.zeros(nh, bool), ev["comm"].to_numpy()[grows]]),
        "comm_seq": np.concatenate([np.full(nh, -1, np.int64), ev["comm_seq"].to_numpy()[grows]]),
        "comm_group": np.concatenate([np.full(nh, "", object),
                                      np.asarray(ev["comm_group"].to_numpy()[grows], dtype=object)]),
        "src": np.concatenate(src) if src else np.zeros(0, np.int64),
        "dst": np.concatenate(dst) if dst else np.zeros(0, np.int64),
        "sp": np.concatenate(sp) if sp else np.zeros(0, np.int8),
        "dp": np.concatenate(dp) if dp else np.zeros(0, np.int8),
        "lag": np.concatenate(lag) if lag else np.zeros(0, np.int64),
        "n_chains": np.array([len(threads) + len(skeys)]),
        "threads": np.array([f"{p}:{t}" for p, t in threads], dtype=object),
    }
    return out


def build_graph(tl: Timeline, ranks: list[int], steps: dict[int, F.Steps | None], median_only: bool = False) -> Graph:
    """The graph of every step of `ranks` (the first rank's median step alone with `median_only`: what the
    report shows, built from that step's rows only, so a long trace costs one step's graph)."""
    assumptions: dict[str, int] = {}
    per_rank = {r: _steps_of(tl, r, steps.get(r)) for r in ranks}
    if median_only and len(per_rank[ranks[0]][0]) > 1:
        own = per_rank[ranks[0]][0]
        by_len = sorted(range(len(own)), key=lambda i: (own[i][2] - own[i][1], i))
        number = own[by_len[(len(by_len) - 1) // 2]][0]
        per_rank = {r: ([s for s in spans if s[0] == number], found) for r, (spans, found) in per_rank.items()}
    origin = min((a for spans, _ in per_rank.values() for _, a, _ in spans), default=0)
    groups: list[tuple[int, int | None, int, int]] = []
    parts: list[dict[str, np.ndarray]] = []
    offset, chain0 = 0, 0
    for r in ranks:
        spans, _ = per_rank[r]
        part = _rank_nodes(tl, r, spans, len(groups), origin, assumptions, chain0, median_only)
        groups.extend((r, n, a - origin, b - origin) for n, a, b in spans)
        for k in ("src", "dst"):
            part[k] = part[k] + offset
        offset += len(part["s0"])
        chain0 += int(part["n_chains"][0])
        parts.append(part)
    cols = {k: np.concatenate([p[k] for p in parts]) if parts else np.zeros(0) for k in parts[0]} if parts else {}
    if not parts or not len(cols["s0"]):
        z = np.zeros(0, np.int64)
        return Graph(z, z, z, z, np.zeros(0, object), z, z, np.zeros(0, bool), z, z, z, z, z, z,
                      np.zeros(0, np.int8), np.zeros(0, np.int8), z, groups, origin, assumptions)
    if len(ranks) > 1:
        _collectives(cols, groups, assumptions)
    # sort by (group, chain, start): chains contiguous
    order = np.lexsort((cols["e0"], cols["s0"], cols["chain"], cols["group"]))
    inverse = np.empty_like(order)
    inverse[order] = np.arange(len(order))
    g = {k: (v[order] if k not in ("src", "dst", "sp", "dp", "lag", "n_chains", "threads") else v)
         for k, v in cols.items()}
    src, dst = inverse[g["src"]], inverse[g["dst"]]
    first = np.ones(len(order), bool)
    first[1:] = (g["chain"][1:] != g["chain"][:-1]) | (g["group"][1:] != g["group"][:-1])
    graph = Graph(g["s0"], g["e0"], g["d"], g["kind"], g["name"], g["rank"], g["group"], first,
                   np.where(first, 0, g["clag"]), g["fs"], g["fe"], g["glob_kind"],
                   src, dst, g["sp"], g["dp"], g["lag"], groups, origin, assumptions)
    # edges the observed times contradict (an inferred edge pointing the wrong way) are left out
    at = np.where(graph.sp == START, graph.s0[src], graph.e0[src]) + graph.lag
    limit = np.where(graph.dp == START, graph.s0[dst], graph.e0[dst])
    bad = at > limit
    if bad.any():
        note_assumption(assumptions, A_CONTRADICTED, int(bad.sum()))
        graph.src, graph.dst, graph.sp, graph.dp, graph.lag = (a[~bad] for a in (src, dst, graph.sp, graph.dp,
                                                                                  graph.lag))
    rank_key = g["rank"].astype(np.int64) * (1 << 20)  # thread keys are per rank
    graph.thread_key = g["thread_key"] + rank_key
    launch_key = np.where(g["launch_key"] >= 0, g["launch_key"] + rank_key, -1)
    graph.thread_key = np.where(g["glob_kind"] == 1, launch_key, graph.thread_key)
    graph.span_lo, graph.span_hi = g["span_lo"], g["span_hi"]
    graph.gpu_rows = np.where(g["gpu_row"] >= 0, g["gpu_row"], -1)
    graph.trailing = g["trail"].astype(bool)
    graph.launch_cap = g["launch_cap"]
    if graph.trailing.any() and graph.groups:  # said where the stretch overlapped the step's other work
        others_end = np.array([b for _, _, _, b in graph.groups], np.int64) - group_tails(graph)
        note_assumption(assumptions, A_TAIL, int((graph.trailing & (graph.s0 < others_end[graph.group])).sum()))
    if len(ranks) > 1:
        note_assumption(assumptions, A_RANK_START, len(ranks))
    return graph


def _collectives(cols: dict[str, np.ndarray], groups: list[tuple[int, int | None, int, int]],
                 assumptions: dict[str, int]) -> None:
    """Collective kernels matched across ranks: each ends no earlier than the latest rank's start plus its own
    transfer time (its end after that start); its duration becomes that transfer time."""
    comm = np.flatnonzero(cols["comm"] & (cols["glob_kind"] == 1))
    if not len(comm):
        return
    seq = cols["comm_seq"][comm]
    grp_name = cols["comm_group"][comm]
    rank = cols["rank"][comm]
    frame = pd.DataFrame({"i": comm, "rank": rank, "group": grp_name, "seq": seq, "s": cols["s0"][comm]})
    frame = frame.sort_values(["rank", "group", "s"], kind="stable")
    by_order = frame["seq"] < 0
    frame["order"] = frame.groupby(["rank", "group"], observed=True).cumcount()
    frame["key"] = np.where(by_order, -1 - frame["order"].to_numpy(), frame["seq"].to_numpy())
    note_assumption(assumptions, A_COLLECTIVE_ORDER, int(by_order.sum()))
    ranks_per = frame.groupby(["group", "key"])["rank"].transform("nunique")
    frame = frame[ranks_per.to_numpy() >= 2]
    if not len(frame):
        return
    latest = frame.groupby(["group", "key"])["s"].transform("max").to_numpy()
    i = frame["i"].to_numpy()
    transfer = np.clip(cols["e0"][i] - latest, 0, None)
    cols["d"][i] = np.minimum(transfer, cols["e0"][i] - cols["s0"][i])
    # edges from every member's start to every other member's end
    members = frame.assign(t=transfer)[["group", "key", "i", "t"]]
    pairs = members.merge(members, on=["group", "key"], suffixes=("_a", "_b"))
    pairs = pairs[pairs["i_a"] != pairs["i_b"]]
    for k, v in (("src", pairs["i_a"]), ("dst", pairs["i_b"])):
        cols[k] = np.concatenate([cols[k], v.to_numpy(np.int64)])
    cols["sp"] = np.concatenate([cols["sp"], np.full(len(pairs), START, np.int8)])
    cols["dp"] = np.concatenate([cols["dp"], np.full(len(pairs), END, np.int8)])
    cols["lag"] = np.concatenate([cols["lag"], pairs["t_b"].to_numpy(np.int64)])


def ending_nodes(g: Graph) -> np.ndarray:
    """The nodes a step ends with: those that ended inside the observed step, but the step's thread's last
    stretch without an event (an untraced wait: it lasts until the step's other work is done, then its tail)."""
    if not len(g.groups):
        return np.zeros(len(g.e0), bool)
    return (g.e0 <= np.array([b for _, _, _, b in g.groups], np.int64)[g.group]) & ~g.trailing


def group_tails(g: Graph) -> np.ndarray:
    """Per group, the observed time from its last ending node's end to the step's end."""
    starts = np.array([a for _, _, a, _ in g.groups], np.int64)
    last = starts.copy()
    ends = ending_nodes(g)
    if ends.any():
        np.maximum.at(last, g.group[ends], g.e0[ends])
    return np.clip(np.array([b for _, _, _, b in g.groups], np.int64) - last, 0, None)


def _waited_records(ev: pd.DataFrame, kind: pd.Series, records: np.ndarray, corr: np.ndarray, ts: np.ndarray,
                    dev: np.ndarray, key_chain: dict[int, int]) -> dict[int, tuple[int, int]]:
    """Per synchronisation call (its correlation) whose cuda_sync row names the event record it waits on
    (Timeline `wait_corr`, `wait_stream`) and both are in the step: (the chain of the stream the event was
    recorded on, the record call's start)."""
    wait_corr = ev["wait_corr"].to_numpy()
    rows = np.flatnonzero(T.category_mask(kind, (T.GPU_ANNOTATION,)) & (wait_corr >= 0) & (corr >= 0)
                          & (ev["wait_stream"].to_numpy() >= 0))
    if not len(rows) or not records.any():
        return {}
    record_ts = dict(zip(corr[records].tolist(), ts[records].tolist()))
    keys = dev[rows].astype(np.int64) * (1 << 40) + ev["wait_stream"].to_numpy()[rows]
    out: dict[int, tuple[int, int]] = {}
    for c, w, key in zip(corr[rows].tolist(), wait_corr[rows].tolist(), keys.tolist()):
        if w in record_ts and key in key_chain and c not in out:
            out[c] = (key_chain[key], int(record_ts[w]))
    return out


def _implicit_waits(gs: np.ndarray, ge: np.ndarray, dev: np.ndarray, chain: np.ndarray, grp: np.ndarray,
                    prev_e: np.ndarray, launch_t: np.ndarray, known: set[tuple[int, int]]
                    ) -> tuple[list[int], list[int]]:
    """(producer, consumer) GPU nodes: a consumer starting at least CRITICAL_PATH_UNEXPLAINED_WAIT_NS after both its
    launch and its stream predecessor's end, within SYNC_TOLERANCE_NS of the end of work on another stream of its
    device in its step (the latest such end)."""
    wait = gs - np.maximum(prev_e, launch_t)
    cand = np.flatnonzero(wait >= CRITICAL_PATH_UNEXPLAINED_WAIT_NS)
    if not len(cand) or len(gs) < 2:
        return [], []
    by_end = np.argsort(ge, kind="stable")
    ends = ge[by_end]
    src: list[int] = []
    dst: list[int] = []
    taken: set[int] = set()  # consumers already given a producer (the latest end wins)
    k = np.searchsorted(ends, gs[cand], side="right") - 1
    for back in range(3):  # the latest end before the start, skipping the consumer's own stream's work
        at = k - back
        ok = at >= 0
        j = by_end[np.clip(at, 0, None)]
        ok &= (gs[cand] - ge[j] <= SYNC_TOLERANCE_NS) & (chain[j] != chain[cand]) & (dev[j] == dev[cand])
        ok &= grp[j] == grp[cand]
        for c, p in zip(cand[ok].tolist(), j[ok].tolist()):
            if (p, c) not in known and c not in taken:
                taken.add(c)
                src.append(p)
                dst.append(c)
    return src, dst


def _innermost(starts: np.ndarray, ends: np.ndarray, points: np.ndarray) -> np.ndarray:
    """For rows sorted by (start, -end) and nested (a thread's calls), the innermost row holding each point
    (its index; -1: none): the last row to start before the point among those at the point's nesting depth."""
    if not len(starts):
        return np.full(len(points), -1, np.int64)
    sorted_ends = np.sort(ends)
    depth_row = np.arange(1, len(starts) + 1) - np.searchsorted(sorted_ends, starts, side="right")
    depth_at = (np.searchsorted(starts, points, side="right")
                - np.searchsorted(sorted_ends, points, side="right"))
    span = np.int64(max(int(ends.max()), int(points.max()) if len(points) else 0) - min(int(starts.min()), 0) + 1)
    key = depth_row.astype(np.int64) * span + (starts - min(int(starts.min()), 0))
    order = np.argsort(key, kind="stable")
    k = np.searchsorted(key[order], depth_at.astype(np.int64) * span + (points - min(int(starts.min()), 0)),
                        side="right") - 1
    row = np.where(k >= 0, order[np.clip(k, 0, None)], -1)
    ok = (depth_at > 0) & (row >= 0)
    ok[ok] &= (depth_row[row[ok]] == depth_at[ok]) & (starts[row[ok]] <= points[ok]) & (ends[row[ok]] > points[ok])
    return np.where(ok, row, -1)


def union_sorted(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if not len(starts):
        return starts, ends
    run_end = np.maximum.accumulate(ends)
    new = np.ones(len(starts), bool)
    new[1:] = starts[1:] > run_end[:-1]
    idx = np.flatnonzero(new)
    return starts[idx], np.maximum.reduceat(ends, idx)


def covered_before(starts: np.ndarray, ends: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Length of the (disjoint, sorted) intervals before each t."""
    if not len(starts):
        return np.zeros(len(t))
    cum = np.concatenate([[0], np.cumsum(ends - starts)])
    k = np.searchsorted(starts, t, side="right")
    part = np.where(k > 0, np.clip(t - starts[np.clip(k - 1, 0, None)], 0,
                                   (ends - starts)[np.clip(k - 1, 0, None)]), 0)
    return (cum[np.clip(k - 1, 0, None)] * (k > 0) + part).astype(np.float64)


def inside_any(starts: np.ndarray, ends: np.ndarray, t: np.ndarray) -> np.ndarray:
    if not len(starts):
        return np.zeros(len(t), bool)
    k = np.searchsorted(starts, t, side="right") - 1
    return (k >= 0) & (t < ends[np.clip(k, 0, None)])
