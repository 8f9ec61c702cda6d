"""CUDA graphs: a device's graph replays, as units, and the one-off graph captures. Timeline -> figures.

A replay is the GPU work of one graph launch: the kernels, copies and memsets with that graph's id
(events' `graph_id`, Kineto "graph id") and one correlation id (CUPTI gives every node of a replay its
`cudaGraphLaunch`'s correlation; without correlation ids, a run of consecutive work of one graph is
one replay). Its span runs from its first node's start to its last node's end; idle time inside a
span is the GPU's own scheduling between nodes, never host launch overhead (analyses/gaps.py).

A capture is host time spent making graphs: each `cudaStreamBeginCapture` .. `cudaStreamEndCapture`
stretch of a thread (the launches inside it enqueue nothing) and every instantiate / upload call. It is
a one-off cost, kept apart from the replays (the gap attribution counts it as start-up).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .. import intervals as iv
from .. import timeline as T
from ..names import name_flags
from ..timeline import Timeline
from . import figures as F

__all__ = ["CAPTURE_BEGIN", "CAPTURE_END", "DeviceGraphs", "GraphFigures", "INSTANTIATE", "capture_mask",
           "device_graphs", "replay_spans", "replays"]

CAPTURE_BEGIN = re.compile(r"^(cuda|hip)StreamBeginCapture\w*$|^cuStreamBeginCapture\w*$", re.IGNORECASE)
CAPTURE_END = re.compile(r"^(cuda|hip)StreamEndCapture$|^cuStreamEndCapture(_v2)?$", re.IGNORECASE)
INSTANTIATE = re.compile(r"^(cuda|hip)Graph(Instantiate|Upload)\w*$|^cuGraph(Instantiate|Upload)\w*$",
                         re.IGNORECASE)
MAX_GRAPH_ROWS = 50  # graphs listed per device (by GPU time); the summary counts them all


@dataclass(frozen=True)
class GraphFigures:
    graph_id: int
    replays: int
    nodes: int  # GPU activities in this graph's replays (kernels, copies, memsets)
    replay_ns: int  # median span of one replay
    gpu_ns: int  # GPU work inside its replays (union)


@dataclass(frozen=True)
class DeviceGraphs:
    gpu_ns: int  # GPU work inside graph replays, in the window (union)
    busy_ns: int  # all GPU work of the device in the window, for the share
    replays: int
    graphs: tuple[GraphFigures, ...]  # by GPU time, at most MAX_GRAPH_ROWS
    captures: int  # graph captures (begin..end stretches, else instantiate calls) on the rank's host
    capture_ns: int  # host time spent capturing and instantiating graphs


def _graph_work(tl: Timeline, rank: int, device: int, window: F.Window) -> pd.DataFrame:
    ev = tl.rank_events(rank)
    ts = ev["ts_ns"].to_numpy()
    mask = ((ev["graph_id"].to_numpy() != -1) & (ev["device"].to_numpy() == device)
            & T.category_mask(ev["kind"], T.GPU_WORK_KINDS) & (ts < window.end_ns)
            & (ts + ev["dur_ns"].to_numpy() > window.start_ns))
    rows = np.flatnonzero(mask)
    out = pd.DataFrame({"ts": ts[rows], "end": ts[rows] + ev["dur_ns"].to_numpy()[rows],
                        "graph": ev["graph_id"].to_numpy()[rows], "corr": ev["correlation"].to_numpy()[rows]})
    out = out.sort_values("ts", kind="stable").reset_index(drop=True)
    # the replay: its launch's correlation; without one, a run of consecutive work of one graph
    graph = out["graph"].to_numpy()
    run = np.cumsum(np.r_[True, graph[1:] != graph[:-1]])[:len(out)].astype(np.int64)
    out["replay"] = np.where(out["corr"].to_numpy() != -1, out["corr"].to_numpy(), -1 - run)
    return out


def replays(tl: Timeline, rank: int, device: int, window: F.Window) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each graph replay on the device (start, end, graph id), in start order."""
    work = _graph_work(tl, rank, device, window)
    if not len(work):
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    g = work.groupby(["graph", "replay"], sort=False).agg(ts=("ts", "min"), end=("end", "max")).reset_index()
    g = g.sort_values("ts", kind="stable")
    return (g["ts"].to_numpy(np.int64), g["end"].to_numpy(np.int64), g["graph"].to_numpy(np.int64))


def replay_spans(tl: Timeline, rank: int, device: int, window: F.Window) -> iv.IntervalSet:
    """The spans of the device's graph replays (first node start .. last node end), merged."""
    work = _graph_work(tl, rank, device, window)
    if not len(work):
        return iv.empty()
    g = work.groupby(["graph", "replay"], sort=False)
    return iv.union(g["ts"].min().to_numpy(), g["end"].max().to_numpy())


def device_graphs(tl: Timeline, rank: int, device: int, window: F.Window, busy_ns: int) -> DeviceGraphs | None:
    """The device's graph figures over `window`; None when it ran no graph there."""
    work = _graph_work(tl, rank, device, window)
    if not len(work):
        return None
    g = work.groupby(["graph", "replay"], sort=False).agg(ts=("ts", "min"), end=("end", "max"), n=("ts", "size"))
    g = g.reset_index()
    rows = []
    for graph_id, part in g.groupby("graph", sort=True):
        mine = work[work["graph"].to_numpy() == graph_id]
        gpu = iv.total(iv.clip(iv.union(mine["ts"].to_numpy(), mine["end"].to_numpy()),
                               window.start_ns, window.end_ns))
        rows.append(GraphFigures(int(graph_id), len(part), int(part["n"].sum()),
                                 int(np.median((part["end"] - part["ts"]).to_numpy())), int(gpu)))
    rows.sort(key=lambda r: (-r.gpu_ns, r.graph_id))
    total = iv.total(iv.clip(iv.union(work["ts"].to_numpy(), work["end"].to_numpy()), window.start_ns, window.end_ns))
    captures, capture_ns = _captures(tl, rank)
    return DeviceGraphs(int(total), int(busy_ns), len(g), tuple(rows[:MAX_GRAPH_ROWS]), captures, capture_ns)


def capture_mask(events: pd.DataFrame) -> np.ndarray:
    """Host events (columns ts_ns, dur_ns, name) that belong to making a graph: inside a
    begin..end capture stretch of their thread (the caller gives one thread's events, or the
    launching threads'), or instantiate / upload calls."""
    n = len(events)
    out = np.zeros(n, dtype=bool)
    if not n:
        return out
    begin = name_flags(events, CAPTURE_BEGIN)
    inst = name_flags(events, INSTANTIATE)
    if not begin.any():
        return inst
    ts = events["ts_ns"].to_numpy()
    spans = _capture_spans(ts, ts + events["dur_ns"].to_numpy(), begin, name_flags(events, CAPTURE_END))
    inside = iv.locate(ts, *spans) >= 0 if len(spans[0]) else np.zeros(n, dtype=bool)
    return out | inst | inside


def _capture_spans(ts: np.ndarray, end: np.ndarray, begin: np.ndarray, stop: np.ndarray) -> iv.IntervalSet:
    """Each capture begin to the end of the first end-capture call after it (unclosed: to the last event)."""
    b = np.sort(ts[begin])
    e_start, e_end = ts[stop], end[stop]
    order = np.argsort(e_start, kind="stable")
    e_start, e_end = e_start[order], e_end[order]
    pos = np.searchsorted(e_start, b, side="left")
    last = int(end.max()) if len(end) else 0
    stops = np.where(pos < len(e_start), e_end[np.clip(pos, 0, max(len(e_end) - 1, 0))] if len(e_end) else last,
                     last)
    return iv.union(b, np.maximum(stops, b))


def _captures(tl: Timeline, rank: int) -> tuple[int, int]:
    """Graph captures on the rank's host threads and the host time they took (union, ns)."""
    ev = tl.rank_events(rank)
    runtime = np.flatnonzero((ev["kind"] == T.RUNTIME).to_numpy())
    if not len(runtime):
        return 0, 0
    sub = pd.DataFrame({"ts_ns": ev["ts_ns"].to_numpy()[runtime], "dur_ns": ev["dur_ns"].to_numpy()[runtime],
                        "name": ev["name"].array.take(runtime)})
    begin = name_flags(sub, CAPTURE_BEGIN)
    inst = name_flags(sub, INSTANTIATE)
    if not (begin.any() or inst.any()):
        return 0, 0
    ts = sub["ts_ns"].to_numpy()
    end = ts + sub["dur_ns"].to_numpy()
    spans = _capture_spans(ts, end, begin, name_flags(sub, CAPTURE_END)) if begin.any() else iv.empty()
    both = iv.union(np.r_[spans[0], ts[inst]], np.r_[spans[1], end[inst]])
    return int(begin.sum()) if begin.any() else int(inst.sum()), iv.total(both)
