"""The job stage of workers traced without GPU kernels (one file, many workers): the per-rank table
(`result.workers`, from each worker's figures, `analyses.workers`), the workers whose compute per step sets the
job's pace, and the verdict that says its basis.

A worker is a straggler when its compute per step is at least WORKER_STRAGGLER_COMPUTE_FACTOR times the
median of the other workers' (not of all: with two pipeline stages, the median of both would hold the slow
one's own work and hide it): the others wait for it at every collective. `job_workers` is one of the
combine's job stages.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ..analyses.workers import WorkerFacts, worker_facts
from ..diagnosis.thresholds import WORKER_STRAGGLER_COMPUTE_FACTOR
from ..result import types as R
from ..result.workers import worker_rows
from ..units import format_us
from .combine import JobStage, JobVerdict


def _others_median(rows: tuple[R.WorkerRow, ...], rank: int) -> float:
    """The median compute per step of the workers other than `rank`."""
    return float(np.median([o.compute_us for o in rows if o.rank != rank]))


def worker_stragglers(rows: tuple[R.WorkerRow, ...]) -> tuple[R.StragglerResult, ...]:
    """The workers whose compute per step is at least the factor times the other workers' median, slowest
    first."""
    if len(rows) < 2:
        return ()
    late = sorted((r for r in rows if (m := _others_median(rows, r.rank)) > 0
                   and r.compute_us >= WORKER_STRAGGLER_COMPUTE_FACTOR * m),
                  key=lambda r: (-r.compute_us, r.rank))
    out = []
    for r in late:
        median = _others_median(rows, r.rank)
        # what the others spend beyond it in communication and waits (waiting for it inside collectives)
        others = [o.comm_us + o.wait_us - r.comm_us - r.wait_us for o in rows if o.rank != r.rank]
        waited = max(0.0, float(np.median(others))) if others else 0.0
        text = (f"worker rank {r.rank} computes {format_us(r.compute_us)} per step, {r.compute_us / median:.2f}x the "
                f"other workers' median {format_us(median)}; the other workers spend {format_us(waited)} more per "
                f"step than it in communication and waits (median)")
        out.append(R.StragglerResult(rank=r.rank, caused_wait_per_step_us=round(waited, 3),
                                     lateness_per_step_us=round(r.compute_us - median, 3), collectives=0,
                                     top_cause=None, top_cause_per_step_us=None, text=text))
    return tuple(out)


def straggler_finding(s: R.StragglerResult, rows: tuple[R.WorkerRow, ...]) -> R.FindingResult:
    """The slowest straggler as the first finding (its advice leads): the others' extra communication and
    waits per step, over the steps of the capture, and as a share of the median other worker's step."""
    from ..diagnosis.advice import advice_for

    me = next(r for r in rows if r.rank == s.rank)
    others_step = float(np.median([r.step_time_us for r in rows if r.rank != s.rank]))
    return R.FindingResult(
        id="straggler", cause=None, severity="high",
        title=f"Worker rank {s.rank} computes {me.compute_vs_median:.2f}x the median worker per step",
        explains_us=round(s.caused_wait_per_step_us * me.steps, 3),
        share_of_idle=round(s.caused_wait_per_step_us / others_step, 4) if others_step > 0 else 0.0, evidence=(s.text,),
        advice=(f"Make worker rank {s.rank}'s compute faster first (its stage's share of layers, its inputs, "
                f"its host): the other workers wait for it at every collective.", *advice_for("straggler", "")),
        figures={"compute_per_step_us": me.compute_us, "lateness_per_step_us": s.lateness_per_step_us,
                 "caused_wait_per_step_us": s.caused_wait_per_step_us})


def no_straggler_headline(rows: tuple[R.WorkerRow, ...]) -> str:
    """The headline of a workers job without a straggler: the spread of compute, the median comm and wait."""
    compute = [r.compute_us for r in rows]
    med = lambda xs: float(np.median(xs))  # noqa: E731
    return (f"No straggler among the {len(rows)} workers: compute per step {format_us(min(compute))} to "
            f"{format_us(max(compute))} (median {format_us(med(compute))}; none at "
            f"{WORKER_STRAGGLER_COMPUTE_FACTOR:g}x the median or more); median communication "
            f"{format_us(med([r.comm_us for r in rows]))} and wait {format_us(med([r.wait_us for r in rows]))} "
            f"per step.")


def basis_note(n: int) -> str:
    """What a workers job's verdict is based on."""
    return (f"No GPU kernels in this trace: the verdict is based on the {n} workers' host-side compute, "
            f"communication and waits per step (see the per-rank table), not on GPU time.")


def job_workers(outputs: tuple[Any, ...], ranks: tuple[R.RankResult, ...], diagnosis: R.DiagnosisResult | None,
                stage: JobStage) -> JobStage:
    """The combine's stage: with two or more ranks of one file, none with GPU work, the per-rank worker table,
    the compute stragglers and a verdict that says its basis; the stage unchanged otherwise."""
    facts = [o.extras.get("workers") for o in outputs]
    if len(facts) < 2 or any(f is None for f in facts) or len({o.meta.name for o in outputs}) != 1:
        return stage
    numbers = [r.rank if r.rank is not None else i for i, r in enumerate(ranks)]
    rows = worker_rows([f for f in facts if f is not None], numbers)
    job = stage.job or R.JobResult(clocks=(), collectives_matched=0, ranks=())
    # one file: one clock; each rank drawn from where its window starts on it
    starts = [o.window_ns[0] if o.window_ns else None for o in outputs]
    earliest = min((s for s in starts if s is not None), default=0)
    clock = R.HostClock(host="one trace file", ranks=tuple(sorted(numbers)), offset_us=0.0, method="same clock",
                        collectives_used=0, residual_us=None)
    job = dataclasses.replace(job, workers=rows, worker_straggler_factor=WORKER_STRAGGLER_COMPUTE_FACTOR,
                              clocks=(clock,),
                              timeline_shift_us=tuple(0.0 if s is None else (s - earliest) / 1000 for s in starts))
    verdict = None
    if diagnosis is not None:
        late = worker_stragglers(rows)
        note = basis_note(len(rows))
        if late:
            verdict = JobVerdict(late, f"Waiting for a straggler: {late[0].text}.", note,
                                 (straggler_finding(late[0], rows),))
        else:
            verdict = JobVerdict((), no_straggler_headline(rows), note)
    return stage.then(job, verdict)


__all__ = ["WorkerFacts", "basis_note", "job_workers", "no_straggler_headline", "straggler_finding", "worker_facts",
           "worker_rows", "worker_stragglers"]
