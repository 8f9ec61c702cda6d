"""Throughput: steps/s, step time (median, p10, p90) and, with the batch size, samples/s.

One measure of step time for the report and for `diff` (compare.py uses these functions): a job
step lasts as long as its slowest rank (steps present on every rank with steps), warm-up steps are
left out (the diagnosis names them; none with --include-warmup), percentiles are numpy's linear
ones. With `--batch-size N` (samples each rank takes per step; never guessed from shapes):
samples/s = N x ranks with steps x steady steps / their summed duration, and per step N / its duration.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Throughput:
    steps: int  # steady job steps measured
    steps_per_s: float | None
    step_time_median_us: float | None
    step_time_p10_us: float | None
    step_time_p90_us: float | None
    samples_per_s: float | None  # only with a batch size
    batch_size: int | None


def job_step_durations(per_rank: Sequence[Mapping[int, float]],
                       exclude: Iterable[int] = ()) -> tuple[list[int], np.ndarray]:
    """Step numbers present on every rank with steps (less `exclude`), and each one's duration on the
    slowest rank. `per_rank`: step number -> duration, one mapping per rank (empty ones ignored)."""
    ranks = [r for r in per_rank if r]
    if not ranks:
        return [], np.zeros(0)
    skip = set(exclude)
    common = sorted(set.intersection(*(set(r) for r in ranks)) - skip)
    dur = np.array([max(r[n] for r in ranks) for n in common], dtype=np.float64)
    return common, dur


def step_time_stats(dur: np.ndarray) -> tuple[float | None, float | None, float | None]:
    """(median, p10, p90) of step durations; None without steps."""
    if not len(dur):
        return None, None, None
    return float(np.median(dur)), float(np.percentile(dur, 10)), float(np.percentile(dur, 90))


def throughput(per_rank: Sequence[Mapping[int, float]], exclude: Iterable[int] = (),
               batch_size: int | None = None) -> Throughput:
    """Throughput of a job from its ranks' step durations in microseconds (see the module docstring)."""
    steps, dur = job_step_durations(per_rank, exclude)
    med, p10, p90 = step_time_stats(dur)
    total_s = float(dur.sum()) / 1e6
    ranks = sum(1 for r in per_rank if r)
    per_s = len(steps) / total_s if total_s > 0 else None
    samples = batch_size * ranks * per_s if batch_size and per_s is not None else None
    return Throughput(len(steps), per_s, med, p10, p90, samples, batch_size)


def samples_per_s(batch_size: int | None, duration_us: float) -> float | None:
    """One step's samples/s (one rank): batch size / step duration."""
    if not batch_size or duration_us <= 0:
        return None
    return batch_size / (duration_us / 1e6)


__all__ = ["Throughput", "job_step_durations", "samples_per_s", "step_time_stats", "throughput"]
