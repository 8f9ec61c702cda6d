"""Findings from the operator view (analyses/operators.py, analyses/frames.py): figures -> findings.

* On a CPU-only rank, what the host loop's own findings already name (its annotations, its optimizer)
  gets the specific advice there instead of a second finding with the same figure.
* A top-level annotation (a user's `record_function` range, `Optimizer.step`, a callback) that
  covers a large share of the steps (a CPU-only rank) or of the GPU idle time is
  named, with that share and the figures it comes from (`named_range`).
* A pattern of the catalogue (advice_patterns.py) seen in an operator or Python frame gets its own
  finding quoting the name that showed it (`pattern_<id>`); a cause finding whose host events show
  a pattern carries the pattern's fix first.
* A host-compute or unexplained-idle finding names the user Python frames running in that idle time
  or, without stacks, says that `with_stack=True` would name them.

None of these changes the verdict.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from .. import advice_patterns as AP
from .. import causes as C
from ..analyses import RankAnalysis
from ..analyses.figures import Steps
from ..analyses.operators import OperatorFigures, OpFigure, PatternHit
from . import savings as S
from .rules import Finding, RankDiagnosis, warmup_steps
from .thresholds import (
    FINDING_MIN_SHARE,
    FRAMES_NAMED,
    NAMED_MAX_FINDINGS,
    NAMED_MAX_SHARE,
    NAMED_MIN_IDLE_SHARE,
    NAMED_MIN_STEP_SHARE,
    NAMED_OWN_MIN_SHARE,
    PATTERN_MIN_SHARE,
    SEVERITY_HIGH_SHARE,
    SEVERITY_MEDIUM_SHARE,
)
from .wording import Quoted, duration, percent

NAMED_RANGE = "named_range"
PATTERN_PREFIX = "pattern_"
NAME_CHARS = 120  # a name quoted in a title (the evidence quotes it whole)
# The figures each quoted percentage is of (Finding.shares: numerator, denominator keys into `figures`).
_OP_SHARE = ("op_us", "basis_us")
_FRAME_SHARE = ("frame_us", "basis_us")
# Patterns a CPU-only rank's host-loop finding already measures as a whole (its optimizer part).
_HOST_LOOP_PART = {PATTERN_PREFIX + "optimizer_step": "cpu_optimizer"}


def add_operator_findings(rd: RankDiagnosis, ra: RankAnalysis) -> RankDiagnosis:
    """The rank's diagnosis with the operator view's findings added and its cause findings' advice and
    evidence made specific where the operators or frames show a pattern."""
    o = ra.operators
    if o is None:
        return rd
    on_gpu = bool(ra.devices)
    pytorch = ra.framework.lower() in ("pytorch", "torch")
    refined = tuple(_refine(f, ra, rd, pytorch) for f in rd.findings)
    named = _named(ra, o, on_gpu, rd) + ([] if on_gpu else _named_frames(ra, o))
    patterns = _patterns(ra, o, on_gpu, rd, {name for _, name in named})
    # on a CPU-only rank, a name the host loop's findings already quote (its annotations, its optimizer): the
    # specific advice goes to that finding, not to a second finding with the same figure
    mine = []
    for f, name in (*named, *patterns):
        at = None if on_gpu else next((i for i, g in enumerate(refined) if _quotes(g, name)
                                       or g.id == _HOST_LOOP_PART.get(f.id)), None)
        if at is None:
            mine.append(f)
        else:
            refined = (*refined[:at], _with_advice(refined[at], f), *refined[at + 1:])
    if not mine:
        return replace(rd, findings=refined)
    if on_gpu:
        return replace(rd, findings=(*refined, *mine))
    out = list(refined)  # the host loop's findings keep their order; each of these goes before the first smaller
    for f in mine:
        at = next((i for i, g in enumerate(out) if g.explains_ns < f.explains_ns), len(out))
        out.insert(at, f)
    return replace(rd, findings=tuple(out))


# --- what removing a named operator, annotation or frame would save --------------------------------------
SAVING_BASIS = ("basis: its time on the launching thread while the GPU had nothing queued (host-caused idle, "
                "per step); limits: assumes the host would launch the next work that much sooner and nothing "
                "else fills the freed time; time it overlaps with other named work is counted for each")


# A cause finding states what removing one of its host events would save when that event covers at least this
# share of the cause's idle time (the event behind it, not one that happened to run beside it).
SAVING_MIN_EVIDENCE_SHARE = 0.5


def name_saving(ra: RankAnalysis, rd: RankDiagnosis, name: str, critical_ns: int,
                per_step: tuple[int, ...]) -> S.Saving | None:
    """What removing `name` (an operator, annotation or Python frame) would save, as savings.py projects a
    cause's saving: from its time on the critical path per steady step; None when it has none."""
    if critical_ns <= 0 or not ra.devices or AP.PHASE_NAMES.search(name):  # a phase (forward) is no thing to remove
        return None
    st = ra.spans if ra.spans is not None and len(per_step) == len(ra.spans) else NO_STEPS
    x = np.asarray(per_step if st is not NO_STEPS else (), dtype=np.float64)
    warm = warmup_steps(st)
    steady = np.delete(x, warm) if len(x) else x
    # rare work (a checkpoint every N steps): counted on the mean step, as periodic stalls are
    rare = bool(len(steady)) and int((steady > 0).sum()) * 2 < len(steady)
    return S.saving_of(name, x, st, warm, critical_ns, rd.window_ns, len(ra.devices), mean=rare)


NO_STEPS = Steps(*(np.zeros(0, dtype=np.int64),) * 3)


def saving_line(name: str, s: S.Saving, q: Quoted, key: str) -> str:
    """"removing `name` would shorten the median step by ≈ X (Y%)", with its basis and limits."""
    pct = q.ns(s.saving_ns, f"{key}_saving_us", s.step_ns, f"{key}_step_us")
    what = (f"the synchronisation in {name} (it and the GPU idle it leaves until the next launch)"
            if C.SYNC_CALLS.search(name) else f"{name}'s time with the GPU idle")
    return f"removing {what} would shorten {S.basis_words(s)} by ≈ {duration(s.saving_ns)} ({pct}); {SAVING_BASIS}"


def _critical_of(ra: RankAnalysis, name: str) -> tuple[int, tuple[int, ...]] | None:
    """The critical-path time (in all, per step) of an operator, annotation or user frame by its name."""
    if ra.operators is not None:
        x = next((x for x in ra.operators.ops if x.name == name), None)
        if x is not None:
            return x.critical_ns, x.critical_per_step
    if ra.frames is not None:
        f = next((f for f in ra.frames.frames if f.frame == name), None)
        if f is not None:
            return f.critical_ns, f.critical_per_step
    return None


def _quotes(f: Finding, name: str) -> bool:
    return name in f.title or any(name in e for e in f.evidence)


def _with_advice(f: Finding, other: Finding) -> Finding:
    """`f` with the advice of `other` (about a name `f` quotes) first."""
    extra = [a for a in other.advice if a not in f.advice]
    return replace(f, advice=(*extra, *f.advice)) if extra else f


def _basis(o: OperatorFigures, on_gpu: bool, rd: RankDiagnosis) -> tuple[int, str] | None:
    """What shares are of: the GPU idle time (a rank with GPU work) or the summed step time (CPU-only)."""
    if on_gpu:
        if o.idle_ns <= 0 or rd.window_ns <= 0 or o.idle_ns < FINDING_MIN_SHARE * rd.window_ns:
            return None
        return o.idle_ns, "GPU idle time"
    if o.steps_ns <= 0:
        return None
    return o.steps_ns, "step time" if o.steps else "host time in the window"


def _short(name: str) -> str:
    """A name as a title quotes it: at most NAME_CHARS characters."""
    return name if len(name) <= NAME_CHARS else name[: NAME_CHARS - 1] + "…"


def _severity(share: float) -> str:
    return "high" if share >= SEVERITY_HIGH_SHARE else "medium" if share >= SEVERITY_MEDIUM_SHARE else "low"


def _part(x: OpFigure | PatternHit, on_gpu: bool) -> int:
    return x.idle_ns if on_gpu else x.steps_ns


def _calls(count: int, steps: int) -> str:
    per = f", {count / steps:.3g} per step" if steps else ""
    return f"{count} call{'s' if count != 1 else ''}{per}"


def _named(ra: RankAnalysis, o: OperatorFigures, on_gpu: bool, rd: RankDiagnosis) -> list[tuple[Finding, str]]:
    """The findings naming top-level ranges, each with the name it quotes."""
    basis = _basis(o, on_gpu, rd)
    if basis is None:
        return []
    total, what = basis
    least = NAMED_MIN_IDLE_SHARE if on_gpu else NAMED_MIN_STEP_SHARE
    found = [x for x in o.ops if x.top_level and x.kind == "annotation" and not _has_cause(x.name)
             and least <= _part(x, on_gpu) / total < NAMED_MAX_SHARE]
    found.sort(key=lambda x: (-_part(x, on_gpu), x.name))
    out = []
    for x in found[:NAMED_MAX_FINDINGS]:
        ns = _part(x, on_gpu)
        share = ns / total
        title = (f"{_short(x.name)} runs during {percent(share)} of the GPU idle time" if on_gpu
                 else f"{_short(x.name)} takes {percent(share)} of each step" if o.steps
                 else f"{_short(x.name)} takes {percent(share)} of the host time")
        evidence = [f"{x.name}: {duration(ns)} of the {duration(total)} of {what} ({percent(share)}); "
                    f"{_calls(x.count, o.steps)}, {duration(x.total_ns)} in all, {duration(x.self_ns)} of it "
                    f"outside the operators it calls"]
        p = AP.match(x.name)
        if p is not None:
            evidence.append(f"{x.name} is {p.label}")
        # its own code, or a phase around the model's operators (by its time, or by its name)
        own = x.self_ns >= NAMED_OWN_MIN_SHARE * x.total_ns and not AP.PHASE_NAMES.search(x.name)
        template = AP.NAMED_RANGE_ADVICE if own else AP.NAMED_PHASE_ADVICE
        advice = (p.advice,) if p is not None else tuple(a.format(name=x.name) for a in template)
        q = Quoted({"op_us": round(ns / 1000, 3), "basis_us": round(total / 1000, 3), "share": round(share, 6),
                    "calls": float(x.count)}, [_OP_SHARE, _OP_SHARE])
        save = name_saving(ra, rd, x.name, x.critical_ns, x.critical_per_step)
        if save is not None:
            evidence.append(saving_line(x.name, save, q, "op"))
        of_lost = ns / rd.lost_ns if on_gpu and rd.lost_ns else share
        out.append((Finding(NAMED_RANGE, None, title, _severity(share), ns, round(min(of_lost, 1.0), 6),
                           tuple(evidence), advice, round(ns / rd.window_ns, 6) if on_gpu and rd.window_ns else
                           round(share, 6), None, (), q.figures, tuple(q.shares)), x.name))
    return out


def _has_cause(name: str) -> bool:
    """A name a host-class cause recognises (communication, copies, syncs, ...): its cause's finding covers it."""
    return any(c.host_pattern is not None and c.host_pattern.search(name) for c in C.host_causes())


def _named_frames(ra: RankAnalysis, o: OperatorFigures) -> list[tuple[Finding, str]]:
    """A CPU-only rank: the user Python frames (innermost) that take a large share of the step time."""
    fr = ra.frames
    if fr is None or o.steps_ns <= 0:
        return []
    what = "step time" if o.steps else "host time in the window"
    out = []
    for x in fr.frames[:NAMED_MAX_FINDINGS]:
        share = x.host_ns / o.steps_ns
        if not NAMED_MIN_STEP_SHARE <= share < NAMED_MAX_SHARE:
            continue
        title = f"Python code {_short(x.frame)} takes {percent(share)} of {'each step' if o.steps else 'the host time'}"
        evidence = (f"{x.frame}: {duration(x.host_ns)} of the {duration(o.steps_ns)} of {what} ({percent(share)}) "
                    f"as the innermost user frame (its own lines, not the user functions it calls)",)
        p = AP.match(x.frame)
        advice = (p.advice,) if p is not None else (
            f"{x.frame} is your own code: run it every N steps instead of every step, move it to a background "
            "thread or process, or make it cheaper (vectorise it with tensor operations).",)
        figures = {"frame_us": round(x.host_ns / 1000, 3), "basis_us": round(o.steps_ns / 1000, 3),
                   "share": round(share, 6)}
        out.append((Finding(NAMED_RANGE, None, title, _severity(share), x.host_ns, round(share, 6), evidence, advice,
                            round(share, 6), None, (), figures, (_FRAME_SHARE, _FRAME_SHARE)), x.frame))
    return out


def _patterns(ra: RankAnalysis, o: OperatorFigures, on_gpu: bool, rd: RankDiagnosis,
              quoted: set[str]) -> list[tuple[Finding, str]]:
    basis = _basis(o, on_gpu, rd)
    if basis is None:
        return []
    total, what = basis
    hits: dict[str, PatternHit] = {h.pattern: h for h in o.patterns}
    frames = ra.frames.patterns if ra.frames is not None else ()
    for h in frames:  # a frame shows the pattern when no operator does (or with more time)
        if h.pattern not in hits or _part(h, on_gpu) > _part(hits[h.pattern], on_gpu):
            hits[h.pattern] = h
    out = []
    for p in AP.PATTERNS:
        hit = hits.get(p.id)
        if hit is None or hit.name in quoted:
            continue
        h = hit
        ns = _part(h, on_gpu)
        share = ns / total
        # every step: on a CPU-only rank nothing measures a read's cost (on a GPU rank its idle share does)
        every = p.every_step and not on_gpu and o.steps > 0 and h.count >= o.steps
        if share < PATTERN_MIN_SHARE and not every:
            continue
        evidence = [f"{h.name}: {_calls(h.count, o.steps)}; {duration(ns)} of the {duration(total)} of {what} "
                    f"({percent(share)})"]
        q = Quoted({"op_us": round(ns / 1000, 3), "basis_us": round(total / 1000, 3), "share": round(share, 6),
                    "calls": float(h.count)}, [_OP_SHARE])
        named_by = _critical_of(ra, h.name)
        save = name_saving(ra, rd, h.name, *named_by) if named_by is not None else None
        if save is not None:
            evidence.append(saving_line(h.name, save, q, "op"))
        of_lost = ns / rd.lost_ns if on_gpu and rd.lost_ns else share
        out.append((Finding(PATTERN_PREFIX + p.id, None, f"{p.label[0].upper()}{p.label[1:]}: {_short(h.name)}",
                           _severity(share), ns, round(min(of_lost, 1.0), 6), tuple(evidence), (p.advice,),
                           round(ns / rd.window_ns, 6) if on_gpu and rd.window_ns else round(share, 6), None, (),
                           q.figures, tuple(q.shares)), h.name))
    return out


def _refine(f: Finding, ra: RankAnalysis, rd: RankDiagnosis, pytorch: bool) -> Finding:
    """A cause finding with the catalogue's fix first when its host events show a pattern (in at least
    PATTERN_MIN_SHARE of its idle time), and the user
    frames behind host-compute / unknown idle time (or what would name them)."""
    advice = list(f.advice)
    evidence = list(f.evidence)
    figures = dict(f.figures)
    shares = list(f.shares)
    # a device-side wait: what the host did meanwhile delayed nothing, so its patterns' fixes would not help
    for e in f.host_ops if f.cause != C.DEPENDENCY else ():
        p = AP.match(e.name)
        if p is not None and e.share >= PATTERN_MIN_SHARE and p.advice not in advice:
            advice.insert(0, p.advice)
            evidence.append(f"{e.name} is {p.label}")
    # the host event behind most of this idle that the operator view measures: what removing it would save
    if f.cause not in (C.DEPENDENCY, C.STARTUP, C.DATALOADER, C.UNKNOWN, None) and ra.devices:
        for e in f.host_ops:
            # a blocking call covers little of the gap it leaves behind, but that gap is its cost
            if e.share < SAVING_MIN_EVIDENCE_SHARE and not (f.cause == C.SYNC and C.SYNC_CALLS.search(e.name)):
                continue
            found = _critical_of(ra, e.name)
            save = name_saving(ra, rd, e.name, *found) if found is not None else None
            if save is not None and save.share >= FINDING_MIN_SHARE:  # a saving worth a line beside its cause's
                q = Quoted(figures, shares)
                evidence.append(saving_line(e.name, save, q, "top_op"))
                break
    if f.cause in (C.HOST_COMPUTE, C.UNKNOWN) and ra.frames is not None and ra.devices:
        fr = ra.frames
        named = [x for x in fr.frames if x.idle_ns > 0][:FRAMES_NAMED]
        if named and fr.idle_ns > 0:
            evidence.append(f"user code running in the {duration(fr.idle_ns)} of host-compute and unexplained idle "
                            "time (innermost Python frames): " + "; ".join(
                                f"{x.frame} {duration(x.idle_ns)} ({percent(x.idle_ns / fr.idle_ns)})" for x in named))
            figures["frames_idle_us"] = round(fr.idle_ns / 1000, 3)
            for i, x in enumerate(named):
                figures[f"frame{i + 1}_idle_us"] = round(x.idle_ns / 1000, 3)
                shares.append((f"frame{i + 1}_idle_us", "frames_idle_us"))
            save = name_saving(ra, rd, named[0].frame, named[0].critical_ns, named[0].critical_per_step)
            if save is not None and save.saving_ns > 0:
                evidence.append(saving_line(named[0].frame, save, Quoted(figures, shares), "frame"))
        elif not fr.has_stacks and pytorch:
            evidence.append("no Python stacks in the trace: torch.profiler.profile(with_stack=True) would name the "
                            "code running in this idle time")
    if advice == list(f.advice) and evidence == list(f.evidence):
        return f
    return replace(f, advice=tuple(advice), evidence=tuple(evidence), figures=figures, shares=tuple(shares))
