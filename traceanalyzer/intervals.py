"""Interval algebra on int64 nanosecond arrays, vectorized with numpy.

An *interval set* is a pair of int64 arrays `(starts, ends)`, sorted, disjoint and with
`starts < ends` (empty intervals are dropped). Every function here takes and returns such sets
(or plain numbers), never Python lists of events.
"""

from __future__ import annotations

import numpy as np

IntervalSet = tuple[np.ndarray, np.ndarray]

_EMPTY = np.zeros(0, dtype=np.int64)


def empty() -> IntervalSet:
    return _EMPTY.copy(), _EMPTY.copy()


def union(starts: np.ndarray, ends: np.ndarray) -> IntervalSet:
    """Merge possibly overlapping, unsorted intervals into a disjoint sorted set.

    Intervals that only touch (end == next start) are merged as well.
    """
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    keep = ends > starts
    starts, ends = starts[keep], ends[keep]
    if starts.size == 0:
        return empty()
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order], ends[order]
    running_end = np.maximum.accumulate(ends)
    # A new merged interval begins where the start lies beyond every earlier end.
    new_block = np.empty(starts.size, dtype=bool)
    new_block[0] = True
    new_block[1:] = starts[1:] > running_end[:-1]
    block_starts = starts[new_block]
    last_of_block = np.flatnonzero(np.r_[new_block[1:], True])
    return block_starts, running_end[last_of_block]


def clip(s: IntervalSet, lo: int, hi: int) -> IntervalSet:
    """Restrict a disjoint set to [lo, hi)."""
    starts, ends = s
    starts = np.maximum(starts, lo)
    ends = np.minimum(ends, hi)
    keep = ends > starts
    return starts[keep], ends[keep]


def total(s: IntervalSet) -> int:
    starts, ends = s
    return int((ends - starts).sum())


def complement(s: IntervalSet, lo: int, hi: int) -> IntervalSet:
    """The parts of [lo, hi) not covered by the disjoint set `s`."""
    starts, ends = clip(s, lo, hi)
    gap_starts = np.r_[np.int64(lo), ends]
    gap_ends = np.r_[starts, np.int64(hi)]
    keep = gap_ends > gap_starts
    return gap_starts[keep].astype(np.int64), gap_ends[keep].astype(np.int64)


def coverage_before(s: IntervalSet, t: np.ndarray) -> np.ndarray:
    """Covered length of the disjoint set `s` in (-inf, t], for each t (vectorized)."""
    starts, ends = s
    t = np.asarray(t, dtype=np.int64)
    if starts.size == 0:
        return np.zeros(t.shape, dtype=np.int64)
    lengths = ends - starts
    cum = np.r_[np.int64(0), np.cumsum(lengths)]
    idx = np.searchsorted(starts, t, side="right") - 1  # last interval starting at or before t
    safe = np.clip(idx, 0, None)
    partial = np.clip(t - starts[safe], 0, lengths[safe])
    return np.where(idx >= 0, cum[safe] + partial, 0)


def overlap_per_window(s: IntervalSet, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Covered length of `s` inside each window [lo[i], hi[i]) (windows may overlap)."""
    return coverage_before(s, np.asarray(hi)) - coverage_before(s, np.asarray(lo))


def intersect(a: IntervalSet, b: IntervalSet) -> IntervalSet:
    """Intersection of two disjoint sets: every overlapping pair (a_i, b_j), found with two binary
    searches per interval of `a`, cut to its common part; pieces that touch are merged."""
    a_s, a_e = a
    b_s, b_e = b
    if a_s.size == 0 or b_s.size == 0:
        return empty()
    first = np.searchsorted(b_e, a_s, side="right")  # the first b ending after a_i starts
    last = np.searchsorted(b_s, a_e, side="left")  # one past the last b starting before a_i ends
    counts = np.maximum(last - first, 0)
    n = int(counts.sum())
    if n == 0:
        return empty()
    i = np.repeat(np.arange(a_s.size), counts)
    j = np.repeat(first - np.cumsum(counts) + counts, counts) + np.arange(n)
    starts = np.maximum(a_s[i], b_s[j])
    ends = np.minimum(a_e[i], b_e[j])
    keep = ends > starts
    starts, ends = starts[keep], ends[keep]
    if starts.size == 0:
        return empty()
    new_block = np.r_[True, starts[1:] > ends[:-1]]  # sorted and disjoint already: merge touching ones
    return starts[new_block].astype(np.int64), ends[np.r_[new_block[1:], True]].astype(np.int64)


def subtract(a: IntervalSet, b: IntervalSet) -> IntervalSet:
    """The parts of `a` not covered by `b`."""
    a_s, a_e = a
    if a_s.size == 0:
        return empty()
    if b[0].size == 0:
        return a
    lo_all, hi_all = int(a_s[0]), int(a_e[-1])
    return intersect(a, complement(b, lo_all, hi_all))


def locate(points: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """For each point, the index of the interval [starts[i], ends[i]) holding it, or -1.

    `starts` must be sorted and the intervals disjoint (e.g. step spans).
    """
    points = np.asarray(points, dtype=np.int64)
    if len(starts) == 0:
        return np.full(points.shape, -1, dtype=np.int64)
    idx = np.searchsorted(starts, points, side="right") - 1
    safe = np.clip(idx, 0, None)
    inside = (idx >= 0) & (points < np.asarray(ends)[safe])
    return np.where(inside, idx, -1)
