import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from traceanalyzer import intervals as iv


def brute_cover(starts, ends, lo, hi):
    grid = np.zeros(hi - lo, dtype=bool)
    for s, e in zip(starts, ends):
        grid[max(s, lo) - lo:max(min(e, hi) - lo, 0)] = True
    return grid


def test_union_merges_overlaps_and_touching():
    s, e = iv.union(np.array([10, 0, 5, 30, 40]), np.array([20, 5, 12, 35, 40]))
    assert s.tolist() == [0, 30] and e.tolist() == [20, 35]


def test_complement_includes_edges():
    s, e = iv.complement((np.array([10, 30]), np.array([20, 40])), 0, 50)
    assert list(zip(s.tolist(), e.tolist())) == [(0, 10), (20, 30), (40, 50)]


def test_overlap_per_window_and_locate():
    u = (np.array([10, 30]), np.array([20, 40]))
    assert iv.overlap_per_window(u, np.array([0, 15, 35, 50]), np.array([15, 35, 60, 60])).tolist() == [5, 10, 5, 0]
    assert iv.locate(np.array([5, 10, 19, 20, 35]), np.array([10, 30]), np.array([20, 40])).tolist() == [-1, 0, 0, -1, 1]


def test_random_against_brute_force():
    rng = np.random.default_rng(7)
    for _ in range(200):
        n = int(rng.integers(0, 12))
        a_s = rng.integers(0, 90, n)
        a_e = a_s + rng.integers(0, 15, n)
        m = int(rng.integers(0, 12))
        b_s = rng.integers(0, 90, m)
        b_e = b_s + rng.integers(0, 15, m)
        lo, hi = 5, 95
        a = iv.clip(iv.union(a_s, a_e), lo, hi)
        b = iv.clip(iv.union(b_s, b_e), lo, hi)
        ga, gb = brute_cover(a_s, a_e, lo, hi), brute_cover(b_s, b_e, lo, hi)
        assert iv.total(a) == ga.sum()
        assert iv.total(iv.intersect(a, b)) == (ga & gb).sum()
        assert iv.total(iv.subtract(a, b)) == (ga & ~gb).sum()
        assert iv.total(iv.complement(a, lo, hi)) == (~ga).sum()


def _covered(s, n):
    """A disjoint set as a boolean array over [0, n)."""
    out = np.zeros(n, dtype=bool)
    for lo, hi in zip(*s):
        out[lo:hi] = True
    return out


def _as_set(mask):
    edges = np.diff(np.r_[0, mask.astype(np.int8), 0])
    return np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)


_spans = st.lists(st.tuples(st.integers(0, 60), st.integers(0, 12)), max_size=25)


@settings(max_examples=300, derandomize=True, deadline=None)
@given(_spans, _spans)
def test_intersect_and_subtract_match_a_grid_reference(xs, ys):
    """Against coverage on an integer grid: the same points covered, and the canonical form (sorted,
    disjoint, touching pieces merged) that `union` gives."""
    a = iv.union(np.array([s for s, _ in xs], dtype=np.int64), np.array([s + d for s, d in xs], dtype=np.int64))
    b = iv.union(np.array([s for s, _ in ys], dtype=np.int64), np.array([s + d for s, d in ys], dtype=np.int64))
    ca, cb = _covered(a, 80), _covered(b, 80)
    for got, want in ((iv.intersect(a, b), ca & cb), (iv.subtract(a, b), ca & ~cb)):
        ref = _as_set(want)
        assert got[0].tolist() == ref[0].tolist() and got[1].tolist() == ref[1].tolist()
        assert got[0].dtype == np.int64 and got[1].dtype == np.int64
