"""Counters a trace recorded itself (Kineto 2026 "GPU N Counters": CUPTI PM sampling), per device of a
rank: each metric's samples in the window, their mean, min and max. Timeline -> figures.

They are the rank's own rows of the counters table (those whose source is the rank's trace file),
apart from counter logs (nvidia-smi, DCGM), which are sources of their own and a job stage's business.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..timeline import Timeline
from . import figures as F

__all__ = ["TraceCounter", "trace_counters"]


@dataclass(frozen=True)
class TraceCounter:
    metric: str
    samples: int
    mean: float | None
    min: float | None
    max: float | None


def trace_counters(tl: Timeline, rank: int, device: int, window: F.Window) -> tuple[TraceCounter, ...]:
    """The rank's trace counters of `device` with samples inside `window` (the whole trace when the
    window is empty), by metric name."""
    co = tl.counters
    if not len(co) or rank >= len(tl.ranks):
        return ()
    ts = co["ts_ns"].to_numpy()
    mine = (co["source"].to_numpy() == tl.ranks[rank].source) & (co["device"].to_numpy() == device)
    if window.dur_ns > 0:
        mine &= (ts >= window.start_ns) & (ts <= window.end_ns)
    rows = co[mine]
    out = []
    for metric, part in rows.groupby(rows["metric"].astype(str), sort=True):
        v = part["value"].to_numpy()
        ok = v[np.isfinite(v)]
        out.append(TraceCounter(str(metric), len(v), float(ok.mean()) if len(ok) else None,
                                float(ok.min()) if len(ok) else None, float(ok.max()) if len(ok) else None))
    return tuple(out)
