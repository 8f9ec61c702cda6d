"""Verdict for nvidia-smi / DCGM logs given without a trace: are the GPUs used, and how hard?

A log alone cannot say *why* a GPU waits (that needs a trace), but it can say that it does: a GPU
with at least UNDERUSED_ZERO_SHARE of its samples at 0% SM utilisation is underused (the seed's
"too many consecutive ticks at zero utilisation"); a GPU at 0% for every sample is not used at all.

nvidia-smi's utilisation is the share of time any kernel runs, not how busy the SMs are. When power is
logged, it says how hard a GPU worked while called busy (`PowerFigures`): its median power over its samples
at BUSY_UTIL_PCT or more, against its power limit (logged) or else its hardest-working phase's power. Below
LIGHT_POWER_SHARE of its logged limit, high utilisation is not saturation (small or memory-bound kernels, or
kernels waiting on another GPU): such a GPU is never called busy in the verdict; SM occupancy is said
unmeasured. Without a limit the hardest phase is only another phase of the log: kernels of another kind
(tensor-core GEMMs beside FP32 ones, compute beside memory-bound work) draw different power while each keeps
the SMs busy, so a lighter phase is said, never taken for the lack of saturation.

Every figure a verdict's headline quotes is a finding's: the headline of the GPUs' utilisation is the first
line of the `gpu_utilisation` finding, which gives each GPU's own figures below it.
"""

from __future__ import annotations

from ..analyses.counters import (
    BUSY_UTIL_PCT,
    HARD_POWER_PERCENTILE,
    IDLE_EDGE_UTIL_PCT,
    LIGHT_POWER_SHARE,
    CounterFigures,
    MetricFigures,
    PowerFigures,
    ZeroRuns,
)
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
from .wording import Quoted, duration

POWER_FINDING = "gpu_power"  # the finding that says how hard the GPUs worked (no cause: a fact beside the verdict)
UTIL_FINDING = "gpu_utilisation"  # the GPUs' utilisation a busy or partly used verdict's headline quotes
NOT_MEASURED = ("nvidia-smi's utilisation is the share of time any kernel runs, not how busy the SMs are; "
                "SM occupancy was not measured (DCGM's sm_active / sm_occupancy fields, or a profile, measure it)")
LIGHT_ADVICE = ("Profile a few steps with torch.profiler to see which kernels run while the GPU draws little power "
                "(small or memory-bound kernels, or communication kernels waiting on another GPU).",
                "Log SM activity beside utilisation (dcgmi dmon -e 1002,1003: sm_active, sm_occupancy) to measure "
                "how busy the SMs are.")


def _sm_mean(d: CounterFigures) -> float | None:
    return next((m.mean for m in d.metrics if m.metric == "sm_util_pct"), None)


def _metric(d: CounterFigures, name: str) -> MetricFigures | None:
    return next((m for m in d.metrics if m.metric == name and m.samples), None)


def _unused_without_util(d: CounterFigures) -> Finding | None:
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


def _diagnose_without_util(devices: tuple[CounterFigures, ...]) -> Diagnosis:
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


def _util(d: CounterFigures) -> tuple[int, float | None, ZeroRuns | None]:
    """A GPU's utilisation figures as the diagnosis judges them: (samples, SM utilisation mean, zero runs) over
    the job's span when the log has an idle head or tail set apart (`CounterFigures.job`), else over the log."""
    if d.job is not None and d.job.trimmed:
        return d.job.samples, d.job.sm_util_mean, d.job.zero_runs
    sm = _metric(d, "sm_util_pct")
    return (sm.samples if sm is not None else d.samples), _sm_mean(d), d.zero_runs


def _seconds(ns: float) -> str:
    """A log's span in seconds as sampled: whole from 10 s, to a tenth from 1 s, shorter as a duration."""
    return f"{ns / 1e9:,.0f} s" if ns >= 10e9 else f"{round(ns / 1e9, 1):g} s" if ns >= 1e9 else duration(ns)


def _over(devices: list[CounterFigures]) -> str:
    """Where the figures were taken: "over the job" when an idle head or tail was set apart, else "over the log"."""
    return "over the job" if any(d.job is not None and d.job.trimmed for d in devices) else "over the log"


def _set_apart(devices: list[CounterFigures]) -> tuple[str, Quoted]:
    """The sentence saying which idle head and tail of the logs were set apart as outside the job (and how long
    the job's span is), with its quoted share; ("", empty) when none was."""
    q = Quoted()
    spans = [d for d in devices if d.job is not None and d.job.trimmed]
    if not spans:
        return "", q
    head = max(d.job.head_samples * d.period_ns for d in spans if d.job is not None)
    tail = max(d.job.tail_samples * d.period_ns for d in spans if d.job is not None)
    job = max(d.job.last_ns - d.job.first_ns + d.period_ns for d in spans if d.job is not None)
    parts = ([f"first {_seconds(head)}"] if head else []) + ([f"last {_seconds(tail)}"] if tail else [])
    where = "before the job" if not tail else "after the job" if not head else "outside the job"
    return (f"The log's {' and '.join(parts)} {'is' if len(parts) == 1 else 'are'} idle on every GPU (SM utilisation "
            f"at most {q.pct(IDLE_EDGE_UTIL_PCT, 'idle_edge_util_pct')}): {where}, set apart; the figures "
            f"are of the job's {_seconds(job)}."), q


def _low_util_with_memory(d: CounterFigures, over: str) -> Finding | None:
    """A GPU busy little on average (SM utilisation mean below LOW_UTIL_MEAN_PCT) while it holds memory (at
    least IDLE_MEMORY_MAX_MIB: a model is loaded): underused, though seldom at exactly 0%."""
    samples, mean, _ = _util(d)
    mem = _metric(d, "fb_used_mib")
    if mean is None or mean >= LOW_UTIL_MEAN_PCT or mem is None or mem.max is None or mem.max < IDLE_MEMORY_MAX_MIB:
        return None
    total = _metric(d, "fb_total_mib")
    q = Quoted()
    util = q.pct(mean, "sm_util_mean_pct", 1)  # the shares in the order the text states them
    held = f"{mem.max:g} MiB of memory held"
    if total is not None and total.max:
        held += f" ({q.of(mem.max, 'memory_used_max_mib', total.max, 'memory_total_mib', small_below=1.0)} " \
                f"of {total.max:g} MiB)"
    else:
        q.figures["memory_used_max_mib"] = float(mem.max)
    evidence = (f"GPU {d.device}: SM utilisation {util} on average {over} ({samples} samples), with {held}: "
                f"a model is loaded but the GPU computes only part of the time",)
    share = round(1.0 - mean / 100.0, 6)
    return Finding(GPU_UNDERUSED, None, f"GPU {d.device} is underused: memory held, little computed", "medium", 0,
                   share, evidence, advice_for(GPU_UNDERUSED, ""), share_of_window=share, figures=q.figures,
                   shares=tuple(q.shares))


def _zero_share_finding(d: CounterFigures, over: str) -> Finding | None:
    """A GPU with at least UNDERUSED_ZERO_SHARE of its samples at 0% SM utilisation: idle for long runs (high
    severity from half of them), or not used at all (every sample)."""
    samples, mean, z = _util(d)
    if z is None or not samples:
        return None
    zero = z.total_samples / samples
    if zero < UNDERUSED_ZERO_SHARE:
        return None
    q = Quoted()
    evidence = (f"GPU {d.device}: {z.total_samples} of {samples} samples at {q.pct(0, 'zero_util_level_pct')} "
                f"SM utilisation {over} ({q.of(z.total_samples, 'zero_util_samples', samples, 'samples')}), in "
                f"{z.runs} run(s); longest {z.longest_samples} samples ({_seconds(z.longest_ns)})",
                f"SM utilisation mean {q.pct(mean or 0.0, 'sm_util_mean_pct', 1)} {over}")
    return Finding(
        GPU_UNDERUSED, None, f"GPU {d.device} is {'not used at all' if zero >= 1.0 else 'idle for long runs'}",
        "high" if zero >= 0.5 else "medium", int(z.total_ns), round(zero, 6), evidence,
        advice_for(GPU_UNDERUSED, ""), share_of_window=round(zero, 6),
        figures={**q.figures, "zero_util_share": round(zero, 6)}, shares=tuple(q.shares))


def _idle_runs(judged: list[CounterFigures], q: Quoted) -> str:
    """What the judged GPUs' samples at 0% are, for a headline that calls them busy or partly used: the share
    and longest run of the GPU with the most, or that there is none (never silent about a listed run)."""
    figures = [(u[2], u[0]) for u in (_util(d) for d in judged) if u[2] is not None and u[0]]
    worst = max(figures, key=lambda f: (f[0].total_samples / f[1], f[0].longest_ns), default=None)
    if worst is None or not worst[0].total_samples:
        return f"no sample at {q.pct(0, 'zero_util_level_pct')}"
    z, n = worst
    return (f"{q.of(z.total_samples, 'zero_util_samples', n, 'samples')} of samples at "
            f"{q.pct(0, 'zero_util_level_pct')} (under {q.fraction(UNDERUSED_ZERO_SHARE, 'underused_zero_share')})"
            f", the longest run {_seconds(z.longest_ns)}")


def _with(headline: str, q: Quoted, judged: list[CounterFigures],
          then: str = "") -> tuple[str, dict[str, float], tuple, str]:
    """A headline with its figures and shares, and its detail: `then` (what to do next) and the set-apart
    sentence, one click away, so the headline stays one sentence."""
    trim, _ = _set_apart(judged)
    return headline, q.figures, tuple(q.shares), " ".join(x for x in (then, trim) if x)


def _power(d: CounterFigures) -> PowerFigures | None:
    """A GPU's power figures as the diagnosis judges them: over the job's span when one was set apart."""
    return d.power


def _power_share(p: PowerFigures) -> float | None:
    """Median busy power over its reference (limit, else the hardest phase's power); None without busy samples."""
    ref = p.reference_w
    return p.busy_power_w / ref if p.busy_power_w is not None and ref else None


def _lower(d: CounterFigures) -> bool:
    """Busy (samples at BUSY_UTIL_PCT or more) at under LIGHT_POWER_SHARE of its power reference (its limit, else
    its hardest-working phase)."""
    p = _power(d)
    share = None if p is None else _power_share(p)
    return share is not None and share < LIGHT_POWER_SHARE


def _light(d: CounterFigures) -> bool:
    """Busy at under LIGHT_POWER_SHARE of its logged power limit: not saturated. Against the hardest phase of the
    log only (no limit logged) a lower phase may run other kernels, not lighter ones (`_lower` says it)."""
    p = _power(d)
    return p is not None and bool(p.limit_w) and _lower(d)


def _reference(devices: list[CounterFigures]) -> str:
    """What the GPUs' busy power is compared with, in words."""
    limits = [p.limit_w is not None for d in devices if (p := _power(d)) is not None]
    return "their power limit" if all(limits) else "the power of their hardest-working phase" if not any(limits) \
        else "their power limit (else of their hardest-working phase)"


def _power_line(d: CounterFigures, p: PowerFigures, q: Quoted) -> str:
    """How hard one GPU worked: its utilisation and power while busy, against its limit or hardest phase."""
    k = f"gpu{d.device}"
    level = q.pct(BUSY_UTIL_PCT, "busy_util_level_pct")
    text = f"GPU {d.device}: {p.busy_samples} of {p.samples} samples at {level} utilisation or more"
    util = q.pct(p.busy_util_mean or 0.0, f"{k}_busy_util_mean_pct")
    busy = round(p.busy_power_w or 0.0, 1)
    if p.limit_w:
        share = q.of(busy, f"{k}_busy_power_w", p.limit_w, f"{k}_power_limit_w")
        text += f", at {util} on average and a median {busy:g} W: {share} of its {p.limit_w:g} W limit"
    else:
        hard = round(p.hard_power_w or 0.0, 1)
        share = q.of(busy, f"{k}_busy_power_w", hard, f"{k}_hard_power_w")
        text += (f", at {util} on average and a median {busy:g} W: {share} of the {hard:g} W it draws in its "
                 f"hardest-working phase (the {HARD_POWER_PERCENTILE:.0f}th percentile of its busy power; no power "
                 f"limit logged)")
    if p.light_samples:
        text += (f"; {p.light_samples} of them at under {q.fraction(LIGHT_POWER_SHARE, 'light_power_share')} of "
                 f"that")
    if p.busy_clock_mhz is not None and p.top_clock_mhz:
        text += f"; SM clock {p.busy_clock_mhz:.0f} MHz while busy (highest logged {p.top_clock_mhz:.0f} MHz)"
    return text


def _power_finding(judged: list[CounterFigures]) -> Finding | None:
    """How hard the GPUs worked, from power beside utilisation (one line per GPU with busy samples that logs
    both; None when none has any). GPUs busy at low power against their logged limit are named in the title as
    busy in time but not saturated; against their hardest phase only (no limit logged), as working at lower
    power in part of their busy time, which the log cannot tell from other work."""
    powered = [d for d in judged if (p := _power(d)) is not None and p.busy_samples]
    if not powered:
        return None
    q = Quoted()
    light = [d for d in powered if _light(d)]
    lower = [d for d in powered if _lower(d) and not _light(d)]
    named = light or lower
    if named:
        worst = min(named, key=lambda d: _power_share(_power(d)) or 0.0)  # type: ignore[arg-type]
        p = _power(worst)
        assert p is not None
        who = f"GPU {worst.device}" if len(named) == 1 else \
            f"{len(named)} of {len(powered)} GPUs (the lightest, GPU {worst.device})"
        what = "busy in time but not saturated" if light else "at lower power in part of their busy time"
        if not light and len(named) == 1:
            what = "at lower power in part of its busy time"
        title = (f"{who} {what}: utilisation "
                 f"{q.pct(p.busy_util_mean or 0.0, f'gpu{worst.device}_busy_util_mean_pct')} drawing "
                 f"{q.fraction(round(_power_share(p) or 0.0, 6), f'gpu{worst.device}_power_share')} of "
                 f"{'its power limit' if p.limit_w else 'the power of its hardest-working phase'}")
    else:
        title = f"How hard the GPU{'s' if len(powered) > 1 else ''} worked: power beside utilisation"
    lines = [_power_line(d, p, q) for d in powered if (p := _power(d)) is not None]
    lines.append(NOT_MEASURED)
    if light:
        lines.append(f"Utilisation at {q.pct(BUSY_UTIL_PCT, 'busy_util_level_pct')} or more at under "
                     f"{q.fraction(LIGHT_POWER_SHARE, 'light_power_share')} of the power limit is not saturation: "
                     f"kernels occupy the GPU in time but do not work its SMs hard")
    elif lower:
        lines.append(f"Busy samples at under {q.fraction(LIGHT_POWER_SHARE, 'light_power_share')} of the power of "
                     f"the GPU's hardest-working phase ran other kernels than that phase, or lighter ones: kernels of "
                     f"another kind (tensor-core or FP32, compute- or memory-bound) draw different power while each "
                     f"keeps the SMs busy, and no power limit is logged to say how hard either worked; log "
                     f"power.limit beside power.draw to judge saturation")
    advice = LIGHT_ADVICE if named else ()
    return Finding(POWER_FINDING, None, title, "medium" if light else "low", 0, 0.0, tuple(lines), advice,
                   figures=q.figures, shares=tuple(q.shares))


def _utilisation_finding(headline: str, q: Quoted, judged: list[CounterFigures], over: str,
                         advice: tuple[str, ...]) -> Finding:
    """The GPUs' utilisation a headline quotes, as a finding: the headline first (its figures and shares the
    same), then each GPU's own mean, zero samples and longest zero run when there are several."""
    f = Quoted(dict(q.figures), list(q.shares))
    lines = [headline]
    if len(judged) > 1:
        for d in judged:
            samples, mean, z = _util(d)
            k = f"gpu{d.device}"
            line = f"GPU {d.device}: SM utilisation {f.pct(mean or 0.0, f'{k}_sm_util_mean_pct', 1)} on average " \
                   f"{over} ({samples} samples)"
            if z is not None and z.total_samples and samples:
                line += (f", {f.of(z.total_samples, f'{k}_zero_util_samples', samples, f'{k}_samples')} of them at "
                         f"{f.pct(0, 'zero_util_level_pct')}, the longest run {_seconds(z.longest_ns)}")
            elif z is not None:
                line += f", never at {f.pct(0, 'zero_util_level_pct')}"
            lines.append(line)
    title = f"SM utilisation of {len(judged)} GPU{'s' if len(judged) > 1 else ''} {over}"
    return Finding(UTIL_FINDING, None, title, "low", 0, 0.0, tuple(lines), advice, figures=f.figures,
                   shares=tuple(f.shares))


def diagnose_counters(devices: tuple[CounterFigures, ...]) -> Diagnosis:
    judged = [d for d in devices if d.zero_runs is not None and d.samples > 0]
    if not judged:
        return _diagnose_without_util(devices)
    over = _over(judged)
    findings = [f for f in (_zero_share_finding(d, over) for d in judged) if f is not None]
    # a GPU idle for long runs that also holds memory gets both findings: two facts, each with its figures
    findings += [f for f in (_low_util_with_memory(d, over) for d in judged) if f is not None]
    findings.sort(key=lambda f: -f.share_of_idle)
    power = _power_finding(judged)
    means = [m for m in (_util(d)[1] for d in judged) if m is not None]
    overall = sum(means) / len(means) if means else 0.0
    if findings:
        worst = findings[0]
        n = worst.evidence[0].count("%")
        q = Quoted()
        q.figures.update(worst.figures)
        q.shares = list(worst.shares[:n])
        gpus = len({f.title.split(" ")[1] for f in findings})
        text, figures, shares, detail = _with(
            f"{gpus} of {len(judged)} GPU(s) underused: {worst.evidence[0]}.", q, judged,
            "The logs cannot say why; profile a few steps with torch.profiler to find out.")
        return Diagnosis(GPU_UNDERUSED, None, text, None, (*findings, *([power] if power else [])), (), figures,
                         shares, headline_detail=detail)
    q = Quoted()
    mean = q.pct(overall, "sm_util_mean_pct")
    extra = (power,) if power else ()
    light = [d for d in judged if _light(d)]
    n = len(judged)
    if overall >= 100 * HEALTHY_BUSY_SHARE and light:
        text, figures, shares, detail = _with(
            f"{n} GPU(s) busy in time but not saturated: utilisation {mean} on average {over}, with "
            f"{len(light)} of them drawing under {q.fraction(LIGHT_POWER_SHARE, 'light_power_share')} of "
            f"{_reference(light)} while busy; {_idle_runs(judged, q)}.", q, judged,
            "High utilisation at low power: kernels run all the time but do not work the SMs hard; the log cannot "
            "say why (SM occupancy was not measured). Profile a few steps to see which kernels run.")
        util = _utilisation_finding(text, q, judged, over, LIGHT_ADVICE)
        return Diagnosis(UNDETERMINED, None, text, None, (*extra, util), (), figures, shares, headline_detail=detail)
    if overall >= 100 * HEALTHY_BUSY_SHARE:
        text, figures, shares, detail = _with(f"{n} GPU(s) busy: SM utilisation {mean} on average {over}; "
                                              f"{_idle_runs(judged, q)}.", q, judged)
        util = _utilisation_finding(text, q, judged, over, advice_for(GPU_BOUND, ""))
        return Diagnosis(GPU_BOUND, None, text, None, (util, *extra), (), figures, shares, headline_detail=detail)
    then = "Profile a few steps to see what holds them up."
    text, figures, shares, detail = _with(f"{n} GPU(s) at {mean} SM utilisation on average {over}, "
                                          f"{_idle_runs(judged, q)}; {VERDICT_BY_ID[GPU_UNDERUSED].label.lower()} "
                                          f"only in part.", q, judged, then)
    util = _utilisation_finding(text, q, judged, over, (then,))
    return Diagnosis(UNDETERMINED, None, text, None, (util, *extra), (), figures, shares, headline_detail=detail)
