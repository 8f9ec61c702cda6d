"""Analyses: pure functions of a Timeline -> frozen figures (int64 ns). `figures_of` runs every figure
for every rank and device of a Timeline.

Each device's idle set is made here once; the gap figures, the gap attribution (diagnosis) and
the drawn gaps all index into it."""

from __future__ import annotations

from dataclasses import dataclass

from .. import intervals as iv
from ..timeline import Timeline
from . import figures as F
from .memory import RankMemory, rank_memory


@dataclass(frozen=True)
class DeviceAnalysis:
    device: int
    name: str
    busy: F.DeviceBusy
    idle: iv.IntervalSet  # every idle stretch of the window (any length): the one gap set
    gaps: F.GapStats
    memcpy: F.MemcpyStats
    kernels: tuple[F.KernelRow, ...]  # by time, the first KERNEL_TABLE_ROWS names


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


@dataclass(frozen=True)
class Figures:
    min_gap_ns: int
    ranks: tuple[RankAnalysis, ...]


def figures_of(tl: Timeline, min_gap_ns: int = F.DEFAULT_MIN_GAP_NS,
            window: F.Window | None = None) -> Figures:
    """All figures. `window` overrides every rank's default window when given."""
    return Figures(min_gap_ns, tuple(rank_figures(tl, r.index, min_gap_ns, window) for r in tl.ranks))


def rank_figures(tl: Timeline, rank: int, min_gap_ns: int = F.DEFAULT_MIN_GAP_NS,
                 window: F.Window | None = None) -> RankAnalysis:
    rank_window = window or F.rank_window(tl, rank)
    names = {d.index: d.name for d in tl.devices if d.rank == rank}
    devices = []
    for device in tl.device_indices(rank):
        w = window or F.device_window(tl, rank, device)
        busy = F.device_busy(tl, rank, device, w)
        idle = F.idle_intervals(tl, rank, device, w, min_gap_ns=0)
        devices.append(DeviceAnalysis(
            device, names.get(device, ""), busy, idle, F.gap_stats(tl, rank, device, w, min_gap_ns, idle=idle),
            F.memcpy_stats(tl, rank, device, w, busy.busy_ns),
            F.top_kernels(tl, rank, device, w, top_n=F.KERNEL_TABLE_ROWS)))
    wait = F.dataloader_wait_ns(tl, rank, rank_window)
    st = F.per_step(tl, rank)
    return RankAnalysis(rank, tl.ranks[rank].rank, rank_window, len(st), st, wait,
                        wait / rank_window.dur_ns if rank_window.dur_ns > 0 else None, tuple(devices),
                        rank_memory(tl, rank, [d.device for d in devices]))

