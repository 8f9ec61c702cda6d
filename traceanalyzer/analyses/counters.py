"""Figures from sampled GPU counters (nvidia-smi dmon / --query-gpu, DCGM): pure functions of
a Timeline's `counters` table (and, when there is one, the trace's GPU work) -> frozen results.

A sample taken at time t describes the period [t - period, t) (nvidia-smi utilisation is "over
the past sample period"); `period` is the median spacing of a GPU's samples. A sample is *inside*
a window when its period lies within the window, *outside* when its period lies entirely outside;
samples straddling an edge count in neither. Definitions in words: `traceanalyzer.definitions`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from .. import intervals as iv
from ..align import device_series
from ..timeline import COUNTER_METRICS, UTIL_METRIC

if TYPE_CHECKING:
    from . import RankAnalysis

# The cross-check warns when trace busy and log utilisation differ by more than this (points).
CROSS_CHECK_MARGIN_PCT = 15.0
# ... and only when at least this many samples were compared.
CROSS_CHECK_MIN_SAMPLES = 5
# Consecutive samples further apart than this many periods break a zero-utilisation run.
RUN_BREAK_PERIODS = 2.0
# Points in the utilisation-over-time series (bins of whole sample periods).
TIMESERIES_POINTS = 120
# A log's idle head and tail: its leading and trailing samples with SM utilisation at most this (percent) on every
# GPU lie outside the job (before it started, after it ended) and are set apart from the job's figures. nvidia-smi
# prints whole percents and an idle GPU reads 0, at times 1 (a monitoring query); a job reads more.
IDLE_EDGE_UTIL_PCT = 1.0
# Power beside utilisation: samples at this utilisation or more are the GPU's busy samples, whose power says how
# hard it worked; without a logged power limit, its power is compared with the power of its hardest-working
# phase, this percentile of its busy samples' power (a high one, not the maximum: one spike does not set it; of
# the busy samples, so that a log mostly idle does not take its idle draw for the hardest phase).
BUSY_UTIL_PCT = 90.0
HARD_POWER_PERCENTILE = 95.0
# A busy sample drawing less than this share of the GPU's power reference (limit, else hardest phase) works
# lightly: kernels keep the GPU occupied in time, not its SMs. A GPU running compute-bound kernels draws close to
# its limit; the margin leaves room for sampling noise and clock boost steps.
LIGHT_POWER_SHARE = 0.7


@dataclass(frozen=True)
class MetricFigures:
    metric: str
    samples: int  # samples with a value (missing '-' values are not counted)
    mean: float | None
    min: float | None
    max: float | None
    window_samples: int  # inside the trace window (0 without a trace)
    window_mean: float | None
    outside_samples: int
    outside_mean: float | None


@dataclass(frozen=True)
class ZeroRuns:
    """Runs of consecutive samples with SM utilisation exactly 0."""

    runs: int
    total_samples: int
    total_ns: int  # total_samples x period
    longest_samples: int
    longest_ns: int
    longest_first_ns: int | None  # time of the run's first and last zero sample
    longest_last_ns: int | None


@dataclass(frozen=True)
class JobSpan:
    """A GPU's SM utilisation over the job's span: the log less its idle head and tail, the leading and trailing
    samples at most IDLE_EDGE_UTIL_PCT on every GPU of the logs (`job_span`)."""

    first_ns: int  # the GPU's first and last sample inside the span
    last_ns: int
    samples: int  # inside the span, with a utilisation value
    head_samples: int  # set apart before the span (idle head) ...
    tail_samples: int  # ... and after it (idle tail)
    sm_util_mean: float | None
    zero_runs: ZeroRuns

    @property
    def trimmed(self) -> bool:
        return self.head_samples > 0 or self.tail_samples > 0


@dataclass(frozen=True)
class PowerFigures:
    """A GPU's power (and clock) beside its utilisation, over the samples that log both: how hard it worked
    while nvidia-smi called it busy (utilisation at least BUSY_UTIL_PCT). nvidia-smi's utilisation is the
    share of time a kernel runs, not how busy the SMs are: power says the rest."""

    samples: int  # samples with utilisation and power
    busy_samples: int  # of those, at utilisation >= BUSY_UTIL_PCT
    busy_util_mean: float | None  # mean utilisation over the busy samples
    busy_power_w: float | None  # median power over the busy samples
    light_samples: int  # busy samples at under LIGHT_POWER_SHARE of `reference_w`
    power_mean_w: float | None  # mean power over every sample with utilisation and power
    limit_w: float | None  # median logged power limit (power.limit / enforced.power.limit)
    hard_power_w: float | None  # HARD_POWER_PERCENTILE of its busy samples' power (all when none is busy)
    busy_clock_mhz: float | None  # median SM (else graphics) clock over the busy samples
    top_clock_mhz: float | None  # the highest SM (else graphics) clock logged

    @property
    def reference_w(self) -> float | None:
        """What the busy power is compared with: the power limit when logged, else the hardest phase's power."""
        return self.limit_w if self.limit_w else self.hard_power_w


@dataclass(frozen=True)
class CrossCheckFigures:
    """Trace GPU busy vs log SM utilisation over the same sample periods inside the window."""

    samples: int
    trace_busy_pct: float
    log_util_pct: float
    difference_pct: float  # log - trace, percentage points
    disagrees: bool  # |difference| > CROSS_CHECK_MARGIN_PCT with enough samples


@dataclass(frozen=True)
class CounterFigures:
    device: int  # trace device after alignment, else the log's GPU index
    sources: tuple[int, ...]  # indices into Timeline.sources
    period_ns: int
    first_ns: int
    last_ns: int
    samples: int  # distinct sample times
    metrics: tuple[MetricFigures, ...]
    zero_runs: ZeroRuns | None  # None when the log has no SM utilisation
    cross_check: CrossCheckFigures | None  # None without a trace window or trace GPU work
    # SM utilisation over time: (bin start ns, mean percent) in up to TIMESERIES_POINTS bins
    utilisation: tuple[tuple[int, float], ...]
    # the job's span without a trace (the log less its idle head and tail); None with a trace window, without
    # SM utilisation, or when no GPU of the logs is ever above IDLE_EDGE_UTIL_PCT
    job: JobSpan | None = None
    # power beside utilisation over the job's span (the log's when none), None without power or utilisation
    power: PowerFigures | None = None


# --- what a rank gives the job's counter logs -------------------------------------------------------
def rank_busy_sets(r: RankAnalysis) -> dict[int, iv.IntervalSet]:
    """Per device index of one rank's figures: its kernel, memcpy and memset intervals merged
    (`DeviceBusy.work`), what the job's counter logs are aligned and cross-checked with
    (`merge_busy_sets` joins the ranks')."""
    return {d.device: d.busy.work for d in r.devices}


def merge_busy_sets(parts: list[dict[int, iv.IntervalSet]]) -> dict[int, iv.IntervalSet]:
    """Several ranks' `rank_busy_sets` as one: per device index, the union over the ranks."""
    out: dict[int, iv.IntervalSet] = {}
    for part in parts:
        for device, (s, e) in part.items():
            if device in out:
                s, e = iv.union(np.r_[out[device][0], s], np.r_[out[device][1], e])
            out[device] = (s, e)
    return out


def job_window(windows: list[tuple[int, int] | None]) -> tuple[int, int] | None:
    """The report's window over all ranks, from each rank's window (None: empty): earliest start to
    latest end."""
    found = [w for w in windows if w is not None]
    if not found:
        return None
    return min(w[0] for w in found), max(w[1] for w in found)


# --- figures ----------------------------------------------------------------------------------------
def counter_figures(counters: pd.DataFrame, window: tuple[int, int] | None = None,
                    busy: dict[int, iv.IntervalSet] | None = None) -> tuple[CounterFigures, ...]:
    """Per GPU in a counters table; `window` (trace clock) splits inside/outside figures and, with the
    trace's GPU work per device (`busy`, `merge_busy_sets`), enables the cross-check."""
    if not len(counters):
        return ()
    busy = busy if window is not None and busy is not None else {}
    out = []
    for device in sorted(int(d) for d in np.unique(counters["device"].to_numpy())):
        rows = counters[counters["device"].to_numpy() == device]
        out.append(_device(device, rows, window, busy.get(device)))
    return tuple(out) if window is not None else job_span(counters, tuple(out))


def job_span(counters: pd.DataFrame, devices: tuple[CounterFigures, ...]) -> tuple[CounterFigures, ...]:
    """`devices` with their figures over the job's span (`CounterFigures.job`): from the first to the last sample
    time at which any GPU reads more than IDLE_EDGE_UTIL_PCT (a sample within half a period of those times is
    inside). Unchanged when no GPU ever does (an unused GPU has no job to cut out)."""
    series = {d.device: next(((v, t) for _, v, t in device_series(counters, d.device, UTIL_METRIC)), None)
              for d in devices}
    active = [t[v > IDLE_EDGE_UTIL_PCT] for v, t in (s for s in series.values() if s is not None)]
    active = [a for a in active if len(a)]
    if not active:
        return devices
    lo, hi = min(int(a[0]) for a in active), max(int(a[-1]) for a in active)
    out = []
    for d in devices:
        s = series[d.device]
        if s is None:
            out.append(d)
            continue
        values, ts = s
        half = d.period_ns // 2
        inside = (ts >= lo - half) & (ts <= hi + half)
        if not inside.any():  # a GPU whose samples all fall outside the others' job
            out.append(d)
            continue
        v, t = values[inside], ts[inside]
        ok = ~np.isnan(v)
        k = np.flatnonzero(inside)
        rows = counters[counters["device"].to_numpy() == d.device]
        span = rows[(rows["ts_ns"].to_numpy() >= t[0]) & (rows["ts_ns"].to_numpy() <= t[-1])]
        out.append(replace(d, job=JobSpan(
            int(t[0]), int(t[-1]), int(ok.sum()), int(k[0]), int(len(ts) - 1 - k[-1]), _mean(v[ok]),
            zero_runs(v, t, d.period_ns)), power=power_figures(span)))
    return tuple(out)


def _device(device: int, rows: pd.DataFrame, window: tuple[int, int] | None,
            busy: iv.IntervalSet | None) -> CounterFigures:
    times = np.unique(rows["ts_ns"].to_numpy())
    period = int(np.median(np.diff(times))) if len(times) > 1 else 0
    metrics = []
    util: tuple[np.ndarray, np.ndarray] | None = None
    series = {m: (v, t) for m, v, t in device_series(rows, device)}
    for metric in _metric_order(list(series)):
        values, ts = series[metric]
        metrics.append(_metric(metric, values, ts, period, window))
        if metric == UTIL_METRIC:
            util = (values, ts)
    return CounterFigures(
        device=device,
        sources=tuple(sorted(int(s) for s in np.unique(rows["source"].to_numpy()))),
        period_ns=period, first_ns=int(times[0]), last_ns=int(times[-1]), samples=len(times),
        metrics=tuple(metrics),
        zero_runs=None if util is None else zero_runs(*util, period),
        cross_check=None if util is None or window is None or busy is None
        else cross_check(*util, period, window, busy),
        utilisation=() if util is None else _timeseries(*util, period),
        power=power_figures(rows),
    )


def power_figures(rows: pd.DataFrame) -> PowerFigures | None:
    """One GPU's counters rows -> its PowerFigures, joining the metrics by sample time; None without
    utilisation and power logged at the same times."""
    metrics = set(rows["metric"].astype(str).unique())
    if not {UTIL_METRIC, "power_w"} <= metrics:
        return None
    wide = rows.pivot_table(index="ts_ns", columns="metric", values="value", aggfunc="mean", observed=True)
    if not {UTIL_METRIC, "power_w"} <= set(wide.columns):  # a metric without a single value
        return None
    both = wide[[UTIL_METRIC, "power_w"]].dropna()
    if not len(both):
        return None
    util, power = both[UTIL_METRIC].to_numpy(), both["power_w"].to_numpy()
    busy = util >= BUSY_UTIL_PCT
    limit = wide["power_limit_w"].dropna().to_numpy() if "power_limit_w" in wide else np.zeros(0)
    clock_name = next((m for m in ("sm_clock_mhz", "graphics_clock_mhz") if m in wide), None)
    clock = wide.loc[both.index, clock_name].to_numpy() if clock_name else np.zeros(len(both))
    busy_clock = clock[busy][~np.isnan(clock[busy])] if clock_name else np.zeros(0)
    all_clock = wide[clock_name].dropna().to_numpy() if clock_name else np.zeros(0)
    limit_w = float(np.median(limit)) if len(limit) and np.median(limit) > 0 else None
    hard_w = float(np.percentile(power[busy] if busy.any() else power, HARD_POWER_PERCENTILE))
    reference = limit_w or hard_w
    return PowerFigures(
        samples=len(both), busy_samples=int(busy.sum()), busy_util_mean=_mean(util[busy]),
        busy_power_w=float(np.median(power[busy])) if busy.any() else None,
        light_samples=int((power[busy] < LIGHT_POWER_SHARE * reference).sum()), power_mean_w=_mean(power),
        limit_w=limit_w, hard_power_w=hard_w,
        busy_clock_mhz=float(np.median(busy_clock)) if len(busy_clock) else None,
        top_clock_mhz=float(all_clock.max()) if len(all_clock) else None)


def _metric_order(names: list[str]) -> list[str]:
    known = [m for m in COUNTER_METRICS if m in set(names)]
    return known + sorted(set(names) - set(known))


def _inside(ts: np.ndarray, period: int, window: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    lo, hi = window
    inside = (ts - period >= lo) & (ts <= hi)
    outside = (ts <= lo) | (ts - period >= hi)
    return inside, outside


def _metric(metric: str, values: np.ndarray, ts: np.ndarray, period: int,
            window: tuple[int, int] | None) -> MetricFigures:
    ok = ~np.isnan(values)
    v = values[ok]
    if window is None:
        inside = outside = np.zeros(len(values), dtype=bool)
    else:
        inside, outside = _inside(ts, period, window)
    vin, vout = values[ok & inside], values[ok & outside]
    return MetricFigures(
        metric, int(ok.sum()), _mean(v), float(v.min()) if len(v) else None,
        float(v.max()) if len(v) else None, len(vin), _mean(vin), len(vout), _mean(vout))


metric_figures = _metric  # the same summary for host logs (analyses/host_logs.py)


def _mean(v: np.ndarray) -> float | None:
    # summed in extended precision: absurd but finite values (1e308) must not overflow to inf
    return float(v.mean(dtype=np.longdouble)) if len(v) else None


def zero_runs(values: np.ndarray, ts: np.ndarray, period: int) -> ZeroRuns:
    """Maximal runs of consecutive zero-utilisation samples (a missing value, or samples more
    than RUN_BREAK_PERIODS periods apart, end a run)."""
    zero = values == 0
    if not zero.any():
        return ZeroRuns(0, 0, 0, 0, 0, None, None)
    idx = np.flatnonzero(zero)
    gap = np.diff(ts[idx]) > RUN_BREAK_PERIODS * period if period > 0 else np.zeros(len(idx) - 1, bool)
    new_run = np.r_[True, (np.diff(idx) > 1) | gap]
    starts = np.flatnonzero(new_run)
    ends = np.r_[starts[1:], len(idx)]
    lengths = ends - starts
    k = int(np.argmax(lengths))  # first of the longest runs
    first, last = idx[starts[k]], idx[ends[k] - 1]
    return ZeroRuns(len(starts), len(idx), len(idx) * period, int(lengths[k]),
                    int(lengths[k]) * period, int(ts[first]), int(ts[last]))


def cross_check(values: np.ndarray, ts: np.ndarray, period: int, window: tuple[int, int],
                busy: iv.IntervalSet) -> CrossCheckFigures | None:
    if period <= 0:
        return None
    inside, _ = _inside(ts, period, window)
    sel = inside & ~np.isnan(values)
    n = int(sel.sum())
    if n == 0:
        return None
    ends = ts[sel]
    covered = iv.overlap_per_window(busy, ends - period, ends)
    trace_pct = 100.0 * float(covered.sum()) / (n * period)
    log_pct = float(values[sel].mean())
    diff = log_pct - trace_pct
    return CrossCheckFigures(n, trace_pct, log_pct, diff,
                             abs(diff) > CROSS_CHECK_MARGIN_PCT and n >= CROSS_CHECK_MIN_SAMPLES)


def _timeseries(values: np.ndarray, ts: np.ndarray, period: int) -> tuple[tuple[int, float], ...]:
    ok = ~np.isnan(values)
    if not ok.any():
        return ()
    v, t = values[ok], ts[ok]
    step = max(period, 1)
    span = int(t[-1] - t[0]) + step
    per_bin = max(1, -(-span // (step * TIMESERIES_POINTS)))
    width = per_bin * step
    b = (t - t[0]) // width
    sums = np.bincount(b, weights=v)
    counts = np.bincount(b)
    keep = counts > 0
    starts = t[0] + np.arange(len(sums), dtype=np.int64) * width
    return tuple((int(s), float(m)) for s, m in zip(starts[keep], sums[keep] / counts[keep]))
