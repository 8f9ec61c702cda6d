"""The two-sided Mann–Whitney rank test: how often two samples of one distribution differ in rank this much.

One definition, used by the comparison of two runs (`compare`: step times and parts) and by change points
(`changepoints`: the runs before a change against the runs after). Exact null distribution up to
`EXACT_MAX` values a side (ties counted half), else the normal approximation with continuity correction.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

EXACT_MAX = 60  # values a side up to which the rank test's null distribution is computed exactly


@lru_cache(maxsize=256)
def u_distribution(n: int, m: int) -> np.ndarray:
    """P(U = u), u = 0..n*m, of the Mann–Whitney count U (pairs where the head value is larger) when both
    samples come from one distribution (no ties): the exact null distribution, by the recurrence
    p(n, m, u) = n/(n+m) p(n-1, m, u-m) + m/(n+m) p(n, m-1, u), one row of m at a time."""
    # prev[k] = distribution for (k, j-1); built up over j = 0..m, each for every k = 0..n
    rows = [np.ones(1) for _ in range(n + 1)]  # j = 0: U = 0 with probability 1
    for j in range(1, m + 1):
        new = [np.ones(1)]  # k = 0: U = 0
        for k in range(1, n + 1):
            size = k * j + 1
            out = np.zeros(size)
            a = new[k - 1]  # (k-1, j): the largest value is a head value -> U grows by j
            out[j:j + len(a)] += k / (k + j) * a
            b = rows[k]  # (k, j-1): the largest value is a base value
            out[:len(b)] += j / (k + j) * b
            new.append(out)
        rows = new
    return rows[n]


def _u_count(base: np.ndarray, head: np.ndarray) -> float:
    d = np.subtract.outer(head, base)
    return float(np.count_nonzero(d > 0) + 0.5 * np.count_nonzero(d == 0))


def rank_test(base: np.ndarray, head: np.ndarray) -> float | None:
    """Two-sided p-value of the Mann–Whitney rank test (exact null distribution up to EXACT_MAX values a side,
    else the normal approximation): how often two samples of one distribution differ in rank this much."""
    n, m = len(head), len(base)
    if n == 0 or m == 0:
        return None
    u = _u_count(base, head)
    if n <= EXACT_MAX and m <= EXACT_MAX:
        cdf = np.cumsum(u_distribution(n, m))
        lo = cdf[int(np.floor(u))]  # P(U <= u)
        hi = 1.0 - (cdf[int(np.ceil(u)) - 1] if np.ceil(u) >= 1 else 0.0)  # P(U >= u)
        return float(min(1.0, 2 * min(lo, hi)))
    mean, sd = n * m / 2, np.sqrt(n * m * (n + m + 1) / 12)
    z = (abs(u - mean) - 0.5) / sd
    return float(min(1.0, math.erfc(max(z, 0.0) / math.sqrt(2))))


__all__ = ["EXACT_MAX", "rank_test", "u_distribution"]
