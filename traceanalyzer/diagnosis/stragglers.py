"""Stragglers: the ranks the others wait for in their collectives, worst first, each with its own cause.

Reads the job's per-rank communication figures (`analyses.collectives_job.JobFigures`, ns) and each
rank's diagnosis; a rank is a straggler when it starts its collectives late (vs the median rank)
by at least STRAGGLER_MIN_LATENESS_NS and STRAGGLER_MIN_STEP_SHARE of the median step, and held
the others up in at least one collective. Its cause is its own largest idle cause per steady step
(a DataLoader wait, host work, ...): why it was late, in its own trace. `result.build` converts the
figures to the report's units.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from .. import causes as C
from ..analyses.collectives_job import JobFigures, RankComm
from ..causes import cause_label
from ..units import format_us
from .advice import advice_for
from .rules import Finding, RankDiagnosis
from .thresholds import STRAGGLER_MIN_LATENESS_NS, STRAGGLER_MIN_STEP_SHARE, STRAGGLER_WAIT_DOMINATES_SHARE
from .wording import Quoted


@dataclass(frozen=True)
class Straggler:
    """A rank the others wait for (whole ns, per step)."""

    rank: int
    caused_wait_ns: int  # time the other ranks spent waiting for this one, per step
    lateness_ns: int  # how late it arrives at collectives (vs the median rank), per step
    collectives: int  # collectives in which it arrived last
    top_cause: str | None  # its own largest cause of lost time
    top_cause_ns: int | None  # per steady step
    text: str  # e.g. "rank 5 is late by 31.0 ms per step; its DataLoader wait is 30.0 ms per step"
    # the phase before its collectives that made it late (PHASES), and how much longer it is per step than the
    # other ranks' median; None when no phase is longer
    phase: str | None = None
    phase_excess_ns: int | None = None


def others_wait_words(caused_wait_ns: int, n_ranks: int) -> str:
    """What the other ranks wait for a late one, per rank and per step (the sum over ranks is no time any
    rank spent, and would read as longer than the step it sits beside)."""
    others = max(n_ranks - 1, 1)
    each = caused_wait_ns / others
    return (f"each of the other {others} ranks waits {duration_text(each)} per step for it on average"
            if others > 1 else f"the other rank waits {duration_text(each)} per step for it")


def duration_text(ns: float) -> str:
    """31_000_000 -> '31.0 ms', 850_000 -> '850 us', 2.5e9 -> '2.50 s': `units.format_us`, as every other
    sentence of the report writes durations."""
    return format_us(ns / 1000.0)


def min_lateness(step_times: list[float], floor: float) -> float:
    """The lateness per step from which a rank counts as a straggler: at least `floor` and
    STRAGGLER_MIN_STEP_SHARE of the ranks' median step time, in the unit of both (the report states it
    in us, from its rounded step times, as it always has)."""
    median_step = float(np.median(step_times)) if step_times else 0.0
    return max(floor, STRAGGLER_MIN_STEP_SHARE * median_step)


def min_lateness_ns(job: JobFigures) -> float:
    """The lateness per step from which a rank counts as a straggler in this job, in ns."""
    return min_lateness([float(r.step_time_ns) for r in job.ranks if r.step_time_ns], float(STRAGGLER_MIN_LATENESS_NS))


def top_cause(d: RankDiagnosis | None) -> tuple[str | None, int | None]:
    """A rank's largest idle cause and its idle time per steady step (mean over those steps, whole ns)."""
    if d is None:
        return None, None
    steps = [p for p in d.per_step if p.step not in set(d.warmup_steps)] or list(d.per_step)
    if steps:
        totals: dict[str, int] = {}
        for p in steps:
            for c, v in p.idle_by_cause.items():
                totals[c] = totals.get(c, 0) + int(v)
        per_step = {c: v / len(steps) for c, v in totals.items()}
    else:
        per_step = {c: float(v) for c, v in d.idle_by_cause.items()}
    best = max(sorted(per_step), key=lambda c: per_step[c], default=None)
    if best is None or per_step[best] <= 0:
        return None, None
    return best, int(round(per_step[best]))


# The phases before a collective, as a rank's step figures measure them (per step, median over its steady
# steps): compute = GPU busy minus exposed communication (the job's figures); data = GPU idle waiting for the
# DataLoader; host = GPU idle for any other host cause (host work, launches, syncs, copies, allocator).
PHASES = {"compute": "computing (GPU busy)", "data": "waiting for data (DataLoader)",
          "host": "in host work with the GPU idle"}
HOST_PHASE_CAUSES = tuple(c for c in C.CAUSES if c not in (C.DATALOADER, C.DEPENDENCY, C.COMMUNICATION, C.STARTUP))


def phase_figures(r: RankComm, d: RankDiagnosis | None) -> dict[str, float]:
    """A rank's per-step phases (ns): compute from the job's figures, data and host from its idle by cause
    (median per steady step, averaged over its devices; the whole window when it has no steps)."""
    out = {"compute": float(r.compute_ns), "data": 0.0, "host": 0.0}
    if d is None:
        return out
    n_dev = max(len(d.devices), 1)
    steps = [p for p in d.per_step if p.step not in set(d.warmup_steps)] or list(d.per_step)
    if steps:
        out["data"] = float(np.median([p.idle_by_cause.get(C.DATALOADER, 0) for p in steps])) / n_dev
        out["host"] = float(np.median([sum(p.idle_by_cause.get(c, 0) for c in HOST_PHASE_CAUSES)
                                       for p in steps])) / n_dev
    else:
        out["data"] = d.idle_by_cause.get(C.DATALOADER, 0) / n_dev
        out["host"] = sum(d.idle_by_cause.get(c, 0) for c in HOST_PHASE_CAUSES) / n_dev
    return out


def late_phase(rank: int, job: JobFigures, diagnoses: Mapping[int, RankDiagnosis | None]) -> tuple[str | None, int]:
    """The phase in which `rank` spends the most more per step than the other ranks' median (ties: compute,
    data, host), and that excess; (None, 0) when it spends no more in any."""
    mine = next(r for r in job.ranks if r.rank == rank)
    me = phase_figures(mine, diagnoses.get(rank))
    others = [phase_figures(r, diagnoses.get(r.rank)) for r in job.ranks if r.rank != rank]
    if not others:
        return None, 0
    excess = {k: me[k] - float(np.median([o[k] for o in others])) for k in PHASES}
    best = max(PHASES, key=lambda k: excess[k])
    return (best, int(round(excess[best]))) if excess[best] > 0 else (None, 0)


def stragglers(job: JobFigures, diagnoses: Mapping[int, RankDiagnosis | None]) -> tuple[Straggler, ...]:
    """The straggler ranks, latest first (see the module text); `diagnoses` by rank number. Empty: no
    straggler."""
    if job.collectives_matched == 0:
        return ()
    floor = min_lateness_ns(job)
    late = [r for r in job.ranks if r.lateness_ns >= floor and r.last_arrivals > 0]
    late.sort(key=lambda r: (-r.lateness_ns, -r.caused_wait_ns, r.rank))
    out = []
    for r in late:
        cause, cause_ns = top_cause(diagnoses.get(r.rank))
        text = f"rank {r.rank} is late by {duration_text(r.lateness_ns)} per step"
        if cause is not None and cause_ns is not None:
            text += f"; its {cause_label(cause)} is {duration_text(cause_ns)} per step"
        phase, excess = late_phase(r.rank, job, diagnoses)
        if phase is not None:
            text += (f"; before its collectives it spends {duration_text(excess)} more per step than the other "
                     f"ranks {PHASES[phase]}")
        text += f"; {others_wait_words(r.caused_wait_ns, len(job.ranks))}"
        out.append(Straggler(r.rank, r.caused_wait_ns, r.lateness_ns, r.last_arrivals, cause, cause_ns, text,
                             phase, excess if phase is not None else None))
    return tuple(out)


COMPUTE_PHASE_ADVICE = (
    "Its GPU computes longer than the others' each step: give every rank the same work (balanced sharding, "
    "sequence lengths or batch sizes bucketed across ranks, experts balanced) and check that GPU for lower "
    "clocks (thermal or power throttling) or other processes sharing it.")


@dataclass(frozen=True)
class StragglerLead:
    """A communication-bound job whose communication is mostly waiting for a late rank: the straggler leads
    the headline, the findings and the advice."""

    headline: str
    note: str
    finding: Finding


def straggler_lead(job: JobFigures, speaker: int | None, primary: str, late: tuple[Straggler, ...],
                   framework: str = "") -> StragglerLead | None:
    """When the job is communication-bound and the speaking rank (`speaker`, its number in the job) spends at
    least STRAGGLER_WAIT_DOMINATES_SHARE of its exposed communication per step waiting for later ranks, the
    worst straggler leads: exposed communication = transfer + waiting, and fixing the late rank removes
    the waiting. None otherwise."""
    if primary != C.COMMUNICATION_BOUND or not late or speaker is None:
        return None
    me = next((r for r in job.ranks if r.rank == speaker), None)
    if me is None or me.exposed_comm_ns <= 0 or me.wait_ns < STRAGGLER_WAIT_DOMINATES_SHARE * me.exposed_comm_ns:
        return None
    s = late[0]
    wait, exposed = min(me.wait_ns, me.exposed_comm_ns), me.exposed_comm_ns
    q = Quoted()
    split = (f"rank {me.rank}'s exposed communication is {duration_text(exposed)} per step: "
             f"{duration_text(wait)} ({q.ns(wait, 'wait_us', exposed, 'exposed_communication_us')}) waiting for "
             f"later ranks, {duration_text(exposed - wait)} transferring")
    cause_advice = advice_for(C.VERDICT_OF_CAUSE[s.top_cause], framework) if s.top_cause in C.VERDICT_OF_CAUSE else ()
    if s.phase == "compute":  # late because its GPU computes longer: no idle cause of its own explains it
        cause_advice = (COMPUTE_PHASE_ADVICE,)
    elif s.phase == "data":
        cause_advice = advice_for(C.INPUT_BOUND, framework)
    advice = (f"Make rank {s.rank} faster first: the others wait for it at every collective"
              + (f"; it is late {PHASES[s.phase]}:" if s.phase else
                 f"; its own largest loss is its {cause_label(s.top_cause)}:" if s.top_cause else "."),
              *cause_advice[:2], *advice_for("straggler", framework))
    step = me.step_time_ns or 0
    finding = Finding("straggler", C.COMMUNICATION, f"Rank {s.rank} holds the other ranks up at collectives", "high",
                      wait, 0.0, (s.text, split), advice, share_of_window=round(wait / step, 6) if step else None,
                      figures=q.figures, shares=tuple(q.shares))
    # the headline: who, how late, and why (its late phase, else its own largest cause); the rest is in s.text
    why = (f", {duration_text(s.phase_excess_ns or 0)} more than the others {PHASES[s.phase]}" if s.phase else
           f"; its {cause_label(s.top_cause)} is {duration_text(s.top_cause_ns or 0)} per step" if s.top_cause else "")
    headline = (f"Waiting for a straggler: rank {s.rank} is late by {duration_text(s.lateness_ns)} per step{why}; "
                f"{others_wait_words(s.caused_wait_ns, len(job.ranks))}.")
    note = (f"The job is communication-bound, but its communication is mostly waiting ({split}): the late rank "
            f"{s.rank}, not the transfers, sets the pace.")
    return StragglerLead(headline, note, finding)


__all__ = ["PHASES", "Straggler", "StragglerLead", "duration_text", "late_phase", "min_lateness", "min_lateness_ns",
           "straggler_lead", "stragglers", "top_cause"]
