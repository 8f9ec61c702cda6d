"""Change points of a series of numbers: E-Divisive means (Matteson & James, "A nonparametric approach
for multiple change point analysis of multivariate data", JASA 2014), the method Apache Otava and
MongoDB's performance CI use on benchmark histories.

For a stretch [a, b) of the series and each split tau, with X = [a, tau) (m values) and Y after it
(k values), the divergence of the two sides is

    E(X, Y)     = 2 mean|x - y| - mean|x - x'| - mean|y - y'|      (energy distance, exponent 1)
    Q(tau, kappa) = m k / (m + k) * E(X, Y),   Y = [tau, kappa) for any kappa up to b

the split tau with the largest Q (over kappa) is the candidate. Its significance is a permutation test: the stretch's
values are shuffled (a fixed seed, so the same series gives the same answer) and the largest Q of each
shuffle computed; p = (shuffles at least as large + 1) / (shuffles + 1). A candidate with p <= alpha is
a change point, and the search goes on in the stretches on either side (bisection, the largest Q of
all stretches first) until no candidate is significant. Each side of a split keeps at least
`min_size` values. No assumption of normal noise: the statistic compares all pairwise distances.

A significant split is kept only when its change is real: |after - before| (the medians of the
stretches on either side) is above zero and above the figure's `resolution` (a change a figure cannot
show, e.g. a memory peak that moved by bytes, is none), and the two sides differ beyond the noise in
one of three ways:

* a two-sided Mann–Whitney rank test of the values before against the values after gives p <= `rank_alpha`
  (sides that do not overlap at all give its smallest p: 2 / C(m + k, m), 1.6e-4 for 8 runs a side), or
* the size is at least `min_effect` times the noise's robust spread.

The noise is estimated **within** the segments, never across a shift: the larger of 1.4826 x the median
absolute deviation of every value from its own segment's median, and 1.4826 / sqrt(2) x the median
absolute difference of successive values of one segment. So a side that alternates (152, 176, 152, ...
ms: two settings of a node taking turns) widens the spread, but a shift that separates it from the
runs before is still found by the rank test, whatever the alternation. On flat series of Gaussian
noise the permutation test alone calls about 1 series in 200 changed, by about one standard deviation;
with the rank test as well, about 1 in 300 (tests/test_changepoints.py counts it over many seeds,
alternating series included).

Pure numpy, vectorized: pairwise distances and their 2-D cumulative sums give every split's Q at once,
and the shuffles are computed in batches (stopped early once the candidate cannot be significant).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .ranktest import rank_test

MIN_SIZE = 3  # values on each side of a change point
ALPHA = 0.005  # significance level of the permutation test
PERMUTATIONS = 499  # shuffles per test (p = 1/500 at best)
SEED = 20261125
MIN_EFFECT = 2.0  # |after - before| / robust spread, at least, or:
RANK_ALPHA = 0.001  # the rank test of the runs before against the runs after, at most
MAX_POINTS = 50  # change points per series at most
_BATCH_CELLS = 2_000_000  # floats per batch of shuffles (memory bound)


@dataclass(frozen=True)
class ChangePoint:
    index: int  # the first value after the change
    q: float  # the E-Divisive statistic of the split
    p_value: float  # of the permutation test
    before: float  # median of the stretch before (up to the previous change point)
    after: float  # median of the stretch after (up to the next change point)


def _integral(d: np.ndarray) -> np.ndarray:
    """S[..., i, j] = sum of d[..., :i, :j] (one row and column of zeros in front)."""
    s = np.zeros((*d.shape[:-2], d.shape[-2] + 1, d.shape[-1] + 1))
    s[..., 1:, 1:] = d.cumsum(-1).cumsum(-2)
    return s


def _q_curve(values: np.ndarray, min_size: int) -> np.ndarray:
    """max over kappa of Q(tau, kappa), for tau = min_size .. n - min_size, for each row of `values`
    (shape (R, n)): (R, taus). X = [0, tau), Y = [tau, kappa): the second side may stop before the end,
    so a change that is undone later (a bump) is seen too (Matteson & James' kappa)."""
    n = values.shape[-1]
    d = np.abs(values[..., :, None] - values[..., None, :])
    s = _integral(d)  # symmetric, as d is: S[tau, kappa] = S[kappa, tau]
    tau = np.arange(min_size, n - min_size + 1)
    kappa = np.arange(2 * min_size, n + 1)
    m = tau[:, None].astype(float)
    k = (kappa[None, :] - tau[:, None]).astype(float)
    valid = k >= min_size
    k = np.where(valid, k, 2.0)  # placeholders where kappa is too close to tau (masked below)
    s_tt = s[..., tau, tau][..., :, None]  # block [0, tau) x [0, tau)
    s_kk = s[..., kappa, kappa][..., None, :]  # block [0, kappa) x [0, kappa)
    s_tk = s[..., tau[:, None], kappa[None, :]]  # rows [0, tau), columns [0, kappa)
    within_y = s_kk - 2 * s_tk + s_tt  # block [tau, kappa) x [tau, kappa)
    between = s_tk - s_tt  # rows [0, tau), columns [tau, kappa)
    e = 2 * between / (m * k) - s_tt / (m * (m - 1)) - within_y / (k * (k - 1))
    q = np.where(valid, m * k / (m + k) * e, -np.inf)
    return q.max(axis=-1)  # type: ignore[no-any-return]


def best_split(values: np.ndarray, min_size: int = MIN_SIZE) -> tuple[int, float] | None:
    """(tau, Q) of the stretch's best split (tau counted from its start), or None when it is too short."""
    x = np.asarray(values, dtype=float)
    if len(x) < 2 * min_size or min_size < 2:
        return None
    q = _q_curve(x[None, :], min_size)[0]
    i = int(np.argmax(q))
    return min_size + i, float(q[i])


def permutation_p(values: np.ndarray, q_obs: float, min_size: int = MIN_SIZE, permutations: int = PERMUTATIONS,
                  alpha: float = ALPHA, seed: int = SEED) -> float:
    """p-value of the largest Q of `values` against shuffles of them. Stops once p cannot reach `alpha`
    (the value returned is then a lower bound, always above alpha)."""
    x = np.asarray(values, dtype=float)
    n = len(x)
    rng = np.random.default_rng(seed)
    most = max(1, min(permutations, _BATCH_CELLS // max(n * n, 1)))
    batch = min(16, most)  # small first: a split that is not significant is usually known after a few shuffles
    need_below = alpha * (permutations + 1) - 1  # exceedances allowed for p <= alpha
    exceed = done = 0
    tol = 1e-12 * max(abs(q_obs), 1.0)
    while done < permutations:
        r = min(batch, permutations - done)
        shuffled = x[rng.permuted(np.tile(np.arange(n), (r, 1)), axis=1)]
        q = _q_curve(shuffled, min_size).max(axis=1)
        exceed += int(np.count_nonzero(q >= q_obs - tol))
        done += r
        batch = min(batch * 2, most)
        if exceed > need_below:  # no longer significant whatever the remaining shuffles give
            return (exceed + 1) / (done + 1)
    return (exceed + 1) / (permutations + 1)


def e_divisive(values: np.ndarray | list[float], min_size: int = MIN_SIZE, alpha: float = ALPHA,
                          permutations: int = PERMUTATIONS, seed: int = SEED, max_points: int = MAX_POINTS,
               min_effect: float = MIN_EFFECT, resolution: float = 0.0,
               rank_alpha: float = RANK_ALPHA) -> list[ChangePoint]:
    """The change points of a series (NaN values are not allowed: leave missing runs out first), in order.
    `resolution`: the smallest change of the figure that means anything (its display's last digit)."""
    x = np.asarray(values, dtype=float)
    if x.ndim != 1:
        raise ValueError("e_divisive takes a 1-D series")
    if not np.all(np.isfinite(x)):
        raise ValueError("e_divisive takes finite values only")
    found: list[tuple[int, float, float]] = []
    bounds = [0, len(x)]
    tested: dict[tuple[int, int], tuple[int, float] | None] = {}
    while len(found) < max_points:
        candidates = []
        for a, b in zip(bounds[:-1], bounds[1:], strict=True):
            if (a, b) not in tested:
                tested[(a, b)] = best_split(x[a:b], min_size)
            split = tested[(a, b)]
            if split is not None:
                candidates.append((split[1], a, b, a + split[0]))
        if not candidates:
            break
        q, a, b, tau = max(candidates)
        if not q > 0 or np.ptp(x[a:b]) == 0:
            break
        p = permutation_p(x[a:b], q, min_size, permutations, alpha, seed + a * 7919 + b)
        if p > alpha:
            break
        found.append((tau, q, p))
        bounds = sorted({*bounds, tau})
    found.sort()
    while found:  # the weakest change goes first; its neighbours' segments then merge
        edges = [0, *(t for t, _, _ in found), len(x)]
        spread = _robust_spread(x, edges)
        sides = [(x[edges[i]:tau], x[tau:edges[i + 2]]) for i, (tau, _, _) in enumerate(found)]
        sizes = [abs(float(np.median(after) - np.median(before))) for before, after in sides]
        real = [size > 0 and size > resolution and (_rank_p(before, after) <= rank_alpha or size >= min_effect * spread)
                for size, (before, after) in zip(sizes, sides, strict=True)]
        if all(real):
            break
        found.pop(min((i for i, ok in enumerate(real) if not ok), key=lambda i: sizes[i]))
    edges = [0, *(t for t, _, _ in found), len(x)]
    return [ChangePoint(tau, round(q, 9), round(p, 6), float(np.median(x[edges[i]:tau])),
                        float(np.median(x[tau:edges[i + 2]])))
            for i, (tau, q, p) in enumerate(found)]


def _robust_spread(x: np.ndarray, edges: list[int]) -> float:
    """The noise's standard deviation within the segments cut at `edges`, estimated two robust ways, the
    larger kept: 1.4826 x the median absolute deviation of each value from its segment's median, and
    1.4826 / sqrt(2) x the median absolute difference of successive values of one segment (a difference
    across a change point is not noise)."""
    segments = [x[a:b] for a, b in zip(edges[:-1], edges[1:], strict=True)]
    dev = np.concatenate([np.abs(s - np.median(s)) for s in segments])
    successive = np.concatenate([np.abs(np.diff(s)) for s in segments])
    by_diff = 1.4826 / np.sqrt(2) * np.median(successive) if len(successive) else 0.0
    return float(max(1.4826 * np.median(dev), by_diff))


def _rank_p(before: np.ndarray, after: np.ndarray) -> float:
    """Two-sided Mann–Whitney p of the values before against the values after (the comparison's own test)."""
    p = rank_test(before, after)
    return 1.0 if p is None else p


__all__ = ["ALPHA", "ChangePoint", "MIN_EFFECT", "MIN_SIZE", "RANK_ALPHA", "PERMUTATIONS", "best_split", "e_divisive",
           "permutation_p"]
