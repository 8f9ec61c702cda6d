"""The per-rank table of a job of workers traced without GPU kernels (`JobResult.workers`): each worker's
figures (`analyses.workers.WorkerFacts`, whole ns over its span) per step, in us, with its compute against
the median worker's. The one place their units are converted.
"""

from __future__ import annotations

import numpy as np

from ..analyses.workers import WorkerFacts
from . import types as R


def worker_rows(facts: list[WorkerFacts], numbers: list[int]) -> tuple[R.WorkerRow, ...]:
    """The per-rank table: per step, in us, with each worker's compute vs the median worker's."""
    per_step = [f.compute_ns / f.steps for f in facts]
    median = float(np.median(per_step)) if per_step else 0.0
    return tuple(R.WorkerRow(
        rank=n, steps=f.steps, compute_us=round(f.compute_ns / f.steps / 1000, 3),
        comm_us=round(f.comm_ns / f.steps / 1000, 3), wait_us=round(f.wait_ns / f.steps / 1000, 3),
        step_time_us=round(f.span_ns / f.steps / 1000, 3),
        compute_vs_median=round(c / median, 3) if median > 0 else 0.0)
        for f, n, c in zip(facts, numbers, per_step))


__all__ = ["worker_rows"]
