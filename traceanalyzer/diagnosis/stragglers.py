"""Stragglers: the ranks the others wait for in their collectives, worst first, each with its own cause.

Reads the job's per-rank communication figures (`result.JobResult`, analyses/job.py) and each
rank's diagnosis; a rank is a straggler when it starts its collectives late (vs the median rank)
by at least STRAGGLER_MIN_LATENESS_NS and STRAGGLER_MIN_STEP_SHARE of the median step, and held
the others up in at least one collective. Its cause is its own largest idle cause per steady step
(a DataLoader wait, host work, ...): why it was late, in its own trace.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ..causes import cause_label
from ..result import types as R
from ..units import format_us
from .thresholds import STRAGGLER_MIN_LATENESS_NS, STRAGGLER_MIN_STEP_SHARE


def duration_text(us: float) -> str:
    """31000.0 -> '31.0 ms', 850 -> '850 us', 2.5e6 -> '2.50 s': `units.format_us`, as every other
    sentence of the report writes durations."""
    return format_us(us)


def min_lateness_us(job: R.JobResult) -> float:
    """The lateness per step from which a rank counts as a straggler in this job."""
    steps = [r.step_time_us for r in job.ranks if r.step_time_us]
    median_step = float(np.median(steps)) if steps else 0.0
    return max(STRAGGLER_MIN_LATENESS_NS / 1000.0, STRAGGLER_MIN_STEP_SHARE * median_step)


def top_cause(d: R.RankDiagnosisResult | None) -> tuple[str | None, float | None]:
    """A rank's largest idle cause and its idle time per steady step (mean over those steps)."""
    if d is None:
        return None, None
    steps = [p for p in d.per_step if p.step not in set(d.warmup_steps)] or list(d.per_step)
    if steps:
        totals: dict[str, float] = {}
        for p in steps:
            for c, v in p.idle_by_cause_us.items():
                totals[c] = totals.get(c, 0.0) + v
        per_step = {c: v / len(steps) for c, v in totals.items()}
    else:
        per_step = dict(d.idle_by_cause_us)
    best = max(sorted(per_step), key=lambda c: per_step[c], default=None)
    if best is None or per_step[best] <= 0:
        return None, None
    return best, round(per_step[best], 3)


def stragglers(job: R.JobResult, by_rank: Mapping[int, R.RankDiagnosisResult | None]) -> tuple[R.StragglerResult, ...]:
    """The straggler ranks, latest first (see the module text); empty: no straggler. `by_rank`: each
    rank's diagnosis by its number in `job.ranks`."""
    if job.collectives_matched == 0:
        return ()
    floor = min_lateness_us(job)
    late = [r for r in job.ranks if r.lateness_us >= floor and r.last_arrivals > 0]
    late.sort(key=lambda r: (-r.lateness_us, -r.caused_wait_us, r.rank))
    out = []
    for r in late:
        cause, cause_us = top_cause(by_rank.get(r.rank))
        text = f"rank {r.rank} is late by {duration_text(r.lateness_us)} per step"
        if cause is not None and cause_us is not None:
            text += f"; its {cause_label(cause)} is {duration_text(cause_us)} per step"
        text += f"; the other ranks wait {duration_text(r.caused_wait_us)} per step for it"
        out.append(R.StragglerResult(rank=r.rank, caused_wait_per_step_us=r.caused_wait_us,
                                     lateness_per_step_us=r.lateness_us, collectives=r.last_arrivals,
                                     top_cause=cause, top_cause_per_step_us=cause_us, text=text))
    return tuple(out)


__all__ = ["duration_text", "min_lateness_us", "stragglers", "top_cause"]
