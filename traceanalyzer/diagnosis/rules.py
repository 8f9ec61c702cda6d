"""Rules: a rank's figures -> its diagnosis (verdict, findings with evidence and advice). They read
only figures (traceanalyzer.analyses: the gaps with their causes, the host's facts, kernel totals),
never the events.

Each rank's GPU time lost = idle time (attributed by cause) + host<->device copy time with no
kernel running (memcpy) + communication with no other GPU work (communication). The primary
verdict is the cause whose removal would shorten the median step most (diagnosis/savings.py), unless
no cause would save much and the GPU is busy (gpu_bound), start-up dominates, or the trace cannot tell
(undetermined); a busy GPU is never called host-, launch- or sync-bound. Thresholds live in
`thresholds`; docs/diagnosis.md documents every rule.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

import numpy as np

from .. import causes as C
from ..analyses import RankAnalysis
from ..analyses.capture import capture_note, rank_device_label
from ..analyses.figures import Steps
from ..analyses.gaps import (
    CausedGap,
    DeviceAttribution,
    Evidence,
    PeriodicSteps,
    RankCauses,
    StepCauses,
)
from ..analyses.host import HostShares
from ..analyses.thresholds import SHORT_KERNEL_NS
from ..causes import (
    COMMUNICATION_BOUND,
    CPU_COMPUTE_BOUND,
    CPU_INPUT_BOUND,
    GPU_BOUND,
    HOST_BOUND,
    INPUT_BOUND,
    LAUNCH_BOUND,
    MEMCPY_BOUND,
    PERIODIC_STALL,
    STARTUP_DOMINATED,
    SYNC_BOUND,
    UNDETERMINED,
    UNEXPLAINED,
    VERDICT_OF_CAUSE,
    VERDICTS,
)
from ..units import PERCENT_DECIMALS
from . import savings as S
from .advice import advice_for, graph_advice, periodic_advice
from .thresholds import (
    BUSY_NEVER_HOST_SHARE,
    CLEAR_MARGIN,
    FINDING_MIN_SHARE,
    GPU_BOUND_MAX_LOST_SHARE,
    GPU_BOUND_MAX_SAVING_SHARE,
    HEALTHY_BUSY_SHARE,
    HOST_INPUT_BOUND_SHARE,
    HOST_UNTRACED_MAX_SHARE,
    MATERIAL_MIN_SHARE,
    MIN_BUSY_SHARE,
    MIN_GPU_EVENTS,
    ROBUST_MIN_STEPS,
    SATURATED_BUSY_SHARE,
    SEVERITY_HIGH_SHARE,
    SEVERITY_MEDIUM_SHARE,
    STARTUP_DOMINATED_MIN_SHARE,
    TOP_KERNELS_NAMED,
    UNSEEN_WAIT_MIN_SHARE,
    WARMUP_STEP_FACTOR,
)
from .wording import Quoted, duration, percent

__all__ = ["COMMUNICATION_BOUND", "GPU_BOUND", "HOST_BOUND", "INPUT_BOUND", "LAUNCH_BOUND", "MEMCPY_BOUND",
           "PERIODIC_STALL", "SYNC_BOUND", "UNDETERMINED", "UNEXPLAINED", "VERDICTS", "VERDICT_OF_CAUSE",
           "Diagnosis", "Finding", "HostShares", "LostTime", "RankDiagnosis", "RankVerdict", "StepCauses",
           "cause_findings", "diagnose_rank", "lost_time", "verdict"]


@dataclass(frozen=True)
class Finding:
    id: str
    cause: str | None
    title: str
    severity: str  # "high" | "medium" | "low"
    explains_ns: int
    share_of_idle: float  # explains / GPU time lost on the rank
    evidence: tuple[str, ...]  # prose, rendered from the numbers below
    advice: tuple[str, ...]
    share_of_window: float | None = None
    gaps: int | None = None  # idle gaps of this cause
    host_ops: tuple[Evidence, ...] = ()  # host events behind the idle time, best first
    figures: dict[str, float] = field(default_factory=dict)  # cause-specific numbers, units in names
    # one (numerator key, denominator key) into `figures` per percentage in the title and evidence, in order
    shares: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class RankDiagnosis:
    index: int
    rank: int | None
    framework: str
    primary: str
    host_primary: str | None
    reason: str  # one line: why this verdict
    headline: str
    window_ns: int  # summed over the rank's devices
    idle_ns: int
    lost_ns: int
    idle_by_cause: dict[str, int]
    exposed_memcpy_ns: int
    exposed_comm_ns: int
    findings: tuple[Finding, ...]
    per_step: tuple[StepCauses, ...]
    gaps: tuple[CausedGap, ...]
    devices: tuple[DeviceAttribution, ...]
    launch_threads: tuple[tuple[int, int], ...]
    thread_basis: str
    periodic: PeriodicSteps | None
    host_shares: HostShares | None
    runner_up: str | None = None  # the cause whose removal would save the second most (how close the call was)
    runner_up_share: float | None = None  # its share of the time lost, as the verdict counts it
    confidence: str | None = None  # "clear" (top >= CLEAR_MARGIN x runner-up) | "close"
    warmup_steps: tuple[int, ...] = ()  # leading steps left out of the verdict
    startup_ns: int = 0  # start-up cause idle + time lost inside warm-up steps
    input_split: str | None = None  # input-bound only: "cpu" | "storage" | "unknown" (diagnosis/input_split.py)
    headline_figures: dict[str, float] = field(default_factory=dict)  # what the headline's shares are of
    headline_shares: tuple[tuple[str, str], ...] = ()  # per percentage in the headline: keys into headline_figures
    verdict_note: str | None = None  # why the verdict is not the top finding's, when they differ
    headline_detail: str = ""  # how the headline's number was computed (shown one click away)


@dataclass(frozen=True)
class Diagnosis:
    primary: str
    host_primary: str | None
    headline: str
    primary_rank: int | None  # index into ranks
    findings: tuple[Finding, ...]
    ranks: tuple[RankDiagnosis, ...]
    headline_figures: dict[str, float] = field(default_factory=dict)
    headline_shares: tuple[tuple[str, str], ...] = ()
    verdict_note: str | None = None
    headline_detail: str = ""


def job_rank(lost: list[float], with_gpu: list[bool]) -> int:
    """Position of the rank whose verdict is the job's: among ranks with GPU work, the one losing the
    most GPU time (ties: the first); the first rank when none has GPU work."""
    candidates = [i for i, g in enumerate(with_gpu) if g]
    return max(candidates, key=lambda i: (lost[i], -i)) if candidates else 0


def job_headline(rank: int | None, headline: str, n_ranks: int) -> str:
    """The job's headline: the chosen rank's, naming it when the job has several (within HEADLINE_MAX
    characters: the longer prefix only when it fits)."""
    if n_ranks <= 1:
        return headline
    who = "Rank ?" if rank is None else f"Rank {rank}"
    lowered = headline[:1].lower() + headline[1:] if headline[1:2].islower() else headline
    long = f"{who}, which loses the most GPU time: {lowered}"
    return long if len(long) <= HEADLINE_MAX else f"{who}: {headline}"


# A headline is the verdict and its one number, read in a glance: at most this many characters. How it was
# computed goes into the headline's detail (`Quoted.detail`, the result's `headline_detail`).
HEADLINE_MAX = 200
# The headline's share is written as every table writes a share (units.PERCENT_DECIMALS decimals), so the
# number reads the same in the headline, the findings, the Markdown, the terminal and the notebook.
AS_TABLES = {"small_below": float("inf"), "small_digits": PERCENT_DECIMALS}


@dataclass(frozen=True)
class LostTime:
    """A rank's GPU time lost, summed over its devices."""

    window_ns: int
    idle_ns: int
    lost_ns: int
    idle_by_cause: dict[str, int]
    lost_by_cause: dict[str, int]  # idle, plus exposed copies (memcpy) and exposed communication
    exposed_memcpy_ns: int
    exposed_comm_ns: int


def lost_time(devices: tuple[DeviceAttribution, ...]) -> LostTime:
    idle_by_cause = {c: sum(d.idle_by_cause.get(c, 0) for d in devices) for c in C.CAUSES}
    exposed_memcpy = sum(d.exposed_memcpy_ns for d in devices)
    exposed_comm = sum(d.exposed_comm_ns for d in devices)
    lost_by_cause = dict(idle_by_cause)
    lost_by_cause[C.MEMCPY] += exposed_memcpy
    lost_by_cause[C.COMMUNICATION] += exposed_comm
    return LostTime(sum(d.window.dur_ns for d in devices), sum(d.idle_ns for d in devices),
                    sum(lost_by_cause.values()), idle_by_cause, lost_by_cause, exposed_memcpy, exposed_comm)


@dataclass(frozen=True)
class RankVerdict:
    """A rank's verdict, why, and the findings that go with it (those of `cause_findings`, led by a
    gpu_bound finding, or replaced by the host loop's when the GPU work is too little to judge)."""

    primary: str
    host_primary: str | None
    reason: str
    headline: str
    findings: tuple[Finding, ...]
    host_shares: HostShares | None = None
    runner_up: str | None = None
    runner_up_share: float | None = None
    confidence: str | None = None
    warmup_steps: tuple[int, ...] = ()
    startup_ns: int = 0
    quoted: Quoted = field(default_factory=Quoted)  # the headline's shares and what they are of


def diagnose_rank(ra: RankAnalysis, include_warmup: bool = False) -> RankDiagnosis:
    """A rank's diagnosis from its figures (made with `causes=True`)."""
    c = _causes(ra)
    lost = lost_time(c.devices)
    saved = rank_savings(ra, lost, include_warmup)
    v = within_headline_max(verdict(ra, lost, cause_findings(ra, lost, saved), include_warmup, saved))
    return RankDiagnosis(
        index=ra.index, rank=ra.rank, framework=ra.framework, primary=v.primary, host_primary=v.host_primary,
        reason=v.reason, headline=v.headline, window_ns=lost.window_ns, idle_ns=lost.idle_ns, lost_ns=lost.lost_ns,
        idle_by_cause=lost.idle_by_cause, exposed_memcpy_ns=lost.exposed_memcpy_ns,
        exposed_comm_ns=lost.exposed_comm_ns, findings=v.findings, per_step=c.per_step, gaps=c.top_gaps,
        devices=c.devices, launch_threads=c.threads, thread_basis=c.thread_basis, periodic=c.periodic,
        host_shares=v.host_shares, runner_up=v.runner_up, runner_up_share=v.runner_up_share,
        confidence=v.confidence, warmup_steps=v.warmup_steps, startup_ns=v.startup_ns,
        headline_figures=dict(v.quoted.figures), headline_shares=tuple(v.quoted.shares),
        verdict_note=verdict_note(v.primary, v.host_primary, v.findings, v.reason), headline_detail=v.quoted.detail)


def _steps(ra: RankAnalysis) -> Steps:
    return ra.spans if ra.spans is not None else Steps(*(np.zeros(0, dtype=np.int64),) * 3)


def rank_savings(ra: RankAnalysis, lost: LostTime, include_warmup: bool = False) -> dict[str, S.Saving]:
    """Each cause's projected saving on the rank's steady steps (diagnosis/savings.py)."""
    c = _causes(ra)
    st = _steps(ra)
    warmup = warmup_steps(st) if not include_warmup else np.zeros(0, dtype=np.int64)
    return S.savings(c.per_step, st, warmup, lost.lost_by_cause, lost.window_ns, len(c.devices), replays(ra))


def replays(ra: RankAnalysis) -> dict[str, S.Replay]:
    """Per cause replayed on the rank's median step (RankAnalysis.critical_path)."""
    cp = ra.critical_path
    median = cp.median_step() if cp is not None else None
    if cp is None or median is None:
        return {}
    return {cause: S.Replay(ns, median.dur_ns, median.step is None) for cause, ns in cp.savings}


# Causes a busy GPU (BUSY_NEVER_HOST_SHARE) is never said to be bound by: host work between launches,
# launching and synchronising stall only a GPU that has little else to do.
HOST_SIDE_CAUSES = (C.LAUNCH, C.HOST_COMPUTE, C.SYNC)
# Causes whose lost time is not idle time (copies and communication with no compute beside them): the only
# ones a saturated GPU (SATURATED_BUSY_SHARE) can still be bound by.
EXPOSED_CAUSES = (C.MEMCPY, C.COMMUNICATION)


def material(cost_ns: int, span_ns: int) -> bool:
    """Whether a cost is material against the span it is weighed against (MATERIAL_MIN_SHARE): the one
    test every verdict that names a cause passes."""
    return span_ns > 0 and cost_ns >= MATERIAL_MIN_SHARE * span_ns


def within_headline_max(v: RankVerdict) -> RankVerdict:
    """A headline over HEADLINE_MAX characters whose last part is a parenthesis (why there is no GPU verdict)
    keeps its sentence; the parenthesis leads the detail, and its shares leave the headline's."""
    h = v.headline
    if len(h) <= HEADLINE_MAX or not h.endswith(").") or " (" not in h:
        return v
    cut = h.rindex(" (")
    why = h[cut + 2:-2]
    n = len(_PERCENT.findall(why))
    q = v.quoted
    shares = q.shares[:len(q.shares) - n] if n else list(q.shares)
    keep = {k for pair in shares for k in pair}
    quoted = Quoted({k: x for k, x in q.figures.items() if k in keep}, shares,
                    f"Why there is no GPU verdict: {why}. {q.detail}".strip())
    return replace(v, headline=h[:cut] + ".", quoted=quoted)


_PERCENT = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)%")


def _causes(ra: RankAnalysis) -> RankCauses:
    if ra.causes is None:
        raise ValueError("these figures carry no gap causes: make them with figures_of(..., causes=True)")
    return ra.causes


def verdict(ra: RankAnalysis, lost: LostTime, findings: tuple[Finding, ...], include_warmup: bool,
            saved: dict[str, S.Saving] | None = None, after_startup: bool = False) -> RankVerdict:
    """The primary verdict: the steady-state cause whose removal would save the most (the median step's
    projected shortening), unless no cause saves much and the GPU is busy (gpu_bound), start-up
    dominates, or there is too little GPU work to judge (the host loop's verdict). A CPU-only capture (no
    GPU listed, or no GPU work launched while the runtime was traced) gets the host loop's own verdict
    (cpu_*). Every cause named, start-up included, is material (`material`); a GPU saturated after
    start-up (SATURATED_BUSY_SHARE) is bound only by copies or communication with nothing beside them.
    When start-up dominates, the verdict of the rest of the capture (`after_startup`: start-up never
    dominates) leads the findings, with its own figures and advice."""
    c = _causes(ra)
    st = _steps(ra)
    framework = ra.framework
    window_ns, idle_ns, lost_ns = lost.window_ns, lost.idle_ns, lost.lost_ns
    lost_by_cause = lost.lost_by_cause
    if not c.devices:
        q = Quoted()
        gpu_ops = ra.capture.gpu_only_ops if ra.capture is not None else 0
        cpu_only = (ra.gpus_listed == 0 or no_gpu_work_launched(ra)) and not ra.range_profiler and not gpu_ops
        host_primary, host_findings, host_line = _host_verdict(c.host_shares, framework, q, cpu_only, _has_stacks(ra))
        if cpu_only:  # a CPU-only capture: the host loop's verdict is the verdict
            why = "a CPU-only capture"
            if ra.gpus_listed:  # a GPU was there and the runtime traced: the model ran on the CPU, say so first
                why = cpu_run_words(ra)
                host_findings = (Finding(MODEL_ON_CPU, None, "The model ran on the CPU; the GPU sat unused", "high",
                                         0, 0.0, (why[0].upper() + why[1:] + ".",),
                                         advice_for(MODEL_ON_CPU, framework)), *host_findings)
            return RankVerdict(host_primary or UNDETERMINED, host_primary, why,
                               f"{host_line} ({why})." if host_line else why + ".", host_findings, c.host_shares,
                               quoted=q)
        why = _no_gpu_reason(ra)
        return RankVerdict(UNDETERMINED, host_primary, why, f"{host_line} ({why})." if host_line else why + ".",
                           host_findings, c.host_shares, quoted=q)
    saved = saved if saved is not None else rank_savings(ra, lost, include_warmup)
    # the call ranks causes by the projection (diagnosis/savings.py): the findings show the replay
    saved = {x: S.projection(s) for x, s in saved.items()}
    # --- steady-state lost time by cause, robust to single gaps, start-up apart
    warmup = warmup_steps(st) if not include_warmup else np.zeros(0, dtype=np.int64)
    in_warmup = _lost_in_steps(c.per_step, warmup)
    steady = robust_lost_by_cause(c.per_step, warmup, lost_by_cause, in_warmup)
    # start-up inside the window (the start-up cause, and what warm-up steps lose), and before it
    startup_in_window = lost_by_cause[C.STARTUP] + (sum(in_warmup.values()) - in_warmup[C.STARTUP])
    startup_ns = startup_in_window + c.startup_before_ns
    ranked = sorted((x for x in C.CAUSES if x != C.STARTUP),
                    key=lambda x: (-saved[x].saving_ns, -steady[x], C.CAUSES.index(x)))
    steady_total = sum(steady[x] for x in ranked)
    warmup_ns = int((st.end_ns[warmup] - st.start_ns[warmup]).sum()) * len(c.devices) if len(warmup) else 0
    # the window after the one-off costs: warm-up steps and start-up idle outside them set apart, as they are
    # from the steady state's lost time
    steady_window = max(window_ns - warmup_ns - (lost_by_cause[C.STARTUP] - in_warmup[C.STARTUP]), 1)
    # start-up outweighs the steady state's whole loss (not merely its largest cause: splitting a loss into
    # finer causes must not make start-up dominate)
    # ... and is material against the capture from its first event (a 2 ms set-up before 600 ms of
    # saturated GEMMs is real and beside the point)
    startup_dominates = (not after_startup and startup_ns > steady_total
                         and startup_ns >= STARTUP_DOMINATED_MIN_SHARE * (lost_ns + c.startup_before_ns)
                         and material(startup_ns, window_ns + c.startup_before_ns))
    n_gpu = sum(d.gpu_events for d in ra.devices)
    q = Quoted()
    unseen = c.unseen_wait_ns
    if (unseen and unseen >= UNSEEN_WAIT_MIN_SHARE * (lost_ns + c.startup_before_ns) and material(unseen, window_ns)
            and not startup_dominates):
        return _unseen_verdict(c, unseen, lost_ns, window_ns, findings, q, f"{duration(lost_ns)} of GPU time lost")
    # Busy share of the window once one-off start-up is set apart: a capture of the first
    # iterations is judged on what follows them, and one that is mostly start-up says so.
    busy_share = (window_ns - idle_ns) / max(window_ns - startup_in_window, 1) if window_ns else 0.0
    if n_gpu < MIN_GPU_EVENTS or (busy_share < MIN_BUSY_SHARE and not startup_dominates):
        host_primary, host_findings, host_line = _host_verdict(c.host_shares, framework, q,
                                                               stacks=_has_stacks(ra))
        busy_pct = q.ns(window_ns - idle_ns, "gpu_busy_us", max(window_ns - startup_in_window, 1),
                        "window_after_startup_us") if n_gpu >= MIN_GPU_EVENTS else ""
        why = (f"only {n_gpu} GPU activities in the window" if n_gpu < MIN_GPU_EVENTS
               else f"GPU busy only {busy_pct} of the window"
               + (" after start-up" if startup_in_window else "")) + ": too little GPU work to judge"
        little = _too_little_gpu_finding(n_gpu, window_ns - idle_ns, max(window_ns - startup_in_window, 1),
                                         bool(startup_in_window))
        return RankVerdict(UNDETERMINED, host_primary, why,
                           f"{host_line} ({why})." if host_line else f"Undetermined: {why}.",
                           (*(host_findings or findings), little), c.host_shares, quoted=q)
    # --- the verdict
    warm = tuple(int(n) for n in st.number[warmup])
    before = (f"; {duration(c.startup_before_ns)} of it before the window, which starts at the first "
              f"{'step' if len(st) else 'GPU work'}" if c.startup_before_ns else "")
    if after_startup:  # the rest of the capture speaks of its own window and its steady losses
        window_ns, idle_ns = steady_window, max(steady_window - (lost.window_ns - lost.idle_ns), 0)
        lost = replace(lost, window_ns=window_ns, idle_ns=idle_ns, lost_ns=steady_total,
                       lost_by_cause={**steady, C.STARTUP: 0})
    if steady_total < GPU_BOUND_MAX_LOST_SHARE * steady_window and not startup_dominates:
        return _gpu_bound(ra, window_ns, idle_ns, framework, findings,
                          f"steady-state GPU time lost {percent(steady_total / steady_window)} of the window "
                          f"(< {percent(GPU_BOUND_MAX_LOST_SHARE)})", warmup_steps=warm, startup_ns=int(startup_ns))
    if startup_dominates:
        rest = verdict(ra, lost, findings, include_warmup, saved, after_startup=True)
        # said when the rest is itself material and judgeable
        if rest.primary not in (UNDETERMINED, STARTUP_DOMINATED) and material(steady_window,
                                                                               window_ns + c.startup_before_ns):
            findings = (steady_state_finding(rest, startup_ns), *findings)
        capture_ns = window_ns + c.startup_before_ns
        headline = _startup_headline(startup_ns, lost_ns + c.startup_before_ns, capture_ns, warmup,
                                     c.evidence.get(C.STARTUP, ()), q)
        return RankVerdict(
            STARTUP_DOMINATED, None,
            f"one-off start-up costs lose {duration(startup_ns)}, more than the steady state's "
            f"{duration(steady_total)}{before}",
            headline, _with_startup_total(findings, startup_ns, capture_ns, startup_in_window, c.startup_before_ns,
                                          warmup), runner_up=ranked[0],
            runner_up_share=round(steady[ranked[0]] / lost_ns, 4) if lost_ns else None,
            confidence="clear" if startup_ns >= CLEAR_MARGIN * steady_total else "close",
            warmup_steps=warm, startup_ns=int(startup_ns), quoted=q)
    # A busy GPU is never host-, launch- or sync-bound: those causes stall only a GPU with little to do; a
    # saturated one is bound by no idle cause at all; and no cause is named that costs nothing material.
    barred = busy_share >= BUSY_NEVER_HOST_SHARE
    saturated = busy_share >= SATURATED_BUSY_SHARE

    def why_not(x: str) -> str | None:
        if saturated and x not in EXPOSED_CAUSES:
            return f"the GPU is busy {percent(busy_share)} (>= {percent(SATURATED_BUSY_SHARE)})"
        if barred and x in HOST_SIDE_CAUSES:
            return f"the GPU is busy {percent(busy_share)} (>= {percent(BUSY_NEVER_HOST_SHARE)})"
        if not (material(steady[x], steady_window) or saved[x].share >= MATERIAL_MIN_SHARE):
            return f"it loses under {percent(MATERIAL_MIN_SHARE)}"
        return None

    eligible = [x for x in ranked if why_not(x) is None]
    if not eligible:
        held = [x for x in ranked if steady[x] > 0][:4] or ranked[:1]
        return _gpu_bound(ra, window_ns, idle_ns, framework, findings,
                          f"GPU busy {percent(busy_share)} of the window and no cause can be named: "
                          + "; ".join(f"{x} not counted ({duration(steady[x])}): {why_not(x)}" for x in held),
                          warmup_steps=warm, startup_ns=int(startup_ns)) \
            if busy_share >= HEALTHY_BUSY_SHARE else _spread_verdict(c, lost, findings, q, warm, int(startup_ns))
    top = eligible[0]
    if top == C.UNKNOWN and steady_total > 0:
        explained = next((x for x in eligible[1:] if saved[x].saving_ns >= saved[top].saving_ns / CLEAR_MARGIN
                          and saved[x].saving_ns > 0), None)
        if explained is not None:  # an explained cause close behind: name it, not the unexplained time
            top = explained
    runner = next(x for x in ranked if x != top)
    runner_share = steady[runner] / steady_total if steady_total else 0.0
    confidence = "clear" if saved[top].saving_ns >= CLEAR_MARGIN * saved[runner].saving_ns else "close"
    close = dict(runner_up=runner, runner_up_share=round(runner_share, 4), confidence=confidence,
                 warmup_steps=warm, startup_ns=int(startup_ns))
    top_save = saved[top]
    if top_save.share < GPU_BOUND_MAX_SAVING_SHARE and busy_share >= HEALTHY_BUSY_SHARE:
        skipped = [f"; {x} not counted: {why_not(x)}" for x in ranked[:ranked.index(top)] if why_not(x) is not None]
        blocked = "".join(skipped)
        return _gpu_bound(ra, window_ns, idle_ns, framework, findings,
                          f"GPU busy {percent(busy_share)} of the window and no cause would shorten "
                          f"{S.basis_words(top_save)} by {percent(GPU_BOUND_MAX_SAVING_SHARE)} or more (largest: "
                          f"{top}, ≈ {duration(top_save.saving_ns)}, {percent(top_save.share)}){blocked}", **close)
    if top == C.DEPENDENCY and unseen >= UNSEEN_WAIT_MIN_SHARE * lost_by_cause[C.DEPENDENCY] > 0:
        # the largest saving is a device-side wait, mostly on work outside the capture: what it waits for is unknown
        return _unseen_verdict(c, unseen, lost_ns, window_ns, findings, q,
                               f"{duration(lost_by_cause[C.DEPENDENCY])} of device-side waits", **close)
    primary = C.VERDICT_OF_CAUSE[top]
    headline = _gpu_headline(ra, c, lost, top, steady, steady_total, warmup, startup_ns, q)
    if primary == UNEXPLAINED:
        if busy_share >= HEALTHY_BUSY_SHARE:  # mostly busy; what is lost has no traced cause: healthy
            return _gpu_bound(ra, window_ns, idle_ns, framework, findings,
                              f"GPU busy {percent(busy_share)} of the window; the lost time has no "
                              f"traced host activity", **close)
        return RankVerdict(UNDETERMINED, None,
                           "most lost GPU time has no traced host activity on the launching thread",
                           headline, findings, quoted=q, **close)  # type: ignore[arg-type]
    runner_save = saved[runner]
    return RankVerdict(primary, None,
                       f"removing {top} would shorten {S.basis_words(top_save)} by ≈ {duration(top_save.saving_ns)} "
                       f"({percent(top_save.share)}; runner-up {runner}: ≈ {duration(runner_save.saving_ns)}, "
                       f"{percent(runner_save.share)}; {confidence} call)",
                       headline, findings, quoted=q, **close)  # type: ignore[arg-type]


def _unseen_verdict(c: RankCauses, unseen: int, lost_ns: int, window_ns: int, findings: tuple[Finding, ...],
                    q: Quoted, of: str, **close: object) -> RankVerdict:
    """Undetermined: the GPU waits mostly on work outside the capture (`of`: what `unseen` is the most of)."""
    share = q.ns(unseen, "unseen_wait_us", window_ns, "window_us", **AS_TABLES)
    why = (f"device-side waits on work outside the capture lose {duration(unseen)} of the {of}: what held the "
           f"GPU up was not measured")
    q.detail = f"The GPU waited {duration(unseen)} {unseen_wait_words(c)}: what held it up was not measured."
    return RankVerdict(UNDETERMINED, None, why,
                       f"Undetermined: the GPU waits {duration(unseen)} ({share} of the {duration(window_ns)} "
                       f"window) on work outside the capture; capture the work it waits for.",
                       findings, c.host_shares, quoted=q, **close)  # type: ignore[arg-type]


def unseen_wait_words(c: RankCauses) -> str:
    """What the device-side waits on work outside the capture were, in words (no shares)."""
    events = ""
    if c.event_waits and not c.event_records:
        events = (f"; {c.event_waits} stream wait{'s' if c.event_waits != 1 else ''} on an event, and no event "
                  f"recorded in the capture")
    return ("with its next work already queued and none of the rank's GPUs running anything: on an event or stream "
            f"whose producer is outside the capture (recorded before it began, or by another process){events}")


# Advice of a device-side wait on work outside the capture: what the capture lacks.
UNSEEN_WAIT_ADVICE = (
    "Capture the work the GPU waits for: start the profiler earlier or record more steps (torch.profiler "
    "schedule with active=2 or more), so the event's producer (the previous step, another stream, another "
    "process) is in the trace; a serving loop that overlaps batches waits on the previous batch's results.",)


def _gpu_bound(ra: RankAnalysis, window_ns: int, idle_ns: int, framework: str, findings: tuple[Finding, ...],
               reason: str, **close: object) -> RankVerdict:
    """The gpu_bound verdict, its finding leading the others."""
    gpu = _gpu_bound_finding(ra, window_ns, idle_ns, framework)
    return RankVerdict(GPU_BOUND, None, reason, gpu.evidence[0], (gpu, *findings), quoted=_first_line_quoted(gpu),
                       **close)  # type: ignore[arg-type]


def _gpu_headline(ra: RankAnalysis, c: RankCauses, lost: LostTime, top: str, steady: dict[str, int],
                  steady_total: int, warmup: np.ndarray, startup_ns: int, q: Quoted) -> str:
    """The headline of a rank with GPU work: the one number of the verdict's cause (the GPU time it lost
    over the whole window, as its finding says, and that as a share of the window); how the verdict
    weighed it (idle and lost time, steady state, medians per step) goes into `q.detail`, with durations
    only, each one a reader can check against the tables."""
    window_ns, idle_ns, lost_ns = lost.window_ns, lost.idle_ns, lost.lost_ns
    lost_by_cause = lost.lost_by_cause
    phrase = C.CAUSE_BY_ID[top].phrase
    if top == C.DATALOADER and ra.framework.lower() in ("tensorflow", "jax"):
        phrase = "waiting for the input pipeline"
    if top == C.CHECKPOINT and c.periodic is not None:
        phrase = f"in stalls that recur every {c.periodic.every} steps (checkpoint / evaluation)"
    n_dev = len(c.devices)
    ns = lost_by_cause[top]
    share = q.ns(ns, f"{top}_lost_us", window_ns, "window_us", **AS_TABLES) if window_ns else "n/a"
    who, of = (("The GPU loses", f"the {duration(window_ns)} window") if n_dev == 1
               else (f"The {n_dev} GPUs lose", f"their {duration(window_ns)} of window"))
    headline = f"{who} {duration(ns)} ({share} of {of}) {phrase}."
    # --- the derivation, one click away
    beyond = (f", plus {duration(lost_ns - idle_ns)} of copies and communication that no compute overlapped"
              if lost_ns > idle_ns else "")
    detail = [f"GPU idle {duration(idle_ns)} of the {duration(window_ns)} window{beyond}: {duration(lost_ns)} of "
              f"GPU time lost in all, {duration(ns)} of it {phrase}."]
    whole = lost_ns == idle_ns and steady_total == lost_ns and steady[top] == lost_by_cause[top]
    if whole:
        detail.append("The verdict weighs the whole window, each cause by the time it lost.")
    else:
        parts = []
        steps = f"the first {len(warmup)} warm-up step{'s' if len(warmup) != 1 else ''}"
        if startup_ns >= 1000:  # under a microsecond: nothing worth saying
            parts.append(f"{duration(startup_ns)} of one-off start-up costs" + (f" and {steps}" if len(warmup) else "")
                         + " set apart")
        elif len(warmup):
            parts.append(f"{steps} set apart")
        n_steady = len(c.per_step) - len(warmup)
        if n_steady >= ROBUST_MIN_STEPS:
            parts.append("each cause counted at its median per step, so one long gap cannot decide")
        how = f" ({'; '.join(parts)})" if parts else ""
        if n_steady >= ROBUST_MIN_STEPS:  # per step: a median times the steps is no time the capture measured
            detail.append(f"The verdict weighs steady state{how}: per steady step, {duration(steady[top] / n_steady)} "
                          f"of the {duration(steady_total / n_steady)} of GPU time lost each step is spent {phrase}.")
        else:
            detail.append(f"The verdict weighs steady state{how}: there {duration(steady[top])} of the "
                          f"{duration(steady_total)} lost in steady state is spent {phrase}.")
    q.detail = " ".join(detail)
    return headline


def _first_line_quoted(f: Finding) -> Quoted:
    """The shares of a finding's first evidence line (a headline made of it)."""
    n = f.evidence[0].count("%") if f.evidence else 0
    return Quoted({k: f.figures[k] for pair in f.shares[:n] for k in pair if k in f.figures}, list(f.shares[:n]))


def verdict_note(primary: str, host_primary: str | None, findings: tuple[Finding, ...], reason: str) -> str | None:
    """One sentence saying why the verdict is not the top finding's, when they differ."""
    if not findings:
        return None
    top = findings[0]
    verdict_id = host_primary if primary == UNDETERMINED and host_primary else primary
    if verdict_id == CPU_COMPUTE_BOUND and top.id != CPU_INPUT_BOUND:
        return None  # every part but the data wait is the loop's own work
    if verdict_id == CPU_INPUT_BOUND and top.id != CPU_INPUT_BOUND:
        part = next((w for _, fid, _, _, w in _HOST_PARTS if fid == top.id), top.title)
        return (f"The largest part of the step ({part.removeprefix('in ')}) is not the verdict because a loop that "
                f"waits for data {percent(HOST_INPUT_BOUND_SHARE)} or more of its step time is input-bound: faster "
                f"input shortens every step first.")
    if top.id in (primary, verdict_id) or top.id == GPU_BOUND or (primary == UNDETERMINED and top.cause == C.UNKNOWN):
        return None
    label = C.VERDICT_BY_ID[top.id].label.lower() if top.id in C.VERDICT_BY_ID else top.title
    if top.cause == C.UNKNOWN and primary != UNDETERMINED:
        why = ("unexplained idle time names nothing to change, and an explained cause loses nearly as much "
               f"({reason})")
    elif primary == STARTUP_DOMINATED:
        why = f"one-off start-up costs outweigh the steady state's whole loss ({reason})"
    elif primary == GPU_BOUND:
        why = reason
    elif primary == UNDETERMINED:
        why = reason
    else:
        why = f"the verdict counts steady-state time only, warm-up steps and single long gaps set apart ({reason})"
    return f"The top finding ({label}) is not the verdict because {why}."


def warmup_steps(st: Steps) -> np.ndarray:
    """Indices of the leading steps at least WARMUP_STEP_FACTOR x the median step (first iterations)."""
    if len(st) < 3:
        return np.zeros(0, dtype=np.int64)
    dur = st.end_ns - st.start_ns
    slow = dur >= WARMUP_STEP_FACTOR * float(np.median(dur))
    n = int(np.argmin(slow)) if not slow.all() else 0  # length of the leading run of slow steps
    return np.arange(n, dtype=np.int64)


def _lost_in_steps(per_step: tuple[StepCauses, ...], which: np.ndarray) -> dict[str, int]:
    """Idle time by cause inside the given steps (indices into `per_step`)."""
    out = dict.fromkeys(C.CAUSES, 0)
    for i in which.tolist():
        for c, v in per_step[i].idle_by_cause.items():
            out[c] += v
    return out


def robust_lost_by_cause(per_step: tuple[StepCauses, ...], warmup: np.ndarray, lost: dict[str, int],
                         in_warmup: dict[str, int]) -> dict[str, int]:
    """Lost time by cause for the verdict: warm-up steps left out; with ROBUST_MIN_STEPS steady steps,
    each cause's idle is its median per-step idle x the steady steps (one long gap cannot decide),
    except stalls that recur in some steps (periodic stalls, `savings.recurring`), counted in full. The
    medians of several causes can add up to more than was lost (each cause's median step is another
    step): the causes are then scaled down together, so the steady-state time lost never exceeds the time
    measured (nor the window)."""
    steady = {c: lost[c] - in_warmup[c] for c in C.CAUSES}
    keep = np.setdiff1d(np.arange(len(per_step)), warmup)
    if len(keep) < ROBUST_MIN_STEPS:
        return steady
    measured = max(sum(steady.values()), 0)
    idle_total = {c: sum(per_step[i].idle_by_cause[c] for i in keep) for c in C.CAUSES}
    for c in C.CAUSES:
        values = np.array([per_step[i].idle_by_cause[c] for i in keep], dtype=np.float64)
        if c == C.CHECKPOINT or S.recurring(values):
            continue
        median = float(np.median(values))
        # idle outside any step stays as measured; inside steps the median per step stands for each
        steady[c] = int(steady[c] - idle_total[c] + median * len(keep))
    steady = {c: max(v, 0) for c, v in steady.items()}
    robust = sum(steady.values())
    if robust > measured:  # counted once: never more than was lost
        steady = {c: v * measured // robust for c, v in steady.items()}
    return steady


def _startup_headline(startup_ns: int, lost_ns: int, capture_ns: int, warmup: np.ndarray,
                      spent: tuple[Evidence, ...], q: Quoted) -> str:
    """Start-up dominates: its one number (time lost to one-off start-up costs, start-up calls plus the
    warm-up steps) against the capture it lies in (`capture_ns`: the window and the start-up before it)
    and the GPU time lost, names cut to keep the headline short; all names in `q.detail`."""
    steps = f" in the first {len(warmup)} warm-up step{'s' if len(warmup) != 1 else ''}" if len(warmup) else ""
    of_capture = q.ns(startup_ns, "startup_us", capture_ns, "capture_us")
    head = f"One-off start-up costs lose {duration(startup_ns)} of the {duration(capture_ns)} capture ({of_capture})"
    tail = ": profile steady-state steps."
    names = [e.name for e in spent[:3]]
    headline = f"{head}{steps}{tail}"
    for k in range(len(names), 0, -1):  # as many names as fit
        with_names = f"{head}{steps}, in {', '.join(n[:30] for n in names[:k])}{tail}"
        if len(with_names) <= HEADLINE_MAX - 40:  # room for a job's "Rank N, ..." prefix
            headline = with_names
            break
    q.detail = (f"GPU time lost in all (start-up included): {duration(lost_ns)}. Start-up costs: idle time while the "
                "host ran start-up calls"
                + (f" ({', '.join(names)})" if names else "")
                + (f", plus all time lost{steps}" if steps else "")
                + f"; {duration(startup_ns)} in all, more than any steady-state cause loses. Steps after "
                  f"start-up show the training loop's own bottleneck.")
    return headline


def _with_startup_total(findings: tuple[Finding, ...], startup_ns: int, capture_ns: int, in_window_ns: int,
                        before_ns: int, warmup: np.ndarray) -> tuple[Finding, ...]:
    """The findings with the start-up finding leading its evidence with the headline's number (every one-off
    start-up cost against the capture, split into inside the window and before it); made when the start-up
    idle inside the window was too small for a finding of its own."""
    q = Quoted()
    share = q.ns(startup_ns, "startup_us", capture_ns, "capture_us")
    steps = f", the first {len(warmup)} warm-up step{'s' if len(warmup) != 1 else ''} included" if len(warmup) else ""
    line = (f"One-off start-up costs lose {duration(startup_ns)} of the {duration(capture_ns)} capture ({share}): "
            f"{duration(in_window_ns)} inside the window{steps}, {duration(before_ns)} before it")
    at = next((i for i, f in enumerate(findings) if f.cause == C.STARTUP), None)
    if at is None:
        window_ns = capture_ns - before_ns  # the finding's time is the window's, the capture's is in its line
        first = Finding(STARTUP_DOMINATED, C.STARTUP, _title(STARTUP_DOMINATED, "high"), "high", in_window_ns, 0.0,
                        (line,), advice_for(STARTUP_DOMINATED, ""), share_of_window=round(in_window_ns / window_ns, 6)
                        if window_ns > 0 else None, figures=q.figures, shares=tuple(q.shares))
    else:
        f = findings[at]
        first = replace(f, evidence=(line, *f.evidence), figures={**f.figures, **q.figures},
                        shares=(*q.shares, *f.shares))
    rest = [f for i, f in enumerate(findings) if i != at]
    lead = 1 if rest and rest[0].id == STEADY_STATE else 0  # the verdict's own finding next, after the rest's
    return (*rest[:lead], first, *rest[lead:])


TOO_LITTLE_GPU_WORK = "too_little_gpu_work"


def _too_little_gpu_finding(n_gpu: int, busy_ns: int, span_ns: int, after_startup: bool) -> Finding:
    """Why a rank with a GPU gets no GPU verdict: the GPU work found, against the window after start-up (the
    figures the headline quotes)."""
    q = Quoted()
    if n_gpu < MIN_GPU_EVENTS:
        line = (f"only {n_gpu} GPU activit{'y' if n_gpu == 1 else 'ies'} in the window (fewer than "
                f"{MIN_GPU_EVENTS}): too little GPU work to judge")
    else:
        busy = q.ns(busy_ns, "gpu_busy_us", span_ns, "window_after_startup_us")
        line = (f"GPU busy only {busy} of the window{' after start-up' if after_startup else ''} "
                f"({duration(busy_ns)} of {duration(span_ns)}): too little GPU work to judge")
    return Finding(TOO_LITTLE_GPU_WORK, None, "Too little GPU work to judge", "low", 0, 0.0,
                   (line[0].upper() + line[1:],),
                   ("Capture steady-state steps with the GPU doing the run's real work (torch.profiler schedule "
                    "wait/warmup/active), or read the host loop's findings below.",), figures=q.figures,
                   shares=tuple(q.shares))


def _spread_verdict(c: RankCauses, lost: LostTime, findings: tuple[Finding, ...], q: Quoted,
                    warm: tuple[int, ...], startup_ns: int) -> RankVerdict:
    """Undetermined: a GPU not busy enough to be gpu_bound whose lost time is spread over causes none of
    which is material (`material`): no one change would set the pace."""
    share = q.ns(lost.lost_ns, "lost_us", lost.window_ns, "window_us", **AS_TABLES)
    why = f"the GPU time lost is spread over causes none of which loses {percent(MATERIAL_MIN_SHARE)} of the window"
    return RankVerdict(UNDETERMINED, None, why,
                       f"Undetermined: the GPU loses {duration(lost.lost_ns)} ({share} of the "
                       f"{duration(lost.window_ns)} window), spread over causes none of which loses "
                       f"{percent(MATERIAL_MIN_SHARE)} of it.", findings, c.host_shares, warmup_steps=warm,
                       startup_ns=startup_ns, quoted=q)


STEADY_STATE = "steady_state"


def steady_state_finding(rest: RankVerdict, startup_ns: int) -> Finding:
    """The verdict of the capture after its one-off start-up (`rest`), as a finding with that verdict's own
    figures and advice: what to change once start-up is out of the way."""
    label = C.VERDICT_BY_ID[rest.primary].label if rest.primary in C.VERDICT_BY_ID else rest.primary
    lead = next((f for f in rest.findings if f.id == rest.primary), None)
    said = label[0].lower() + label[1:] if label[1:2].islower() else label
    evidence = [f"After the one-off start-up ({duration(startup_ns)}), the rest of the capture is {said}: "
                f"{rest.headline}"]
    figures, shares = dict(rest.quoted.figures), list(rest.quoted.shares)
    if lead is not None and lead.evidence and lead.evidence[0] == rest.headline:  # the lead's further lines
        n = lead.evidence[0].count("%")
        evidence += lead.evidence[1:]
        figures.update(lead.figures)
        shares += lead.shares[n:]
    advice = lead.advice if lead is not None else advice_for(rest.primary, "", "")
    # no time of its own beside its title: its figures speak of the rest's window, in its evidence
    return Finding(STEADY_STATE, None, f"After start-up: {label}", "medium", 0, 0.0, tuple(evidence), advice,
                   figures=figures, shares=tuple(shares))


MODEL_ON_CPU = "model_on_cpu"


def no_gpu_work_launched(ra: RankAnalysis) -> bool:
    """The runtime was traced (GPU runtime calls recorded) and launched no GPU work: the model ran on the
    CPU though a GPU was there (device queries only)."""
    c = ra.capture
    return c is not None and c.gpu_events == 0 and c.launches == 0 and c.gpu_runtime_calls > 0 and not c.truncated


def cpu_run_words(ra: RankAnalysis) -> str:
    """Why a capture with a GPU listed is judged as a CPU run."""
    c = ra.capture
    calls = c.gpu_runtime_calls if c is not None else 0
    listed = f"{ra.gpus_listed} GPU{'s' if ra.gpus_listed != 1 else ''} listed"
    return (f"the model ran on the CPU: {listed}, no GPU work launched; the {calls} GPU runtime "
            f"call{'s' if calls != 1 else ''} traced are device queries and set-up, no kernel launch or copy")


# --- findings ------------------------------------------------------------------------------------------
def cause_findings(ra: RankAnalysis, lost: LostTime, saved: dict[str, S.Saving] | None = None) -> tuple[Finding, ...]:
    """One finding per cause losing at least FINDING_MIN_SHARE of the window, each with what removing it
    would save; ordered by that saving (then by the time lost); severity by the saving's share of the step."""
    c = _causes(ra)
    saved = saved if saved is not None else rank_savings(ra, lost)
    window_ns, lost_ns = lost.window_ns, lost.lost_ns
    out = []
    for cause in C.CAUSES:
        ns = lost.lost_by_cause[cause]
        if window_ns <= 0 or ns < FINDING_MIN_SHARE * window_ns:
            continue
        fid = C.VERDICT_OF_CAUSE[cause]
        n_gaps = sum(d.gaps_by_cause.get(cause, 0) for d in c.devices)
        q = Quoted()
        host_ops = c.evidence.get(cause, ())
        first = _first_evidence(ns, window_ns, lost_ns, n_gaps, q)
        save = saved.get(cause)
        saving = [_saving_line(cause, save, q)] if save is not None and cause != C.STARTUP else []
        lines = _specific_evidence(ra, c, cause, q)
        ops = [f"{e.name}: {q.fraction(e.share, f'host_op_{i + 1}_share')} of this idle time"
               for i, e in enumerate(host_ops)]
        severity = _severity(save.share if save is not None and cause != C.STARTUP else ns / window_ns)
        advice = advice_for(fid, ra.framework, c.workload)
        if cause == C.CHECKPOINT:
            advice = periodic_advice([e.name for e in host_ops], ra.framework)
        if cause == C.DEPENDENCY and c.unseen_wait_ns:
            advice = (*UNSEEN_WAIT_ADVICE, *advice)
        if cause == C.LAUNCH:
            advice = graph_advice(any(d.graphs is not None for d in ra.devices), ra.framework) + advice
        out.append(Finding(fid, cause, _title(fid, severity), severity, ns,
                           round(ns / lost_ns, 6), (first, *saving, *lines, *ops), advice,
                           round(ns / window_ns, 6), n_gaps, host_ops, q.figures, tuple(q.shares)))
    order = {f.cause: (saved[f.cause].projection_ns if f.cause in saved and f.cause != C.STARTUP else 0) for f in out}
    out.sort(key=lambda f: (-order[f.cause or ""], -f.explains_ns))
    return tuple(out)


def _saving_line(cause: str, s: S.Saving, q: Quoted) -> str:
    """What removing the cause would save, its basis and its limits (diagnosis/savings.py)."""
    label = C.CAUSE_BY_ID[cause].label
    pct = q.ns(s.saving_ns, "saving_us", s.step_ns, "step_us")
    if s.replayed:
        removed = {C.MEMCPY: " and the copies"}
        q.figures["projected_saving_us"] = round(s.projection_ns / 1000, 3)
        basis = (f"replayed on its dependency graph without the host time in the idle stretches"
                 f"{removed.get(cause, '')} (projected: ≈ {duration(s.projection_ns)}); assumes launch overheads "
                 f"kept, queue depth unchanged, memory not modelled")
    elif cause == C.DEPENDENCY:
        basis = ("basis: the idle time with the next GPU work already queued; removing a host cause never "
                 "saves it, removing the wait (the dependency, the late peer, the graph's bubbles) would")
    else:
        basis = ("basis: its idle time with nothing queued on the GPU (the host had not yet launched the next "
                 "work), per step; projected: assumes the rest of the step unchanged and nothing "
                 "else fills the freed time")
    return f"removing the {label} would shorten {S.basis_words(s)} by ≈ {duration(s.saving_ns)} ({pct}); {basis}"


def _title(fid: str, severity: str) -> str:
    """A finding's title, matched to its severity: a cause that loses little is not said to dominate."""
    if fid == STARTUP_DOMINATED and severity != "high":
        return "One-off start-up costs" + (" take a noticeable share of this capture" if severity == "medium"
                                           else " in this capture")
    return C.VERDICT_BY_ID[fid].title


def _first_evidence(ns: int, window_ns: int, lost_ns: int, n_gaps: int, q: Quoted) -> str:
    """A finding's first evidence line: the time it lost and its shares of the window and of all time lost."""
    where = f" in {n_gaps} idle gap{'s' if n_gaps != 1 else ''}" if n_gaps else ""
    return (f"{duration(ns)} of GPU time ({q.ns(ns, 'lost_us', window_ns, 'window_us')} of the "
            f"{duration(window_ns)} window, {q.ns(ns, 'lost_us', lost_ns, 'all_lost_us')} of the "
            f"{duration(lost_ns)} lost){where}")


def _specific_evidence(ra: RankAnalysis, c: RankCauses, cause: str, q: Quoted) -> list[str]:
    """The cause's own facts as prose lines; the numbers they state go into `q.figures`."""
    out: list[str] = []
    figures = q.figures
    if cause == C.DATALOADER and ra.dataloader_wait_fraction is not None:
        out.append(f"DataLoader wait (the host blocked in the DataLoader) "
                   f"{q.ns(ra.dataloader_wait_ns, 'dataloader_wait_us', ra.window.dur_ns, 'rank_window_us')} of "
                   f"the rank's {duration(ra.window.dur_ns)} window ({duration(ra.dataloader_wait_ns)}); the GPU "
                   f"idle time above is the part of it no GPU work overlapped")
        figures["dataloader_wait_fraction"] = round(float(ra.dataloader_wait_fraction), 6)
    elif cause == C.MEMCPY:
        exposed = sum(d.exposed_memcpy_ns for d in c.devices)
        figures["exposed_memcpy_us"] = round(exposed / 1000, 3)
        if exposed:
            out.append(f"{duration(exposed)} of host-device copies run with no kernel running")
        pageable = ra.pageable_htod_copies
        figures["pageable_htod_copies"] = pageable
        if pageable:
            out.append(f"{pageable} host-to-device copies from pageable memory (staged by the host; "
                       f"not asynchronous)")
        if c.sync_copy_calls:
            out.append(f"{c.sync_copy_calls} synchronous copy API calls ({c.sync_copy_first})")
        for dev in ra.devices:
            for d in dev.memcpy.directions:
                if d.direction == "HtoD" and d.bytes:
                    bw = f", {d.bandwidth_gbps:.1f} GB/s" if d.bandwidth_gbps else ""
                    out.append(f"{rank_device_label(ra.capture, dev.device)}: {d.count} HtoD copies, "
                               f"{d.bytes / 1e6:.1f} MB{bw}")
    elif cause == C.SYNC:
        if c.blocking_calls:
            out.append("blocking calls on the launching thread: "
                       + ", ".join(f"{n} x{k}" for n, k in c.blocking_calls[:3]))
    elif cause == C.LAUNCH:
        k = ra.kernel_totals
        if k is not None and k.count and k.median_ns is not None and k.short_share is not None:
            figures["median_kernel_us"] = round(k.median_ns / 1000, 3)
            out.append(f"median kernel {duration(k.median_ns)}; {q.fraction(k.short_share, 'short_kernel_share')}"
                       f" of {k.count} kernels shorter than {duration(SHORT_KERNEL_NS)}")
        n_short = sum(d.gaps_by_cause.get(C.LAUNCH, 0) for d in c.devices)
        out.append(f"{n_short} short idle gaps between kernels while the host was launching")
        graphs = [d.graphs for d in ra.devices if d.graphs is not None]
        busy = sum(g.busy_ns for g in graphs)
        if graphs and busy > 0:  # graphs removed some launches; the gaps counted here are outside replays
            in_graphs = sum(g.gpu_ns for g in graphs)
            out.append(f"{q.ns(in_graphs, 'graph_gpu_us', busy, 'graph_devices_busy_us')} of GPU work already "
                       f"runs in {sum(g.replays for g in graphs)} "
                       f"CUDA graph replays; these gaps are outside them")
    elif cause == C.CHECKPOINT and c.periodic is not None:
        p = c.periodic
        out.append(f"steps {', '.join(str(s) for s in p.steps)} are at least 1.5x the median step "
                   f"({duration(p.median_step_ns)}): every {p.every} steps")
    elif cause == C.DEPENDENCY and c.unseen_wait_ns:
        share = q.ns(c.unseen_wait_ns, 'unseen_wait_us', ra.window.dur_ns * len(c.devices), 'devices_window_us')
        out.append(f"{duration(c.unseen_wait_ns)} of it ({share} of the window) {unseen_wait_words(c)}; this capture "
                   f"cannot say what it waited for")
    elif cause == C.COMMUNICATION:
        exposed = sum(d.exposed_comm_ns for d in c.devices)
        figures["exposed_communication_us"] = round(exposed / 1000, 3)
        if exposed:
            out.append(f"{duration(exposed)} of communication kernels run with no other GPU work")
    return out


def _gpu_bound_finding(ra: RankAnalysis, window_ns: int, idle_ns: int, framework: str) -> Finding:
    busy = window_ns - idle_ns
    q = Quoted()
    busy_pct = q.ns(busy, 'gpu_busy_us', window_ns, 'window_us', **AS_TABLES)
    evidence = [f"GPU busy {busy_pct} of the window ({duration(busy)} of {duration(window_ns)}): the GPU itself is "
                f"the bottleneck."]
    k = ra.kernel_totals
    ktotal = k.total_ns if k is not None else 0
    n = 0
    for dev in ra.devices:  # the GPU's own work: communication kernels are communication, never compute
        for row in [r for r in dev.kernels if not r.comm][:TOP_KERNELS_NAMED]:
            n += 1
            share = q.ns(row.total_ns, f"top_kernel_{n}_us", ktotal, "kernel_us") if ktotal else "n/a"
            evidence.append(f"top kernel {row.name[:80]}: {duration(row.total_ns)} "
                            f"({share} of kernel time, {row.count}x)")
    if k is not None and ktotal:
        evidence.append(f"{q.ns(k.memory_bound_ns, 'memory_bound_kernel_us', ktotal, 'kernel_us')} of kernel time in "
                        f"memory-bound kernels (elementwise, reductions, normalisation, copies; by name)")
        if k.fp32_matmul_ns > 0.1 * ktotal:
            evidence.append(f"{q.ns(k.fp32_matmul_ns, 'fp32_matmul_kernel_us', ktotal, 'kernel_us')} of kernel time "
                            f"in FP32 matrix kernels: mixed precision (bf16/fp16) or TF32 would use the tensor cores")
    return Finding(GPU_BOUND, None, C.VERDICT_BY_ID[GPU_BOUND].title, "low", busy, 0.0, tuple(evidence),
                   advice_for(GPU_BOUND, framework, ra.causes.workload if ra.causes is not None else ""),
                   share_of_window=round(busy / window_ns, 6) if window_ns else None,
                   figures=q.figures, shares=tuple(q.shares))


# --- CPU-only ranks -----------------------------------------------------------------------------------
# The host loop's parts, in claiming order: (HostShares field, finding id, cause, title, words)
_HOST_PARTS = (
    ("data_wait_ns", CPU_INPUT_BOUND, C.DATALOADER, "The host loop waits for data", "waiting for data"),
    ("optimizer_ns", "cpu_optimizer", C.HOST_COMPUTE, "The host loop is busy in the optimizer", "in the optimizer"),
    ("annotations_ns", "cpu_annotation", C.HOST_COMPUTE, "The host loop is busy in named annotations",
     "in named annotations"),
    ("model_ops_ns", CPU_COMPUTE_BOUND, C.HOST_COMPUTE, "The host loop is busy in the model's ops",
     "in model ops"),
    ("other_ns", "cpu_elsewhere", None, "The host loop spends time outside any traced op",
     "outside any traced op"),
)


def _has_stacks(ra: RankAnalysis) -> bool:
    """The rank's trace holds Python frames: time outside the framework's ops is still traced, by the frames."""
    return ra.frames is not None and ra.frames.has_stacks


def _host_verdict(s: HostShares | None, framework: str, q: Quoted | None = None,
                  cpu_only: bool = False, stacks: bool = False) -> tuple[str | None, tuple[Finding, ...], str]:
    """The host loop's verdict (cpu_input_bound when it waits for data at least HOST_INPUT_BOUND_SHARE of
    its step time, else cpu_compute_bound), one finding per part of its step time (each part's share of
    the step time, total and per step), and the headline sentence (its shares written into `q`)."""
    if s is None:
        return None, (), ""
    q = q if q is not None else Quoted()
    total = s.total_ns
    untraced = (not stacks and s.other_ns >= HOST_UNTRACED_MAX_SHARE * total
                and s.data_wait_ns < HOST_INPUT_BOUND_SHARE * total)
    primary = CPU_INPUT_BOUND if s.data_wait_ns / total >= HOST_INPUT_BOUND_SHARE else CPU_COMPUTE_BOUND
    n_steps = len(s.steps)
    per = f" over {n_steps} step{'s' if n_steps != 1 else ''}" if n_steps else ""
    findings = []
    for i, (attr, fid, cause, title, _) in enumerate(_HOST_PARTS):
        ns = getattr(s, attr)
        if ns < FINDING_MIN_SHARE * total or ns <= 0:
            continue
        fq = Quoted()
        key = attr.replace("_ns", "_us")
        lines = [f"{duration(ns)} of {duration(total)} of step time{per} ({fq.ns(ns, key, total, 'step_time_us')})"
                 + (f"; {duration(ns / n_steps)} per step" if n_steps else "")]
        if n_steps:
            fq.figures[key.replace("_us", "_per_step_us")] = round(ns / n_steps / 1000, 3)
        if attr == "annotations_ns":
            for j, (name, a_ns) in enumerate(s.top_annotations):
                share = fq.ns(a_ns, f"annotation_{j + 1}_us", total, "step_time_us")
                lines.append(f"{name}: {duration(a_ns)} ({share} of step time)")
        if attr == "other_ns":
            for j, (name, o_ns) in enumerate(s.elsewhere_others):
                share = fq.ns(o_ns, f"other_thread_{j + 1}_us", total, "step_time_us")
                lines.append(f"meanwhile on another thread: {name} for {duration(o_ns)} ({share} of step time)")
        if n_steps and s.per_step:
            vals = [row[i] for row in s.per_step]
            lines.append(f"per step: {', '.join(duration(v) for v in vals[:8])}{' …' if len(vals) > 8 else ''}")
        sev = _severity(ns / total)
        if attr == "annotations_ns" and s.top_annotations:
            title = f"The host loop is busy in {s.top_annotations[0][0][:60]}" + (
                " and other named annotations" if len(s.top_annotations) > 1 else "")
        advice = advice_for(fid, framework)
        if cpu_only and fid == CPU_COMPUTE_BOUND:  # no GPU listed: one may be at hand (never when one is listed)
            advice += advice_for("cpu_no_gpu", framework)
        findings.append(Finding(fid, cause, title, sev, ns, round(ns / total, 6), tuple(lines), advice,
                                figures=fq.figures, shares=tuple(fq.shares)))
    findings.sort(key=lambda f: -f.explains_ns)
    # the headline: the verdict's part (the data wait; else the largest other part) as a share of step time
    parts = sorted(((getattr(s, attr), attr, words) for attr, _, _, _, words in _HOST_PARTS), key=lambda t: -t[0])
    ns, attr, words = next(p for p in parts if (p[1] == "data_wait_ns") == (primary == CPU_INPUT_BOUND))
    share = q.ns(ns, attr.replace("_ns", "_us"), total, "step_time_us", **AS_TABLES)
    if attr == "annotations_ns" and s.top_annotations:
        name, a_ns = s.top_annotations[0]
        words += f" ({name[:40]} {q.ns(a_ns, 'annotation_1_us', total, 'step_time_us')})"
    said = "waits for data" if primary == CPU_INPUT_BOUND else "busy in its own work,"
    headline = (f"Host loop {said} {share} of its step time{'' if primary == CPU_INPUT_BOUND else ' ' + words}: "
                f"{duration(ns)} of {duration(total)}{per}")
    if untraced:  # most of the loop is outside any traced op: what holds it was not traced
        q.figures.clear()
        q.shares.clear()
        share = q.ns(s.other_ns, "other_us", total, "step_time_us", **AS_TABLES)
        headline = (f"Host loop outside any traced op {share} of its step time ({duration(s.other_ns)} of "
                    f"{duration(total)}{per}): too little traced to say what holds it")
        return None, tuple(findings), headline
    q.detail = (f"The host loop's {duration(total)} of step time{per}: "
                + _join([f"{duration(n)} {w}" for n, a, w in parts if n > 0 or a == "data_wait_ns"])
                + f". A loop that waits for data {percent(HOST_INPUT_BOUND_SHARE)} or more of its step time is "
                  f"input-bound; otherwise its own work is the bottleneck.")
    return primary, tuple(findings), headline


def _join(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _no_gpu_reason(ra: RankAnalysis) -> str:
    lost = capture_note(ra.capture) if ra.capture is not None and ra.capture.gpu_events_lost else None
    if lost:  # a cut-off capture (or one whose GPU activity was dropped) is no CPU-only one
        return lost
    if ra.range_profiler:
        return ("no kernels in the trace: a CUPTI range-profiler capture records GPU work as ranges, "
                "so GPU idle time cannot be measured")
    n = ra.capture.gpu_only_ops if ra.capture is not None else 0
    if n:
        return (f"no GPU activity in the trace, though the host ran {n} operator{'s' if n != 1 else ''} that run only "
                f"on a GPU (cuDNN, cuBLAS, NCCL): the GPU side was not recorded, and host time inside them may be "
                f"waiting for it")
    return "no GPU activity in the trace"


def _severity(share: float) -> str:
    return "high" if share >= SEVERITY_HIGH_SHARE else "medium" if share >= SEVERITY_MEDIUM_SHARE else "low"
