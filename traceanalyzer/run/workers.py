"""Workers traced without GPU kernels (one file, many workers: `formats.workers`): each worker's compute,
communication and waits per step, and the workers whose compute per step sets the job's pace.

Per worker (a rank with no GPU work), from its host-side events:
* communication: events named as collectives or transfers (send/recv, all-reduce, reduce-scatter,
  all-gather, all-to-all, broadcast, barrier, NCCL/Gloo calls);
* compute: every other event except steps, DataLoader waits, the profiler's own span, and events named
  as waits or bubbles; counted as the union of its lanes (nested or parallel events once);
* exposed communication: communication with no compute beside it; wait: the worker's span (its first
  event's start to its last event's end) with neither running; so compute + comm + wait = span;
* steps: its step markers (ProfilerStep, or the step spans its events' step args give: `formats.workers`),
  else its optimizer events (one per training step), else 1.

A worker is a straggler when its compute per step is at least WORKER_STRAGGLER_COMPUTE_FACTOR times the
median of the other workers' (not of all: with two pipeline stages, the median of both would hold the slow
one's own work and hide it): the others wait for it at every collective. `job_workers` is one of the
combine's job stages.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import intervals as iv
from .. import timeline as T
from ..diagnosis.thresholds import WORKER_STRAGGLER_COMPUTE_FACTOR
from ..result import types as R
from ..timeline import Timeline
from ..units import format_us
from .combine import JobStage, JobVerdict

COMM_NAMES = re.compile(r"send|recv|all[-_ ]?reduce|reduce[-_ ]?scatter|all[-_ ]?gather|all[-_ ]?to[-_ ]?all|"
                        r"broadcast|barrier|nccl|gloo|\bp2p\b|collective", re.IGNORECASE)
WAIT_NAMES = re.compile(r"wait|bubble|idle", re.IGNORECASE)
OPTIMIZER_NAMES = re.compile(r"optim", re.IGNORECASE)
NOT_WORK_KINDS = (T.STEP, T.DATALOADER, T.TRACE_SPAN)


@dataclass(frozen=True)
class WorkerFacts:
    """One worker's totals over its span (whole ns) and its step count."""

    compute_ns: int
    comm_ns: int  # exposed: with no compute beside it
    wait_ns: int
    span_ns: int
    steps: int


def worker_facts(tl: Timeline, rank: int) -> WorkerFacts | None:
    """A rank's worker figures (module text); None when it has GPU work or no events."""
    ev = tl.events
    mine = ev["rank"].to_numpy() == rank
    codes = ev["kind"].cat.codes.to_numpy()
    gpu_codes = [i for i, k in enumerate(ev["kind"].cat.categories) if k in T.GPU_WORK_KINDS]
    if not mine.any() or np.isin(codes[mine], gpu_codes).any():
        return None
    kinds = ev["kind"].to_numpy()[mine].astype(str)
    names = ev["name"].to_numpy()[mine].astype(str)
    starts = ev["ts_ns"].to_numpy()[mine]
    ends = starts + ev["dur_ns"].to_numpy()[mine]
    unique, inverse = np.unique(names, return_inverse=True)
    is_comm = np.array([bool(COMM_NAMES.search(n)) for n in unique], dtype=bool)[inverse]
    is_wait = np.array([bool(WAIT_NAMES.search(n)) for n in unique], dtype=bool)[inverse]
    is_optimizer = np.array([bool(OPTIMIZER_NAMES.search(n)) for n in unique], dtype=bool)[inverse]
    work = ~np.isin(kinds, NOT_WORK_KINDS)
    comm_mask = work & is_comm
    compute_mask = work & ~is_comm & ~is_wait
    timed = kinds != T.TRACE_SPAN
    if not timed.any():
        return None
    lo, hi = int(starts[timed].min()), int(ends[timed].max())
    compute = iv.union(starts[compute_mask], ends[compute_mask])
    comm = iv.subtract(iv.union(starts[comm_mask], ends[comm_mask]), compute)
    compute_ns, comm_ns = iv.total(compute), iv.total(comm)
    optimizer_steps = int((work & is_optimizer & ~is_comm).sum())
    steps = int((kinds == T.STEP).sum()) or optimizer_steps or 1
    return WorkerFacts(compute_ns, comm_ns, max(0, hi - lo - compute_ns - comm_ns), hi - lo, steps)


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
