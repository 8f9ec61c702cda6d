"""Memory of each GPU (and of the host) from the `[memory]` events of torch.profiler(profile_memory=True).

Timeline.memory -> per device: the peak of the bytes allocated to tensors and of the bytes the
caching allocator reserved, the device's total memory (deviceProperties `totalGlobalMem`), and per
real step (step markers, or the iterations of a loop the trace shows: analyses/iterations.py) the
peak and the bytes still allocated at the step's end, whose growth from step to step shows a leak. A
capture without steps (one forward pass) has no per-step rows: growth through its layers is no leak.
GPU and host (CPU) memory are kept apart. A sample is the state
after one allocation or release; between samples the state holds, so a step with no sample of
its own holds the state carried in from before it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .. import timeline as T
from ..timeline import Timeline
from . import figures as F

MAX_SERIES_POINTS = 1000  # drawn points per device: above it, the maximum per time bin (peaks kept)


@dataclass(frozen=True)
class MemoryStep:
    step: int
    peak_allocated_bytes: int
    end_allocated_bytes: int
    growth_bytes: int  # end - the previous listed step's end (0 for the first)


@dataclass(frozen=True)
class MemoryFigures:
    """Memory of one device (`device` >= 0) or of the host (`device` == -1)."""

    device: int
    samples: int
    peak_allocated_bytes: int
    peak_reserved_bytes: int | None  # None when the events carry no reserved total
    total_bytes: int | None  # the device's memory; None for the host or when the trace does not say
    per_step: tuple[MemoryStep, ...]
    growth_per_step_bytes: float | None  # median growth between consecutive steps (None: < 2 steps)
    series_ts_ns: np.ndarray = field(repr=False)  # bounded drawing series (MAX_SERIES_POINTS)
    series_allocated: np.ndarray = field(repr=False)
    series_reserved: np.ndarray | None = field(repr=False)
    memory_device: int = -1  # the device index the memory events gave (differs when mapped onto the work GPU)

    @property
    def peak_allocated_fraction(self) -> float | None:
        return None if not self.total_bytes else self.peak_allocated_bytes / self.total_bytes

    @property
    def peak_used_bytes(self) -> int:
        """What the process held at its peak: reserved when known, else allocated."""
        return self.peak_reserved_bytes if self.peak_reserved_bytes is not None else self.peak_allocated_bytes

    @property
    def peak_used_fraction(self) -> float | None:
        return None if not self.total_bytes else self.peak_used_bytes / self.total_bytes

    @property
    def headroom_fraction(self) -> float | None:
        used = self.peak_used_fraction
        return None if used is None else max(1.0 - used, 0.0)


@dataclass(frozen=True)
class RankMemory:
    devices: dict[int, MemoryFigures]  # by the GPU index of the rank's work
    host: MemoryFigures | None
    unmatched: tuple[int, ...] = ()  # GPUs of memory events with no GPU work in the trace (not reported)


def rank_memory(tl: Timeline, rank: int, work_devices: list[int], st: F.Steps | None = None) -> RankMemory | None:
    """Memory figures of one rank; None when its trace has no memory events. `st`: the rank's step spans,
    when already found."""
    mem = tl.memory
    mine = mem[mem["rank"].to_numpy() == rank]
    if not len(mine):
        return None
    st = F.steps(tl, rank) if st is None else st
    dtype = mine["device_type"].to_numpy()
    gpu = mine[(dtype == T.MEMORY_GPU) & (mine["device"].to_numpy() >= 0)]
    host = mine[dtype == T.MEMORY_CPU]
    # A curve rebuilt from allocation sizes (RankInfo.memory_from_sizes) starts at 0 at the capture's
    # start: it shows growth, never how full the device was, so no device total is set beside it.
    relative = tl.ranks[rank].memory_from_sizes if 0 <= rank < len(tl.ranks) else False
    totals = {d.index: None if relative else _int_or_none(d.properties.get("totalGlobalMem"))
              for d in tl.devices if d.rank == rank}
    devices: dict[int, MemoryFigures] = {}
    unmatched: list[int] = []
    mem_devices = sorted(int(d) for d in np.unique(gpu["device"].to_numpy()))
    for d in mem_devices:
        target = d
        if d not in work_devices and len(mem_devices) == 1 and len(work_devices) == 1:
            # One GPU in the memory events, another in the work: the allocator numbers the visible
            # devices, the kernels may carry the physical index; it is the same GPU.
            target = work_devices[0]
        if target not in work_devices:
            unmatched.append(d)
            continue
        rows = gpu[gpu["device"].to_numpy() == d]
        total = totals.get(d) or totals.get(target)
        devices[target] = _figures(rows, target, total, st, d)
    host_figures = _figures(host, -1, None, st, -1) if len(host) else None
    if not devices and host_figures is None and not unmatched:
        return None
    return RankMemory(devices, host_figures, tuple(unmatched))


def _figures(rows: pd.DataFrame, device: int, total: int | None, st: F.Steps, memory_device: int) -> MemoryFigures:
    order = np.argsort(rows["ts_ns"].to_numpy(), kind="stable")  # equal times keep the trace's order
    ts = rows["ts_ns"].to_numpy()[order]
    alloc = rows["allocated_bytes"].to_numpy()[order]
    reserved = rows["reserved_bytes"].to_numpy()[order]
    # The host has no caching allocator: its "Total Reserved" is 0 and means nothing.
    has_reserved = device >= 0 and bool((reserved >= 0).any())
    per_step = _per_step(ts, alloc, st)
    growths = np.array([s.growth_bytes for s in per_step[1:]], dtype=np.float64)
    s_ts, s_alloc, s_res = _series(ts, alloc, reserved if has_reserved else None)
    return MemoryFigures(
        device=device, samples=len(ts), peak_allocated_bytes=int(alloc.max()),
        peak_reserved_bytes=int(reserved.max()) if has_reserved else None,
        total_bytes=total if total and total > 0 else None, per_step=per_step,
        growth_per_step_bytes=float(np.median(growths)) if len(growths) else None,
        series_ts_ns=s_ts, series_allocated=s_alloc, series_reserved=s_res, memory_device=memory_device)


def _per_step(ts: np.ndarray, alloc: np.ndarray, st: F.Steps) -> tuple[MemoryStep, ...]:
    """Per step: the peak (state carried in included) and the state at its end; steps that end
    before the first sample are left out. One pass per step, not per sample."""
    if not len(st) or not len(ts):
        return ()
    lo = np.searchsorted(ts, st.start_ns, side="left")  # first sample in the step
    hi = np.searchsorted(ts, st.end_ns, side="right")  # one past the last sample at or before its end
    rows: list[MemoryStep] = []
    prev_end: int | None = None
    for n, a, b in zip(st.number.tolist(), lo.tolist(), hi.tolist()):
        if b == 0:
            continue
        end = int(alloc[b - 1])
        carried = int(alloc[a - 1]) if a > 0 else None
        inside = int(alloc[a:b].max()) if b > a else None
        peak = max(v for v in (carried, inside, end) if v is not None)
        rows.append(MemoryStep(int(n), peak, end, 0 if prev_end is None else end - prev_end))
        prev_end = end
    return tuple(rows)


def _series(ts: np.ndarray, alloc: np.ndarray,
            reserved: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """At most MAX_SERIES_POINTS points: every sample, or the maximum of each equal time bin
    (at the bin's first sample time), so that every peak stays drawn."""
    if len(ts) <= MAX_SERIES_POINTS:
        return ts, alloc, reserved
    edges = np.linspace(ts[0], ts[-1], MAX_SERIES_POINTS + 1)[1:-1]
    starts = np.unique(np.concatenate([[0], np.searchsorted(ts, edges, side="left")]))
    starts = starts[starts < len(ts)]
    res = None if reserved is None else np.maximum.reduceat(reserved, starts)
    return ts[starts], np.maximum.reduceat(alloc, starts), res


def _int_or_none(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)) and value == value:
        return int(value)
    return None
