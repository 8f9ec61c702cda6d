import numpy as np

from traceanalyzer.analyses import _intervals as iv


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
