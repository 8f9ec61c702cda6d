"""Python frames (torch.profiler `with_stack=True`, kind PYTHON) behind host time and unexplained GPU
idle time. Timeline -> frozen figures; vectorized.

On the launching threads, the *user* frames (not built-ins, not the standard library, not torch or
an installed package) nest per thread (operators.nest); at any moment the innermost open one is
the user code running. Each user frame's self time (its duration minus its user children) is
measured inside the steps (the rank's window without steps: host time) and inside the devices' idle
gaps whose cause is host compute or unknown (idle time, summed over devices).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from .. import advice_patterns as AP
from .. import intervals as iv
from .. import timeline as T
from ..timeline import Timeline
from .operators import Critical, PatternHit, covered, nest, thread_groups, union_pieces
from .thresholds import FRAMES_KEPT

# Frames that are not the user's code: built-ins and other `<...>` pseudo-files, installed packages,
# module markers (`nn.Module: Linear_0`, with_modules=True), torch itself (Kineto writes paths from
# the sys.path entry: `torch/nn/modules/module.py(1501): _call_impl`).
NOT_USER_FRAME = re.compile(r"^<|^nn\.Module: |(^|/)(site-packages|dist-packages)/|(^|/)torch/")
# `file(line): function`, as Kineto names a Python frame.
FRAME_NAME = re.compile(r"^(?P<file>.*)\((?P<line>\d+)\): (?P<func>.*)$")
_STDLIB = frozenset(getattr(sys, "stdlib_module_names", ()))


@dataclass(frozen=True)
class FrameFigure:
    frame: str  # `file:line function`
    host_ns: int  # self time (innermost user frame) inside the steps (the window without steps)
    idle_ns: int  # self time inside host-compute / unknown idle gaps, summed over devices
    # self time inside the host-caused idle gaps (operators.Critical), summed over devices, in all and per
    # step (a call in the step holding its start): what removing it would save (diagnosis)
    critical_ns: int = 0
    critical_per_step: tuple[int, ...] = ()


@dataclass(frozen=True)
class FrameFigures:
    has_stacks: bool  # the rank's trace holds Python frames
    frames: tuple[FrameFigure, ...]  # by idle time, then host time: the first FRAMES_KEPT
    omitted: int
    idle_ns: int  # the host-compute and unknown idle time the frames are measured against
    patterns: tuple[PatternHit, ...] = ()  # catalogue patterns seen among every Python frame


def user_frame(name: str) -> bool:
    """A frame of the user's own code: not `<built-in ...>`, not torch, an installed package or the stdlib."""
    if NOT_USER_FRAME.search(name):
        return False
    m = FRAME_NAME.match(name)
    path = m.group("file") if m else name
    top = path.split("/", 1)[0]
    top = top[:-3] if top.endswith(".py") else top
    return top not in _STDLIB


# The object address in a built-in's frame name (`<built-in method item of Tensor object at 0x7f...>`).
OBJECT_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+>$")


def frame_label(name: str) -> str:
    """`file(line): function` -> `file:line function`; a built-in's object address left out."""
    m = FRAME_NAME.match(name)
    return f"{m.group('file')}:{m.group('line')} {m.group('func')}" if m else OBJECT_ADDRESS.sub(">", name)


def frame_figures(tl: Timeline, rank: int, basis: iv.IntervalSet, threads: tuple[tuple[int, int], ...],
                  idle_sets: list[iv.IntervalSet], critical: Critical | None = None) -> FrameFigures:
    """The user frames of the launching `threads`; `idle_sets`: each device's host-compute and unknown gaps;
    `critical`: what each kept frame's time on the critical path is measured against."""
    ev = tl.rank_events(rank)
    py = (ev["kind"] == T.PYTHON).to_numpy()
    has_stacks = bool(py.any())
    idle_total = sum(iv.total(s) for s in idle_sets)
    if not has_stacks or not threads:
        return FrameFigures(has_stacks, (), 0, idle_total)
    pid, tid = ev["pid"].to_numpy(), ev["tid"].to_numpy()
    mine = np.zeros(len(ev), dtype=bool)
    for p, t in threads:
        mine |= (pid == p) & (tid == t)
    rows = np.flatnonzero(py & mine)
    names = ev["name"].array.take(rows)
    codes = np.asarray(names.codes, dtype=np.int64)
    ts = ev["ts_ns"].to_numpy()[rows]
    end = ts + ev["dur_ns"].to_numpy()[rows]
    group = thread_groups(pid[rows], tid[rows])
    used = np.unique(codes[codes >= 0])
    cats = names.categories
    is_user = np.zeros(len(cats) + 1, dtype=bool)
    is_user[used] = [user_frame(str(cats[c])) for c in used]
    patterns = _frame_patterns(codes, ts, end, cats, used, basis, idle_sets)
    u = np.flatnonzero(is_user[codes])
    if not len(u):
        return FrameFigures(True, (), 0, idle_total, patterns)
    c, s, e = codes[u], ts[u], end[u]
    parent = nest(group[u], s, e)
    host = _self_inside(basis, parent, s, e)
    idle = np.zeros(len(u), dtype=np.int64)
    for gaps in idle_sets:
        idle += _self_inside(gaps, parent, s, e)
    frame = pd.DataFrame({"code": c, "host": host, "idle": idle}).groupby("code", sort=False).sum()
    frame = frame[(frame["host"] > 0) | (frame["idle"] > 0)]
    frame["key"] = [frame_label(str(cats[k])) for k in frame.index]
    frame = frame.sort_values(["idle", "host", "key"], ascending=[False, False, True], kind="stable")
    rows_out = tuple(FrameFigure(k, int(h), int(i)) for k, h, i in zip(frame["key"], frame["host"], frame["idle"]))
    if critical is not None and len(frame):
        kept = frame.index.to_numpy()[:FRAMES_KEPT].astype(np.int64)
        total, per = _critical_self(critical, kept, c, parent, s, e)
        rows_out = (*(replace(r, critical_ns=int(t), critical_per_step=tuple(int(v) for v in p))
                      for r, t, p in zip(rows_out, total, per)), *rows_out[FRAMES_KEPT:])
    return FrameFigures(True, rows_out[:FRAMES_KEPT], max(len(rows_out) - FRAMES_KEPT, 0), idle_total, patterns)


def _critical_self(c: Critical, kept: np.ndarray, code: np.ndarray, parent: np.ndarray, ts: np.ndarray,
                   end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per kept frame code: its self time inside the critical sets, in all and per step (by call start)."""
    got = np.zeros(len(ts), dtype=np.int64)
    for s in c.sets:
        got += _self_inside(s, parent, ts, end)
    row = pd.Index(kept).get_indexer(code)
    ok = row >= 0
    total = np.zeros(len(kept), dtype=np.int64)
    per = np.zeros((len(kept), len(c.step_start_ns)), dtype=np.int64)
    np.add.at(total, row[ok], got[ok])
    if len(c.step_start_ns):
        step = iv.locate(ts, c.step_start_ns, c.step_end_ns)
        ok &= step >= 0
        np.add.at(per, (row[ok], step[ok]), got[ok])
    return total, per


def _self_inside(s: iv.IntervalSet, parent: np.ndarray, ts: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Each frame's self time (its span minus its children's) inside the disjoint set `s`."""
    out = covered(s, ts, end).astype(np.int64)
    child = np.flatnonzero(parent >= 0)
    if len(child):
        p = parent[child]
        inner = covered(s, np.maximum(ts[child], ts[p]), np.minimum(end[child], end[p]))
        out -= np.bincount(p, weights=inner, minlength=len(ts)).astype(np.int64)
    return np.maximum(out, 0)


def _frame_patterns(codes: np.ndarray, ts: np.ndarray, end: np.ndarray, cats: pd.Index, used: np.ndarray,
                    basis: iv.IntervalSet, idle_sets: list[iv.IntervalSet]) -> tuple[PatternHit, ...]:
    """Per catalogue pattern, the Python frame it recognises with the most time in the steps."""
    which = {int(c): AP.match(str(cats[c])) for c in used}
    hit_codes = np.array([c for c, p in which.items() if p is not None], dtype=np.int64)
    if not len(hit_codes):
        return ()
    rows = np.flatnonzero(np.isin(codes, hit_codes))
    lo, hi = union_pieces(codes[rows], ts[rows], end[rows])
    w = covered(basis, lo, hi)
    idle = np.zeros(len(rows), dtype=np.int64)
    for gaps in idle_sets:
        idle += covered(gaps, lo, hi)
    g = pd.DataFrame({"code": codes[rows], "w": w, "idle": idle}).groupby("code").agg(
        n=("w", "size"), w=("w", "sum"), idle=("idle", "sum"))
    best: dict[str, PatternHit] = {}
    for code, n, wn, idn in zip(g.index, g["n"], g["w"], g["idle"]):
        p = which[int(code)]
        assert p is not None
        hit = PatternHit(p.id, frame_label(str(cats[code])), int(n), int(wn), int(idn))
        if p.id not in best or (hit.steps_ns, hit.idle_ns, -len(hit.name)) > (best[p.id].steps_ns, best[p.id].idle_ns,
                                                                                 -len(best[p.id].name)):
            best[p.id] = hit
    return tuple(best[p.id] for p in AP.PATTERNS if p.id in best)
