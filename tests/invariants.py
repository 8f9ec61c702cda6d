"""Invariants every analysis result must hold, whatever the trace (issue 43 item 9a).

Each check reads the saved JSON result (`ta.analyze(path).to_data()`, what `report -o x.json` writes) and
returns the violations it finds, each with the figures that break it; an empty list is a pass. They are
rules a verdict must follow on traces nobody tuned for, so `tests/test_invariants.py` runs them on every
trace the tests have (samples, corpus, fetched):

- `material_cost`: a verdict naming a cause has that cause's lost time >= MATERIAL_MIN_SHARE of the window (or
  its saving of the median step; start-up: of the capture);
- `saturated_gpu_bound`: a GPU busy >= SATURATED_BUSY_SHARE of its window is gpu_bound;
- `within_window`: no duration beyond its window, no share outside [0, 1] (percent outside [0, 100]);
- `steps_top_level`: steps detected from repeating work are not nested inside one host call;
- `leak_needs_steps`: no memory-leak finding without LEAK_MIN_STEPS real steps;
- `headline_in_findings`: the headline's number is found again in a finding.

`steps_top_level` also needs the rank's host events (the Timeline the result was made from); the other checks
read the result alone.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeGuard

import numpy as np
import pandas as pd

from traceanalyzer import causes as C
from traceanalyzer import timeline as T
from traceanalyzer.diagnosis import thresholds as TH

# The share of the window a cause must lose before a verdict may name it (issue 43 item 1, "materiality").
MATERIAL_MIN_SHARE: float = TH.MATERIAL_MIN_SHARE
# A GPU doing useful work (its window less the time lost) this share of its window or more is gpu_bound.
SATURATED_BUSY_SHARE: float = TH.SATURATED_BUSY_SHARE
# A leak needs growth across at least this many real steps (issue 43 item 2).
LEAK_MIN_STEPS = 5
# Durations are written rounded to 0.001 us; two rounded figures compared may differ by this much.
TOL_US = 0.002
# A sum of many rounded figures (causes adding up to the idle time) is compared within this share.
SUM_REL = 1e-4
# Findings of a memory leak (diagnosis/memory.py `LEAK`).
LEAK_FINDINGS = ("memory_leak",)
# The finding giving the verdict of the capture after its start-up (diagnosis/rules.py `STEADY_STATE`).
STEADY_STATE = "steady_state"
# Verdicts of the host loop (no GPU work to judge): their cost is the host step time, not GPU time.
HOST_VERDICT_PART = {C.CPU_INPUT_BOUND: "data_wait_us"}
# Host events that are calls (a framework op, a user range, a DataLoader wait, a runtime call, a module's
# forward): two detected steps starting inside one of them are steps nested inside one call. Python frames
# other than a module's forward are left out: a training loop's own function spans all its iterations.
CALL_KINDS = (T.CPU_OP, T.ANNOTATION, T.DATALOADER, T.RUNTIME, T.OTHER)
MODULE_FRAME = re.compile(r"^nn\.Module: ")
PERCENT = re.compile(r"(?<![\w.+-])(-?\d+(?:\.\d+)?)%")


@dataclass(frozen=True)
class Violation:
    """One break of an invariant: which, where in the result, and the figures that break it."""

    invariant: str
    where: str
    figures: str

    def __str__(self) -> str:
        return f"{self.invariant} at {self.where}: {self.figures}"


# --- helpers ------------------------------------------------------------------------------------------------
def _diagnoses(data: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any], dict[str, Any] | None]]:
    """(where, diagnosis, the rank's figures) for every rank's diagnosis and the job's (with its speaking rank's
    figures: the job's verdict is that rank's)."""
    ranks = data.get("ranks") or []
    for i, r in enumerate(ranks):
        if r.get("diagnosis"):
            yield f"ranks[{i}].diagnosis", r["diagnosis"], r
    job = data.get("diagnosis")
    if job:
        k = job.get("rank")
        rank = ranks[k] if isinstance(k, int) and 0 <= k < len(ranks) else None
        said = (rank or {}).get("diagnosis") or {}
        if (job.get("primary"), job.get("headline")) != (said.get("primary"), said.get("headline")):
            yield "diagnosis", job, rank  # the job's own words (a rank's verdict said again is checked once)


def _cause_of(verdict: str) -> str | None:
    """The cause a verdict names (None for gpu_bound, undetermined, the host loop's and the logs' verdicts)."""
    if verdict in (C.GPU_BOUND, C.UNDETERMINED, C.GPU_UNDERUSED, C.CPU_INPUT_BOUND, C.CPU_COMPUTE_BOUND):
        return None
    return C.VERDICT_BY_ID[verdict].cause if verdict in C.VERDICT_BY_ID else None


def lost_by_cause_us(diag: dict[str, Any], cause: str) -> float:
    """GPU time a cause lost on a rank: its idle time, plus exposed copies (memcpy) and exposed communication;
    start-up: every one-off start-up cost (`startup_us`, with the part before the window)."""
    if cause == C.STARTUP:
        return float(diag.get("startup_us") or 0.0)
    lost = float((diag.get("idle_by_cause_us") or {}).get(cause, 0.0))
    if cause == C.MEMCPY:
        lost += float(diag.get("exposed_memcpy_us") or 0.0)
    if cause == C.COMMUNICATION:
        lost += float(diag.get("exposed_communication_us") or 0.0)
    return lost


def _pct(x: float) -> str:
    return f"{100 * x:.2f}%"


# --- 1. no verdict without a material cost -----------------------------------------------------------------
def _capture_us(diag: dict[str, Any]) -> float:
    """What start-up is weighed against: the capture from its first event (the headline's `capture_us` when the
    result carries it), else the window."""
    return float((diag.get("headline_figures") or {}).get("capture_us") or diag.get("window_us") or 0.0)


def _step_share(diag: dict[str, Any], cause: str) -> float | None:
    """The cause's projected saving as a share of the median step (its finding's saving_us / step_us), if given."""
    for f in diag.get("findings") or []:
        fig = f.get("figures") or {}
        if f.get("cause") == cause and _number(fig.get("saving_us")) and _number(fig.get("step_us")) and fig["step_us"]:
            return float(fig["saving_us"]) / float(fig["step_us"])
    return None


def _claims(diag: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any] | None]]:
    """(verdict, what says it, the figures it speaks of) for a diagnosis: its primary (None: the rank's), and the
    verdict of the capture after start-up that a `steady_state` finding gives ("After start-up: <label>"), with
    that finding's figures: the rest of the capture is judged on its own window."""
    yield str(diag.get("primary")), "primary", None
    labels = {v.label: v.id for v in C.VERDICT_LIST}
    for i, f in enumerate(diag.get("findings") or []):
        title = str(f.get("title") or "")
        if f.get("id") == STEADY_STATE and title.startswith("After start-up: ") and title[16:] in labels:
            yield labels[title[16:]], f"findings[{i}] (steady_state)", f.get("figures") or {}


def _gpu_bound_busy(figures: dict[str, Any]) -> float | None:
    """A rank's GPU busy share of its window once start-up idle is set apart (None with warm-up steps, whose
    time the result does not split)."""
    if figures.get("warmup_steps"):
        return None
    window, idle = float(figures.get("window_us") or 0.0), float(figures.get("idle_us") or 0.0)
    after = window - float((figures.get("idle_by_cause_us") or {}).get(C.STARTUP, 0.0))
    return (window - idle) / after if after > 0 else None


def material_cost(data: dict[str, Any]) -> list[Violation]:
    """A verdict naming a cause (the primary, or the steady-state verdict after start-up): that cause lost at
    least MATERIAL_MIN_SHARE of the window, or its removal would shorten the median step by that share (its
    finding's saving); start-up: of the capture (the window and the start-up before it); the host loop's
    input-bound verdict: of its step time. gpu_bound names the GPU's own work: the GPU is busy at least
    HEALTHY_BUSY_SHARE of the window once start-up idle is set apart."""
    out = []
    for where, diag, rank in _diagnoses(data):
        figures = rank["diagnosis"] if rank and rank.get("diagnosis") else diag
        for verdict, said, own in _claims(diag):
            at = f"{where} {said}"
            if own is not None:  # the rest after start-up: its own window and losses
                window = float(own.get("window_us") or 0.0)
                if verdict == C.GPU_BOUND:
                    busy = float(own.get("gpu_busy_us") or 0.0) / window if window else 0.0
                    if busy < TH.HEALTHY_BUSY_SHARE:
                        out.append(Violation("material_cost", at, f"gpu_bound after start-up with the GPU busy "
                                             f"{_pct(busy)} of the rest's {window:.1f} us window"))
                    continue
                cause = _cause_of(verdict)
                lost = float(own.get(f"{cause}_lost_us") or 0.0) if cause else 0.0
                if cause is not None and (window <= 0 or lost < MATERIAL_MIN_SHARE * window):
                    out.append(Violation("material_cost", at, f"{verdict} after start-up: {cause} lost {lost:.1f} us "
                                         f"of the rest's {window:.1f} us window"))
                continue
            if verdict in HOST_VERDICT_PART:
                shares = figures.get("host_shares") or {}
                part = float(shares.get(HOST_VERDICT_PART[verdict]) or 0.0)
                total = float(shares.get("total_us") or 0.0)
                if total <= 0 or part < MATERIAL_MIN_SHARE * total:
                    out.append(Violation("material_cost", at, f"{verdict}: {part:.1f} us of {total:.1f} us of step "
                                         f"time ({_pct(part / total) if total else 'n/a'} < {_pct(MATERIAL_MIN_SHARE)})"))
                continue
            if verdict == C.GPU_BOUND:
                busy = _gpu_bound_busy(figures) if rank and rank.get("devices") else None
                if busy is not None and busy < TH.HEALTHY_BUSY_SHARE:
                    out.append(Violation("material_cost", at, f"gpu_bound with the GPU busy {_pct(busy)} of the window "
                                         f"after start-up idle (< {_pct(TH.HEALTHY_BUSY_SHARE)}): window "
                                         f"{figures.get('window_us')} us, idle {figures.get('idle_us')} us, start-up "
                                         f"idle {(figures.get('idle_by_cause_us') or {}).get(C.STARTUP, 0.0)} us"))
                continue
            cause = _cause_of(verdict)
            if cause is None:
                continue
            lost = lost_by_cause_us(figures, cause)
            span, of = ((_capture_us(figures), "capture") if cause == C.STARTUP
                        else (float(figures.get("window_us") or 0.0), "window"))
            step = None if cause == C.STARTUP else _step_share(figures, cause)
            if (span <= 0 or lost < MATERIAL_MIN_SHARE * span) and not (step is not None and step >= MATERIAL_MIN_SHARE):
                out.append(Violation("material_cost", at, f"{verdict}: {cause} lost {lost:.1f} us of a {span:.1f} us "
                                     f"{of} ({_pct(lost / span) if span else 'n/a'} < {_pct(MATERIAL_MIN_SHARE)})"
                                     + (f", saving {_pct(step)} of the median step" if step is not None else "")
                                     + f"; GPU time lost in all {float(figures.get('lost_us') or 0):.1f} us"))
    return out


def saturated_gpu_bound(data: dict[str, Any]) -> list[Violation]:
    """A rank whose GPUs do useful work (window less idle, exposed copies and exposed communication) at least
    SATURATED_BUSY_SHARE of their window is gpu_bound, whatever the split of the rest; start-up may lead only
    when it is itself material (of the capture)."""
    out = []
    for where, diag, rank in _diagnoses(data):
        figures = rank["diagnosis"] if rank and rank.get("diagnosis") else diag
        if not rank or not rank.get("devices"):
            continue
        window, lost = float(figures.get("window_us") or 0.0), float(figures.get("lost_us") or 0.0)
        if window <= 0:
            continue
        busy = (window - lost) / window
        primary = diag.get("primary")
        startup = lost_by_cause_us(figures, C.STARTUP)
        startup_material = startup >= MATERIAL_MIN_SHARE * _capture_us(figures)
        if busy >= SATURATED_BUSY_SHARE and primary != C.GPU_BOUND and not (
                primary == C.STARTUP_DOMINATED and startup_material):
            out.append(Violation("saturated_gpu_bound", where,
                                 f"{primary} with the GPU busy {_pct(busy)} of its window ({window - lost:.1f} us of "
                                 f"{window:.1f} us; lost {lost:.1f} us, start-up {startup:.1f} us)"))
    return out


# --- 2. no duration beyond its window, no share out of range ------------------------------------------------
def _leaves(x: Any, path: str = "") -> Iterator[tuple[str, str, Any]]:
    """(path, key, value) of every leaf of the result, `definitions` and drawings left out."""
    if isinstance(x, dict):
        for k, v in x.items():
            if k in ("definitions", "drawing"):
                continue
            p = f"{path}.{k}" if path else k
            if isinstance(v, (dict, list)):
                yield from _leaves(v, p)
            else:
                yield p, k, v
    elif isinstance(x, list):
        for i, v in enumerate(x):
            p = f"{path}[{i}]"
            if isinstance(v, (dict, list)):
                yield from _leaves(v, p)
            else:
                yield p, path.rsplit(".", 1)[-1], v


# keys holding a share in [0, 1], and in percent [0, 100] (other `_pct` keys are differences or margins)
_SHARE_KEY = re.compile(r"(^|_)(share|fraction)(_|$)")
_PCT_KEY = re.compile(r"_pct$")
_SIGNED_PCT = ("difference_pct", "margin_pct")
# `_us` keys that are positions or offsets, not durations (may be negative)
_SIGNED_US = re.compile(r"(^|_)(offset|shift|lateness|residual)(_|$)|^start_us$|lateness")


def _number(v: Any) -> TypeGuard[int | float]:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _ranges(data: dict[str, Any]) -> list[Violation]:
    """Every share in [0, 1], every percent in [0, 100], every duration >= 0, every figure finite."""
    out = []
    for path, key, v in _leaves(data):
        if not _number(v):
            continue
        if not math.isfinite(v):
            out.append(Violation("within_window", path, f"{v} is not a finite number"))
        elif _SHARE_KEY.search(key) and not -1e-9 <= v <= 1 + 1e-6:
            out.append(Violation("within_window", path, f"share {v} outside [0, 1]"))
        elif _PCT_KEY.search(key) and key not in _SIGNED_PCT and not 0 <= v <= 100 + 1e-6:
            out.append(Violation("within_window", path, f"percent {v} outside [0, 100]"))
        elif key.endswith("_us") and not _SIGNED_US.search(key) and v < -TOL_US:
            out.append(Violation("within_window", path, f"duration {v} us < 0"))
    return out


def _texts(data: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(path, text) of the verdicts' prose: headlines, reasons, details, findings' titles and evidence."""
    for where, diag, _ in _diagnoses(data):
        for k in ("headline", "reason", "headline_detail", "verdict_note"):
            if isinstance(diag.get(k), str):
                yield f"{where}.{k}", diag[k]
        for i, f in enumerate(diag.get("findings") or []):
            yield f"{where}.findings[{i}].title", f.get("title") or ""
            for j, e in enumerate(f.get("evidence") or []):
                yield f"{where}.findings[{i}].evidence[{j}]", e


def _not_above(out: list[Violation], where: str, what: str, x: Any, limit: Any, of: str, summed: bool = False) -> None:
    """`x` at most `limit` (rounded figures: within TOL_US; `summed`, a sum of many: within SUM_REL of it too)."""
    if _number(x) and _number(limit) and x > limit + max(TOL_US, SUM_REL * limit if summed else 0.0):
        out.append(Violation("within_window", where, f"{what} {x} us > {of} {limit} us"))


def _written_shares(data: dict[str, Any]) -> list[Violation]:
    """Every share a verdict writes (a headline's or a finding's (numerator, denominator) figures) in [0, 1]."""
    out = []
    for where, diag, _ in _diagnoses(data):
        said = [(f"{where}.headline_shares", diag.get("headline_figures") or {}, diag.get("headline_shares") or [])]
        said += [(f"{where}.findings[{i}].shares ({f.get('id')})", f.get("figures") or {}, f.get("shares") or [])
                 for i, f in enumerate(diag.get("findings") or [])]
        for at, figures, pairs in said:
            for (num, den), x in zip(pairs, _shares(figures, pairs)):
                if not -1e-9 <= x <= 1 + 1e-6:
                    out.append(Violation("within_window", at, f"{num}={figures.get(num)} of {den or '1'}="
                                         f"{figures.get(den, '')}: share {_pct(x)} outside [0, 100%]"))
    return out


def within_window(data: dict[str, Any]) -> list[Violation]:
    """No duration beyond its window: a step's figures within the step, the steps within the rank's window, a
    device's busy time, copies, communication and gaps within its window, idle and lost time (all and per cause)
    within the window, causes adding up to the idle time, the host loop's parts within its step time, operators'
    time within the steps; and every share, percent and duration in range (`_ranges`), the shares the verdicts
    write (`_written_shares`) and the percentages in their prose included (a share of something is at most 100%)."""
    out = _ranges(data) + _written_shares(data)
    for path, text in _texts(data):
        for m in PERCENT.finditer(text):
            if not 0 <= float(m.group(1)) <= 100:
                out.append(Violation("within_window", path, f"{m.group(0)} written in {text[:160]!r}"))
    for i, r in enumerate(data.get("ranks") or []):
        at = f"ranks[{i}]"
        window = r.get("window_us")
        for j, s in enumerate(r.get("per_step") or []):
            w = f"{at}.per_step[{j}]"
            dur = s["duration_us"]
            for k in ("gpu_busy_us", "memcpy_us", "dataloader_wait_us", "idle_us", "comm_us", "exposed_comm_us"):
                _not_above(out, w, k, s.get(k), dur, "step duration_us")
            _not_above(out, w, "exposed_comm_us", s.get("exposed_comm_us"), s.get("comm_us"), "comm_us")
            if _number(window):
                if s["start_us"] < -TOL_US:
                    out.append(Violation("within_window", w, f"step {s['step']} starts {s['start_us']} us before its "
                                         f"rank's window ({r.get('window_basis')})"))
                _not_above(out, w, "step end", round(s["start_us"] + dur, 3), window, "rank window_us")
        _not_above(out, at, "dataloader_wait_us", r.get("dataloader_wait_us"), window, "rank window_us")
        for j, d in enumerate(r.get("devices") or []):
            w, dw = f"{at}.devices[{j}]", d.get("window_us")
            for k in ("gpu_busy_us", "memcpy_us", "communication_us", "exposed_communication_us"):
                _not_above(out, w, k, d.get(k), dw, "device window_us")
            _not_above(out, w, "exposed_communication_us", d.get("exposed_communication_us"), d.get("communication_us"),
                       "communication_us")
            gaps = d.get("gaps") or {}
            _not_above(out, w, "gaps.total_us", gaps.get("total_us"), dw, "device window_us")
            _not_above(out, w, "gaps.largest_us", gaps.get("largest_us"), gaps.get("total_us"), "gaps.total_us")
            table = d.get("gap_table") or {}
            for g, (s0, du) in enumerate(zip(table.get("start_us") or [], table.get("duration_us") or [])):
                if s0 < -TOL_US:
                    out.append(Violation("within_window", f"{w}.gap_table[{g}]", f"gap starts at {s0} us < 0"))
                _not_above(out, f"{w}.gap_table[{g}]", "gap end", round(s0 + du, 3), dw, "device window_us")
        ops = r.get("operators") or {}
        for j, o in enumerate(ops.get("ops") or []):
            w = f"{at}.operators.ops[{j}] ({o.get('name')!s:.60})"
            _not_above(out, w, "in_steps_us", o.get("in_steps_us"), ops.get("steps_us"), "operators.steps_us")
            _not_above(out, w, "idle_us", o.get("idle_us"), ops.get("idle_us"), "operators.idle_us")
        for j, fr in enumerate(ops.get("frames") or []):
            _not_above(out, f"{at}.operators.frames[{j}]", "idle_us", fr.get("idle_us"), ops.get("frames_idle_us"),
                       "operators.frames_idle_us")
        dg = r.get("diagnosis")
        if dg:
            out += _diagnosis_within(dg, f"{at}.diagnosis", r)
    return out


def _diagnosis_within(dg: dict[str, Any], at: str, rank: dict[str, Any]) -> list[Violation]:
    out: list[Violation] = []
    window, idle = dg.get("window_us"), float(dg.get("idle_us") or 0.0)
    _not_above(out, at, "idle_us", idle, window, "window_us")
    _not_above(out, at, "lost_us", dg.get("lost_us"), window, "window_us")
    _not_above(out, at, "idle_us", idle, dg.get("lost_us"), "lost_us")
    by_cause = dg.get("idle_by_cause_us") or {}
    for cause in by_cause:
        _not_above(out, at, f"idle_by_cause_us.{cause}", by_cause[cause], idle, "idle_us")
        if cause != C.STARTUP:  # start-up's part before the window is outside it by definition
            _not_above(out, at, f"lost by {cause}", lost_by_cause_us(dg, cause), window, "window_us")
    if by_cause and abs(sum(by_cause.values()) - idle) > max(TOL_US * len(by_cause), SUM_REL * idle):
        out.append(Violation("within_window", at, f"idle by cause sums to {sum(by_cause.values()):.3f} us, idle_us "
                             f"{idle} us"))
    for k in ("exposed_memcpy_us", "exposed_communication_us"):
        _not_above(out, at, k, dg.get(k), window, "window_us")
    # a finding explains GPU time within the GPUs' window; on a rank without GPUs, host time within the rank's
    limit, of = (window, "window_us") if rank.get("devices") else (rank.get("window_us"), "the rank's window_us")
    for j, f in enumerate(dg.get("findings") or []):
        _not_above(out, f"{at}.findings[{j}] ({f.get('id')})", "explains_us", f.get("explains_us"), limit, of)

    for j, d in enumerate(dg.get("devices") or []):
        w = f"{at}.devices[{j}]"
        _not_above(out, w, "idle_us", d.get("idle_us"), d.get("window_us"), "window_us")
        for cause, v in (d.get("idle_by_cause_us") or {}).items():
            _not_above(out, w, f"idle_by_cause_us.{cause}", v, d.get("idle_us"), "idle_us")
    n_dev = max(len(rank.get("devices") or []), 1)
    steps = {s["step"]: s["duration_us"] for s in rank.get("per_step") or []}
    for j, p in enumerate(dg.get("per_step") or []):
        if p.get("step") in steps:
            _not_above(out, f"{at}.per_step[{j}]", f"step {p['step']} idle by cause (all GPUs)",
                       round(sum((p.get("idle_by_cause_us") or {}).values()), 3), steps[p["step"]] * n_dev,
                       f"{n_dev} x step duration", summed=True)
    hs = dg.get("host_shares")
    if hs:
        parts = ("data_wait_us", "optimizer_us", "annotations_us", "model_ops_us", "other_us")
        total = hs.get("total_us")
        for k in parts:
            _not_above(out, f"{at}.host_shares", k, hs.get(k), total, "total_us")
        if _number(total) and abs(sum(hs.get(k) or 0.0 for k in parts) - total) > max(5 * TOL_US, SUM_REL * total):
            out.append(Violation("within_window", f"{at}.host_shares",
                                 f"parts sum to {sum(hs.get(k) or 0.0 for k in parts):.3f} us, total_us {total} us"))
        per = {s["step"]: s["duration_us"] for s in rank.get("per_step") or []}
        for j, s in enumerate(hs.get("per_step") or []):
            if s.get("step") in per:
                _not_above(out, f"{at}.host_shares.per_step[{j}]", f"step {s['step']} parts",
                           round(sum(s.get(k) or 0.0 for k in parts), 3), per[s["step"]], "step duration_us", summed=True)
    return out


# --- 3. no steps inside one top-level call -------------------------------------------------------------------
def steps_top_level(data: dict[str, Any], rank_events: Callable[[int], pd.DataFrame] | None = None) -> list[Violation]:
    """Steps detected from repeating work (step_source `detected`) are not nested inside one host call: no
    framework op, user range, DataLoader wait, runtime call or module forward (`nn.Module: ...` frame) holds
    two or more step starts strictly inside it (a whole step inside one call: the layers of one forward).
    `rank_events(i)`: the host events of result rank i (Timeline columns, times in ns on the rank's clock);
    ranks with detected steps need it."""
    out = []
    for i, r in enumerate(data.get("ranks") or []):
        src = r.get("step_source") or {}
        steps = r.get("per_step") or []
        if src.get("kind") != "detected" or len(steps) < 2:
            continue
        if rank_events is None:
            raise ValueError("steps_top_level needs the rank's host events for detected steps")
        ev = rank_events(i)
        calls = ev[ev["kind"].isin(CALL_KINDS)
                   | ((ev["kind"] == T.PYTHON) & ev["name"].astype(str).str.match(MODULE_FRAME.pattern))]
        origin = int(r["window_start_ns"])
        starts = np.array([origin + round(s["start_us"] * 1000) for s in steps], dtype=np.int64)
        cs = calls["ts_ns"].to_numpy(np.int64)
        ce = cs + calls["dur_ns"].to_numpy(np.int64)
        lo = np.searchsorted(starts, cs, side="right")  # first step start > call start
        hi = np.searchsorted(starts, ce, side="left")  # first step start >= call end
        held = hi - lo
        if (held >= 2).any():
            k = int(np.argmax(np.where(held >= 2, ce - cs, -1)))
            row = calls.iloc[k]
            out.append(Violation("steps_top_level", f"ranks[{i}]",
                                 f"{int((held >= 2).sum())} host calls hold 2+ of the {len(steps)} detected steps "
                                 f"({src.get('basis')}); the longest, {row['kind']} {str(row['name'])[:80]!r} "
                                 f"({row['dur_ns'] / 1e3:.1f} us), holds {int(held[k])}"))
    return out


# --- 4. no leak without >= 5 steps ---------------------------------------------------------------------------
def leak_needs_steps(data: dict[str, Any]) -> list[Violation]:
    """A memory-leak finding only on a rank with at least LEAK_MIN_STEPS steps, from markers or a detected loop
    (never the whole window as one step)."""
    out = []
    for where, diag, rank in _diagnoses(data):
        for f in diag.get("findings") or []:
            if f.get("id") not in LEAK_FINDINGS:
                continue
            n = int(rank.get("steps") or 0) if rank else 0
            kind = ((rank or {}).get("step_source") or {}).get("kind")
            if n < LEAK_MIN_STEPS or kind not in ("markers", "detected"):
                out.append(Violation("leak_needs_steps", where, f"{f.get('title')!r} with {n} steps (step source "
                                     f"{kind}; at least {LEAK_MIN_STEPS} real steps needed)"))
    return out


# --- 5. every headline's number is found again in a finding --------------------------------------------------
def _same(a: float, b: float) -> bool:
    return abs(a - b) <= max(TOL_US, 1e-6 * abs(b))


def _shares(figures: dict[str, Any], pairs: list[Any]) -> list[float]:
    """The fractions a list of (numerator, denominator) keys into `figures` stands for (denominator "": the
    numerator is the fraction; "%": a figure in percent)."""
    out = []
    for num, den in pairs:
        n, d = figures.get(num), figures.get(den)
        if not _number(n):
            continue
        if den == "":
            out.append(float(n))
        elif den == "%":
            out.append(float(n) / 100)
        elif _number(d) and d:
            out.append(float(n) / float(d))
    return out


def headline_in_findings(data: dict[str, Any]) -> list[Violation]:
    """The headline's own numbers are in its findings: each figure of the headline (`headline_figures`) is a
    figure (or the explained time) of some finding, and each share the headline writes (`headline_shares`, a
    fraction of two of its figures) is a share some finding writes (`shares` of its figures), to 1e-6."""
    out = []
    for where, diag, _ in _diagnoses(data):
        findings = diag.get("findings") or []
        head = diag.get("headline_figures") or {}
        if not findings:
            if head:
                out.append(Violation("headline_in_findings", where, f"headline {diag.get('headline')!r} with no "
                                     f"finding"))
            continue
        values = [float(v) for f in findings for v in (f.get("figures") or {}).values() if _number(v)]
        values += [float(f["explains_us"]) for f in findings if _number(f.get("explains_us"))]
        for key, v in head.items():
            if _number(v) and not any(_same(float(v), x) for x in values):
                out.append(Violation("headline_in_findings", where, f"headline figure {key}={v} is in no finding's "
                                     f"figures (headline {diag.get('headline')!r})"))
        written = [x for f in findings for x in _shares(f.get("figures") or {}, f.get("shares") or [])]
        for (num, den), x in zip(diag.get("headline_shares") or [], _shares(head, diag.get("headline_shares") or [])):
            if not any(abs(x - y) <= 1e-6 for y in written):
                out.append(Violation("headline_in_findings", where, f"the headline's share {num}/{den or '1'} = "
                                     f"{_pct(x)} is no finding's share (headline {diag.get('headline')!r})"))
    return out


# The checks by name, in the order the issue lists them.
RESULT_CHECKS: dict[str, Callable[[dict[str, Any]], list[Violation]]] = {
    "material_cost": material_cost,
    "saturated_gpu_bound": saturated_gpu_bound,
    "within_window": within_window,
    "leak_needs_steps": leak_needs_steps,
    "headline_in_findings": headline_in_findings,
}
CHECKS = ("material_cost", "saturated_gpu_bound", "within_window", "steps_top_level", "leak_needs_steps",
          "headline_in_findings")


def needs_events(data: dict[str, Any]) -> bool:
    """Whether `steps_top_level` needs the ranks' events (some rank has detected steps)."""
    return any((r.get("step_source") or {}).get("kind") == "detected" for r in data.get("ranks") or [])


def check(name: str, data: dict[str, Any], rank_events: Callable[[int], pd.DataFrame] | None = None
          ) -> list[Violation]:
    """The violations of invariant `name` in a result."""
    if name == "steps_top_level":
        return steps_top_level(data, rank_events)
    return RESULT_CHECKS[name](data)
