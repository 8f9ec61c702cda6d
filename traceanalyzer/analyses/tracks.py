"""What a rank's timeline looks like, reduced to a bounded number of blocks for drawing.

Timeline -> frozen `RankTracks`: per device the GPU busy intervals and copies, the idle gaps,
the host's operator / DataLoader / synchronize / copy-call ranges, the steps and sampled counters. A trace
may hold millions of kernels; a picture needs at most a few thousand rectangles per track, so
`coarsen` merges neighbouring intervals across the *shortest* separations first: the longest
idle stretches always stay visible, and every block keeps how much of it is really covered.

Times stay int64 nanoseconds on the rank's clock here; the report converts them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .. import intervals as iv
from .. import timeline as T
from ..causes import COPY_CALLS, SYNCHRONIZE_CALLS
from ..names import name_flags
from ..timeline import Timeline
from .figures import Steps, Window, steps
from .gaps import GapSet
from .graphs import replays

MAX_BLOCKS_PER_TRACK = 2000
MIN_BLOCKS_PER_TRACK = 200
# All block tracks of one report share this budget, so a 64-rank job stays a few MB.
TIMELINE_BLOCK_BUDGET = 20_000
MAX_STEPS_DRAWN = 2000
MAX_COUNTER_POINTS = 1000
MAX_NAME_CHARS = 160
# Host runtime / driver calls drawn on the host lanes: the registry's patterns (traceanalyzer/causes.py),
# the ones the gap attribution's sync and memcpy classes use. The "sync" lane shows the explicit
# synchronisations (cudaStreamSynchronize, ...); synchronous copy calls are drawn on the "copy" lane.
HOST_LANES = (("sync", SYNCHRONIZE_CALLS), ("copy", COPY_CALLS))


@dataclass(frozen=True)
class Blocks:
    """Disjoint drawn blocks; each covers `covered_ns` of its span with `count` events.

    `name_idx` points into `names`: the longest event starting in the block (-1 when none).
    """

    start_ns: np.ndarray
    end_ns: np.ndarray
    covered_ns: np.ndarray
    count: np.ndarray
    name_idx: np.ndarray
    names: tuple[str, ...]
    intervals: int  # disjoint intervals before merging (== len(start_ns) when nothing merged)
    # Per block, its longest event: duration, position among the clipped events, full name. Kept
    # so that `recoarsen` can cut the blocks to fewer later (per-rank results, job-wide budget).
    longest_ns: np.ndarray | None = None
    longest_pos: np.ndarray | None = None
    longest_name: np.ndarray | None = None


@dataclass(frozen=True)
class GapTrack:
    start_ns: np.ndarray  # the longest gaps, sorted by start
    dur_ns: np.ndarray
    step: np.ndarray  # step number holding the gap start, -1 when none
    total: int  # all gaps of at least min_gap (the arrays may hold fewer)
    cause: tuple[str | None, ...]  # each drawn gap's cause from the attribution (None: not attributed)


@dataclass(frozen=True)
class DeviceTrack:
    device: int
    busy: Blocks
    copies: Blocks
    gaps: GapTrack
    comm: Blocks  # communication kernels (NCCL/RCCL): drawn as their own lane
    graphs: Blocks | None = None  # CUDA graph replays, one block each (first node .. last node); None: none


@dataclass(frozen=True)
class HostTrack:
    kind: str  # "ops" (framework operators, user annotations) | "dataloader" | "sync" | "copy"
    blocks: Blocks


@dataclass(frozen=True)
class CounterTrack:
    device: int
    metric: str
    ts_ns: np.ndarray
    value: np.ndarray
    samples: int  # before downsampling


@dataclass(frozen=True)
class RankTracks:
    window: Window
    step_number: np.ndarray
    step_start_ns: np.ndarray
    step_end_ns: np.ndarray
    steps_total: int
    devices: tuple[DeviceTrack, ...]
    host: tuple[HostTrack, ...]
    counters: tuple[CounterTrack, ...]
    count: int = 0  # block tracks the rank draws (`count_rank_tracks`): its part of the job's shared budget


def blocks_per_track(n_tracks: int) -> int:
    """The per-track block limit when `n_tracks` tracks share the report's budget."""
    if n_tracks <= 0:
        return MAX_BLOCKS_PER_TRACK
    return int(min(MAX_BLOCKS_PER_TRACK, max(MIN_BLOCKS_PER_TRACK, TIMELINE_BLOCK_BUDGET // n_tracks)))


def coarsen(starts: np.ndarray, ends: np.ndarray, names: np.ndarray | pd.Categorical | None, lo: int, hi: int,
            max_blocks: int) -> Blocks:
    """Events [starts, ends) clipped to [lo, hi) -> at most `max_blocks` blocks.

    The union of the events is split at its `max_blocks - 1` longest separations.
    """
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    inside = (ends > lo) & (starts < hi) if hi > lo else np.zeros(len(starts), bool)
    starts, ends = np.maximum(starts[inside], lo), np.minimum(ends[inside], hi)
    u_start, u_end = iv.union(starts, ends)
    n = len(u_start)
    lengths = u_end - u_start
    if n > max_blocks:
        separations = u_start[1:] - u_end[:-1]
        keep = np.argsort(-separations, kind="stable")[: max_blocks - 1]
        split = np.zeros(n - 1, dtype=bool)
        split[keep] = True
        first = np.flatnonzero(np.r_[True, split])
        b_start, b_end = u_start[first], u_end[np.r_[first[1:] - 1, n - 1]]
        covered = np.add.reduceat(lengths, first) if n else lengths
    else:
        b_start, b_end, covered = u_start, u_end, lengths
    which = np.searchsorted(b_start, starts, side="right") - 1
    which = np.clip(which, 0, None)
    count = np.bincount(which, minlength=len(b_start)).astype(np.int64) if len(b_start) else np.zeros(0, np.int64)
    name_idx = np.full(len(b_start), -1, dtype=np.int64)
    table: tuple[str, ...] = ()
    longest_ns = np.full(len(b_start), -1, dtype=np.int64)
    longest_pos = np.full(len(b_start), -1, dtype=np.int64)
    longest_name = np.full(len(b_start), "", dtype=object)
    if names is not None and len(starts) and len(b_start):
        ev_names = names[inside] if isinstance(names, pd.Categorical) else np.asarray(names, dtype=object)[inside]
        # Longest event of each block: sort by (block, -duration), take each block's first.
        order = np.lexsort((-(ends - starts), which))
        firsts = order[np.r_[True, which[order][1:] != which[order][:-1]]]
        chosen = np.asarray(ev_names[firsts], dtype=object).astype(str)
        uniq, inverse = np.unique(chosen, return_inverse=True)
        table = tuple(s[:MAX_NAME_CHARS] for s in uniq.tolist())
        name_idx[which[firsts]] = inverse
        longest_ns[which[firsts]] = (ends - starts)[firsts]
        longest_pos[which[firsts]] = firsts
        longest_name[which[firsts]] = chosen
    return Blocks(b_start, b_end, covered.astype(np.int64), count, name_idx, table, n,
                  longest_ns, longest_pos, longest_name)


def recoarsen(b: Blocks, max_blocks: int) -> Blocks:
    """Blocks cut to at most `max_blocks`, exactly as `coarsen` would have cut the events.

    `coarsen` splits the union at its longest separations (ties: the earlier first); the
    separations between `b`'s blocks are the longest ones, in order, so the first `max_blocks - 1`
    of them are the same. Each merged block keeps its longest event (ties: the earlier event)."""
    n = len(b.start_ns)
    if n <= max_blocks:
        return b
    if b.longest_ns is None or b.longest_pos is None or b.longest_name is None:
        raise ValueError("these blocks carry no longest-event columns: cut them with coarsen")
    separations = b.start_ns[1:] - b.end_ns[:-1]
    keep = np.argsort(-separations, kind="stable")[: max_blocks - 1]
    split = np.zeros(n - 1, dtype=bool)
    split[keep] = True
    first = np.flatnonzero(np.r_[True, split])
    group = np.cumsum(np.r_[True, split]) - 1
    b_start, b_end = b.start_ns[first], b.end_ns[np.r_[first[1:] - 1, n - 1]]
    covered = np.add.reduceat(b.covered_ns, first)
    count = np.add.reduceat(b.count, first)
    # Longest event per merged block: sort by (group, -duration, position), take each group's first.
    order = np.lexsort((b.longest_pos, -b.longest_ns, group))
    firsts = order[np.r_[True, group[order][1:] != group[order][:-1]]]
    has = b.longest_pos[firsts] >= 0
    name_idx = np.full(len(first), -1, dtype=np.int64)
    table: tuple[str, ...] = ()
    if has.any():
        uniq, inverse = np.unique(b.longest_name[firsts][has].astype(str), return_inverse=True)
        table = tuple(s[:MAX_NAME_CHARS] for s in uniq.tolist())
        name_idx[group[firsts][has]] = inverse
    return Blocks(b_start, b_end, covered.astype(np.int64), count.astype(np.int64), name_idx, table, b.intervals,
                  b.longest_ns[firsts], b.longest_pos[firsts], b.longest_name[firsts])


def recut_gaps(g: GapTrack, max_gaps: int) -> GapTrack:
    """The `max_gaps` longest of the drawn gaps, as `_gap_track` would have chosen them."""
    if len(g.start_ns) <= max_gaps:
        return g
    keep = np.sort(np.argsort(-g.dur_ns, kind="stable")[:max_gaps])
    return GapTrack(g.start_ns[keep], g.dur_ns[keep], g.step[keep], g.total, tuple(g.cause[i] for i in keep))


def recut_tracks(t: RankTracks, max_blocks: int) -> RankTracks:
    """A rank's tracks drawn at `MAX_BLOCKS_PER_TRACK`, cut to the job's per-track limit."""
    if max_blocks >= MAX_BLOCKS_PER_TRACK:
        return t
    devices = tuple(DeviceTrack(d.device, recoarsen(d.busy, max_blocks), recoarsen(d.copies, max_blocks),
                                recut_gaps(d.gaps, max_blocks), recoarsen(d.comm, max_blocks),
                                None if d.graphs is None else recoarsen(d.graphs, max_blocks)) for d in t.devices)
    host = tuple(HostTrack(h.kind, recoarsen(h.blocks, max_blocks)) for h in t.host)
    return RankTracks(t.window, t.step_number, t.step_start_ns, t.step_end_ns, t.steps_total, devices, host,
                      t.counters, t.count)


def _gap_track(gaps: GapSet, st_number: np.ndarray, st_start: np.ndarray, st_end: np.ndarray,
               min_gap_ns: int, max_gaps: int) -> GapTrack:
    """The drawn gaps: the device's gaps of at least `min_gap_ns`, the longest `max_gaps` of them,
    each keeping its cause by index into the gap set."""
    keep = np.flatnonzero((gaps.end_ns - gaps.start_ns) >= max(min_gap_ns, 1))
    total = len(keep)
    if total > max_gaps:
        longest = np.argsort(-(gaps.end_ns[keep] - gaps.start_ns[keep]), kind="stable")[:max_gaps]
        keep = np.sort(keep[longest])
    g_start, g_end = gaps.start_ns[keep], gaps.end_ns[keep]
    idx = iv.locate(g_start, st_start, st_end) if len(st_number) else np.full(len(g_start), -1)
    step = np.where(idx >= 0, st_number[np.clip(idx, 0, None)] if len(st_number) else -1, -1)
    cause = (tuple(np.asarray(gaps.cause, dtype=object)[keep].tolist()) if gaps.cause is not None
             else (None,) * len(keep))
    return GapTrack(g_start, g_end - g_start, step.astype(np.int64), total, cause)


def counter_tracks(counters: pd.DataFrame, devices: Sequence[int], lo: int, hi: int) -> tuple[CounterTrack, ...]:
    """The sampled counters a rank draws: per device of the rank (in its order) and metric (by name),
    the samples inside its window [lo, hi) on the trace clock, averaged down to MAX_COUNTER_POINTS."""
    out = []
    if len(counters) and hi > lo:
        ts = counters["ts_ns"].to_numpy()
        in_w = (ts >= lo) & (ts < hi)
        for device in devices:
            mine = counters[in_w & (counters["device"].to_numpy() == device)]
            for metric in sorted(set(mine["metric"].astype(str))):
                m = mine[(mine["metric"].astype(str) == metric).to_numpy()]
                t, v = _downsample(m["ts_ns"].to_numpy(), m["value"].to_numpy(), MAX_COUNTER_POINTS)
                out.append(CounterTrack(device, metric, t, v, len(m)))
    return tuple(out)


def _downsample(ts: np.ndarray, value: np.ndarray, max_points: int) -> tuple[np.ndarray, np.ndarray]:
    """Mean of equal-count buckets (sorted by time) when there are too many samples."""
    order = np.argsort(ts, kind="stable")
    ts, value = ts[order], value[order]
    if len(ts) <= max_points:
        return ts, value
    edges = np.linspace(0, len(ts), max_points + 1).astype(np.int64)
    first = edges[:-1]
    counts = np.diff(edges)
    t = (np.add.reduceat(ts.astype(np.float64), first) / counts).astype(np.int64)
    finite = np.where(np.isnan(value), 0.0, value)
    n_ok = np.add.reduceat((~np.isnan(value)).astype(np.int64), first)
    v = np.where(n_ok > 0, np.add.reduceat(finite, first) / np.maximum(n_ok, 1), np.nan)
    return t, v


def rank_tracks(tl: Timeline, rank: int, window: Window, gap_sets: dict[int, GapSet],
                min_gap_ns: int, max_blocks: int, st: Steps | None = None) -> RankTracks:
    """Every drawn track of one rank over `window`, each bounded by `max_blocks`.

    Gaps are the device's gap set (made once by the figures over the device's own window, each gap
    with the cause it got there), not recomputed here; `st`: the rank's step spans, when found.
    """
    st = steps(tl, rank) if st is None else st
    lo, hi = window.start_ns, window.end_ns
    ev = tl.rank_events(rank)
    # Columns, not row selections of the table: each track takes its rows from these arrays.
    kind = ev["kind"]
    device_col = ev["device"].to_numpy()
    ts = ev["ts_ns"].to_numpy()
    end = ts + ev["dur_ns"].to_numpy()
    names = ev["name"].array  # a Categorical: names are looked up only for the blocks drawn

    def blocks(mask: np.ndarray) -> Blocks:
        return coarsen(ts[mask], end[mask], names[mask], lo, hi, max_blocks)

    gpu_work = T.category_mask(kind, T.GPU_WORK_KINDS)
    is_copy = (kind == T.MEMCPY).to_numpy()
    is_comm = (kind == T.KERNEL).to_numpy() & ev["comm"].to_numpy()
    devices = []
    for device in tl.device_indices(rank):
        on_dev = device_col == device
        devices.append(DeviceTrack(
            device,
            blocks(on_dev & gpu_work),
            blocks(on_dev & is_copy),
            _gap_track(gap_sets.get(device, GapSet(np.zeros(0, np.int64), np.zeros(0, np.int64))),
                       st.number, st.start_ns, st.end_ns, min_gap_ns, max_blocks),
            blocks(on_dev & is_comm),
            _replay_blocks(tl, rank, device, window, max_blocks)))

    on_host = device_col < 0
    runtime = on_host & (kind == T.RUNTIME).to_numpy()
    host_sets = (
        ("ops", on_host & T.category_mask(kind, (T.CPU_OP, T.ANNOTATION))),
        ("dataloader", on_host & (kind == T.DATALOADER).to_numpy()),
        *((lane, runtime & name_flags(ev, pattern)) for lane, pattern in HOST_LANES),
    )
    host_tracks = tuple(h for h in (HostTrack(k, blocks(m)) for k, m in host_sets if m.any())
                        if len(h.blocks.start_ns))

    counters = counter_tracks(tl.counters, tl.device_indices(rank), lo, hi)

    n = min(len(st), MAX_STEPS_DRAWN)
    return RankTracks(window, st.number[:n], st.start_ns[:n], st.end_ns[:n], len(st),
                      tuple(devices), host_tracks, counters, _track_count(ev, len(devices)))


def _replay_blocks(tl: Timeline, rank: int, device: int, window: Window, max_blocks: int) -> Blocks | None:
    """The device's CUDA graph replays as one block each, named by their graph; None without graphs."""
    if not (tl.events["graph_id"].to_numpy() != -1).any():
        return None
    start, end, graph = replays(tl, rank, device, window)
    if not len(start):
        return None
    names = np.array([f"CUDA graph {g} replay" if g > 0 else "CUDA graph replay" for g in graph.tolist()], dtype=object)
    return coarsen(start, end, names, window.start_ns, window.end_ns, max_blocks)


def count_tracks(tl: Timeline) -> int:
    """How many block tracks the whole timeline will draw (for sharing the budget)."""
    return sum(count_rank_tracks(tl, r.index) for r in tl.ranks)


def count_rank_tracks(tl: Timeline, rank: int) -> int:
    """How many block tracks one rank will draw (`rank_tracks` counts them as it draws: `RankTracks.count`)."""
    return _track_count(tl.rank_events(rank), len(tl.device_indices(rank)))


def _track_count(ev: pd.DataFrame, n_devices: int) -> int:
    """The block tracks of a rank's events with `n_devices` GPUs: what its drawing takes of the shared budget."""
    n = 3 * n_devices  # busy, copies, gaps
    n += int(ev["comm"].to_numpy().any())  # a communication lane
    graph = ev["graph_id"].to_numpy() != -1
    if graph.any():  # a lane of graph replays per device that ran one
        n += len(np.unique(ev["device"].to_numpy()[graph & (ev["device"].to_numpy() >= 0)]))
    on_host = ev["device"].to_numpy() < 0
    kind = ev["kind"]
    n += int((on_host & T.category_mask(kind, (T.CPU_OP, T.ANNOTATION))).any())
    n += int((on_host & (kind == T.DATALOADER).to_numpy()).any())
    n += 2 * int((on_host & (kind == T.RUNTIME).to_numpy()).any())
    return n
