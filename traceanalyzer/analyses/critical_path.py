"""Each step's critical path, and what-if by replaying the step's dependency graph
(analyses/critical_path_graph.py builds it: which edges, and the assumptions that stand in for missing ones).

Lags (launch latency, a stream's gap) are kept as observed, so replaying the graph with the observed
durations gives back the observed times; the replay keeps launch overheads and queue depth and does not
model memory.

The longest path is one pass per "layer" of cross edges (host -> GPU -> host ...) over int64 arrays:
each chain is a max-plus scan (`np.maximum.accumulate`), cross edges are `np.maximum.at`, repeated
until no time moves (a step with k blocking calls on its path takes about 2k + 2 passes).
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field, replace

import numpy as np

from .. import timeline as T
from ..timeline import Timeline
from . import figures as F

# the kinds and assumptions are this module's words too (re-exported)
from .critical_path_graph import (  # noqa: F401
    A_COLLECTIVE_ORDER,
    A_CONTRADICTED,
    A_EVENT_OF_WAIT,
    A_EVENT_STREAM,
    A_IMPLICIT_WAIT,
    A_NO_LAUNCH,
    A_NOT_CONVERGED,
    A_OUTSIDE,
    A_RANK_START,
    A_STREAM_SYNC,
    A_TAIL,
    A_THREAD,
    A_WAIT_STREAM,
    COPY,
    END,
    GLOB_HOST_KINDS,
    HOST_OP,
    IDLE,
    KERNEL,
    LAUNCH,
    PEER_WAIT,
    SEGMENT_KINDS,
    START,
    SYNC_WAIT,
    Graph,
    build_graph,
    covered_before,
    ending_nodes,
    group_tails,
    inside_any,
    note_assumption,
    step_threads,
    union_sorted,
)
from .thresholds import CRITICAL_PATH_MAX_PASSES, CRITICAL_PATH_SEGMENTS


@dataclass(frozen=True)
class Segment:
    kind: str  # one of SEGMENT_KINDS
    name: str  # the operator / kernel / call, "rank N" for a peer wait, "" for idle
    dur_ns: int


@dataclass(frozen=True)
class StepPath:
    """One step's critical path: segments in path order (the longest kept, the rest folded per kind into one
    "(other)" segment each) whose durations add up to the step's duration."""

    step: int | None  # the step number; None: the window (no steps)
    start_ns: int
    end_ns: int
    segments: tuple[Segment, ...]
    by_kind_ns: tuple[tuple[str, int], ...]  # (kind, ns) for every kind on the path, largest first

    @property
    def dur_ns(self) -> int:
        return self.end_ns - self.start_ns

    def shares(self) -> dict[str, float]:
        """Share of the step per kind (sums to 1 when the step has a duration)."""
        total = sum(ns for _, ns in self.by_kind_ns)
        return {k: ns / total for k, ns in self.by_kind_ns} if total > 0 else {}


@dataclass(frozen=True)
class CriticalPath:
    rank: int  # index into Timeline.ranks
    steps: tuple[StepPath, ...]
    # (assumption, times it stood in for a missing edge), in first-use order
    assumptions: tuple[tuple[str, int], ...] = ()
    # (removal key, how much shorter the median step replays without it), per `Removal` asked for
    savings: tuple[tuple[str, int], ...] = ()

    def median_step(self) -> StepPath | None:
        """The step whose duration is the median (the lower one of an even count)."""
        if not self.steps:
            return None
        order = sorted(range(len(self.steps)), key=lambda i: (self.steps[i].dur_ns, i))
        return self.steps[order[(len(order) - 1) // 2]]


@dataclass(frozen=True)
class Removal:
    """Work to take out of a step's graph before replaying it: the host time inside the intervals
    (`starts`/`ends`, absolute ns, sorted and disjoint: the GPU idle a cause left) is cut from every host
    piece that holds it (launch calls only with `launches`: the work after the stretch still has to be
    launched), and every copy on the GPU with `copies`."""

    starts: np.ndarray
    ends: np.ndarray
    copies: bool = False
    launches: bool = False


@dataclass(frozen=True)
class WhatIf:
    """Base and projected duration of each step of one rank when durations change."""

    rank: int
    steps: tuple[int | None, ...]  # step numbers (None: the window)
    base_ns: tuple[int, ...]
    projected_ns: tuple[int, ...]
    matched: tuple[tuple[str, int], ...]  # (glob, rows it matched) per rule
    assumptions: tuple[tuple[str, int], ...] = ()

    @property
    def base_median_ns(self) -> int:
        return int(np.median(self.base_ns)) if self.base_ns else 0

    @property
    def projected_median_ns(self) -> int:
        return int(np.median(self.projected_ns)) if self.projected_ns else 0


class RuleError(ValueError):
    """A what-if rule that cannot be applied (bad glob or factor)."""


@dataclass(frozen=True)
class WhatIfRule:
    glob: str
    factor: float  # 0: removed

    @staticmethod
    def parse_scale(text: str) -> WhatIfRule:
        glob, sep, value = text.rpartition("=")
        if not sep or not glob.strip():
            raise RuleError(f"--scale {text!r}: expected GLOB=FACTOR, e.g. 'aten::mm=0.5'")
        try:
            factor = float(value)
        except ValueError:
            raise RuleError(f"--scale {text!r}: the factor {value!r} is not a number") from None
        if not np.isfinite(factor) or factor < 0:
            raise RuleError(f"--scale {text!r}: the factor must be a finite number >= 0 (0 removes)")
        return WhatIfRule(_check_glob(glob), factor)

    @staticmethod
    def remove(glob: str) -> WhatIfRule:
        return WhatIfRule(_check_glob(glob), 0.0)


def _check_glob(glob: str) -> str:
    glob = glob.strip()
    if not glob:
        raise RuleError("an empty glob matches nothing; give a name or a pattern such as 'aten::*'")
    try:
        re.compile(fnmatch.translate(glob))
    except re.error as exc:  # e.g. an unclosed character class
        raise RuleError(f"glob {glob!r} is not a valid pattern: {exc}") from None
    return glob


# --- replay ---------------------------------------------------------------------------------------
def _replay(g: Graph, d: np.ndarray) -> tuple[np.ndarray, np.ndarray, bool]:
    """Start and end of every node with durations `d`: the longest path from each group's start."""
    n = len(d)
    neg = np.iinfo(np.int64).min // 4
    s = np.maximum(g.floor_s, np.full(n, neg))
    e = np.maximum(s + d, g.floor_e)
    b = g.clag + d  # a chain step: previous end + lag + own duration
    chain_id = np.cumsum(g.chain_first) - 1
    start_of = np.flatnonzero(g.chain_first)
    for _ in range(CRITICAL_PATH_MAX_PASSES):
        cs = g.floor_s.copy()
        ce = g.floor_e.copy()
        if len(g.src):
            val = np.where(g.sp == START, s[g.src], e[g.src]) + g.lag
            to_s = g.dp == START
            np.maximum.at(cs, g.dst[to_s], val[to_s])
            np.maximum.at(ce, g.dst[~to_s], val[~to_s])
        a = np.maximum(cs + d, ce)
        # e_i = max(a_i, e_{i-1} + b_i) along each chain: e = B + running max of (a - B), reset per chain
        bb = np.where(g.chain_first, 0, b)
        cum = np.cumsum(bb)
        base = cum - cum[start_of][chain_id]
        v = a - base
        # reset the running max at each chain's first node: offset chains so each starts above the last
        vmin = np.minimum.reduceat(v, start_of) if len(start_of) else v
        vmax = np.maximum.reduceat(v, start_of) if len(start_of) else v
        shift = np.zeros(len(start_of), np.int64)
        if len(start_of) > 1:
            shift[1:] = np.cumsum(vmax[:-1] - vmin[1:] + 1)
        run = np.maximum.accumulate(v + shift[chain_id]) - shift[chain_id]
        new_e = base + run
        prev = np.empty(n, np.int64)
        prev[1:] = new_e[:-1]
        prev[:1] = neg
        new_s = np.where(g.chain_first, cs, np.maximum(cs, prev + g.clag))
        moved = (new_e != e) | (new_s != s)
        s, e = new_s, new_e
        if not moved.any():
            return s, e, True
    return s, e, False


def _sinks(g: Graph, e: np.ndarray) -> np.ndarray:
    """Each group's end: the latest end among the nodes it ends with (`ending_nodes`), plus its observed tail."""
    out = np.array([a for _, _, a, _ in g.groups], np.int64)
    ends = ending_nodes(g)
    if ends.any():
        np.maximum.at(out, g.group[ends], e[ends])
    return out + group_tails(g)


# --- the path -------------------------------------------------------------------------------------
def _incoming(g: Graph) -> tuple[np.ndarray, np.ndarray]:
    """Edges sorted by destination, and each node's first edge in that order (a CSR index)."""
    order = np.argsort(g.dst, kind="stable")
    first = np.searchsorted(g.dst[order], np.arange(len(g.s0) + 1), side="left")
    return order, first


@dataclass
class _Walk:
    """Segments collected walking back: node ranges (their own times and chain lags) and single segments."""

    kinds: list[np.ndarray] = field(default_factory=list)
    names: list[np.ndarray] = field(default_factory=list)
    durs: list[np.ndarray] = field(default_factory=list)

    def one(self, kind: str, name: str, dur: int) -> None:
        self.kinds.append(np.array([SEGMENT_KINDS.index(kind)]))
        self.names.append(np.array([name], dtype=object))
        self.durs.append(np.array([dur], np.int64))


def _path(g: Graph, s: np.ndarray, e: np.ndarray, d: np.ndarray, group: int, own_rank: int,
          incoming: tuple[np.ndarray, np.ndarray], run_from: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Walk back from the group's sink along the constraints that set each time: (kinds, names, durations) of
    the segments in path order.

    At a node's end: an end edge that set it (a blocking call released by GPU work; a collective released by the
    last rank's start), a fixed wait, or its own duration. At its start: its chain predecessor, a start edge
    (a launch, a stream wait), or its step's start. Every nanosecond from the step's start to its end is on
    exactly one segment. A run of chain nodes each set by its predecessor is taken in one step (`run_from`)."""
    _, _, g_start, g_end = g.groups[group]
    members = np.flatnonzero((g.group == group) & ending_nodes(g))
    walk = _Walk()
    if not len(members):
        if g_end > g_start:
            walk.one(IDLE, "", g_end - g_start)
        return _walked(walk)
    tail = int(group_tails(g)[group])
    if tail > 0:
        walk.one(IDLE, "", tail)
    order, first = incoming
    sp, src, lag, dp = g.sp, g.src, g.lag, g.dp
    i = int(members[np.argmax(e[members])])
    t = int(e[i])
    at_end = True

    def binding(i: int, point: int, value: int) -> int:
        idx = order[first[i]:first[i + 1]]
        idx = idx[dp[idx] == point]
        if not len(idx):
            return -1
        val = np.where(sp[idx] == START, s[src[idx]], e[src[idx]]) + lag[idx]
        j = int(np.argmax(val))
        return int(idx[j]) if int(val[j]) == value else -1

    def one(i: int, kind: str, name: str, dur: int) -> None:
        if g.rank[i] != own_rank:
            walk.one(PEER_WAIT, f"rank {g.rank[i]}", dur)
        else:
            walk.one(kind, name, dur)

    for _ in range(2 * len(g.s0) + 2):
        if at_end:
            own_end = int(s[i] + d[i])
            if int(e[i]) == own_end and run_from[i] < i:
                # nodes run_from[i] + 1 .. i: each its own time after its predecessor's end plus the chain lag
                j = int(run_from[i])
                nodes = np.arange(i, j, -1)
                _run(walk, g, s, e, nodes, own_rank)
                i, t = j, int(e[j])
                continue
            k = binding(i, END, int(e[i])) if int(e[i]) > own_end else -1
            if k >= 0:
                j = int(src[k])
                reached = int(s[j] if sp[k] == START else e[j])
                one(i, SEGMENT_KINDS[int(g.kind[i])], str(g.name[i]), t - reached)
                i, t, at_end = j, reached, bool(sp[k] == END)
                continue
            if int(e[i]) > own_end:  # a fixed wait (on work of an earlier step)
                one(i, SYNC_WAIT, str(g.name[i]), t - int(s[i]))
            else:
                one(i, SEGMENT_KINDS[int(g.kind[i])], str(g.name[i]), t - int(s[i]))
            t, at_end = int(s[i]), False
            continue
        # at the node's start
        if not g.chain_first[i] and int(e[i - 1] + g.clag[i]) == t:
            if g.clag[i] > 0:
                one(i, IDLE, "", int(g.clag[i]))
            i, t, at_end = i - 1, int(e[i - 1]), True
            continue
        k = binding(i, START, t)
        if k >= 0:
            j = int(src[k])
            reached = int(s[j] if sp[k] == START else e[j])
            if t > reached:  # the edge's lag: a launch's latency (beyond the usual one: a wait the trace does not
                # explain), or how long a thread waited to wake
                launch = g.kind[j] == SEGMENT_KINDS.index(LAUNCH) and sp[k] == START
                usual = min(t - reached, int(g.launch_cap[i])) if launch else 0
                if t - reached > usual:
                    one(i, IDLE, "", t - reached - usual)
                if usual > 0:
                    one(i, LAUNCH, str(g.name[j]), usual)
            i, t, at_end = j, reached, bool(sp[k] == END)
            continue
        break
    # from the step's start to where the path begins: this rank's idle time, or a later rank's start
    begin = g.groups[int(g.group[i])][2]
    if t > begin:
        one(i, IDLE, "", t - begin)
        t = begin
    if t > g_start:
        walk.one(PEER_WAIT, f"rank {g.rank[i]}", t - g_start)
    return _walked(walk)


def _run(walk: _Walk, g: Graph, s: np.ndarray, e: np.ndarray, nodes: np.ndarray, own_rank: int) -> None:
    """Segments of a run of chain nodes, walking back: each node's own time, then the lag before it."""
    n = len(nodes)
    kinds = np.empty(2 * n, np.int64)
    names = np.empty(2 * n, dtype=object)
    durs = np.empty(2 * n, np.int64)
    peer = g.rank[nodes] != own_rank
    kinds[0::2] = np.where(peer, SEGMENT_KINDS.index(PEER_WAIT), g.kind[nodes])
    kinds[1::2] = np.where(peer, SEGMENT_KINDS.index(PEER_WAIT), SEGMENT_KINDS.index(IDLE))
    peer_names = np.array([f"rank {r}" for r in g.rank[nodes]], dtype=object) if peer.any() else None
    names[0::2] = np.where(peer, peer_names, g.name[nodes]) if peer_names is not None else g.name[nodes]
    names[1::2] = np.where(peer, peer_names, "") if peer_names is not None else ""
    durs[0::2] = e[nodes] - s[nodes]
    durs[1::2] = g.clag[nodes]
    walk.kinds.append(kinds)
    walk.names.append(names)
    walk.durs.append(durs)


def _walked(walk: _Walk) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if not walk.kinds:
        return np.zeros(0, np.int64), np.zeros(0, object), np.zeros(0, np.int64)
    kinds, names, durs = (np.concatenate(x)[::-1] for x in (walk.kinds, walk.names, walk.durs))
    keep = durs > 0
    return kinds[keep], names[keep], durs[keep]


def _run_from(g: Graph, s: np.ndarray, e: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Per node, the node before the run of chain nodes ending at it in which each node ends after its own time
    and starts at its predecessor's end plus the chain lag (the node itself when it is not such a node)."""
    n = len(s)
    prev_e = np.empty(n, np.int64)
    prev_e[1:] = e[:-1]
    prev_e[:1] = 0
    linked = ~g.chain_first & (prev_e + g.clag == s) & (e == s + d)
    pos = np.where(linked, 0, np.arange(n))
    last_unlinked = np.maximum.accumulate(pos)
    # a linked node's run reaches back to the last unlinked node (its predecessor ends the run)
    return np.where(linked, np.maximum(last_unlinked, 0), np.arange(n))


def _fold(kinds: np.ndarray, names: np.ndarray, durs: np.ndarray
          ) -> tuple[tuple[Segment, ...], tuple[tuple[str, int], ...]]:
    """Consecutive segments of one kind and name merged; beyond CRITICAL_PATH_SEGMENTS the shortest folded per
    kind into one "(other)" segment; the totals per kind."""
    if not len(durs):
        return (), ()
    new = np.ones(len(durs), bool)
    new[1:] = (kinds[1:] != kinds[:-1]) | (names[1:] != names[:-1])
    at = np.flatnonzero(new)
    kinds, names, durs = kinds[at], names[at], np.add.reduceat(durs, at)
    per_kind = np.bincount(kinds, weights=durs, minlength=len(SEGMENT_KINDS)).astype(np.int64)
    by_kind = tuple((SEGMENT_KINDS[k], int(per_kind[k]))
                    for k in sorted(np.flatnonzero(per_kind > 0).tolist(), key=lambda k: (-per_kind[k], k)))
    if len(durs) > CRITICAL_PATH_SEGMENTS:
        keep = np.zeros(len(durs), bool)
        keep[np.argsort(-durs, kind="stable")[:CRITICAL_PATH_SEGMENTS - 1]] = True
        rest = np.bincount(kinds[~keep], weights=durs[~keep], minlength=len(SEGMENT_KINDS)).astype(np.int64)
        segments = [Segment(SEGMENT_KINDS[int(k)], str(nm), int(du)) for k, nm, du in
                    zip(kinds[keep], names[keep], durs[keep])]
        segments += [Segment(SEGMENT_KINDS[k], "(other)", int(rest[k]))
                     for k in sorted(np.flatnonzero(rest > 0).tolist(), key=lambda k: (-rest[k], k))]
        return tuple(segments), by_kind
    return tuple(Segment(SEGMENT_KINDS[int(k)], str(nm), int(du)) for k, nm, du in zip(kinds, names, durs)), by_kind


# --- the faces of this module ---------------------------------------------------------------------
def critical_path(tl: Timeline, rank: int, st: F.Steps | None = None, peers: tuple[int, ...] = (),
                  median_only: bool = False, removals: dict[str, Removal] | None = None) -> CriticalPath:
    """Each step's critical path on `rank` (the window's when it has no steps; the median step's alone with
    `median_only`); `peers`: other ranks of the same Timeline whose collectives this rank's are matched with;
    `removals`: what each would save the median step, replayed (`CriticalPath.savings`)."""
    ranks = [rank] + [p for p in peers if p != rank]
    g = build_graph(tl, ranks, {rank: st}, median_only)
    if not len(g.s0):
        spans = [(n, a + g.origin, b + g.origin) for r, n, a, b in g.groups if r == rank]
        return CriticalPath(rank, tuple(StepPath(n, a, b, (Segment(IDLE, "", b - a),), ((IDLE, b - a),))
                                        for n, a, b in spans), tuple(g.assumptions.items()))
    s, e, settled = _replay(g, g.d)
    if not settled:
        note_assumption(g.assumptions, A_NOT_CONVERGED, 1)
    sinks = _sinks(g, e)
    incoming = _incoming(g)
    run_from = _run_from(g, s, e, g.d)
    paths = []
    for k, (r, number, a, _) in enumerate(g.groups):
        if r != rank:
            continue
        segs, kinds = _fold(*_path(g, s, e, g.d, k, rank, incoming, run_from))
        paths.append(StepPath(number, a + g.origin, int(sinks[k]) + g.origin, segs, kinds))
    cp = CriticalPath(rank, tuple(paths), tuple(g.assumptions.items()))
    if not removals or not paths:
        return cp
    median = cp.median_step()
    k = next(k for k, (r, n, a, _) in enumerate(g.groups) if r == rank and n == median.step  # type: ignore[union-attr]
             and a + g.origin == median.start_ns)  # type: ignore[union-attr]
    saved = []
    for key, removal in removals.items():
        d = _removed(g, removal)
        if np.array_equal(d, g.d):  # nothing of it in the step
            saved.append((key, 0))
            continue
        _, e1, _ = _replay(g, d)
        step = int(sinks[k]) - g.groups[k][2]
        saved.append((key, int(np.clip(int(sinks[k]) - int(_sinks(g, e1)[k]), 0, max(step, 0)))))
    return replace(cp, savings=tuple(saved))


def _removed(g: Graph, removal: Removal) -> np.ndarray:
    """The graph's durations without what `removal` takes out: a host piece loses its time inside the
    intervals (at most its own duration), copies their whole time."""
    lo, hi = removal.starts - g.origin, removal.ends - g.origin
    host = g.glob_kind == 0
    if not removal.launches:
        host &= g.kind != SEGMENT_KINDS.index(LAUNCH)
    inside = covered_before(lo, hi, g.e0) - covered_before(lo, hi, g.s0) if len(lo) else np.zeros(len(g.d))
    d = np.where(host, np.clip(g.d - np.rint(inside).astype(np.int64), 0, None), g.d)
    if removal.copies:
        d = np.where((g.glob_kind == 1) & (g.kind == SEGMENT_KINDS.index(COPY)), 0, d)
    return d


def what_if(tl: Timeline, rules: list[WhatIfRule], rank: int = 0, st: F.Steps | None = None,
            peers: tuple[int, ...] = ()) -> WhatIf:
    """Each step replayed with the rules' durations (a factor per glob; several matching: the smallest)."""
    ranks = [rank] + [p for p in peers if p != rank]
    g = build_graph(tl, ranks, {rank: st})
    matched: list[tuple[str, int]] = []
    best_f = np.ones(len(g.s0))
    best_hit = np.zeros(len(g.s0))
    for rule in rules:
        hit, count = _rule_hits(tl, ranks, g, rule)
        matched.append((rule.glob, count))
        better = (hit > 0) & (rule.factor < best_f)
        best_f = np.where(better, rule.factor, best_f)
        best_hit = np.where(better, hit, best_hit)
    # a host piece partly inside the matched rows: only that part scales
    d = np.clip(np.rint(g.d * (1.0 - best_hit * (1.0 - best_f))), 0, None).astype(np.int64)
    s0, e0, _ = _replay(g, g.d)
    # a blocking call removed whole waits for nothing any more: its waits go with it
    removed = (best_f == 0) & (best_hit >= 1.0)
    keep = ~((g.dp == END) & removed[g.dst]) if len(g.dst) else np.zeros(0, bool)
    changed = replace(g, src=g.src[keep], dst=g.dst[keep], sp=g.sp[keep], dp=g.dp[keep], lag=g.lag[keep],
                      floor_e=np.where(removed, g.floor_e.min(initial=0), g.floor_e))
    s1, e1, settled = _replay(changed, d)
    if not settled:
        note_assumption(g.assumptions, A_NOT_CONVERGED, 1)
    base, proj = _sinks(g, e0), _sinks(g, e1)
    mine = [k for k, grp in enumerate(g.groups) if grp[0] == rank]
    return WhatIf(rank, tuple(g.groups[k][1] for k in mine),
                  tuple(int(base[k] - g.groups[k][2]) for k in mine),
                  tuple(int(proj[k] - g.groups[k][2]) for k in mine), tuple(matched), tuple(g.assumptions.items()))


def _rule_hits(tl: Timeline, ranks: list[int], g: Graph, rule: WhatIfRule) -> tuple[np.ndarray, int]:
    """Per node, the fraction of it the rule's rows cover (GPU work: 1 when its name matches or its launch lies
    inside a matched host row); and how many rows the glob matched."""
    pattern = re.compile(fnmatch.translate(rule.glob))
    hit = np.zeros(len(g.s0))
    count = 0
    for r in ranks:
        ev = tl.rank_events(r)
        names = ev["name"].cat
        cat_hit = np.array([bool(pattern.match(str(c))) for c in names.categories] + [False])
        rows = cat_hit[names.codes.to_numpy()]
        host_rows = rows & T.category_mask(ev["kind"], GLOB_HOST_KINDS) & (ev["device"].to_numpy() < 0)
        gpu_rows = rows & T.category_mask(ev["kind"], T.GPU_WORK_KINDS)
        count += int(host_rows.sum() + gpu_rows.sum())
        on_rank = g.rank == r
        # GPU work by its own name
        gpu_nodes = np.flatnonzero(on_rank & (g.gpu_rows >= 0))
        hit[gpu_nodes[gpu_rows[g.gpu_rows[gpu_nodes]]]] = 1.0
        if not host_rows.any():
            continue
        pid, tid = ev["pid"].to_numpy(), ev["tid"].to_numpy()
        ts = ev["ts_ns"].to_numpy() - g.origin
        end = ts + ev["dur_ns"].to_numpy()
        threads, _ = step_threads(tl, r)
        for k, (p, t) in enumerate(threads):
            on = host_rows & (pid == p) & (tid == t)
            if not on.any():
                continue
            order = np.argsort(ts[on], kind="stable")
            starts, ends = union_sorted(ts[on][order], end[on][order])
            key = k + r * (1 << 20)
            nodes = np.flatnonzero(on_rank & (g.thread_key == key))
            lo, hi = g.span_lo[nodes], g.span_hi[nodes]
            point = lo == hi
            cov = covered_before(starts, ends, hi) - covered_before(starts, ends, lo)
            frac = np.where(point, inside_any(starts, ends, lo).astype(np.float64),
                            cov / np.maximum(hi - lo, 1))
            hit[nodes] = np.maximum(hit[nodes], frac)
    return np.clip(hit, 0.0, 1.0), count
