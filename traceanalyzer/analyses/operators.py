"""The operator view of a rank: its host operators and annotations (count, total and self time, share
of the steps, time during GPU idle), its kernels with the operator that launched each, and the
catalogue's patterns (advice_patterns.py) found among them. Timeline -> frozen figures; vectorized.

Nesting is per host thread: a thread's events sorted by start (longer first on ties); an event's
depth is the number of the thread's earlier events still open at its start, its parent the last
earlier event one level up. Self time = duration - the parts of its children inside it. An operator's
total is counted once: the inclusive time of its outermost calls on each thread (a call nested in another
call of the same name on its thread, as `aten::copy_` inside `aten::copy_`, adds nothing), so it never
exceeds the time its threads were recorded; its self time sums every call's own time. A kernel's
launcher: the runtime call with the kernel's `correlation`, then the operator or annotation that
encloses that call on its thread.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from .. import advice_patterns as AP
from .. import causes as C
from .. import intervals as iv
from .. import timeline as T
from ..names import name_flags
from ..timeline import Timeline
from . import figures as F
from .thresholds import KERNEL_LAUNCH_ROWS, OPS_KEPT

# Host kinds that nest on a thread for the operator view (Python frames nest apart: analyses/frames.py).
NESTING_KINDS = (T.STEP, T.DATALOADER, T.CPU_OP, T.ANNOTATION, T.RUNTIME, T.OTHER)
# Kinds listed in the operator table (steps are its denominator; runtime calls are the launch path).
OP_KINDS = (T.DATALOADER, T.CPU_OP, T.ANNOTATION, T.OTHER)


@dataclass(frozen=True)
class OpFigure:
    name: str
    kind: str
    count: int
    total_ns: int  # inclusive time of its outermost calls per thread (nested calls of the name count once), summed
    self_ns: int  # summed self time (duration minus its nested host events)
    steps_ns: int  # union of its calls (any thread) inside the steps (the window without steps)
    idle_ns: int  # union of its calls inside the devices' idle gaps, summed over devices
    top_level: bool  # some call has no enclosing operator or annotation (only a step, or nothing)
    threads: int = 1  # host threads it ran on: total_ns is at most their recorded time, summed
    # on the critical path: the union of its calls on the launching threads inside the host-caused idle gaps
    # (`critical_sets`: every cause but device_dependency and start-up), summed over devices; in all and per
    # step (each piece counted in the step holding its start); what removing it would save (diagnosis)
    critical_ns: int = 0
    critical_per_step: tuple[int, ...] = ()


@dataclass(frozen=True)
class KernelLaunch:
    name: str
    device: int
    count: int
    total_ns: int
    launched_by: str | None  # the launching operator with the most of this kernel's time


@dataclass(frozen=True)
class PatternHit:
    """A catalogue pattern (advice_patterns.py) seen in the trace: the name that showed it, its figures."""

    pattern: str
    name: str
    count: int
    steps_ns: int
    idle_ns: int


@dataclass(frozen=True)
class OperatorFigures:
    steps_ns: int  # summed step time (the window's length without steps): the shares' denominator
    steps: int
    idle_ns: int  # the devices' idle time in their windows, summed
    ops: tuple[OpFigure, ...]  # by total time, the first OPS_KEPT
    ops_omitted: int
    kernels: tuple[KernelLaunch, ...]  # by total time, the first KERNEL_LAUNCH_ROWS
    kernels_omitted: int
    patterns: tuple[PatternHit, ...] = ()  # per pattern, its name with the most time in the steps


# --- nesting -------------------------------------------------------------------------------------------
def nest(group: np.ndarray, ts: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Each event's parent (index, -1 for none) among the events of its group (thread), vectorized.

    Events of a group sorted by start, longer first; depth = earlier events of the group not yet
    ended at the start; parent = the last earlier event of the group at depth - 1."""
    n = len(ts)
    parent = np.full(n, -1, dtype=np.int64)
    if n == 0:
        return parent
    order = np.lexsort((ts - end, ts, group))  # group, start, longest first
    g, s, e = group[order], ts[order], end[order]
    g64 = g.astype(np.int64)
    rs, re_, m = _time_keys(s, e, max(abs(int(g64[0])), abs(int(g64[-1]))) + 1)
    pos = np.arange(n, dtype=np.int64)
    gstart = np.searchsorted(g64, g64, side="left")
    key_start = g64 * m + rs  # sorted already (group, start)
    ended = np.searchsorted(np.sort(g64 * m + re_), key_start, side="right") - gstart
    # zero-length events at this very start, at or after this one, ended "before" it by the count above
    zero = (e == s).astype(np.int64)
    cz = np.r_[np.int64(0), np.cumsum(zero)]
    block_end = np.searchsorted(key_start, key_start, side="right")
    ended -= cz[block_end] - cz[pos]
    depth = np.maximum((pos - gstart) - ended, 0)
    nonroot = np.flatnonzero(depth > 0)
    if len(nonroot):
        key = depth * (n + 1) + pos
        by_key = np.argsort(key, kind="stable")
        at = np.searchsorted(key[by_key], (depth[nonroot] - 1) * (n + 1) + pos[nonroot], side="left") - 1
        ok = at >= 0
        cand = by_key[np.clip(at, 0, None)]
        ok &= (depth[cand] == depth[nonroot] - 1) & (g64[cand] == g64[nonroot])
        sorted_parent = np.full(n, -1, dtype=np.int64)
        sorted_parent[nonroot[ok]] = cand[ok]
        has = sorted_parent >= 0
        parent[order[has]] = order[sorted_parent[has]]
    return parent


def _time_keys(s: np.ndarray, e: np.ndarray, groups: int) -> tuple[np.ndarray, np.ndarray, np.int64]:
    """Starts and ends as non-negative integers in time order, and a multiplier `m` above all of them, so
    that `group * m + key` orders (group, time) pairs: the offset from the earliest time where every
    key fits int64 (a capture of hours, thousands of threads), else the times' ranks (hostile times)."""
    lo = int(min(s.min(), e.min()))
    span = int(max(s.max(), e.max())) - lo + 1
    if 0 < span and groups * span < 2**62:
        return s - lo, e - lo, np.int64(span)
    times, inv = np.unique(np.r_[s, e], return_inverse=True)
    n = len(s)
    return inv[:n].astype(np.int64), inv[n:].astype(np.int64), np.int64(len(times) + 1)


def self_time(parent: np.ndarray, ts: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Duration minus the parts of each event's children that lie inside it (>= 0)."""
    dur = (end - ts).astype(np.int64)
    child = np.flatnonzero(parent >= 0)
    p = parent[child]
    inside = np.clip(np.minimum(end[child], end[p]) - np.maximum(ts[child], ts[p]), 0, None)
    taken = np.bincount(p, weights=inside, minlength=len(ts)).astype(np.int64)
    return np.maximum(dur - taken, 0)


def thread_groups(pid: np.ndarray, tid: np.ndarray) -> np.ndarray:
    """A group number per row for its (pid, tid) pair (from the two columns' codes: no tuple per row)."""
    if not len(pid):
        return np.zeros(0, dtype=np.int64)
    p, _ = pd.factorize(pid)
    t, t_uniques = pd.factorize(tid)
    return pd.factorize(p.astype(np.int64) * len(t_uniques) + t)[0].astype(np.int64)


def union_pieces(code: np.ndarray, ts: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per call, the piece of it not covered by earlier calls of the same code (by start): the pieces of
    one code are disjoint and their union is the union of its calls. Returns (piece start, piece end)."""
    n = len(ts)
    if n == 0:
        return ts.copy(), end.copy()
    order = np.lexsort((ts, code))
    c, s, e = code[order], ts[order], end[order]
    running = pd.Series(e).groupby(c).cummax().to_numpy()
    first = np.r_[True, c[1:] != c[:-1]]
    prev = np.where(first, np.iinfo(np.int64).min, np.r_[np.int64(0), running[:-1]])
    lo = np.maximum(s, prev)
    hi = np.maximum(e, lo)
    out_lo, out_hi = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
    out_lo[order], out_hi[order] = lo, hi
    return out_lo, out_hi


def covered(s: iv.IntervalSet, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Length of each [lo, hi) inside the disjoint set `s` (0 for empty pieces)."""
    return np.where(hi > lo, iv.overlap_per_window(s, lo, np.maximum(hi, lo)), 0)


# --- the operator view ---------------------------------------------------------------------------------
def host_nesting(tl: Timeline, rank: int) -> tuple[pd.DataFrame, np.ndarray]:
    """The rank's host events of NESTING_KINDS (name, kind, ts_ns, dur_ns, correlation) with their parent."""
    ev = tl.rank_events(rank)
    rows = np.flatnonzero((ev["device"].to_numpy() < 0) & T.category_mask(ev["kind"], NESTING_KINDS))
    cols = ("ts_ns", "dur_ns", "name", "kind", "pid", "tid", "correlation")
    host = pd.DataFrame({c: ev[c].array.take(rows) if ev[c].dtype == "category" else ev[c].to_numpy()[rows]
                         for c in cols}, copy=False)
    ts = host["ts_ns"].to_numpy()
    host["thread"] = thread_groups(host["pid"].to_numpy(), host["tid"].to_numpy())
    parent = nest(host["thread"].to_numpy(), ts, ts + host["dur_ns"].to_numpy())
    return host, parent


def step_basis(st: F.Steps, window: F.Window) -> iv.IntervalSet:
    """What shares of the steps are of: the union of the step spans, or the window without steps."""
    if len(st):
        return iv.union(st.start_ns, st.end_ns)
    return (np.array([window.start_ns]), np.array([window.end_ns])) if window.dur_ns > 0 else iv.empty()


def operator_figures(tl: Timeline, rank: int, basis: iv.IntervalSet, n_steps: int,
                     idle_sets: list[iv.IntervalSet], critical: Critical | None = None) -> OperatorFigures:
    """The operator view of a rank; `basis`: the steps (`step_basis`); `idle_sets`: each device's idle set
    (every gap of its window); `critical`: the host-caused gaps, launching threads and steps that measure each
    kept operator's time on the critical path."""
    host, parent = host_nesting(tl, rank)
    ts = host["ts_ns"].to_numpy()
    end = ts + host["dur_ns"].to_numpy()
    kind_codes = host["kind"].cat.codes.to_numpy()
    kinds = host["kind"].cat.categories
    step_code = kinds.get_loc(T.STEP) if T.STEP in kinds else -2
    self_ns = self_time(parent, ts, end)
    is_op = T.category_mask(host["kind"], OP_KINDS)
    # top level: the parent is a step or nothing
    parent_kind = np.where(parent >= 0, kind_codes[np.clip(parent, 0, None)], -1)
    top = (parent < 0) | (parent_kind == step_code)
    idle_ns = sum(iv.total(s) for s in idle_sets)
    ops_rows = np.flatnonzero(is_op)
    ops_table, omitted = _ops_table(host, ops_rows, ts, end, self_ns, top, basis, idle_sets)
    kernels, k_omitted = kernel_launches(tl, rank, host, parent)
    patterns = _pattern_hits(ops_table)
    if critical is not None:
        ops_table = (*on_critical_path(host, ops_rows, ops_table[:OPS_KEPT], critical), *ops_table[OPS_KEPT:])
    return OperatorFigures(iv.total(basis), n_steps, idle_ns, ops_table[:OPS_KEPT],
                           omitted + max(len(ops_table) - OPS_KEPT, 0), kernels, k_omitted, patterns)


@dataclass(frozen=True)
class Critical:
    """What an operator's or frame's time on the critical path is measured against."""

    sets: list[iv.IntervalSet]  # each device's host-caused idle gaps (not device_dependency, not start-up)
    threads: tuple[tuple[int, int], ...]  # the launching threads (pid, tid)
    step_start_ns: np.ndarray  # the step spans (empty: no steps)
    step_end_ns: np.ndarray


def on_threads(pid: np.ndarray, tid: np.ndarray, threads: tuple[tuple[int, int], ...]) -> np.ndarray:
    mine = np.zeros(len(pid), dtype=bool)
    for p, t in threads:
        mine |= (pid == p) & (tid == t)
    return mine


def critical_time(code: np.ndarray, lo: np.ndarray, hi: np.ndarray, kept: np.ndarray, c: Critical,
                  blocking: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per kept code (`kept`, its position: the result's row), the time of its pieces [lo, hi) inside the
    critical sets, in all and per step (a piece in the step holding its start; none without steps). A
    `blocking` piece (a synchronising call) runs on to the end of the idle gap it ends in: blocked in it, the
    host could not queue ahead, so the gap it leaves behind is its cost."""
    n_steps = len(c.step_start_ns)
    total = np.zeros(len(kept), dtype=np.int64)
    per = np.zeros((len(kept), n_steps), dtype=np.int64)
    row = pd.Index(kept).get_indexer(code)
    ok = row >= 0
    if not ok.any():
        return total, per
    lo, hi, row = lo[ok], hi[ok], row[ok]
    blocks = blocking[ok] if blocking is not None else np.zeros(len(lo), dtype=bool)
    got = np.zeros(len(lo), dtype=np.int64)
    for s in c.sets:
        upto = hi
        if blocks.any() and len(s[0]):
            at = iv.locate(hi, s[0], s[1])
            upto = np.where(blocks & (at >= 0), s[1][np.clip(at, 0, None)], hi)
        got += covered(s, lo, upto).astype(np.int64)
    np.add.at(total, row, got)
    if n_steps:
        step = iv.locate(lo, c.step_start_ns, c.step_end_ns)
        inside = step >= 0
        np.add.at(per, (row[inside], step[inside]), got[inside])
    return total, per


def on_critical_path(host: pd.DataFrame, rows: np.ndarray, ops: tuple[OpFigure, ...],
                     c: Critical) -> tuple[OpFigure, ...]:
    """`ops` with their time on the critical path: the union of their calls on the launching threads
    inside the host-caused idle gaps."""
    if not ops or not len(rows):
        return ops
    mine = rows[on_threads(host["pid"].to_numpy()[rows], host["tid"].to_numpy()[rows], c.threads)]
    names = host["name"].cat.categories
    kept = names.get_indexer([o.name for o in ops]).astype(np.int64)
    code = host["name"].cat.codes.to_numpy()[mine].astype(np.int64)
    ts = host["ts_ns"].to_numpy()[mine]
    lo, hi = union_pieces(code, ts, ts + host["dur_ns"].to_numpy()[mine])
    blocking = name_flags(host.iloc[mine], C.SYNC_CALLS)
    total, per = critical_time(code, lo, hi, kept, c, blocking)
    return tuple(replace(o, critical_ns=int(t), critical_per_step=tuple(int(v) for v in p))
                 for o, t, p in zip(ops, total, per))


def _ops_table(host: pd.DataFrame, rows: np.ndarray, ts: np.ndarray, end: np.ndarray, self_ns: np.ndarray,
               top: np.ndarray, basis: iv.IntervalSet,
               idle_sets: list[iv.IntervalSet]) -> tuple[tuple[OpFigure, ...], int]:
    if not len(rows):
        return (), 0
    code = host["name"].cat.codes.to_numpy()[rows].astype(np.int64)
    t0, t1 = ts[rows], end[rows]
    thread = host["thread"].to_numpy()[rows]
    # counted once: per thread, the union of the name's calls (its outermost calls' inclusive time)
    per_thread = pd.factorize(code * (int(thread.max()) + 1) + thread)[0].astype(np.int64)
    own_lo, own_hi = union_pieces(per_thread, t0, t1)
    lo, hi = union_pieces(code, t0, t1)
    in_window = covered(basis, lo, hi)
    in_idle = np.zeros(len(rows), dtype=np.int64)
    for s in idle_sets:
        in_idle += covered(s, lo, hi)
    frame = pd.DataFrame({"code": code, "kind": host["kind"].cat.codes.to_numpy()[rows], "dur": own_hi - own_lo,
                          "self": self_ns[rows], "win": in_window, "idle": in_idle, "top": top[rows],
                          "thread": thread})
    g = frame.groupby("code", sort=False).agg(count=("dur", "size"), total=("dur", "sum"), selfns=("self", "sum"),
                                              win=("win", "sum"), idle=("idle", "sum"), top=("top", "max"),
                                              kind=("kind", "first"), threads=("thread", "nunique"))
    names = host["name"].cat.categories
    g["key"] = [str(names[c]) for c in g.index]
    g = g.sort_values(["total", "count", "key"], ascending=[False, False, True], kind="stable")
    kinds = host["kind"].cat.categories
    out = tuple(OpFigure(k, str(kinds[kd]), int(n), int(tot), int(sf), int(w), int(i), bool(tp), int(th))
                for k, kd, n, tot, sf, w, i, tp, th in zip(g["key"], g["kind"], g["count"], g["total"], g["selfns"],
                                                           g["win"], g["idle"], g["top"], g["threads"]))
    return out, 0


def kernel_launches(tl: Timeline, rank: int, host: pd.DataFrame, parent: np.ndarray,
                    limit: int = KERNEL_LAUNCH_ROWS) -> tuple[tuple[KernelLaunch, ...], int]:
    """Every kernel name per device by total time (the first `limit`), with its launching operator."""
    k = F._gpu_work(tl, rank, kinds=(T.KERNEL,))
    if not len(k):
        return (), 0
    launcher = np.full(len(k), -1, dtype=np.int64)
    runtime = np.flatnonzero((host["kind"] == T.RUNTIME).to_numpy() & (host["correlation"].to_numpy() != -1))
    corr = k["correlation"].to_numpy()
    if len(runtime):
        rt_corr = pd.Index(host["correlation"].to_numpy()[runtime])
        keep = ~rt_corr.duplicated()
        at = pd.Index(rt_corr[keep]).get_indexer(corr)
        call = np.where(at >= 0, runtime[keep][np.clip(at, 0, None)], -1)
        # the call's enclosing event; a runtime call inside another (a driver call) goes one level up
        kinds = host["kind"].cat.codes.to_numpy()
        rt_code = host["kind"].cat.categories.get_loc(T.RUNTIME)
        up = np.where(call >= 0, parent[np.clip(call, 0, None)], -1)
        up = np.where((up >= 0) & (kinds[np.clip(up, 0, None)] == rt_code), parent[np.clip(up, 0, None)], up)
        is_launcher = T.category_mask(host["kind"], (T.CPU_OP, T.ANNOTATION, T.DATALOADER, T.OTHER))
        launcher = np.where((up >= 0) & is_launcher[np.clip(up, 0, None)], up, -1)
    host_names = host["name"].cat.codes.to_numpy()
    frame = pd.DataFrame({"name": k["name"].cat.codes.to_numpy(), "device": k["device"].to_numpy(),
                          "dur": k["dur_ns"].to_numpy(),
                          "by": np.where(launcher >= 0, host_names[np.clip(launcher, 0, None)], -1)
                          if len(host_names) else np.full(len(k), -1)})
    per = frame.groupby(["device", "name"], sort=False).agg(count=("dur", "size"), total=("dur", "sum"))
    by = frame[frame["by"] >= 0].groupby(["device", "name", "by"], sort=False)["dur"].sum()
    best: dict[tuple[int, int], int] = {}
    if len(by):
        by = by.reset_index().sort_values(["dur", "by"], ascending=[False, True], kind="stable")
        by = by.drop_duplicates(["device", "name"])
        best = {(int(d), int(n)): int(b) for d, n, b in zip(by["device"], by["name"], by["by"])}
    kn, hn = k["name"].cat.categories, host["name"].cat.categories
    per = per.reset_index()
    per["key"] = [str(kn[c]) for c in per["name"]]
    per = per.sort_values(["total", "count", "key", "device"], ascending=[False, False, True, True], kind="stable")
    rows = tuple(KernelLaunch(key, int(d), int(n), int(tot),
                              str(hn[best[(int(d), int(c))]]) if (int(d), int(c)) in best else None)
                 for key, d, c, n, tot in zip(per["key"], per["device"], per["name"], per["count"], per["total"]))
    return rows[:limit], max(len(rows) - limit, 0)


def _pattern_hits(ops: tuple[OpFigure, ...]) -> tuple[PatternHit, ...]:
    """Per catalogue pattern, the operator or annotation it recognises with the most time in the steps."""
    best: dict[str, PatternHit] = {}
    for o in ops:
        p = AP.match(o.name)
        if p is None:
            continue
        hit = PatternHit(p.id, o.name, o.count, o.steps_ns, o.idle_ns)
        if p.id not in best or (hit.steps_ns, hit.idle_ns) > (best[p.id].steps_ns, best[p.id].idle_ns):
            best[p.id] = hit
    return tuple(best[p.id] for p in AP.PATTERNS if p.id in best)
