"""Verdict for nvidia-smi / DCGM logs given without a trace: are the GPUs used?

A log alone cannot say *why* a GPU waits (that needs a trace), but it can say that it does: a GPU
with at least UNDERUSED_ZERO_SHARE of its samples at 0% SM utilisation is underused (the seed's
"too many consecutive ticks at zero utilisation"); a GPU at 0% for every sample is not used at all.
"""

from __future__ import annotations

from ..analyses.counters import DeviceCounters, MetricFigures
from ..causes import GPU_BOUND, GPU_UNDERUSED, UNDETERMINED, VERDICT_BY_ID
from .advice import advice_for
from .rules import Diagnosis, Finding
from .thresholds import (
    HEALTHY_BUSY_SHARE,
    IDLE_MEMORY_MAX_MIB,
    IDLE_POWER_MAX_SHARE,
    LOW_UTIL_MEAN_PCT,
    UNDERUSED_ZERO_SHARE,
)
from .wording import Quoted


def _sm_mean(d: DeviceCounters) -> float | None:
    return next((m.mean for m in d.metrics if m.metric == "sm_util_pct"), None)


def _metric(d: DeviceCounters, name: str) -> MetricFigures | None:
    return next((m for m in d.metrics if m.metric == name and m.samples), None)


def _unused_without_util(d: DeviceCounters) -> Finding | None:
    """A GPU of a log without utilisation, judged from memory used and power: unused when its memory
    never reaches IDLE_MEMORY_MAX_MIB and (with a power limit logged) its power never reaches
    IDLE_POWER_MAX_SHARE of the limit. None when it is not unused, or nothing can judge it."""
    mem, power, limit = _metric(d, "fb_used_mib"), _metric(d, "power_w"), _metric(d, "power_limit_w")
    if mem is None or mem.max is None:
        return None
    if mem.max >= IDLE_MEMORY_MAX_MIB:
        return None
    evidence = f"memory used at most {mem.max:g} MiB"
    figures = {"memory_used_max_mib": float(mem.max), "samples": float(d.samples)}
    if power is not None and power.max is not None:
        if limit is not None and limit.max:
            if power.max >= IDLE_POWER_MAX_SHARE * limit.max:
                return None
            evidence += f", power at most {power.max:g} W of its {limit.max:g} W limit"
        else:
            evidence += f", power at most {power.max:g} W"
        figures["power_max_w"] = float(power.max)
    return Finding(GPU_UNDERUSED, None, f"GPU {d.device} is not used at all", "high", 0, 1.0,
                   (f"GPU {d.device}: judged from memory and power (the log has no utilisation column): "
                    f"{evidence} over {d.samples} samples",),
                   advice_for(GPU_UNDERUSED, ""), share_of_window=1.0, figures=figures)


def _diagnose_without_util(devices: tuple[DeviceCounters, ...]) -> Diagnosis:
    """Logs with memory and power but no utilisation: GPUs that hold no memory are called unused."""
    gauged = [d for d in devices if _metric(d, "fb_used_mib") is not None]
    if not gauged:
        return Diagnosis(UNDETERMINED, None, "The logs hold no SM utilisation to judge the GPUs by.", None, (), ())
    found = [f for f in (_unused_without_util(d) for d in gauged) if f is not None]
    if found:
        headline = (f"{len(found)} of {len(gauged)} GPU(s) not used at all, judged from memory and power (the logs "
                    f"have no utilisation column): {found[0].evidence[0].split(': ', 2)[-1]}.")
        return Diagnosis(GPU_UNDERUSED, None, headline, None, tuple(found), ())
    return Diagnosis(UNDETERMINED, None, f"{len(gauged)} GPU(s) hold memory, so they are in use; the logs have no "
                                         f"utilisation column to say how busy they are.", None, (), ())


def _low_util_with_memory(d: DeviceCounters) -> Finding | None:
    """A GPU busy little on average (SM utilisation mean below LOW_UTIL_MEAN_PCT) while it holds memory (at
    least IDLE_MEMORY_MAX_MIB: a model is loaded): underused, though seldom at exactly 0%."""
    mean, mem = _sm_mean(d), _metric(d, "fb_used_mib")
    if mean is None or mean >= LOW_UTIL_MEAN_PCT or mem is None or mem.max is None or mem.max < IDLE_MEMORY_MAX_MIB:
        return None
    total = _metric(d, "fb_total_mib")
    q = Quoted()
    util = q.pct(mean, "sm_util_mean_pct", 1)  # the shares in the order the text states them
    held = f"{mem.max:g} MiB of memory held"
    if total is not None and total.max:
        held += f" ({q.of(mem.max, 'memory_used_max_mib', total.max, 'memory_total_mib')} of {total.max:g} MiB)"
    else:
        q.figures["memory_used_max_mib"] = float(mem.max)
    evidence = (f"GPU {d.device}: SM utilisation {util} on average over {d.samples} "
                f"samples, with {held}: a model is loaded but the GPU computes little of the time",)
    share = round(1.0 - mean / 100.0, 6)
    return Finding(GPU_UNDERUSED, None, f"GPU {d.device} is underused", "medium", 0, share, evidence,
                   advice_for(GPU_UNDERUSED, ""), share_of_window=share, figures=q.figures, shares=tuple(q.shares))


def diagnose_counters(devices: tuple[DeviceCounters, ...]) -> Diagnosis:
    judged = [d for d in devices if d.zero_runs is not None and d.samples > 0]
    if not judged:
        return _diagnose_without_util(devices)
    findings = []
    for d in judged:
        zero = d.zero_runs.total_samples / d.samples if d.zero_runs else 0.0
        if zero < UNDERUSED_ZERO_SHARE:
            continue
        unused = zero >= 1.0
        z = d.zero_runs
        assert z is not None
        q = Quoted()
        evidence = (f"GPU {d.device}: {z.total_samples} of {d.samples} samples at {q.pct(0, 'zero_util_level_pct')} "
                    f"SM utilisation ({q.of(z.total_samples, 'zero_util_samples', d.samples, 'samples')}), in "
                    f"{z.runs} run(s); longest {z.longest_samples} samples",
                    f"SM utilisation mean {q.pct(_sm_mean(d) or 0.0, 'sm_util_mean_pct', 1)} over the log")
        findings.append(Finding(
            GPU_UNDERUSED, None,
            f"GPU {d.device} is {'not used at all' if unused else 'idle for long runs'}",
            "high" if zero >= 0.5 else "medium", int(z.total_ns), round(zero, 6), evidence,
            advice_for(GPU_UNDERUSED, ""), share_of_window=round(zero, 6), figures={
                **q.figures, "zero_util_share": round(zero, 6)}, shares=tuple(q.shares)))
    flagged = {f.title.split(" ")[1] for f in findings}
    findings += [f for f in (_low_util_with_memory(d) for d in judged if d.device not in flagged) if f is not None]
    findings.sort(key=lambda f: -f.share_of_idle)
    means = [m for m in (_sm_mean(d) for d in judged) if m is not None]
    overall = sum(means) / len(means) if means else 0.0
    if findings:
        worst = findings[0]
        headline = (f"{len(findings)} of {len(judged)} GPU(s) underused: {worst.evidence[0]}. "
                    f"The logs cannot say why; profile a few steps with torch.profiler to find out.")
        n = worst.evidence[0].count("%")
        return Diagnosis(GPU_UNDERUSED, None, headline, None, tuple(findings), (), dict(worst.figures),
                         worst.shares[:n])
    if overall >= 100 * HEALTHY_BUSY_SHARE:
        q = Quoted()
        return Diagnosis(GPU_BOUND, None, f"{len(judged)} GPU(s) busy: SM utilisation "
                                          f"{q.pct(overall, 'sm_util_mean_pct')} on average; "
                                          f"under {q.fraction(UNDERUSED_ZERO_SHARE, 'underused_zero_share')} of "
                                          f"samples at {q.pct(0, 'zero_util_level_pct')}.", None, (), (),
                         q.figures, tuple(q.shares))
    q = Quoted()
    return Diagnosis(UNDETERMINED, None, f"{len(judged)} GPU(s) at {q.pct(overall, 'sm_util_mean_pct')} SM utilisation "
                                         f"on average, under "
                                         f"{q.fraction(UNDERUSED_ZERO_SHARE, 'underused_zero_share')} "
                                         f"of samples at {q.pct(0, 'zero_util_level_pct')}; "
                                         f"{VERDICT_BY_ID[GPU_UNDERUSED].label.lower()} only in "
                                         f"part. Profile a few steps to see what holds them up.", None, (), (),
                     q.figures, tuple(q.shares))
