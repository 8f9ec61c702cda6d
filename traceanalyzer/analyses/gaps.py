"""Gap attribution: every idle stretch of a device gets one cause when the gap set is made, from what
the launching host threads were doing during it (analyses/host.py). Timeline -> frozen figures;
vectorized over gaps.

All idle time of the window is attributed (gaps of any length, `min_gap_ns = 0`), so the idle
time by cause adds up to window - GPU busy. Causal first: a gap whose ending GPU work (the work that
starts when it ends) was already queued when it began (its launch call, found by correlation id, had
returned) is device-side (`device_dependency`): the host delayed nothing, so no host cause gets it;
so is every gap inside a CUDA graph replay (the graph's nodes are queued together). The other gaps are
the host's: a gap mostly covered by the events of a host class whose cause is `direct` (causes.py)
gets that cause; otherwise: blocked in a synchronising call at its start -> sync, inside a copy call
-> memcpy, short with host activity -> launch, the rest of the host's work -> host_compute, nothing
traced -> unknown; slow steps that recur -> checkpoint. Idle before a device's first GPU work that
allocator calls fill (the first cudaFree/cudaMalloc creates the context) is start-up; start-up and
allocator calls before the window starts (`RankCauses.startup_before_ns`) are counted apart.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from .. import causes as C
from .. import intervals as iv
from .. import timeline as T
from ..names import name_flags
from ..timeline import Timeline
from . import figures as F
from . import host as H
from ._beside import beside
from .graphs import replay_spans
from .operators import Critical
from .serving import FrontendFacts, KernelMix, ServingPhases, frontend_facts, rank_kernel_mix, serving_phases
from .thresholds import (
    EVIDENCE_NAMES,
    LAUNCH_GAP_MAX_NS,
    PERIODIC_MAX_STEP_SHARE,
    PERIODIC_MIN_EXCESS_NS,
    PERIODIC_MIN_OCCURRENCES,
    PERIODIC_MIN_STEPS,
    PERIODIC_STEP_FACTOR,
    QUEUED_WAIT_MIN_NS,
    SYNC_TOLERANCE_NS,
    TOP_GAPS,
    WORKLOAD_MIN_OPS,
)


@dataclass(frozen=True)
class GapSet:
    """A device's idle set: every idle stretch of its window (any length), sorted, with its cause."""

    start_ns: np.ndarray
    end_ns: np.ndarray
    cause: pd.Categorical | None = None  # cause id per gap (categories: causes.CAUSES); None: not attributed

    def __len__(self) -> int:
        return len(self.start_ns)

    def codes(self) -> np.ndarray:
        """Each gap's cause as its index into the registry's CAUSES (-1: not attributed)."""
        return np.full(len(self), -1, dtype=np.int64) if self.cause is None else self.cause.codes.astype(np.int64)


@dataclass(frozen=True)
class Evidence:
    name: str
    share: float  # covered length of this name's events inside the gap(s) / their length
    time_ns: int = 0  # covered length of this name's events inside the gap(s)


@dataclass(frozen=True)
class CausedGap:
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
    gaps_by_cause: dict[str, int]  # how many gaps have each cause
    exposed_memcpy_ns: int  # host<->device copies running while no kernel runs
    exposed_comm_ns: int  # communication kernels running while no other GPU work runs
    gaps: GapSet  # every gap (min-gap 0) with its cause
    # device-side waits of at least QUEUED_WAIT_MIN_NS (outside graph replays) while none of the rank's GPUs
    # runs anything: the queued work waits on an event or stream whose producer is not in the capture
    unseen_wait_ns: int = 0


@dataclass(frozen=True)
class PeriodicSteps:
    steps: tuple[int, ...]  # step numbers of the recurring slow steps
    every: int  # their spacing in steps
    median_step_ns: int


@dataclass(frozen=True)
class StepCauses:
    step: int
    idle_by_cause: dict[str, int]  # summed over the rank's devices
    # GPU time lost inside the step that is not idle: exposed host<->device copies (memcpy) and exposed
    # communication (communication), summed over the rank's devices
    exposed_by_cause: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class RankCauses:
    """A rank's gap attribution: what its launching threads did and which cause each idle stretch got."""

    threads: tuple[tuple[int, int], ...]  # (pid, tid) of the launching threads
    thread_basis: str  # how they were chosen (host.launching_threads)
    periodic: PeriodicSteps | None
    devices: tuple[DeviceAttribution, ...]
    per_step: tuple[StepCauses, ...]  # one per step span, in step order
    top_gaps: tuple[CausedGap, ...]  # the longest gaps over all devices, with their host events
    evidence: dict[str, tuple[Evidence, ...]]  # per cause with idle time: the host events behind it
    blocking_calls: tuple[tuple[str, int], ...]  # sync-class event names and counts, most frequent first
    sync_copy_calls: int  # synchronous copy API calls on the launching threads
    sync_copy_first: str | None  # the first one's name
    host_shares: H.HostShares | None  # the host loop's step time split (data wait, model ops, other)
    # Start-up and allocator calls on the launching threads before the window (before the first step, or
    # without steps before the first GPU work), no GPU work of the rank running: one-off start-up the
    # window leaves out (context creation in the first cudaFree, lazy loading, compilation).
    startup_before_ns: int = 0
    # "training" (backward or optimizer ops in the trace), "inference" (host ops, none of them), "" (no host
    # ops to tell): chooses the advice, never a figure
    workload: str = ""
    # runtime calls that make a stream wait on an event (cudaStreamWaitEvent, hipStreamWaitEvent) and that
    # record an event (cudaEventRecord, ...), on the rank: a wait on an event never recorded in the capture
    # waits on work outside it
    event_waits: int = 0
    event_records: int = 0
    # a serving loop's phases from its engine's annotations (analyses/serving.py; None: no annotation names a phase
    # and no serving engine's kernel ran); chooses advice, never a figure
    serving: ServingPhases | None = None
    # inference ranks: where the kernels' time goes, by name (GEMMs, their formats, attention): chooses advice
    kernels: KernelMix | None = None
    # a process that only ran Python (no GPU work, no operators, no runtime calls): a frontend or driver
    frontend: FrontendFacts | None = None

    @property
    def unseen_wait_ns(self) -> int:
        """Device-side waits on something outside the capture, summed over the rank's devices."""
        return sum(d.unseen_wait_ns for d in self.devices)


# A stream made to wait on an event, and an event recorded (CUDA runtime and driver, HIP).
EVENT_WAIT_CALLS = re.compile(r"^(cuda|hip)StreamWaitEvent\w*$|^cuStreamWaitEvent\w*$", re.IGNORECASE)
EVENT_RECORD_CALLS = re.compile(r"^(cuda|hip)EventRecord\w*$|^cuEventRecord\w*$", re.IGNORECASE)


def cause_codes() -> dict[str, int]:
    return {c: i for i, c in enumerate(C.CAUSES)}


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
                     idle: iv.IntervalSet) -> DeviceAttribution:
    """Causes for the device's idle set (`idle`: every gap of the window, any length)."""
    starts, ends = idle
    # A gap whose ending work sat queued at least QUEUED_WAIT_MIN_NS on the idle device is two: the host's
    # part (until that work's launch call returned) and the device-side wait after it.
    starts, ends, waited = split_queued_waits(tl, rank, device, starts, ends)
    dur = ends - starts
    code = cause_codes()
    causes = classify_gaps(starts, ends, host)
    unseen = 0
    if len(starts):
        first_work = _first_work_ns(tl, rank, device)
        # idle before the device's first GPU work that allocator calls fill: the context's creation
        leading = (ends <= first_work) & (causes == code[C.ALLOCATOR])
        causes = np.where(leading, code[C.STARTUP], causes)
        device_side = queued_before(tl, rank, device, starts, ends) | waited
        in_replay = np.zeros(len(starts), dtype=bool)
        if (tl.events["graph_id"].to_numpy() != -1).any():
            # inside a CUDA graph replay the GPU schedules the nodes itself, all queued by one launch
            in_replay = iv.overlap_per_window(replay_spans(tl, rank, device, window), starts, ends) >= dur
            device_side |= in_replay
        causes = np.where(device_side, code[C.DEPENDENCY], causes)
        # a long device-side wait while none of the rank's GPUs works: what it waits for is not in the capture
        long_wait = device_side & ~in_replay & (dur >= QUEUED_WAIT_MIN_NS)
        if long_wait.any():
            other = iv.overlap_per_window(F.work_union(tl, rank), starts[long_wait], ends[long_wait])
            unseen = int(dur[long_wait][other == 0].sum())
    if periodic is not None and len(starts):
        idx = iv.locate(starts, st.start_ns, st.end_ns)
        step_no = np.where(idx >= 0, st.number[np.clip(idx, 0, None)] if len(st) else -1, -1)
        stall = np.isin(step_no, periodic.steps) & (dur >= LAUNCH_GAP_MAX_NS)
        stall &= ~np.isin(causes, [code[C.DATALOADER], code[C.COMMUNICATION], code[C.DEPENDENCY]])
        causes = np.where(stall, code[C.CHECKPOINT], causes)
    by_cause = {c: int(dur[causes == i].sum()) for i, c in enumerate(C.CAUSES)}
    count = {c: int((causes == i).sum()) for i, c in enumerate(C.CAUSES)}
    gaps = GapSet(starts, ends, pd.Categorical.from_codes(causes, categories=list(C.CAUSES)))
    return DeviceAttribution(device, window, int(dur.sum()), len(dur), by_cause, count,
                             exposed_memcpy_ns(tl, rank, device, window), exposed_comm_ns, gaps, unseen)


def _first_work_ns(tl: Timeline, rank: int, device: int) -> int:
    work = tl.gpu_work(rank)
    ts = work["ts_ns"].to_numpy()[work["device"].to_numpy() == device]
    return int(ts.min()) if len(ts) else np.iinfo(np.int64).max


def queued_before(tl: Timeline, rank: int, device: int, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Per gap: was the GPU work that ends it (the device's work starting at the gap's end; the earliest
    queued when several start there) queued before the gap began, i.e. had its launch call (same
    correlation id) returned? Work with no launch call found counts as queued when it started (never
    before its gap), so such gaps stay the host's."""
    return queued_at(tl, rank, device, starts, ends) < starts


def split_queued_waits(tl: Timeline, rank: int, device: int, starts: np.ndarray,
                       ends: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The gaps, each one whose ending work was queued after it began and then waited at least
    QUEUED_WAIT_MIN_NS before it ran cut in two at the moment it was queued (its launch call returned),
    and per resulting gap whether it is such a wait (device-side: the work was queued, the GPU idle)."""
    n = len(starts)
    if not n:
        return starts, ends, np.zeros(0, dtype=bool)
    q = queued_at(tl, rank, device, starts, ends)
    cut = (q > starts) & (ends - q >= QUEUED_WAIT_MIN_NS)
    if not cut.any():
        return starts, ends, np.zeros(n, dtype=bool)
    at = q[cut]
    new_starts = np.sort(np.r_[starts, at])
    new_ends = np.sort(np.r_[ends, at])
    return new_starts, new_ends, np.isin(new_starts, at)


def queued_at(tl: Timeline, rank: int, device: int, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Per gap: when the GPU work that ends it was queued (its launch call returned; the earliest when several
    start at the gap's end); the gap's end when no work starts there or its launch call is not found."""
    n = len(starts)
    work = tl.gpu_work(rank)
    work = work[work["device"].to_numpy() == device]
    if not n or not len(work):
        return np.asarray(ends, dtype=np.int64).copy()
    ts = work["ts_ns"].to_numpy().astype(np.int64)
    queued = F.launch_times(tl.rank_events(rank), work["correlation"].to_numpy(), ts, end=True)
    order = np.argsort(ts, kind="stable")
    ts, queued = ts[order], queued[order]
    first = np.flatnonzero(np.r_[True, ts[1:] != ts[:-1]])
    at, earliest = ts[first], np.minimum.reduceat(queued, first)
    pos = np.clip(np.searchsorted(at, ends), 0, len(at) - 1)
    return np.where(at[pos] == ends, np.minimum(earliest[pos], ends), ends).astype(np.int64)


def classify_gaps(starts: np.ndarray, ends: np.ndarray, host: H.HostActivity) -> np.ndarray:
    """One cause per gap (index into CAUSES); see docs/diagnosis.md for the rules."""
    n = len(starts)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    code = cause_codes()
    dur = (ends - starts).astype(np.float64)
    cover = np.stack([iv.overlap_per_window(host.exclusive[c], starts, ends) for c in host.classes])
    none = dur - cover.sum(axis=0)
    table = np.vstack([cover, none[None, :]])
    best = np.argmax(table, axis=0)  # ties: the earlier (more specific) class
    labels = np.array([*host.classes, "none"], dtype=object)[best]
    blocked = iv.overlap_per_window(host.sync_calls, starts - SYNC_TOLERANCE_NS, starts) > 0
    short = (ends - starts) < LAUNCH_GAP_MAX_NS
    any_host = cover.sum(axis=0) > 0
    out = np.full(n, code[C.UNKNOWN], dtype=np.int64)
    direct = [c for c in host.classes if c in C.CAUSE_BY_ID and C.CAUSE_BY_ID[c].direct]
    for klass in direct:
        out[labels == klass] = code[klass]
    rest = ~np.isin(labels, direct)
    out[rest & blocked] = code[C.SYNC]
    rest &= ~blocked
    # Host still inside a copy call when the GPU ran dry (a pageable copy holds the host up).
    copying = iv.overlap_per_window(host.copy_calls, starts - SYNC_TOLERANCE_NS, starts) > 0
    out[rest & copying] = code[C.MEMCPY]
    rest &= ~copying
    out[rest & short & any_host] = code[C.LAUNCH]
    out[rest & ~short & (labels == H.OTHER_HOST)] = code[C.HOST_COMPUTE]
    return out


def exposed_memcpy(tl: Timeline, rank: int, device: int, window: F.Window) -> iv.IntervalSet:
    """Host<->device copies (HtoD, DtoH or direction unknown) with no kernel running, inside the window."""
    ev = tl.rank_events(rank)
    copies = ev[(ev["kind"] == T.MEMCPY).to_numpy() & (ev["device"].to_numpy() == device)
                & ev["copy_kind"].isin(("", "HtoD", "DtoH")).to_numpy()]
    ts = copies["ts_ns"].to_numpy()
    c = iv.clip(iv.union(ts, ts + copies["dur_ns"].to_numpy()), window.start_ns, window.end_ns)
    k = iv.clip(F.work_union(tl, rank, device, (T.KERNEL,)), window.start_ns, window.end_ns)
    return iv.subtract(c, k)


def exposed_memcpy_ns(tl: Timeline, rank: int, device: int, window: F.Window) -> int:
    """Host<->device copy time (HtoD, DtoH or direction unknown) with no kernel running."""
    return iv.total(exposed_memcpy(tl, rank, device, window))


def exposed_comm(tl: Timeline, rank: int, device: int, window: F.Window) -> iv.IntervalSet:
    """Communication kernels running while no other GPU work runs, inside the window (as
    `DeviceBusy.exposed_comm_ns` counts them)."""
    lo, hi = window.start_ns, window.end_ns
    comm = iv.clip(F.work_union(tl, rank, device, (T.KERNEL,), comm=True), lo, hi)
    return iv.subtract(comm, iv.clip(F.work_union(tl, rank, device, comm=False), lo, hi))


def startup_before(tl: Timeline, rank: int, host: H.HostActivity, before_ns: int) -> int:
    """Start-up and allocator calls of the launching threads before `before_ns`, while no GPU work of the
    rank runs (one-off costs a window starting there leaves out)."""
    calls = [host.exclusive[c] for c in (C.STARTUP, C.ALLOCATOR) if c in host.exclusive]
    if not calls:
        return 0
    s = iv.union(np.concatenate([c[0] for c in calls]), np.concatenate([c[1] for c in calls]))
    lo = int(s[0].min()) if len(s[0]) else before_ns
    s = iv.clip(s, lo, before_ns)
    return iv.total(iv.subtract(s, iv.clip(F.work_union(tl, rank), lo, before_ns)))


def rank_causes(tl: Timeline, rank: int, window: F.Window, st: F.Steps,
                devices: list[tuple[int, F.Window, int, iv.IntervalSet]],
                host: H.HostActivity | None = None) -> RankCauses:
    """The rank's gap attribution; `devices`: (device, window, exposed communication ns, idle set) each;
    `host`: the rank's `host_activity` when already made."""
    host = host if host is not None else H.host_activity(tl, rank)
    periodic = periodic_steps(st)
    attributed = [attribute_device(tl, rank, d, w, host, st, periodic, comm, idle) for d, w, comm, idle in devices]

    def the_rest() -> tuple[Any, ...]:
        exposed = per_step_exposed(tl, rank, attributed, st)
        per_step = tuple(StepCauses(int(n), c, e)
                         for n, c, e in zip(st.number, per_step_by_cause(attributed, st), exposed))
        shares = H.host_shares(F.dataloader_union(tl, rank), st.start_ns, st.end_ns, window.start_ns,
                               window.end_ns, host, st.number, H.other_threads(tl, rank, host))
        # one-off start-up before the window: before the first step, or without steps the first GPU work
        before = (startup_before(tl, rank, host, min(w.start_ns for _, w, _, _ in devices))
                  if devices and all(w.basis in ("steps", "gpu_activity") for _, w, _, _ in devices) else 0)
        waits, records = event_calls(tl, rank)
        kind = workload(tl, rank)
        serving = serving_phases(tl, rank) if kind != "training" else None  # backward or optimizer: no serving loop
        if serving is not None:  # a serving loop is inference however few its ops
            kind = "inference"
        mix = rank_kernel_mix(tl, rank) if devices else None  # the kernels' kinds choose a busy GPU's levers
        front = frontend_facts(tl, rank) if not devices else None
        return per_step, shares, before, waits, records, kind, serving, mix, front, top_gaps(attributed, host, st)

    # the evidence behind each cause (the longest part) beside the rest
    evidence, (per_step, shares, before, waits, records, kind, serving, mix, front, top) = beside(
        lambda: causes_evidence(host, attributed), the_rest)
    n_copies, first_copy = H.sync_copy_calls(host)
    return RankCauses(host.threads, host.basis, periodic, tuple(attributed), per_step,
                      top, evidence, H.blocking_calls(host), n_copies, first_copy,
                      shares, before, kind, waits, records, serving, mix, front)


def event_calls(tl: Timeline, rank: int) -> tuple[int, int]:
    """The rank's runtime calls that make a stream wait on an event, and those that record an event."""
    ev = tl.rank_events(rank)
    rt = (ev["kind"] == T.RUNTIME).to_numpy()
    if not rt.any():
        return 0, 0
    return int((name_flags(ev, EVENT_WAIT_CALLS) & rt).sum()), int((name_flags(ev, EVENT_RECORD_CALLS) & rt).sum())


# Causes whose idle time is not the host's to save: the GPU had work queued, or a one-off start-up cost.
NOT_CRITICAL = (C.DEPENDENCY, C.STARTUP)


def critical(attributed: RankCauses, st: F.Steps) -> Critical:
    """The host-caused idle gaps of each device (every cause but NOT_CRITICAL: time the GPU had nothing
    queued), the launching threads and the steps: what an operator's or frame's saving is measured on."""
    skip = [C.CAUSES.index(c) for c in NOT_CRITICAL]
    sets = []
    for d in attributed.devices:
        keep = ~np.isin(d.gaps.codes(), skip)
        sets.append((d.gaps.start_ns[keep], d.gaps.end_ns[keep]))
    return Critical(sets, attributed.threads, st.start_ns, st.end_ns)


def workload(tl: Timeline, rank: int) -> str:
    """"training" when any of the rank's host ops, annotations or frames is backward or optimizer work
    (causes.TRAINING_CALLS), "inference" when it has at least WORKLOAD_MIN_OPS framework ops but none of
    these, "" when it cannot tell (too few ops: small or hand-made traces)."""
    ev = tl.rank_events(rank)
    ops = T.category_mask(ev["kind"], (T.CPU_OP, T.ANNOTATION, T.PYTHON))  # flags, not a copy of the rows
    if ops.any() and (name_flags(ev, C.TRAINING_CALLS) & ops).any():
        return "training"
    return "inference" if int((ev["kind"] == T.CPU_OP).to_numpy().sum()) >= WORKLOAD_MIN_OPS else ""


def per_step_by_cause(devices: list[DeviceAttribution], st: F.Steps) -> list[dict[str, int]]:
    """Idle time by cause inside each step span, summed over the rank's devices."""
    out = [dict.fromkeys(C.CAUSES, 0) for _ in range(len(st))]
    if not len(st):
        return out
    for d in devices:
        codes = d.gaps.codes()
        for i, c in enumerate(C.CAUSES):
            m = codes == i
            if not m.any():
                continue
            got = iv.overlap_per_window((d.gaps.start_ns[m], d.gaps.end_ns[m]), st.start_ns, st.end_ns)
            for j, v in enumerate(got):
                out[j][c] += int(v)
    return out


def per_step_exposed(tl: Timeline, rank: int, devices: list[DeviceAttribution],
                     st: F.Steps) -> list[dict[str, int]]:
    """Exposed copies (memcpy) and exposed communication (communication) inside each step span, summed over
    the rank's devices."""
    out = [{C.MEMCPY: 0, C.COMMUNICATION: 0} for _ in range(len(st))]
    if not len(st):
        return out
    for d in devices:
        for cause, s in ((C.MEMCPY, exposed_memcpy(tl, rank, d.device, d.window)),
                         (C.COMMUNICATION, exposed_comm(tl, rank, d.device, d.window))):
            if not len(s[0]):
                continue
            for j, v in enumerate(iv.overlap_per_window(s, st.start_ns, st.end_ns)):
                out[j][cause] += int(v)
    return out


def top_gaps(devices: list[DeviceAttribution], host: H.HostActivity, st: F.Steps,
             top_n: int = TOP_GAPS) -> tuple[CausedGap, ...]:
    """The rank's longest gaps over all its devices, with the host events that explain them."""
    rows = []
    for d in devices:
        g = d.gaps
        order = np.argsort(-(g.end_ns - g.start_ns), kind="stable")[:top_n]
        rows += [(int(e - s), d.device, int(s), int(e), int(c), d.window.start_ns)
                 for s, e, c in zip(g.start_ns[order], g.end_ns[order], g.codes()[order])]
    rows.sort(key=lambda r: (-r[0], r[1], r[2]))
    out = []
    for length, device, s, e, c, w0 in rows[:top_n]:
        idx = iv.locate(np.array([s]), st.start_ns, st.end_ns)[0] if len(st) else -1
        out.append(CausedGap(device, s, w0, length, int(st.number[idx]) if idx >= 0 else None,
                             C.CAUSES[c], gap_evidence(host, s, e, C.CAUSES[c])))
    return tuple(out)


# Start-up's evidence: the first calls (start-up class) and the runtime calls that stalled inside them (a first
# cudaFree / cudaMalloc that sets up the caching allocator, a first kernel launch that loads its module), so the
# call that stalled is named beside the operator that made it.
STARTUP_EVIDENCE_CLASSES = (C.STARTUP, C.ALLOCATOR, C.LAUNCH)


def _evidence_classes(host: H.HostActivity, cause: str) -> tuple[str, ...] | None:
    """Host classes whose events are evidence for a cause: a host-class cause's own (start-up's with the calls
    that stall inside it); others: every class."""
    if cause == C.STARTUP and cause in host.classes:
        return tuple(k for k in STARTUP_EVIDENCE_CLASSES if k in host.classes)
    return (cause,) if cause in host.classes and cause != H.OTHER_HOST else None


def gap_evidence(host: H.HostActivity, lo: int, hi: int, cause: str) -> tuple[Evidence, ...]:
    """The host events behind one gap: the most specific names, with their share of the gap.

    For a sync gap the blocking call running at the gap start is named even though it covers
    little of the gap. Names are ranked by share x specificity (the part of their time that lies
    inside the gap), so an enclosing frame that spans the whole step ranks below the op inside.
    """
    ev = host.events
    ts = ev["ts_ns"].to_numpy()
    end = ts + ev["dur_ns"].to_numpy()
    lo_q = lo - SYNC_TOLERANCE_NS if cause == C.SYNC else lo
    mask = (ts < hi) & (end > lo_q)
    classes = _evidence_classes(host, cause)
    if classes is not None:
        mask &= T.category_mask(ev["klass"], classes)
    return _rank_names(ev[mask], lo, hi, sync=cause == C.SYNC)


def _rank_names(ev: pd.DataFrame, lo: int, hi: int, sync: bool = False) -> tuple[Evidence, ...]:
    if not len(ev) or hi <= lo:
        return ()
    ts = ev["ts_ns"].to_numpy()
    end = ts + ev["dur_ns"].to_numpy()
    inside = np.clip(np.minimum(end, hi) - np.maximum(ts, lo), 0, None)
    names, inside_ns, dur_ns = sum_by_name(ev, inside, np.maximum(end - ts, 1))
    share = np.minimum(inside_ns / (hi - lo), 1.0)
    specificity = inside_ns / dur_ns
    score = share * specificity
    order = np.argsort(-score, kind="stable")[:EVIDENCE_NAMES]
    return tuple(Evidence(names[i], round(float(share[i]), 4), int(inside_ns[i])) for i in order
                 if share[i] > 0 or sync)


class _GapCover:
    """One device's gaps as seen from each of the host's events: `at_start`/`at_end` one past the last gap
    starting at or before the event's start/end (0: none; int32), the gap's cause code there (-1: none), and
    how far into that gap the start/end lies (`part_*`, clipped to the gap). Found once per device and shared
    by every cause: a cause's time inside an event is then two look-ups of its running gap total (`inside`).
    Kept small (18 bytes per host event and side): it lives beside the host table while every cause is
    looked at."""

    def __init__(self, host: H.HostActivity, g: GapSet) -> None:
        ts = host.events["ts_ns"].to_numpy()
        end = ts + host.events["dur_ns"].to_numpy()
        self.gaps = g
        self.codes = g.codes()
        lengths = g.end_ns - g.start_ns
        self.at_start, self.cause_start, self.part_start = self._where(lengths, ts)
        self.at_end, self.cause_end, self.part_end = self._where(lengths, end)

    def _where(self, lengths: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        g = self.gaps
        at = np.searchsorted(g.start_ns, t, side="right") - 1
        if not len(lengths):
            return (np.zeros(len(t), dtype=np.int32), np.full(len(t), -1, dtype=np.int16),
                    np.zeros(len(t), dtype=np.int64))
        safe = np.maximum(at, 0)
        part = g.start_ns[safe]
        np.subtract(t, part, out=part)
        np.clip(part, 0, lengths[safe], out=part)
        cause = self.codes[safe].astype(np.int16)
        del safe
        outside = at < 0
        cause[outside] = -1
        part[outside] = 0
        at += 1
        return at.astype(np.int32), cause, part

    def inside(self, code: int, rows: np.ndarray | None) -> tuple[np.ndarray, int]:
        """Each event's time inside this device's gaps of cause `code` (events `rows`, all when None), and
        the cause's total idle time on the device."""
        g = self.gaps
        lengths = np.where(self.codes == code, g.end_ns - g.start_ns, 0)
        # at position k + 1: the cause's time in the gaps before gap k; at 0: none (no gap before the event)
        before = np.r_[np.int64(0), np.int64(0), np.cumsum(lengths)]

        def pick(values: np.ndarray) -> np.ndarray:
            return values if rows is None else values[rows]

        out = before[pick(self.at_end)]
        out -= before[pick(self.at_start)]
        np.add(out, pick(self.part_end), out=out, where=pick(self.cause_end) == code)
        np.subtract(out, pick(self.part_start), out=out, where=pick(self.cause_start) == code)
        return out, int(lengths.sum())


def sum_by_name(ev: pd.DataFrame, inside: np.ndarray, dur: np.ndarray) -> tuple[list[str], np.ndarray, np.ndarray]:
    """`inside` and `dur` summed per event name, names in order of first appearance (`sum_by_code`)."""
    name = ev["name"]
    return sum_by_code(name.cat.codes.to_numpy(), name.cat.categories, inside, dur)


def sum_by_code(codes: np.ndarray, categories: pd.Index, inside: np.ndarray,
                dur: np.ndarray) -> tuple[list[str], np.ndarray, np.ndarray]:
    """`inside` and `dur` summed per name code, names in order of first appearance: grouped by the
    name column's category codes (integers, one stable sort), never by the strings of a million rows."""
    if not len(codes):
        return [], np.zeros(0, dtype=np.asarray(inside).dtype), np.zeros(0, dtype=np.asarray(dur).dtype)
    order = np.argsort(codes, kind="stable")
    c = codes[order]
    starts = np.flatnonzero(np.r_[True, c[1:] != c[:-1]])
    inside_sum = np.add.reduceat(np.asarray(inside)[order], starts)
    dur_sum = np.add.reduceat(np.asarray(dur)[order], starts)
    first = np.argsort(order[starts], kind="stable")  # groups by their first row
    names = [str(categories[k]) if k >= 0 else "nan" for k in c[starts][first].tolist()]
    return names, inside_sum[first], dur_sum[first]


def causes_evidence(host: H.HostActivity, devices: list[DeviceAttribution]) -> dict[str, tuple[Evidence, ...]]:
    """`cause_evidence` of every cause that has idle time, each device's gap positions found once."""
    covers = [_GapCover(host, d.gaps) for d in devices]
    out = {}
    for cause in C.CAUSES:
        if any(d.idle_by_cause.get(cause) for d in devices):
            out[cause] = cause_evidence(host, devices, cause, covers)
    return out


def cause_evidence(host: H.HostActivity, devices: list[DeviceAttribution], cause: str,
                   covers: list[_GapCover] | None = None) -> tuple[Evidence, ...]:
    """The host events behind all gaps of one cause; share = their time inside those gaps / that idle.
    `covers`: each device's `_GapCover`, when already found. Works on the columns it needs (no copy of
    the host table per cause)."""
    ev = host.events
    classes = _evidence_classes(host, cause)
    rows = T.category_mask(ev["klass"], classes) if classes is not None else None
    if rows is not None and not rows.any() or not len(ev):
        return ()
    code = C.CAUSES.index(cause)
    inside = np.zeros(len(ev) if rows is None else int(rows.sum()), dtype=np.int64)
    total = 0
    for k, d in enumerate(devices):
        if not (d.gaps.codes() == code).any():
            continue
        cover = covers[k] if covers is not None else _GapCover(host, d.gaps)
        got, idle = cover.inside(code, rows)
        inside += got
        total += idle
    if total <= 0:
        return ()
    dur = np.maximum(ev["dur_ns"].to_numpy(), 1)  # end - start, at least 1 ns
    name = ev["name"]
    codes = name.cat.codes.to_numpy()
    if rows is not None:
        dur, codes = dur[rows], codes[rows]
    names, inside_ns, dur_ns = sum_by_code(codes, name.cat.categories, inside, dur)
    share = np.minimum(inside_ns / total, 1.0)
    score = share * inside_ns / dur_ns
    order = np.argsort(-score, kind="stable")[:EVIDENCE_NAMES]
    return tuple(Evidence(names[i], round(float(share[i]), 4), int(inside_ns[i])) for i in order
                 if share[i] > 0)
