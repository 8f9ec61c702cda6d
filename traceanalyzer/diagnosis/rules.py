"""Rules: Timeline + Figures -> Diagnosis (verdict per rank, findings with evidence and advice).

Each rank's GPU time lost = idle time (attributed by cause) + host<->device copy time with no
kernel running (memcpy) + communication with no other GPU work (communication). The primary
verdict is the cause losing the most time, unless the loss is small (gpu_bound) or the trace cannot
tell (undetermined). Thresholds live in `thresholds`; the README documents every rule.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from .. import intervals as iv
from .. import timeline as T
from ..analyses import RankAnalysis
from ..analyses import figures as F
from ..causes import CAUSE_BY_ID as _CAUSE_BY_ID
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
    VERDICT_BY_ID,
    VERDICT_OF_CAUSE,
    VERDICTS,
)
from ..names import name_flags
from ..timeline import Timeline
from ..units import format_us
from . import attribution as A
from . import host as H
from .advice import advice_for
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
    SHORT_KERNEL_NS,
    STARTUP_DOMINATED_MIN_SHARE,
    TOP_KERNELS_NAMED,
    WARMUP_STEP_FACTOR,
)

# --- verdict vocabulary: defined once in the registry -------------------------------------------------

TITLES = {v.id: v.title for v in VERDICT_BY_ID.values()}
PHRASE = {c.id: c.phrase for c in _CAUSE_BY_ID.values()}
__all__ = ["COMMUNICATION_BOUND", "GPU_BOUND", "HOST_BOUND", "INPUT_BOUND", "LAUNCH_BOUND", "MEMCPY_BOUND",
           "PERIODIC_STALL", "SYNC_BOUND", "UNDETERMINED", "UNEXPLAINED", "VERDICTS", "VERDICT_OF_CAUSE",
           "Diagnosis", "Finding", "RankDiagnosis"]
# Kernel-name hints (informative only): memory-bound kernel families and precision.
MEMORY_BOUND_KERNEL = re.compile(
    r"elementwise|reduce|norm|softmax|copy|fill|cat_|index|gather|scatter|transpose|pool|embedding|dropout"
    r"|adam|sgd|memset|unrolled|vectorized", re.IGNORECASE)
FP32_MATMUL_KERNEL = re.compile(r"sgemm|f32f32|fp32.*(?:gemm|conv)|(?:gemm|conv).*fp32|scudnn", re.IGNORECASE)


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
    host_ops: tuple[A.Evidence, ...] = ()  # host events behind the idle time, best first
    figures: dict[str, float] = field(default_factory=dict)  # cause-specific numbers, units in names


@dataclass(frozen=True)
class StepCauses:
    step: int
    idle_by_cause: dict[str, int]


@dataclass(frozen=True)
class HostShares:
    """CPU-only ranks: where the host loop's step time went."""

    total_ns: int
    data_wait_ns: int
    model_ops_ns: int
    other_ns: int


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
    gaps: tuple[A.AttributedGap, ...]
    devices: tuple[A.DeviceAttribution, ...]
    launch_threads: tuple[tuple[int, int], ...]
    thread_basis: str
    periodic: A.PeriodicSteps | None
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


def diagnose_rank(tl: Timeline, ra: RankAnalysis, include_warmup: bool = False) -> RankDiagnosis:
    rank = ra.index
    info = tl.ranks[rank]
    host = H.host_activity(tl, rank)
    st = F.steps(tl, rank)
    periodic = A.periodic_steps(st)
    devices = [A.attribute_device(tl, rank, d.device, d.busy.window, host, st, periodic, d.busy.exposed_comm_ns,
                                  d.idle) for d in ra.devices]
    idle_by_cause = {c: sum(d.idle_by_cause[c] for d in devices) for c in H.CAUSES}
    exposed_memcpy = sum(d.exposed_memcpy_ns for d in devices)
    exposed_comm = sum(d.exposed_comm_ns for d in devices)
    lost_by_cause = dict(idle_by_cause)
    lost_by_cause[H.MEMCPY] += exposed_memcpy
    lost_by_cause[H.COMMUNICATION] += exposed_comm
    window_ns = sum(d.window.dur_ns for d in devices)
    idle_ns = sum(d.idle_ns for d in devices)
    lost_ns = sum(lost_by_cause.values())
    per_step = tuple(StepCauses(int(n), c) for n, c in zip(st.number, A.per_step_by_cause(devices, st)))
    gaps = A.top_gaps(devices, host, st)
    base = dict(index=rank, rank=info.rank, framework=info.framework, window_ns=window_ns, idle_ns=idle_ns,
                lost_ns=lost_ns, idle_by_cause=idle_by_cause, exposed_memcpy_ns=exposed_memcpy,
                exposed_comm_ns=exposed_comm, per_step=per_step, gaps=gaps, devices=tuple(devices),
                launch_threads=host.threads, thread_basis=host.basis, periodic=periodic)

    if not devices:
        shares = host_shares(tl, rank, ra, host)
        host_primary, findings, headline = _host_verdict(shares, info.framework)
        why = _no_gpu_reason(tl, rank)
        return RankDiagnosis(primary=UNDETERMINED, host_primary=host_primary, reason=why,
                             headline=f"{headline} ({why})." if headline else why + ".",
                             findings=findings, host_shares=shares, **base)  # type: ignore[arg-type]

    findings = _findings(tl, ra, devices, lost_by_cause, window_ns, lost_ns, host, periodic, info.framework)
    # --- steady-state lost time by cause, robust to single gaps, start-up apart
    warmup = warmup_steps(st) if not include_warmup else np.zeros(0, dtype=np.int64)
    in_warmup = _lost_in_steps(devices, st, warmup)
    steady = robust_lost_by_cause(devices, st, warmup, lost_by_cause, in_warmup)
    startup_ns = lost_by_cause[H.STARTUP] + (sum(in_warmup.values()) - in_warmup[H.STARTUP])
    ranked = sorted((c for c in H.CAUSES if c != H.STARTUP), key=lambda c: (-steady[c], H.CAUSES.index(c)))
    steady_total = sum(steady[c] for c in ranked)
    warmup_ns = int((st.end_ns[warmup] - st.start_ns[warmup]).sum()) * len(devices) if len(warmup) else 0
    steady_window = max(window_ns - warmup_ns, 1)
    startup_dominates = startup_ns > steady[ranked[0]] and startup_ns >= STARTUP_DOMINATED_MIN_SHARE * lost_ns
    n_gpu = _gpu_events(tl, rank, devices)
    idle_pct = _pct(idle_ns / window_ns) if window_ns else "n/a"
    # Busy share of the window once one-off start-up is set apart: a capture of the first
    # iterations is judged on what follows them, and one that is mostly start-up says so.
    busy_share = (window_ns - idle_ns) / max(window_ns - startup_ns, 1) if window_ns else 0.0
    if n_gpu < MIN_GPU_EVENTS or (busy_share < MIN_BUSY_SHARE and not startup_dominates):
        why = (f"only {n_gpu} GPU activities in the window" if n_gpu < MIN_GPU_EVENTS
               else f"GPU busy only {_pct(busy_share)} of the window"
               + (" after start-up" if startup_ns else "")) + ": too little GPU work to judge"
        shares = host_shares(tl, rank, ra, host)
        host_primary, host_findings, host_line = _host_verdict(shares, info.framework)
        return RankDiagnosis(primary=UNDETERMINED, host_primary=host_primary, reason=why,
                             headline=f"{host_line} ({why})." if host_line else f"Undetermined: {why}.",
                             findings=host_findings or findings, host_shares=shares,
                             **base)  # type: ignore[arg-type]
    # --- the verdict
    if steady_total < GPU_BOUND_MAX_LOST_SHARE * steady_window and not startup_dominates:
        gpu = _gpu_bound_finding(tl, ra, window_ns, idle_ns, info.framework)
        return RankDiagnosis(primary=GPU_BOUND, host_primary=None,
                             reason=f"steady-state GPU time lost {_pct(steady_total / steady_window)} of the "
                                    f"window (< {_pct(GPU_BOUND_MAX_LOST_SHARE)})",
                             warmup_steps=tuple(int(n) for n in st.number[warmup]), startup_ns=int(startup_ns),
                             headline=gpu.evidence[0], findings=(gpu, *findings), host_shares=None,
                             **base)  # type: ignore[arg-type]
    close = dict(warmup_steps=tuple(int(n) for n in st.number[warmup]), startup_ns=int(startup_ns))
    if startup_dominates:
        return RankDiagnosis(
            primary=STARTUP_DOMINATED, host_primary=None,
            reason=f"one-off start-up costs lose {_fmt_ns(startup_ns)}, more than any steady-state cause",
            headline=_startup_headline(startup_ns, lost_ns, warmup, st, host, devices),
            findings=findings, host_shares=None, runner_up=ranked[0],
            runner_up_share=round(steady[ranked[0]] / lost_ns, 4) if lost_ns else None,
            confidence="clear" if startup_ns >= CLEAR_MARGIN * steady[ranked[0]] else "close",
            **close, **base)  # type: ignore[arg-type]
    top = ranked[0]
    if top == H.UNKNOWN and steady_total > 0:
        explained = next((c for c in ranked[1:] if steady[c] >= steady[top] / CLEAR_MARGIN), None)
        if explained is not None:  # an explained cause close behind: name it, not the unexplained time
            top = explained
    runner = next(c for c in ranked if c != top)
    share = steady[top] / steady_total if steady_total else 0.0
    runner_share = steady[runner] / steady_total if steady_total else 0.0
    confidence = "clear" if steady[top] >= CLEAR_MARGIN * steady[runner] else "close"
    close.update(runner_up=runner, runner_up_share=round(runner_share, 4), confidence=confidence)
    verdict = VERDICT_OF_CAUSE[top]
    what = "that idle time" if top not in (H.MEMCPY, H.COMMUNICATION) or lost_by_cause[top] == idle_by_cause[top] \
        else "that lost time"
    extra = ""
    exposed = exposed_memcpy if top == H.MEMCPY else exposed_comm
    if exposed > 0.01 * window_ns and what == "that lost time":
        extra = (f", plus {_pct(exposed / window_ns)} "
                 f"{'copying data' if top == H.MEMCPY else 'in communication'} with no compute running")
    phrase = PHRASE[top]
    if top == H.DATALOADER and info.framework.lower() in ("tensorflow", "jax"):
        phrase = "waiting for the input pipeline"
    if top == H.CHECKPOINT and periodic is not None:
        phrase = f"in stalls that recur every {periodic.every} steps (checkpoint / evaluation)"
    steady_note = ""
    if len(warmup) or lost_by_cause[H.STARTUP]:
        steady_note = f" (steady state; {_fmt_ns(startup_ns)} of one-off start-up costs set apart)"
    headline = f"GPU idle {idle_pct} of the window{extra}; {_pct(share)} of {what} is spent {phrase}{steady_note}."
    if verdict == UNEXPLAINED:
        if busy_share >= HEALTHY_BUSY_SHARE:  # mostly busy; what is lost has no traced cause: healthy
            gpu = _gpu_bound_finding(tl, ra, window_ns, idle_ns, info.framework)
            return RankDiagnosis(primary=GPU_BOUND, host_primary=None,
                                 reason=f"GPU busy {_pct(busy_share)} of the window; the lost time has no traced "
                                        f"host activity",
                                 headline=gpu.evidence[0], findings=(gpu, *findings), host_shares=None,
                                 **close, **base)  # type: ignore[arg-type]
        return RankDiagnosis(primary=UNDETERMINED, host_primary=None,
                             reason="most lost GPU time has no traced host activity on the launching thread",
                             headline=headline, findings=findings, host_shares=None,
                             **close, **base)  # type: ignore[arg-type]
    return RankDiagnosis(primary=verdict, host_primary=None,
                         reason=f"{top} explains {_pct(share)} of the steady-state GPU time lost "
                                f"(runner-up {runner}: {_pct(runner_share)}; {confidence} call)",
                         headline=headline, findings=findings, host_shares=None,
                         **close, **base)  # type: ignore[arg-type]


def warmup_steps(st: F.Steps) -> np.ndarray:
    """Indices of the leading steps at least WARMUP_STEP_FACTOR x the median step (first iterations)."""
    if len(st) < 3:
        return np.zeros(0, dtype=np.int64)
    dur = st.end_ns - st.start_ns
    slow = dur >= WARMUP_STEP_FACTOR * float(np.median(dur))
    n = int(np.argmin(slow)) if not slow.all() else 0  # length of the leading run of slow steps
    return np.arange(n, dtype=np.int64)


def _lost_in_steps(devices: list[A.DeviceAttribution], st: F.Steps, which: np.ndarray) -> dict[str, int]:
    """Idle time by cause inside the given steps."""
    out = dict.fromkeys(H.CAUSES, 0)
    if not len(which):
        return out
    lo, hi = st.start_ns[which], st.end_ns[which]
    for d in devices:
        for i, c in enumerate(H.CAUSES):
            m = d.causes == i
            if m.any():
                out[c] += int(iv.overlap_per_window((d.starts[m], d.ends[m]), lo, hi).sum())
    return out


def robust_lost_by_cause(devices: list[A.DeviceAttribution], st: F.Steps, warmup: np.ndarray,
                         lost: dict[str, int], in_warmup: dict[str, int]) -> dict[str, int]:
    """Lost time by cause for the verdict: warm-up steps left out; with ROBUST_MIN_STEPS steady steps,
    each cause's idle is its median per-step idle x the steady steps (one long gap cannot decide),
    except periodic stalls, which are rare by nature and counted in full."""
    steady = {c: lost[c] - in_warmup[c] for c in H.CAUSES}
    keep = np.setdiff1d(np.arange(len(st)), warmup)
    if len(keep) < ROBUST_MIN_STEPS:
        return steady
    per_step = A.per_step_by_cause(devices, st)
    idle_total = {c: sum(per_step[i][c] for i in keep) for c in H.CAUSES}
    for c in H.CAUSES:
        if c == H.CHECKPOINT:
            continue
        median = float(np.median([per_step[i][c] for i in keep]))
        # idle outside any step stays as measured; inside steps the median per step stands for each
        steady[c] = int(steady[c] - idle_total[c] + median * len(keep))
    return {c: max(v, 0) for c, v in steady.items()}


def _startup_headline(startup_ns: int, lost_ns: int, warmup: np.ndarray, st: F.Steps, host: H.HostActivity,
                      devices: list[A.DeviceAttribution]) -> str:
    spent = A.cause_evidence(host, devices, H.STARTUP)
    names = ", ".join(e.name for e in spent[:3])
    steps = f" in the first {len(warmup)} warm-up step(s)" if len(warmup) else ""
    on = f"; spent in {names}" if names else ""
    return (f"One-off start-up costs lose {_fmt_ns(startup_ns)} ({_pct(startup_ns / lost_ns)} of the GPU time "
            f"lost){steps}{on}: profile steady-state steps to see the training loop's own bottleneck.")


# --- findings ------------------------------------------------------------------------------------------
def _findings(tl: Timeline, ra: RankAnalysis, devices: list[A.DeviceAttribution], lost: dict[str, int],
              window_ns: int, lost_ns: int, host: H.HostActivity, periodic: A.PeriodicSteps | None,
              framework: str) -> tuple[Finding, ...]:
    out = []
    for cause in H.CAUSES:
        ns = lost[cause]
        if window_ns <= 0 or ns < FINDING_MIN_SHARE * window_ns:
            continue
        fid = VERDICT_OF_CAUSE[cause]
        n_gaps = sum(int((d.causes == H.CAUSES.index(cause)).sum()) for d in devices)
        lines, figures = _specific_evidence(tl, ra, devices, cause, host, periodic)
        host_ops = A.cause_evidence(host, devices, cause)
        evidence = _evidence_prose(ns, window_ns, lost_ns, n_gaps, lines, host_ops)
        out.append(Finding(fid, cause, TITLES[fid], _severity(ns / window_ns), ns, round(ns / lost_ns, 6),
                           evidence, advice_for(fid, framework), round(ns / window_ns, 6), n_gaps, host_ops,
                           figures))
    out.sort(key=lambda f: -f.explains_ns)
    return tuple(out)


def _evidence_prose(ns: int, window_ns: int, lost_ns: int, n_gaps: int, specific: list[str],
                    host_ops: tuple[A.Evidence, ...]) -> tuple[str, ...]:
    """A finding's evidence lines, from its numbers: time lost and shares, the cause's own facts, host ops."""
    where = f" in {n_gaps} idle gap{'s' if n_gaps != 1 else ''}" if n_gaps else ""
    first = (f"{_fmt_ns(ns)} of GPU time ({_pct(ns / window_ns)} of the window, "
             f"{_pct(ns / lost_ns)} of the time lost){where}")
    return (first, *specific, *(f"{e.name}: {_pct(e.share)} of this idle time" for e in host_ops))


def _specific_evidence(tl: Timeline, ra: RankAnalysis, devices: list[A.DeviceAttribution], cause: str,
                       host: H.HostActivity, periodic: A.PeriodicSteps | None) -> tuple[list[str], dict[str, float]]:
    """The cause's own facts: prose lines and the numbers they state (units in the keys)."""
    ev = tl.rank_events(ra.index)
    out: list[str] = []
    figures: dict[str, float] = {}
    if cause == H.DATALOADER and ra.dataloader_wait_fraction is not None:
        figures["dataloader_wait_fraction"] = round(float(ra.dataloader_wait_fraction), 6)
        out.append(f"DataLoader wait {_pct(ra.dataloader_wait_fraction)} of the window")
    elif cause == H.MEMCPY:
        exposed = sum(d.exposed_memcpy_ns for d in devices)
        figures["exposed_memcpy_us"] = round(exposed / 1000, 3)
        if exposed:
            out.append(f"{_fmt_ns(exposed)} of host-device copies run with no kernel running")
        copies = ev[(ev["kind"] == T.MEMCPY).to_numpy()]
        pageable = int(((copies["pinned"] == 0) & (copies["copy_kind"] == "HtoD")).sum())
        figures["pageable_htod_copies"] = pageable
        if pageable:
            out.append(f"{pageable} host-to-device copies from pageable memory (staged by the host; "
                       f"not asynchronous)")
        sync_copies = host.events[host.events["name"].astype(str).str.fullmatch(
            r"(cuda|hip)Memcpy(2D|3D)?|hipMemcpyWithStream|cuMemcpy(HtoD|DtoH|DtoD)?(_v2)?").to_numpy()]
        if len(sync_copies):
            out.append(f"{len(sync_copies)} synchronous copy API calls ({sync_copies['name'].astype(str).iloc[0]})")
        for dev in ra.devices:
            for c in dev.memcpy.directions:
                if c.direction == "HtoD" and c.bytes:
                    bw = f", {c.bandwidth_gbps:.1f} GB/s" if c.bandwidth_gbps else ""
                    out.append(f"cuda:{dev.device}: {c.count} HtoD copies, {c.bytes / 1e6:.1f} MB{bw}")
    elif cause == H.SYNC:
        syncs = host.events[(host.events["klass"] == H.SYNC).to_numpy()]
        if len(syncs):
            counts = syncs["name"].astype(str).value_counts().head(3)
            out.append("blocking calls on the launching thread: "
                       + ", ".join(f"{n} x{int(k)}" for n, k in counts.items()))
    elif cause == H.LAUNCH:
        k = ev[(ev["kind"] == T.KERNEL).to_numpy()]
        if len(k):
            durs = k["dur_ns"].to_numpy()
            short = float((durs < SHORT_KERNEL_NS).mean())
            figures["median_kernel_us"] = round(float(np.median(durs)) / 1000, 3)
            figures["short_kernel_share"] = round(short, 6)
            out.append(f"median kernel {_fmt_ns(float(np.median(durs)))}; {_pct(short)}"
                       f" of {len(durs)} kernels shorter than {_fmt_ns(SHORT_KERNEL_NS)}")
        n_short = sum(int((d.causes == H.CAUSES.index(H.LAUNCH)).sum()) for d in devices)
        out.append(f"{n_short} short idle gaps between kernels while the host was launching")
    elif cause == H.CHECKPOINT and periodic is not None:
        out.append(f"steps {', '.join(str(s) for s in periodic.steps)} are at least 1.5x the median step "
                   f"({_fmt_ns(periodic.median_step_ns)}): every {periodic.every} steps")
    elif cause == H.COMMUNICATION:
        exposed = sum(d.exposed_comm_ns for d in devices)
        figures["exposed_communication_us"] = round(exposed / 1000, 3)
        if exposed:
            out.append(f"{_fmt_ns(exposed)} of communication kernels run with no other GPU work")
    return out, figures


def _gpu_bound_finding(tl: Timeline, ra: RankAnalysis, window_ns: int, idle_ns: int, framework: str) -> Finding:
    busy = window_ns - idle_ns
    evidence = [f"GPU busy {_pct(busy / window_ns)} of the window: the GPU itself is the bottleneck."]
    ev = tl.rank_events(ra.index)
    k = ev[(ev["kind"] == T.KERNEL).to_numpy()]
    ktotal = int(k["dur_ns"].sum())
    for dev in ra.devices:
        for row in dev.kernels[:TOP_KERNELS_NAMED]:
            evidence.append(f"top kernel {row.name[:80]}: {_fmt_ns(row.total_ns)} "
                            f"({_pct(row.total_ns / ktotal) if ktotal else 'n/a'} of kernel time, {row.count}x)")
    if ktotal:
        mem = int(k["dur_ns"].to_numpy()[name_flags(k, MEMORY_BOUND_KERNEL)].sum())
        fp32 = int(k["dur_ns"].to_numpy()[name_flags(k, FP32_MATMUL_KERNEL)].sum())
        evidence.append(f"{_pct(mem / ktotal)} of kernel time in memory-bound kernels (elementwise, "
                        f"reductions, normalisation, copies; by name)")
        if fp32 > 0.1 * ktotal:
            evidence.append(f"{_pct(fp32 / ktotal)} of kernel time in FP32 matrix kernels: mixed precision "
                            f"(bf16/fp16) or TF32 would use the tensor cores")
    return Finding(GPU_BOUND, None, TITLES[GPU_BOUND], "low", busy, 0.0, tuple(evidence),
                   advice_for(GPU_BOUND, framework))


# --- CPU-only ranks -----------------------------------------------------------------------------------
def host_shares(tl: Timeline, rank: int, ra: RankAnalysis, host: H.HostActivity) -> HostShares | None:
    """Step time (or the window without steps) split into data wait, model ops and the rest."""
    st = F.steps(tl, rank)
    lo, hi = (st.start_ns, st.end_ns) if len(st) else (np.array([ra.window.start_ns]), np.array([ra.window.end_ns]))
    total = int((hi - lo).sum())
    if total <= 0:
        return None
    wait_set = F.dataloader_union(tl, rank)
    ops = host.events[(host.events["kind"] == T.CPU_OP).to_numpy()]
    ts = ops["ts_ns"].to_numpy()
    model_set = iv.subtract(iv.union(ts, ts + ops["dur_ns"].to_numpy()), wait_set)
    wait = int(iv.overlap_per_window(wait_set, lo, hi).sum())
    model = int(iv.overlap_per_window(model_set, lo, hi).sum())
    return HostShares(total, wait, model, total - wait - model)


def _host_verdict(s: HostShares | None, framework: str) -> tuple[str | None, tuple[Finding, ...], str]:
    if s is None:
        return None, (), ""
    data, model = s.data_wait_ns / s.total_ns, s.model_ops_ns / s.total_ns
    verdict = INPUT_BOUND if data >= HOST_INPUT_BOUND_SHARE else HOST_BOUND
    findings = []
    for fid, cause, ns, title in ((INPUT_BOUND, H.DATALOADER, s.data_wait_ns, "The host loop waits for data"),
                                  (HOST_BOUND, H.HOST_COMPUTE, s.model_ops_ns,
                                   "The host loop is busy in the model's ops")):
        if ns >= FINDING_MIN_SHARE * s.total_ns:
            findings.append(Finding(fid, cause, title, _severity(ns / s.total_ns), ns, round(ns / s.total_ns, 6),
                                    (f"{_fmt_ns(ns)} ({_pct(ns / s.total_ns)} of the step time)",),
                                    advice_for(f"host_{fid}", framework)))
    findings.sort(key=lambda f: -f.explains_ns)
    label = "input-bound" if verdict == INPUT_BOUND else "host-bound"
    headline = (f"Host loop {label}: it spends {_pct(data)} of its step time waiting for data, {_pct(model)} in "
                f"the model's ops and {_pct(1 - data - model)} elsewhere")
    return verdict, tuple(findings), headline


def _no_gpu_reason(tl: Timeline, rank: int) -> str:
    ev = tl.rank_events(rank)
    ann = ev[(ev["kind"] == T.GPU_ANNOTATION).to_numpy()]
    if len(ann) and (ann["category"].astype(str) == "cuda_profiler_range").any():
        return ("no kernels in the trace: a CUPTI range-profiler capture records GPU work as ranges, "
                "so GPU idle time cannot be measured")
    return "no GPU activity in the trace"


# --- small helpers ------------------------------------------------------------------------------------
def _gpu_events(tl: Timeline, rank: int, devices: list[A.DeviceAttribution]) -> int:
    work = tl.gpu_work(rank)
    ts = work["ts_ns"].to_numpy()
    dev = work["device"].to_numpy()
    n = 0
    for d in devices:
        n += int(((dev == d.device) & (ts >= d.window.start_ns) & (ts < d.window.end_ns)).sum())
    return n


def _severity(share: float) -> str:
    return "high" if share >= SEVERITY_HIGH_SHARE else "medium" if share >= SEVERITY_MEDIUM_SHARE else "low"


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%" if x >= 0.1 or x == 0 else f"{100 * x:.1f}%"


def _fmt_ns(ns: float) -> str:
    return format_us(ns / 1000)
