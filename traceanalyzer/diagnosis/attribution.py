"""Gap attribution: every idle stretch of a device gets one cause, from what the launching host
threads were doing during it. Timeline + window -> frozen results; vectorized over gaps.

All idle time of the window is attributed (gaps of any length, `min_gap_ns = 0`), so the idle
time by cause adds up to window - GPU busy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from .. import intervals as iv
from .. import timeline as T
from ..analyses import figures as F
from ..timeline import Timeline
from . import host as H
from .thresholds import (
    EVIDENCE_NAMES,
    LAUNCH_GAP_MAX_NS,
    PERIODIC_MAX_STEP_SHARE,
    PERIODIC_MIN_EXCESS_NS,
    PERIODIC_MIN_OCCURRENCES,
    PERIODIC_MIN_STEPS,
    PERIODIC_STEP_FACTOR,
    SYNC_TOLERANCE_NS,
    TOP_GAPS,
)

_CAUSE_CODE = {c: i for i, c in enumerate(H.CAUSES)}
# Host classes that name a cause directly when they cover the largest part of a gap.
_DIRECT = {H.STARTUP: H.STARTUP, H.DATALOADER: H.DATALOADER, H.COMMUNICATION: H.COMMUNICATION,
           H.ALLOCATOR: H.ALLOCATOR, H.MEMCPY: H.MEMCPY, H.SYNC: H.SYNC}


@dataclass(frozen=True)
class Evidence:
    name: str
    share: float  # covered length of this name's events inside the gap(s) / their length
    time_ns: int = 0  # covered length of this name's events inside the gap(s)


@dataclass(frozen=True)
class AttributedGap:
    device: int
    start_ns: int  # absolute
    window_start_ns: int
    dur_ns: int
    step: int | None
    cause: str
    evidence: tuple[Evidence, ...]


@dataclass(frozen=True)
class DeviceAttribution:
    device: int
    window: F.Window
    idle_ns: int
    gap_count: int
    idle_by_cause: dict[str, int]
    exposed_memcpy_ns: int  # host<->device copies running while no kernel runs
    exposed_comm_ns: int  # communication kernels running while no other GPU work runs
    starts: np.ndarray  # every gap (min-gap 0), absolute ns
    ends: np.ndarray
    causes: np.ndarray  # index into host.CAUSES per gap


@dataclass(frozen=True)
class PeriodicSteps:
    steps: tuple[int, ...]  # step numbers of the recurring slow steps
    every: int  # their spacing in steps
    median_step_ns: int


def periodic_steps(st: F.Steps) -> PeriodicSteps | None:
    """Slow steps that recur every N steps (checkpoints, evaluation), or None."""
    if len(st) < PERIODIC_MIN_STEPS:
        return None
    dur = st.end_ns - st.start_ns
    median = float(np.median(dur))
    slow = (dur >= PERIODIC_STEP_FACTOR * median) & (dur - median >= PERIODIC_MIN_EXCESS_NS)
    numbers = np.sort(st.number[slow])
    if len(numbers) < PERIODIC_MIN_OCCURRENCES or len(numbers) > PERIODIC_MAX_STEP_SHARE * len(st):
        return None
    spacing = np.diff(numbers)
    if spacing.min() < 2 or spacing.max() - spacing.min() > 1:
        return None
    return PeriodicSteps(tuple(int(n) for n in numbers), int(np.median(spacing)), int(median))


def attribute_device(tl: Timeline, rank: int, device: int, window: F.Window, host: H.HostActivity,
                     st: F.Steps, periodic: PeriodicSteps | None, exposed_comm_ns: int,
                     idle: iv.IntervalSet | None = None) -> DeviceAttribution:
    """Causes for the device's idle set (`idle`, made once by the figures; computed when absent)."""
    starts, ends = idle if idle is not None else F.idle_intervals(tl, rank, device, window, min_gap_ns=0)
    dur = ends - starts
    causes = classify_gaps(starts, ends, host)
    if periodic is not None and len(starts):
        idx = iv.locate(starts, st.start_ns, st.end_ns)
        step_no = np.where(idx >= 0, st.number[np.clip(idx, 0, None)] if len(st) else -1, -1)
        stall = np.isin(step_no, periodic.steps) & (dur >= LAUNCH_GAP_MAX_NS)
        stall &= ~np.isin(causes, [_CAUSE_CODE[H.DATALOADER], _CAUSE_CODE[H.COMMUNICATION]])
        causes = np.where(stall, _CAUSE_CODE[H.CHECKPOINT], causes)
    by_cause = {c: int(dur[causes == i].sum()) for i, c in enumerate(H.CAUSES)}
    return DeviceAttribution(device, window, int(dur.sum()), len(dur), by_cause,
                             exposed_memcpy_ns(tl, rank, device, window), exposed_comm_ns,
                             starts, ends, causes)


def classify_gaps(starts: np.ndarray, ends: np.ndarray, host: H.HostActivity) -> np.ndarray:
    """One cause per gap (index into CAUSES); see the README's Diagnosis section for the rules."""
    n = len(starts)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    dur = (ends - starts).astype(np.float64)
    cover = np.stack([iv.overlap_per_window(host.exclusive[c], starts, ends) for c in H.HOST_CLASSES])
    none = dur - cover.sum(axis=0)
    table = np.vstack([cover, none[None, :]])
    best = np.argmax(table, axis=0)  # ties: the earlier (more specific) class
    labels = np.array(list(H.HOST_CLASSES) + ["none"], dtype=object)[best]
    blocked = iv.overlap_per_window(host.sync_calls, starts - SYNC_TOLERANCE_NS, starts) > 0
    short = (ends - starts) < LAUNCH_GAP_MAX_NS
    any_host = cover.sum(axis=0) > 0
    out = np.full(n, _CAUSE_CODE[H.UNKNOWN], dtype=np.int64)
    for klass, cause in _DIRECT.items():
        out[labels == klass] = _CAUSE_CODE[cause]
    rest = ~np.isin(labels, list(_DIRECT))
    out[rest & blocked] = _CAUSE_CODE[H.SYNC]
    rest &= ~blocked
    # Host still inside a copy call when the GPU ran dry (a pageable copy holds the host up).
    copying = iv.overlap_per_window(host.copy_calls, starts - SYNC_TOLERANCE_NS, starts) > 0
    out[rest & copying] = _CAUSE_CODE[H.MEMCPY]
    rest &= ~copying
    out[rest & short & any_host] = _CAUSE_CODE[H.LAUNCH]
    out[rest & ~short & (labels == "host")] = _CAUSE_CODE[H.HOST_COMPUTE]
    return out


def exposed_memcpy_ns(tl: Timeline, rank: int, device: int, window: F.Window) -> int:
    """Host<->device copy time (HtoD, DtoH or direction unknown) with no kernel running."""
    ev = tl.rank_events(rank)
    copies = ev[(ev["kind"] == T.MEMCPY).to_numpy() & (ev["device"].to_numpy() == device)
                & ev["copy_kind"].isin(("", "HtoD", "DtoH")).to_numpy()]
    ts = copies["ts_ns"].to_numpy()
    c = iv.clip(iv.union(ts, ts + copies["dur_ns"].to_numpy()), window.start_ns, window.end_ns)
    k = iv.clip(F.work_union(tl, rank, device, (T.KERNEL,)), window.start_ns, window.end_ns)
    return iv.total(iv.subtract(c, k))


def per_step_by_cause(devices: list[DeviceAttribution], st: F.Steps) -> list[dict[str, int]]:
    """Idle time by cause inside each step span, summed over the rank's devices."""
    out = [dict.fromkeys(H.CAUSES, 0) for _ in range(len(st))]
    if not len(st):
        return out
    for d in devices:
        for i, c in enumerate(H.CAUSES):
            m = d.causes == i
            if not m.any():
                continue
            got = iv.overlap_per_window((d.starts[m], d.ends[m]), st.start_ns, st.end_ns)
            for j, v in enumerate(got):
                out[j][c] += int(v)
    return out


def top_gaps(devices: list[DeviceAttribution], host: H.HostActivity, st: F.Steps,
             top_n: int = TOP_GAPS) -> tuple[AttributedGap, ...]:
    """The rank's longest gaps over all its devices, with the host events that explain them."""
    rows = [(int(e - s), d.device, int(s), int(e), int(c), d.window.start_ns)
            for d in devices
            for s, e, c in zip(*(a[np.argsort(-(d.ends - d.starts), kind="stable")[:top_n]]
                                 for a in (d.starts, d.ends, d.causes)))]
    rows.sort(key=lambda r: (-r[0], r[1], r[2]))
    out = []
    for length, device, s, e, c, w0 in rows[:top_n]:
        idx = iv.locate(np.array([s]), st.start_ns, st.end_ns)[0] if len(st) else -1
        out.append(AttributedGap(device, s, w0, length, int(st.number[idx]) if idx >= 0 else None,
                                 H.CAUSES[c], gap_evidence(host, s, e, H.CAUSES[c])))
    return tuple(out)


# Host classes whose events are evidence for a cause (others fall back to every class).
_EVIDENCE_CLASSES = {H.DATALOADER: (H.DATALOADER,), H.COMMUNICATION: (H.COMMUNICATION,),
                     H.MEMCPY: (H.MEMCPY,), H.SYNC: (H.SYNC,), H.STARTUP: (H.STARTUP,),
                     H.ALLOCATOR: (H.ALLOCATOR,)}


def gap_evidence(host: H.HostActivity, lo: int, hi: int, cause: str) -> tuple[Evidence, ...]:
    """The host events behind one gap: the most specific names, with their share of the gap.

    For a sync gap the blocking call running at the gap start is named even though it covers
    little of the gap. Names are ranked by share x specificity (the part of their time that lies
    inside the gap), so an enclosing frame that spans the whole step ranks below the op inside.
    """
    ev = host.events
    ts = ev["ts_ns"].to_numpy()
    end = ts + ev["dur_ns"].to_numpy()
    lo_q = lo - SYNC_TOLERANCE_NS if cause == H.SYNC else lo
    mask = (ts < hi) & (end > lo_q)
    classes = _EVIDENCE_CLASSES.get(cause)
    if classes is not None:
        mask &= T.category_mask(ev["klass"], classes)
    return _rank_names(ev[mask], lo, hi, sync=cause == H.SYNC)


def _rank_names(ev: pd.DataFrame, lo: int, hi: int, sync: bool = False) -> tuple[Evidence, ...]:
    if not len(ev) or hi <= lo:
        return ()
    ts = ev["ts_ns"].to_numpy()
    end = ts + ev["dur_ns"].to_numpy()
    inside = np.clip(np.minimum(end, hi) - np.maximum(ts, lo), 0, None)
    names, inside_ns, dur_ns = _sum_by_name(ev, inside, np.maximum(end - ts, 1))
    share = np.minimum(inside_ns / (hi - lo), 1.0)
    specificity = inside_ns / dur_ns
    score = share * specificity
    order = np.argsort(-score, kind="stable")[:EVIDENCE_NAMES]
    return tuple(Evidence(names[i], round(float(share[i]), 4), int(inside_ns[i])) for i in order
                 if share[i] > 0 or sync)


def _gap_positions(host: H.HostActivity, d: DeviceAttribution) -> tuple[np.ndarray, np.ndarray]:
    """For each of the host's events: the last gap of `d` (any cause) starting at or before its start
    and its end (-1: none). Two binary searches of a million events, made once per device and reused
    for every cause."""
    key = ("gap_positions", d.device)
    cached = host.cache.get(key)
    if cached is None or cached[0] is not d.starts:
        ts = host.events["ts_ns"].to_numpy()
        end = ts + host.events["dur_ns"].to_numpy()
        cached = host.cache[key] = (d.starts, np.searchsorted(d.starts, ts, side="right") - 1,
                                    np.searchsorted(d.starts, end, side="right") - 1)
    return cached[1], cached[2]


def _cause_cover(d: DeviceAttribution, of_cause: np.ndarray, t: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Length of the gaps flagged `of_cause` inside (-inf, t], given `at` (the last gap starting at or
    before t): the gaps are sorted and disjoint, so those before `at` lie wholly before t."""
    lengths = np.where(of_cause, d.ends - d.starts, 0)
    before = np.r_[np.int64(0), np.cumsum(lengths)]
    safe = np.clip(at, 0, None)
    partial = np.clip(t - d.starts[safe], 0, lengths[safe])
    return np.where(at >= 0, before[safe] + partial, 0)


def _sum_by_name(ev: pd.DataFrame, inside: np.ndarray, dur: np.ndarray) -> tuple[list[str], np.ndarray, np.ndarray]:
    """`inside` and `dur` summed per event name, names in order of first appearance: grouped by the
    name column's category codes (integers), never by the strings of a million rows."""
    codes = ev["name"].cat.codes.to_numpy()
    frame = pd.DataFrame({"code": codes, "inside": inside, "dur": dur})
    g = frame.groupby("code", sort=False).sum()
    categories = ev["name"].cat.categories
    names = [str(categories[c]) if c >= 0 else "nan" for c in g.index.to_numpy().tolist()]
    return names, g["inside"].to_numpy(), g["dur"].to_numpy()


def cause_evidence(host: H.HostActivity, devices: list[DeviceAttribution], cause: str) -> tuple[Evidence, ...]:
    """The host events behind all gaps of one cause; share = their time inside those gaps / that idle."""
    ev = host.events
    classes = _EVIDENCE_CLASSES.get(cause)
    rows = T.category_mask(ev["klass"], classes) if classes is not None else np.ones(len(ev), dtype=bool)
    ev = ev[rows]
    if not len(ev):
        return ()
    code = _CAUSE_CODE[cause]
    ts = ev["ts_ns"].to_numpy()
    end = ts + ev["dur_ns"].to_numpy()
    inside = np.zeros(len(ev), dtype=np.int64)
    total = 0
    for d in devices:
        m = d.causes == code
        if not m.any():
            continue
        total += int((d.ends[m] - d.starts[m]).sum())
        at_start, at_end = (p[rows] for p in _gap_positions(host, d))
        inside += _cause_cover(d, m, end, at_end) - _cause_cover(d, m, ts, at_start)
    if total <= 0:
        return ()
    names, inside_ns, dur_ns = _sum_by_name(ev, inside, np.maximum(end - ts, 1))
    share = np.minimum(inside_ns / total, 1.0)
    score = share * inside_ns / dur_ns
    order = np.argsort(-score, kind="stable")[:EVIDENCE_NAMES]
    return tuple(Evidence(names[i], round(float(share[i]), 4), int(inside_ns[i])) for i in order
                 if share[i] > 0)
