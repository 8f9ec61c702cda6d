"""Rules: a rank's figures -> its diagnosis (verdict, findings with evidence and advice). They read
only figures (traceanalyzer.analyses: the gaps with their causes, the host's facts, kernel totals),
never the events.

Each rank's GPU time lost = idle time (attributed by cause) + host<->device copy time with no
kernel running (memcpy) + communication with no other GPU work (communication). The primary
verdict is the cause losing the most time, unless the loss is small (gpu_bound) or the trace cannot
tell (undetermined). Thresholds live in `thresholds`; docs/diagnosis.md documents every rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .. import causes as C
from ..analyses import RankAnalysis
from ..analyses.figures import Steps
from ..analyses.gaps import AttributedGap, DeviceAttribution, Evidence, PeriodicSteps, RankCauses, StepCauses
from ..analyses.host import HostShares
from ..analyses.thresholds import SHORT_KERNEL_NS
from ..causes import (
    COMMUNICATION_BOUND,
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
from .advice import advice_for, graph_advice
from .thresholds import (
    CLEAR_MARGIN,
    FINDING_MIN_SHARE,
    GPU_BOUND_MAX_LOST_SHARE,
    HEALTHY_BUSY_SHARE,
    HOST_INPUT_BOUND_SHARE,
    MIN_BUSY_SHARE,
    MIN_GPU_EVENTS,
    ROBUST_MIN_STEPS,
    SEVERITY_HIGH_SHARE,
    SEVERITY_MEDIUM_SHARE,
    STARTUP_DOMINATED_MIN_SHARE,
    TOP_KERNELS_NAMED,
    WARMUP_STEP_FACTOR,
)
from .wording import duration, percent

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
    gaps: tuple[AttributedGap, ...]
    devices: tuple[DeviceAttribution, ...]
    launch_threads: tuple[tuple[int, int], ...]
    thread_basis: str
    periodic: PeriodicSteps | None
    host_shares: HostShares | None
    runner_up: str | None = None  # the cause losing the second most time (how close the call was)
    runner_up_share: float | None = None  # its share of the time lost, as the verdict counts it
    confidence: str | None = None  # "clear" (top >= CLEAR_MARGIN x runner-up) | "close"
    warmup_steps: tuple[int, ...] = ()  # leading steps left out of the verdict
    startup_ns: int = 0  # start-up cause idle + time lost inside warm-up steps
    input_split: str | None = None  # input-bound only: "cpu" | "storage" | "unknown" (diagnosis/input_split.py)


@dataclass(frozen=True)
class Diagnosis:
    primary: str
    host_primary: str | None
    headline: str
    primary_rank: int | None  # index into ranks
    findings: tuple[Finding, ...]
    ranks: tuple[RankDiagnosis, ...]


def job_rank(lost: list[float], with_gpu: list[bool]) -> int:
    """Position of the rank whose verdict is the job's: among ranks with GPU work, the one losing the
    most GPU time (ties: the first); the first rank when none has GPU work."""
    candidates = [i for i, g in enumerate(with_gpu) if g]
    return max(candidates, key=lambda i: (lost[i], -i)) if candidates else 0


def job_headline(rank: int | None, headline: str, n_ranks: int) -> str:
    """The job's headline: the chosen rank's, naming it when the job has several."""
    if n_ranks <= 1:
        return headline
    return f"{'Rank ?' if rank is None else f'Rank {rank}'} (loses the most GPU time): {headline}"


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


def diagnose_rank(ra: RankAnalysis, include_warmup: bool = False) -> RankDiagnosis:
    """A rank's diagnosis from its figures (made with `causes=True`)."""
    c = _causes(ra)
    lost = lost_time(c.devices)
    v = verdict(ra, lost, cause_findings(ra, lost), include_warmup)
    return RankDiagnosis(
        index=ra.index, rank=ra.rank, framework=ra.framework, primary=v.primary, host_primary=v.host_primary,
        reason=v.reason, headline=v.headline, window_ns=lost.window_ns, idle_ns=lost.idle_ns, lost_ns=lost.lost_ns,
        idle_by_cause=lost.idle_by_cause, exposed_memcpy_ns=lost.exposed_memcpy_ns,
        exposed_comm_ns=lost.exposed_comm_ns, findings=v.findings, per_step=c.per_step, gaps=c.top_gaps,
        devices=c.devices, launch_threads=c.threads, thread_basis=c.thread_basis, periodic=c.periodic,
        host_shares=v.host_shares, runner_up=v.runner_up, runner_up_share=v.runner_up_share,
        confidence=v.confidence, warmup_steps=v.warmup_steps, startup_ns=v.startup_ns)


def _causes(ra: RankAnalysis) -> RankCauses:
    if ra.causes is None:
        raise ValueError("these figures carry no gap causes: make them with figures_of(..., causes=True)")
    return ra.causes


def verdict(ra: RankAnalysis, lost: LostTime, findings: tuple[Finding, ...], include_warmup: bool) -> RankVerdict:
    """The primary verdict: the steady-state cause losing the most GPU time, unless the loss is small
    (gpu_bound), start-up dominates, or there is too little GPU work to judge (the host loop's verdict)."""
    c = _causes(ra)
    st = ra.spans if ra.spans is not None else Steps(*(np.zeros(0, dtype=np.int64),) * 3)
    framework = ra.framework
    window_ns, idle_ns, lost_ns = lost.window_ns, lost.idle_ns, lost.lost_ns
    lost_by_cause, idle_by_cause = lost.lost_by_cause, lost.idle_by_cause
    if not c.devices:
        host_primary, host_findings, host_line = _host_verdict(c.host_shares, framework)
        why = _no_gpu_reason(ra)
        return RankVerdict(UNDETERMINED, host_primary, why, f"{host_line} ({why})." if host_line else why + ".",
                           host_findings, c.host_shares)
    # --- steady-state lost time by cause, robust to single gaps, start-up apart
    warmup = warmup_steps(st) if not include_warmup else np.zeros(0, dtype=np.int64)
    in_warmup = _lost_in_steps(c.per_step, warmup)
    steady = robust_lost_by_cause(c.per_step, warmup, lost_by_cause, in_warmup)
    startup_ns = lost_by_cause[C.STARTUP] + (sum(in_warmup.values()) - in_warmup[C.STARTUP])
    ranked = sorted((x for x in C.CAUSES if x != C.STARTUP), key=lambda x: (-steady[x], C.CAUSES.index(x)))
    steady_total = sum(steady[x] for x in ranked)
    warmup_ns = int((st.end_ns[warmup] - st.start_ns[warmup]).sum()) * len(c.devices) if len(warmup) else 0
    steady_window = max(window_ns - warmup_ns, 1)
    startup_dominates = startup_ns > steady[ranked[0]] and startup_ns >= STARTUP_DOMINATED_MIN_SHARE * lost_ns
    n_gpu = sum(d.gpu_events for d in ra.devices)
    idle_pct = percent(idle_ns / window_ns) if window_ns else "n/a"
    # Busy share of the window once one-off start-up is set apart: a capture of the first
    # iterations is judged on what follows them, and one that is mostly start-up says so.
    busy_share = (window_ns - idle_ns) / max(window_ns - startup_ns, 1) if window_ns else 0.0
    if n_gpu < MIN_GPU_EVENTS or (busy_share < MIN_BUSY_SHARE and not startup_dominates):
        why = (f"only {n_gpu} GPU activities in the window" if n_gpu < MIN_GPU_EVENTS
               else f"GPU busy only {percent(busy_share)} of the window"
               + (" after start-up" if startup_ns else "")) + ": too little GPU work to judge"
        host_primary, host_findings, host_line = _host_verdict(c.host_shares, framework)
        return RankVerdict(UNDETERMINED, host_primary, why,
                           f"{host_line} ({why})." if host_line else f"Undetermined: {why}.",
                           host_findings or findings, c.host_shares)
    # --- the verdict
    warm = tuple(int(n) for n in st.number[warmup])
    if steady_total < GPU_BOUND_MAX_LOST_SHARE * steady_window and not startup_dominates:
        gpu = _gpu_bound_finding(ra, window_ns, idle_ns, framework)
        return RankVerdict(GPU_BOUND, None,
                           f"steady-state GPU time lost {percent(steady_total / steady_window)} of the window "
                           f"(< {percent(GPU_BOUND_MAX_LOST_SHARE)})",
                           gpu.evidence[0], (gpu, *findings), warmup_steps=warm, startup_ns=int(startup_ns))
    if startup_dominates:
        return RankVerdict(
            STARTUP_DOMINATED, None,
            f"one-off start-up costs lose {duration(startup_ns)}, more than any steady-state cause",
            _startup_headline(startup_ns, lost_ns, warmup, c.evidence.get(C.STARTUP, ())), findings,
            runner_up=ranked[0], runner_up_share=round(steady[ranked[0]] / lost_ns, 4) if lost_ns else None,
            confidence="clear" if startup_ns >= CLEAR_MARGIN * steady[ranked[0]] else "close",
            warmup_steps=warm, startup_ns=int(startup_ns))
    top = ranked[0]
    if top == C.UNKNOWN and steady_total > 0:
        explained = next((x for x in ranked[1:] if steady[x] >= steady[top] / CLEAR_MARGIN), None)
        if explained is not None:  # an explained cause close behind: name it, not the unexplained time
            top = explained
    runner = next(x for x in ranked if x != top)
    share = steady[top] / steady_total if steady_total else 0.0
    runner_share = steady[runner] / steady_total if steady_total else 0.0
    confidence = "clear" if steady[top] >= CLEAR_MARGIN * steady[runner] else "close"
    close = dict(runner_up=runner, runner_up_share=round(runner_share, 4), confidence=confidence,
                 warmup_steps=warm, startup_ns=int(startup_ns))
    primary = C.VERDICT_OF_CAUSE[top]
    what = "that idle time" if top not in (C.MEMCPY, C.COMMUNICATION) or lost_by_cause[top] == idle_by_cause[top] \
        else "that lost time"
    extra = ""
    exposed = lost.exposed_memcpy_ns if top == C.MEMCPY else lost.exposed_comm_ns
    if exposed > 0.01 * window_ns and what == "that lost time":
        extra = (f", plus {percent(exposed / window_ns)} "
                 f"{'copying data' if top == C.MEMCPY else 'in communication'} with no compute running")
    phrase = C.CAUSE_BY_ID[top].phrase
    if top == C.DATALOADER and framework.lower() in ("tensorflow", "jax"):
        phrase = "waiting for the input pipeline"
    if top == C.CHECKPOINT and c.periodic is not None:
        phrase = f"in stalls that recur every {c.periodic.every} steps (checkpoint / evaluation)"
    steady_note = ""
    if len(warmup) or lost_by_cause[C.STARTUP]:
        steady_note = f" (steady state; {duration(startup_ns)} of one-off start-up costs set apart)"
    headline = f"GPU idle {idle_pct} of the window{extra}; {percent(share)} of {what} is spent {phrase}{steady_note}."
    if primary == UNEXPLAINED:
        if busy_share >= HEALTHY_BUSY_SHARE:  # mostly busy; what is lost has no traced cause: healthy
            gpu = _gpu_bound_finding(ra, window_ns, idle_ns, framework)
            return RankVerdict(GPU_BOUND, None, f"GPU busy {percent(busy_share)} of the window; the lost time has no "
                                                f"traced host activity",
                               gpu.evidence[0], (gpu, *findings), **close)  # type: ignore[arg-type]
        return RankVerdict(UNDETERMINED, None,
                           "most lost GPU time has no traced host activity on the launching thread",
                           headline, findings, **close)  # type: ignore[arg-type]
    return RankVerdict(primary, None,
                       f"{top} explains {percent(share)} of the steady-state GPU time lost "
                       f"(runner-up {runner}: {percent(runner_share)}; {confidence} call)",
                       headline, findings, **close)  # type: ignore[arg-type]


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
    except periodic stalls, which are rare by nature and counted in full."""
    steady = {c: lost[c] - in_warmup[c] for c in C.CAUSES}
    keep = np.setdiff1d(np.arange(len(per_step)), warmup)
    if len(keep) < ROBUST_MIN_STEPS:
        return steady
    idle_total = {c: sum(per_step[i].idle_by_cause[c] for i in keep) for c in C.CAUSES}
    for c in C.CAUSES:
        if c == C.CHECKPOINT:
            continue
        median = float(np.median([per_step[i].idle_by_cause[c] for i in keep]))
        # idle outside any step stays as measured; inside steps the median per step stands for each
        steady[c] = int(steady[c] - idle_total[c] + median * len(keep))
    return {c: max(v, 0) for c, v in steady.items()}


def _startup_headline(startup_ns: int, lost_ns: int, warmup: np.ndarray, spent: tuple[Evidence, ...]) -> str:
    names = ", ".join(e.name for e in spent[:3])
    steps = f" in the first {len(warmup)} warm-up step(s)" if len(warmup) else ""
    on = f"; spent in {names}" if names else ""
    return (f"One-off start-up costs lose {duration(startup_ns)} ({percent(startup_ns / lost_ns)} of the GPU time "
            f"lost){steps}{on}: profile steady-state steps to see the training loop's own bottleneck.")


# --- findings ------------------------------------------------------------------------------------------
def cause_findings(ra: RankAnalysis, lost: LostTime) -> tuple[Finding, ...]:
    """One finding per cause losing at least FINDING_MIN_SHARE of the window, the largest first."""
    c = _causes(ra)
    window_ns, lost_ns = lost.window_ns, lost.lost_ns
    out = []
    for cause in C.CAUSES:
        ns = lost.lost_by_cause[cause]
        if window_ns <= 0 or ns < FINDING_MIN_SHARE * window_ns:
            continue
        fid = C.VERDICT_OF_CAUSE[cause]
        n_gaps = sum(d.gaps_by_cause.get(cause, 0) for d in c.devices)
        lines, figures = _specific_evidence(ra, c, cause)
        host_ops = c.evidence.get(cause, ())
        evidence = _evidence_prose(ns, window_ns, lost_ns, n_gaps, lines, host_ops)
        advice = advice_for(fid, ra.framework)
        if cause == C.LAUNCH:
            advice = graph_advice(any(d.graphs is not None for d in ra.devices), ra.framework) + advice
        out.append(Finding(fid, cause, C.VERDICT_BY_ID[fid].title, _severity(ns / window_ns), ns,
                           round(ns / lost_ns, 6), evidence, advice, round(ns / window_ns, 6),
                           n_gaps, host_ops, figures))
    out.sort(key=lambda f: -f.explains_ns)
    return tuple(out)


def _evidence_prose(ns: int, window_ns: int, lost_ns: int, n_gaps: int, specific: list[str],
                    host_ops: tuple[Evidence, ...]) -> tuple[str, ...]:
    """A finding's evidence lines, from its numbers: time lost and shares, the cause's own facts, host ops."""
    where = f" in {n_gaps} idle gap{'s' if n_gaps != 1 else ''}" if n_gaps else ""
    first = (f"{duration(ns)} of GPU time ({percent(ns / window_ns)} of the window, "
             f"{percent(ns / lost_ns)} of the time lost){where}")
    return (first, *specific, *(f"{e.name}: {percent(e.share)} of this idle time" for e in host_ops))


def _specific_evidence(ra: RankAnalysis, c: RankCauses, cause: str) -> tuple[list[str], dict[str, float]]:
    """The cause's own facts: prose lines and the numbers they state (units in the keys)."""
    out: list[str] = []
    figures: dict[str, float] = {}
    if cause == C.DATALOADER and ra.dataloader_wait_fraction is not None:
        figures["dataloader_wait_fraction"] = round(float(ra.dataloader_wait_fraction), 6)
        out.append(f"DataLoader wait {percent(ra.dataloader_wait_fraction)} of the window")
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
                    out.append(f"cuda:{dev.device}: {d.count} HtoD copies, {d.bytes / 1e6:.1f} MB{bw}")
    elif cause == C.SYNC:
        if c.blocking_calls:
            out.append("blocking calls on the launching thread: "
                       + ", ".join(f"{n} x{k}" for n, k in c.blocking_calls[:3]))
    elif cause == C.LAUNCH:
        k = ra.kernel_totals
        if k is not None and k.count and k.median_ns is not None and k.short_share is not None:
            figures["median_kernel_us"] = round(k.median_ns / 1000, 3)
            figures["short_kernel_share"] = round(k.short_share, 6)
            out.append(f"median kernel {duration(k.median_ns)}; {percent(k.short_share)}"
                       f" of {k.count} kernels shorter than {duration(SHORT_KERNEL_NS)}")
        n_short = sum(d.gaps_by_cause.get(C.LAUNCH, 0) for d in c.devices)
        out.append(f"{n_short} short idle gaps between kernels while the host was launching")
        graphs = [d.graphs for d in ra.devices if d.graphs is not None]
        busy = sum(g.busy_ns for g in graphs)
        if graphs and busy > 0:  # graphs removed some launches; the gaps counted here are outside replays
            in_graphs = sum(g.gpu_ns for g in graphs)
            figures["graph_share_of_busy"] = round(in_graphs / busy, 6)
            out.append(f"{percent(in_graphs / busy)} of GPU work already runs in {sum(g.replays for g in graphs)} "
                       f"CUDA graph replays; these gaps are outside them")
    elif cause == C.CHECKPOINT and c.periodic is not None:
        p = c.periodic
        out.append(f"steps {', '.join(str(s) for s in p.steps)} are at least 1.5x the median step "
                   f"({duration(p.median_step_ns)}): every {p.every} steps")
    elif cause == C.COMMUNICATION:
        exposed = sum(d.exposed_comm_ns for d in c.devices)
        figures["exposed_communication_us"] = round(exposed / 1000, 3)
        if exposed:
            out.append(f"{duration(exposed)} of communication kernels run with no other GPU work")
    return out, figures


def _gpu_bound_finding(ra: RankAnalysis, window_ns: int, idle_ns: int, framework: str) -> Finding:
    busy = window_ns - idle_ns
    evidence = [f"GPU busy {percent(busy / window_ns)} of the window: the GPU itself is the bottleneck."]
    k = ra.kernel_totals
    ktotal = k.total_ns if k is not None else 0
    for dev in ra.devices:
        for row in dev.kernels[:TOP_KERNELS_NAMED]:
            evidence.append(f"top kernel {row.name[:80]}: {duration(row.total_ns)} "
                            f"({percent(row.total_ns / ktotal) if ktotal else 'n/a'} of kernel time, {row.count}x)")
    if k is not None and ktotal:
        evidence.append(f"{percent(k.memory_bound_ns / ktotal)} of kernel time in memory-bound kernels (elementwise, "
                        f"reductions, normalisation, copies; by name)")
        if k.fp32_matmul_ns > 0.1 * ktotal:
            evidence.append(f"{percent(k.fp32_matmul_ns / ktotal)} of kernel time in FP32 matrix kernels: mixed "
                            f"precision (bf16/fp16) or TF32 would use the tensor cores")
    return Finding(GPU_BOUND, None, C.VERDICT_BY_ID[GPU_BOUND].title, "low", busy, 0.0, tuple(evidence),
                   advice_for(GPU_BOUND, framework))


# --- CPU-only ranks -----------------------------------------------------------------------------------
def _host_verdict(s: HostShares | None, framework: str) -> tuple[str | None, tuple[Finding, ...], str]:
    if s is None:
        return None, (), ""
    data, model = s.data_wait_ns / s.total_ns, s.model_ops_ns / s.total_ns
    primary = INPUT_BOUND if data >= HOST_INPUT_BOUND_SHARE else HOST_BOUND
    findings = []
    for fid, cause, ns, title in ((INPUT_BOUND, C.DATALOADER, s.data_wait_ns, "The host loop waits for data"),
                                  (HOST_BOUND, C.HOST_COMPUTE, s.model_ops_ns,
                                   "The host loop is busy in the model's ops")):
        if ns >= FINDING_MIN_SHARE * s.total_ns:
            findings.append(Finding(fid, cause, title, _severity(ns / s.total_ns), ns, round(ns / s.total_ns, 6),
                                    (f"{duration(ns)} ({percent(ns / s.total_ns)} of the step time)",),
                                    advice_for(f"host_{fid}", framework)))
    findings.sort(key=lambda f: -f.explains_ns)
    label = "input-bound" if primary == INPUT_BOUND else "host-bound"
    headline = (f"Host loop {label}: it spends {percent(data)} of its step time waiting for data, {percent(model)} in "
                f"the model's ops and {percent(1 - data - model)} elsewhere")
    return primary, tuple(findings), headline


def _no_gpu_reason(ra: RankAnalysis) -> str:
    if ra.range_profiler:
        return ("no kernels in the trace: a CUPTI range-profiler capture records GPU work as ranges, "
                "so GPU idle time cannot be measured")
    return "no GPU activity in the trace"


def _severity(share: float) -> str:
    return "high" if share >= SEVERITY_HIGH_SHARE else "medium" if share >= SEVERITY_MEDIUM_SHARE else "low"
