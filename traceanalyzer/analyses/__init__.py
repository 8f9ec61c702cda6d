"""Analyses: pure functions of a Timeline -> frozen figures (int64 ns). `figures_of` runs every figure
for every rank and device of a Timeline.

Each rank's step spans are found once and each device's idle set is made once, with each gap's
cause (analyses/gaps.py) when `causes` is asked for; the gap figures, the diagnosis and the drawn
gaps all read that one gap set."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from .. import causes as C
from .. import intervals as iv
from ..timeline import Timeline
from . import critical_path as CPA
from . import figures as F
from . import gaps as G
from . import host as H
from ._beside import beside
from ._beside import set_threads as set_threads
from .capture import CaptureFigures, capture_figures, survived_steps, survived_window
from .cause_removal import removals
from .frames import FrameFigures, frame_figures
from .graphs import DeviceGraphs, device_graphs
from .host import launching_threads
from .iterations import StepSource, find_steps
from .memory import RankMemory, rank_memory
from .operators import OperatorFigures, operator_figures, step_basis
from .trace_counters import TraceCounter, trace_counters


@dataclass(frozen=True)
class DeviceAnalysis:
    device: int
    name: str
    busy: F.DeviceBusy
    idle: G.GapSet  # every idle stretch of the window (any length), with its cause: the one gap set
    gaps: F.GapStats
    memcpy: F.MemcpyStats
    kernels: tuple[F.KernelRow, ...]  # by time, the first KERNEL_TABLE_ROWS names
    gpu_events: int = 0  # GPU activities starting inside the window
    attribution: G.DeviceAttribution | None = None  # idle time by cause (None: causes not asked for)
    graphs: DeviceGraphs | None = None  # CUDA graph replays and captures (None: no graph ran)
    trace_counters: tuple[TraceCounter, ...] = ()  # counters the trace itself recorded for this device


@dataclass(frozen=True)
class RankAnalysis:
    index: int  # index into Timeline.ranks
    rank: int | None
    window: F.Window
    steps: int
    per_step: tuple[F.StepFigures, ...]
    dataloader_wait_ns: int
    dataloader_wait_fraction: float | None
    devices: tuple[DeviceAnalysis, ...]
    memory: RankMemory | None = None  # from profile_memory events (analyses/memory.py)
    framework: str = ""
    spans: F.Steps | None = None  # the step spans, found once
    kernel_totals: F.KernelTotals | None = None
    pageable_htod_copies: int = 0
    range_profiler: bool = False  # a CUPTI range-profiler capture (no kernels to measure idle by)
    causes: G.RankCauses | None = None  # the gap attribution (None: not asked for)
    input: str = ""  # the file the rank was read from
    clock: str = "relative"  # RankInfo.clock: "epoch" or "relative"
    host: str | None = None  # the machine it ran on (trace metadata)
    step_source: StepSource | None = None  # where the steps came from: markers, detected iterations, none
    gpus_listed: int = 0  # GPUs the trace lists for the rank (deviceProperties), active or not
    capture: CaptureFigures | None = None  # how complete the capture is (cut off, GPU events lost)
    operators: OperatorFigures | None = None  # host operators, kernels with their launchers (analyses/operators.py)
    frames: FrameFigures | None = None  # user Python frames behind host and idle time (analyses/frames.py)
    # the median step's critical path (analyses/critical_path.py; this rank alone: collectives are its own kernels),
    # with what removing each cause would save it, replayed (analyses/cause_removal.py)
    critical_path: CPA.CriticalPath | None = None
    # The DataLoader waits inside the window, merged (`dataloader_wait_ns` is their length): what the job's
    # host logs are figured over.
    dataloader_waits: iv.IntervalSet = field(default_factory=iv.empty, compare=False, repr=False)


@dataclass(frozen=True)
class Figures:
    min_gap_ns: int
    ranks: tuple[RankAnalysis, ...]


def figures_of(tl: Timeline, min_gap_ns: int = F.DEFAULT_MIN_GAP_NS,
               window: F.Window | None = None, causes: bool = True) -> Figures:
    """All figures. `window` overrides every rank's default window when given; `causes`: attribute
    every gap (what the diagnosis reads; False: figures alone, no gap has a cause)."""
    return Figures(min_gap_ns, tuple(rank_figures(tl, r.index, min_gap_ns, window, causes) for r in tl.ranks))


def rank_figures(tl: Timeline, rank: int, min_gap_ns: int = F.DEFAULT_MIN_GAP_NS,
                 window: F.Window | None = None, causes: bool = True) -> RankAnalysis:
    capture = capture_figures(tl, rank)
    # a truncated file: what lies outside the stretch whose record survived is out of every figure
    cut, kept_from = capture.cut_ns, capture.kept_from_ns
    markers = survived_steps(F.steps(tl, rank), cut, kept_from)
    st, source = find_steps(tl, rank, markers)  # the markers; without them, iterations of repeating work
    st = survived_steps(st, cut, kept_from)
    # the window is the steps' span, detected iterations' too: host time before a step's first launch is the
    # step's, counted in every figure
    rank_window = window or survived_window(F.rank_window(tl, rank, st), cut, kept_from)
    names = {d.index: d.name for d in tl.devices if d.rank == rank}

    def device_figures() -> list[DeviceAnalysis]:
        devices = []
        for device in tl.device_indices(rank):
            w = window or survived_window(F.device_window(tl, rank, device, st), cut, kept_from)
            busy = F.device_busy(tl, rank, device, w)
            idle = F.idle_intervals(tl, rank, device, w, min_gap_ns=0)
            devices.append(DeviceAnalysis(
                device, names.get(device, ""), busy, G.GapSet(*idle),
                F.gap_stats(tl, rank, device, w, min_gap_ns, idle=idle, st=st),
                F.memcpy_stats(tl, rank, device, w, busy.busy_ns),
                F.top_kernels(tl, rank, device, w, top_n=F.KERNEL_TABLE_ROWS), F.gpu_events(tl, rank, device, w),
                graphs=device_graphs(tl, rank, device, w, busy.busy_ns),
                trace_counters=trace_counters(tl, rank, device, w)))
        return devices

    # the host's activity (what the causes read) beside the devices' figures
    host, devices = beside(lambda: H.host_activity(tl, rank) if causes else None, device_figures)
    attributed = None
    if causes:
        attributed = G.rank_causes(tl, rank, rank_window, st, [(d.device, d.busy.window, d.busy.exposed_comm_ns,
                                                                (d.idle.start_ns, d.idle.end_ns)) for d in devices],
                                   host)
        devices = [replace(d, idle=a.gaps, attribution=a) for d, a in zip(devices, attributed.devices)]
    waits = F.dataloader_waits(tl, rank, rank_window)
    wait = iv.total(waits)
    info = tl.ranks[rank]
    ops, frames = _operator_view(tl, rank, step_basis(st, rank_window), len(st), devices, attributed, st)
    return RankAnalysis(rank, info.rank, rank_window, len(st), F.per_step(tl, rank, st), wait,
                        wait / rank_window.dur_ns if rank_window.dur_ns > 0 else None, tuple(devices),
                        rank_memory(tl, rank, [d.device for d in devices], st), info.framework, st,
                        F.kernel_totals(tl, rank), F.pageable_htod_copies(tl, rank), F.range_profiler_capture(tl, rank),
                        attributed, tl.sources[info.source].path, info.clock, info.host, source,
                        info.gpus_listed, capture, ops, frames,
                        CPA.critical_path(tl, rank, st, median_only=True,
                                          removals=removals([d.idle for d in devices]) if causes else None),
                        waits)


def _operator_view(tl: Timeline, rank: int, basis: iv.IntervalSet, n_steps: int, devices: list[DeviceAnalysis],
                   attributed: G.RankCauses | None, st: F.Steps) -> tuple[OperatorFigures, FrameFigures]:
    """The operator view (every device's idle set) and the user frames behind the host-compute and unknown
    idle time (every idle stretch when the gaps have no causes)."""
    idle = [(d.idle.start_ns, d.idle.end_ns) for d in devices]
    wanted = [C.CAUSES.index(C.HOST_COMPUTE), C.CAUSES.index(C.UNKNOWN)]
    host_idle = []
    for d in devices:
        keep = np.isin(d.idle.codes(), wanted) if d.idle.cause is not None else np.ones(len(d.idle), dtype=bool)
        host_idle.append((d.idle.start_ns[keep], d.idle.end_ns[keep]))
    threads = attributed.threads if attributed is not None else launching_threads(tl, rank)[0]
    critical = G.critical(attributed, st) if attributed is not None else None
    # one after the other: each holds a copy of the rank's host rows (beside each other, a 1 GB trace's peak
    # memory rose by 0.12-0.16 GB)
    return (operator_figures(tl, rank, basis, n_steps, idle, critical),
            frame_figures(tl, rank, basis, threads, host_idle, critical))
