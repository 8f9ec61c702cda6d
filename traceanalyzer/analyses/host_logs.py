"""Figures from host monitor logs (glances): pure functions of a Timeline whose `host_metrics` are on
the trace's clock (`align.place_host_logs`, whose alignments say how) and of the ranks' DataLoader
waits (`RankAnalysis.dataloader_waits`, inside each rank's window) -> frozen results.

A sample taken at time t describes its refresh period [t - period, t) (glances' CPU percentages are
"since the last refresh"). Metric summaries are those of GPU counter logs (`counters.metric_figures`:
all samples, inside the trace window, outside it). **During DataLoader waits**: each metric's mean
over the samples whose period overlaps the waits, weighted by the wait time inside that period, so a
sample half covered by waits counts half as much as one fully covered.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import intervals as iv
from ..align import HostLogAlignment, host_period_ns
from ..timeline import Source, Timeline
from .counters import MetricFigures, metric_figures

SERIES_POINTS = 600  # samples drawn per host log (every k-th beyond)
SERIES_METRICS = ("cpu_user_pct", "cpu_system_pct", "cpu_iowait_pct")
MAX_WAIT_SPANS = 2000  # DataLoader-wait spans drawn (the longest beyond)


@dataclass(frozen=True)
class WaitFigures:
    """Host figures over the DataLoader waits of a set of ranks."""

    samples: int  # samples whose period overlaps a wait
    covered_ns: int  # wait time inside sampled periods
    wait_ns: int  # all wait time (union) of those ranks in the window
    means: dict[str, float]  # metric -> wait-weighted mean

    @property
    def covered_fraction(self) -> float | None:
        return self.covered_ns / self.wait_ns if self.wait_ns > 0 else None


@dataclass(frozen=True)
class HostLogFigures:
    source: Source  # the log as read: path, format, sample counts, own clock, warnings
    cores: int | None  # logical CPUs of the host (HostLogInfo.cores)
    offset_ns: int  # log time + offset = trace time
    method: str
    zone: str
    warnings: tuple[str, ...]
    ts_ns: np.ndarray  # sample times on the trace clock
    values: dict[str, np.ndarray]  # metric -> value per sample (NaN: missing), HOST_METRICS order
    period_ns: int | None
    metrics: tuple[MetricFigures, ...]
    during_wait: WaitFigures  # all ranks' waits together
    by_rank: dict[int, WaitFigures]  # rank index -> its own waits
    wait_spans: tuple[np.ndarray, np.ndarray]  # the waits drawn (union over ranks), trace clock


def host_figures(logs: Timeline, alignments: tuple[HostLogAlignment, ...], waits: dict[int, iv.IntervalSet] | None,
                 window: tuple[int, int] | None) -> tuple[HostLogFigures, ...]:
    """Every host log of `logs` (already on the trace's clock, placed as `alignments` say), summarised
    against the trace's window and each rank's DataLoader waits (`RankAnalysis.dataloader_waits`, by rank
    index in the job; None: no trace events)."""
    info = {h.source: h for h in logs.host_logs}
    out = []
    for a in alignments:
        ts, values = logs.host_samples(a.source)
        out.append(host_log_figures(logs.sources[a.source], info[a.source].cores, ts, values, host_period_ns(ts),
                                    a, waits, window))
    return tuple(out)


def host_log_figures(source: Source, cores: int | None, ts: np.ndarray, values: dict[str, np.ndarray],
                     period: int | None, a: HostLogAlignment, waits: dict[int, iv.IntervalSet] | None,
                     window: tuple[int, int] | None) -> HostLogFigures:
    metrics = tuple(metric_figures(m, v, ts, period or 0, window) for m, v in values.items())
    waits = waits or {}
    by_rank = {i: wait_figures(values, ts, period, w) for i, w in waits.items()}
    all_s = np.concatenate([w[0] for w in waits.values()]) if waits else np.zeros(0, np.int64)
    all_e = np.concatenate([w[1] for w in waits.values()]) if waits else np.zeros(0, np.int64)
    union = iv.union(all_s, all_e)
    return HostLogFigures(source, cores, a.offset_ns, a.method, a.zone, a.warnings, ts, values, period, metrics,
                          wait_figures(values, ts, period, union), by_rank, _drawn(union))


def wait_figures(values: dict[str, np.ndarray], ts_ns: np.ndarray, period_ns: int | None,
                 waits: iv.IntervalSet) -> WaitFigures:
    """Wait-weighted means of every metric over the samples whose period overlaps `waits`."""
    wait_ns = iv.total(waits)
    if not period_ns or not len(ts_ns) or wait_ns == 0:
        return WaitFigures(0, 0, wait_ns, {})
    weight = iv.overlap_per_window(waits, ts_ns - period_ns, ts_ns).astype(np.float64)
    hit = weight > 0
    means: dict[str, float] = {}
    for metric, v in values.items():
        ok = hit & ~np.isnan(v)
        if ok.any():
            # extended precision: absurd but finite values (1e308) must not overflow the weighted sum
            means[metric] = float(np.average(v[ok].astype(np.longdouble), weights=weight[ok]))
    return WaitFigures(int(hit.sum()), int(weight.sum()), wait_ns, means)


def _drawn(waits: iv.IntervalSet) -> tuple[np.ndarray, np.ndarray]:
    s, e = waits
    if len(s) <= MAX_WAIT_SPANS:
        return s, e
    keep = np.sort(np.argsort(e - s, kind="stable")[::-1][:MAX_WAIT_SPANS])
    return s[keep], e[keep]


__all__ = ["HostLogFigures", "WaitFigures", "host_figures", "host_log_figures", "wait_figures"]
