"""Counter logs onto the trace's clock: pure functions, Timeline(s) + options -> offsets.

A counter log's times are its own clock (`Source.clock`): local wall time of the machine that
ran nvidia-smi (`wall`), time of day only (`time_of_day`), sample numbers (`samples`) or epoch
(`epoch`). Traces are epoch nanoseconds when `RankInfo.clock == "epoch"`.

For each log, `align_logs` finds `offset_ns` with  log time + offset_ns = trace time:

* **given**: `--dmon-offset` was set: offset = what the clocks say (zone, date) + that skew;
* **clock**: what the clocks alone say: `wall` minus the UTC offset of `--dmon-tz` (default:
  this machine's zone, at the log's first sample); `time_of_day` also takes the trace's date;
  `samples` (or a trace without epoch times) assumes the log starts with the trace;
* **searched**: the offset whose log SM utilisation best matches the trace's GPU busy fraction
  in the same time bins (Pearson correlation, pooled over GPUs). Candidates: every zone shift
  from -12 h to +14 h in 15-minute steps (only the given zone with `--dmon-tz`) plus up to 30 s
  either way; any overlap for logs or traces without real times. The search result is used
  when it is clear (correlation >= MIN_FIT_CORRELATION, beating every offset more than
  RUNNER_UP_EXCLUSION_NS away by AMBIGUITY_MARGIN) and differs from the clock offset by more
  than one sample period; an ambiguous or too-short match keeps the clock offset and warns.

A log sample at time t describes [t - period, t) (nvidia-smi utilisation is "over the past
sample period"). `place_counters` moves the counters onto the trace clock and maps GPU indices.

Host monitor logs (glances; `Timeline.host_metrics`) follow the same clock rules without the search
(`host_log_offset`: host figures have nothing to correlate with GPU work): `place_host_logs` moves
their rows onto the trace's clock.

What the trace gives is a `TraceClock` of arrays (its span, whether it is on epoch time, each
device's GPU-busy intervals), made from the ranks' compact results, never a merged Timeline: the
logs are aligned where the ranks meet, however many there are.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import numpy as np
import pandas as pd

from . import intervals as iv
from . import timeline as T
from .errors import UsageError
from .timeline import UTIL_METRIC, Timeline

GIVEN, CLOCK, SEARCHED = "given", "clock", "searched"

ZONE_STEP_NS = 15 * 60 * 10**9
ZONE_MIN_NS = -12 * 3600 * 10**9
ZONE_MAX_NS = 14 * 3600 * 10**9
FINE_RANGE_NS = 30 * 10**9  # clock skew searched either way around each zone shift
MIN_OVERLAP_SAMPLES = 10  # fewer log samples inside the trace: too short to match
MIN_FIT_CORRELATION = 0.5  # a match weaker than this is not trusted
AMBIGUITY_MARGIN = 0.1  # the best match must beat every distant offset by this much
RUNNER_UP_EXCLUSION_NS = 5 * 10**9  # "distant" = further than this (and 3 bins) from the best
MIN_VARIANCE = 0.005**2  # utilisation (as a fraction) flatter than 0.5% std has no features
MAX_BINS = 1_000_000  # bins per correlation (log + trace); coarser bins beyond, then refined
_DAY_NS = 86_400 * 10**9
_MAX_GPU_INDEX = 2**31 - 1  # device indices are int32
_MAX_TIME_NS = 9 * 10**18  # moved log times must stay within int64 nanoseconds


@dataclass(frozen=True)
class AlignOptions:
    tz: str | None = None  # zone of the logging machine; None = this machine's zone
    offset_ns: int | None = None  # --dmon-offset: log time (after the zone) + this = trace time
    gpu_map: tuple[tuple[int, int], ...] = ()  # (log GPU index, trace device) pairs


@dataclass(frozen=True)
class TraceClock:
    """What aligning a log needs of the trace, as arrays (from the ranks' compact results)."""

    span_ns: tuple[int, int] | None  # first event start to last event end over every rank (None: no events)
    epoch: bool  # every rank's times are epoch times (and there is a rank)
    busy: dict[int, iv.IntervalSet] = field(default_factory=dict)  # device index -> GPU work, all ranks


@dataclass(frozen=True)
class HostLogAlignment:
    """How a host monitor log (glances) was put on the trace clock: by the clocks (or --dmon-offset) only,
    as host figures have nothing to correlate with GPU activity."""

    source: int  # index into the host logs' Timeline's sources: the log
    offset_ns: int  # log time + offset_ns = trace time
    method: str  # GIVEN | CLOCK
    zone: str
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class Fit:
    """How well log SM utilisation matches trace GPU busy fraction at an offset."""

    correlation: float | None  # Pearson r over the bins compared; None when undefined (flat)
    samples: int  # bins compared (about one per log sample per GPU)
    runner_up_correlation: float | None = None  # best r more than the exclusion away (search)
    runner_up_offset_ns: int | None = None
    ambiguous: bool = False


@dataclass(frozen=True)
class Alignment:
    source: int  # index into the log Timeline's sources
    clock: str  # the log's clock kind (Source.clock)
    method: str  # GIVEN | CLOCK | SEARCHED
    offset_ns: int  # log time + offset_ns = trace time
    clock_offset_ns: int  # what the clocks alone say
    zone: str  # zone behind clock_offset_ns, e.g. "UTC+01:00 (Europe/Berlin)"; "" when none
    skew_ns: int  # offset_ns minus the nearest zone shift (searched) or the clock offset
    fit: Fit | None  # None when nothing could be compared
    device_map: tuple[tuple[int, int], ...]  # (log GPU, trace device) used
    warnings: tuple[str, ...] = ()

    @property
    def offset_s(self) -> float:
        return self.offset_ns / 1e9


# --- options --------------------------------------------------------------------------------------
_FIXED_ZONE = re.compile(r"^(?:UTC|GMT)?\s*([+-])(\d{1,2})(?::?(\d{2}))?$", re.IGNORECASE)


def parse_zone(text: str) -> tzinfo:
    """'Europe/Berlin', 'UTC', '+05:30', '-0800', 'UTC+2' -> tzinfo; ValueError otherwise."""
    value = text.strip()
    if value.upper() in ("UTC", "Z", "GMT"):
        return timezone.utc
    m = _FIXED_ZONE.match(value)
    if m:
        sign = -1 if m.group(1) == "-" else 1
        hours, minutes = int(m.group(2)), int(m.group(3) or 0)
        if hours > 23 or minutes > 59:
            raise ValueError(f"time zone offset {text!r} out of range: expected -23:59 to +23:59")
        return timezone(sign * timedelta(hours=hours, minutes=minutes))
    try:
        return ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: a name too long for a file name
        raise ValueError(f"unknown time zone {text!r}: expected a zone name such as Europe/Berlin, "
                         f"UTC, or an offset such as +05:30") from None


def parse_gpu_map(items: list[str] | tuple[str, ...]) -> tuple[tuple[int, int], ...]:
    """['1=0', '3=1'] -> ((1, 0), (3, 1)); ValueError naming the bad item."""
    pairs: dict[int, int] = {}
    for item in items:
        m = re.fullmatch(r"\s*(\d{1,10})\s*=\s*(\d{1,10})\s*", item)
        if not m or max(int(m.group(1)), int(m.group(2))) > _MAX_GPU_INDEX:
            raise ValueError(f"{item!r} is not DMON_INDEX=DEVICE (e.g. 1=0; indices up to {_MAX_GPU_INDEX})")
        pairs[int(m.group(1))] = int(m.group(2))
    targets = list(pairs.values())
    if len(set(targets)) != len(targets):
        raise ValueError("two log GPUs mapped to the same trace device")
    return tuple(sorted(pairs.items()))


def zone_offset_ns(local_ns: int, tz: str | None) -> tuple[int, str]:
    """UTC offset (ns) of zone `tz` (None: this machine's) at a local wall time, and a label."""
    wall = datetime(1970, 1, 1) + timedelta(microseconds=local_ns // 1000)
    if tz is None:
        aware = wall.astimezone()  # naive -> this machine's zone (honours TZ)
        name = aware.tzname() or "local"
    else:
        aware = wall.replace(tzinfo=parse_zone(tz))
        name = tz
    delta = aware.utcoffset() or timedelta(0)
    ns = int(delta.total_seconds()) * 10**9
    label = _utc_label(ns)
    return ns, label if name == label else f"{label} ({name})"


def _utc_label(offset_ns: int) -> str:
    sign = "-" if offset_ns < 0 else "+"
    minutes = abs(offset_ns) // (60 * 10**9)
    return f"UTC{sign}{minutes // 60:02d}:{minutes % 60:02d}"


# --- alignment ------------------------------------------------------------------------------------
@dataclass
class _Log:
    """One log's utilisation, per trace device, on the log's own clock."""

    ends: list[np.ndarray] = field(default_factory=list)  # sample times (end of the period)
    util: list[np.ndarray] = field(default_factory=list)  # fraction 0..1
    busy: list[iv.IntervalSet] = field(default_factory=list)
    period_ns: int = 10**9


def device_series(counters: pd.DataFrame, device: int | None,
                  metric: str | None = None) -> Iterator[tuple[str, np.ndarray, np.ndarray]]:
    """(metric, values, ts_ns) in time order for each device/metric series of a counters table matching
    the filters."""
    dev = counters["device"].to_numpy()
    mask = np.ones(len(counters), dtype=bool) if device is None else dev == device
    if metric is not None:
        mask &= (counters["metric"] == metric).to_numpy()
    sel = counters[mask]
    if not len(sel):
        return
    for (_, name), group in sel.groupby(["device", "metric"], observed=True, sort=True):
        ts = group["ts_ns"].to_numpy()
        order = np.argsort(ts, kind="stable")
        yield str(name), group["value"].to_numpy()[order], ts[order]


def host_period_ns(ts_ns: np.ndarray) -> int | None:
    """A host log's refresh period: the median spacing of its distinct sample times (None: one sample)."""
    d = np.diff(np.unique(ts_ns))
    return int(np.median(d)) if len(d) else None


def align_logs(trace: TraceClock, logs: Timeline, options: AlignOptions) -> tuple[Alignment, ...]:
    """One Alignment per source of `logs` (a Timeline holding counters only)."""
    return tuple(_align_source(trace, logs, s, options) for s in range(len(logs.sources)))


def _align_source(trace: TraceClock, logs: Timeline, source: int, options: AlignOptions) -> Alignment:
    src = logs.sources[source]
    counters = logs.counters[logs.counters["source"].to_numpy() == source]
    warnings: list[str] = []
    span = trace.span_ns
    epoch_trace = trace.epoch
    log_devices = sorted(int(d) for d in np.unique(counters["device"].to_numpy()))
    device_map = _device_map(log_devices, options.gpu_map, warnings)
    times = counters["ts_ns"].to_numpy()
    first_ns = int(times.min()) if len(times) else 0
    last_ns = int(times.max()) if len(times) else 0
    if options.offset_ns is not None and not (-_MAX_TIME_NS <= first_ns + options.offset_ns
                                              and last_ns + options.offset_ns <= _MAX_TIME_NS):
        raise UsageError(f"--dmon-offset {options.offset_ns / 3.6e12:.0f} h moves {src.path} beyond the "
                         f"times that can be represented; offsets are at most a few centuries")

    # What the clocks alone say, and the candidates the search may try.
    clock = src.clock if epoch_trace else T.CLOCK_SAMPLES
    base, zone = clock_base(clock, span, first_ns, last_ns, _period_ns(counters), options.tz)

    log = _log_for_fit(trace, counters, device_map)
    if span is None or not log.ends:
        reason = ("the trace has no events" if span is None else
                  f"no {UTIL_METRIC} samples for a GPU the trace has work on")
        if options.offset_ns is None:
            warnings.append(f"offset not checked against the trace: {reason}")
        method = GIVEN if options.offset_ns is not None else CLOCK
        offset = base + (options.offset_ns or 0)
        return Alignment(source, src.clock, method, offset, base, zone, offset - base, None,
                         device_map, tuple(warnings))

    if options.offset_ns is not None:
        offset = base + options.offset_ns
        fit = _fit_at(log, span, offset)
        if fit.correlation is None or fit.correlation < MIN_FIT_CORRELATION:
            warnings.append(f"the given offset fits the trace poorly ({_r(fit.correlation)} between "
                            f"log SM utilisation and trace GPU busy, {fit.samples} bins)")
        return Alignment(source, src.clock, GIVEN, offset, base, zone, options.offset_ns, fit,
                         device_map, tuple(warnings))

    candidates = _candidates(clock, base, span, first_ns, last_ns, log.period_ns, options.tz)
    best, fit = _search(log, span, candidates)
    if fit.samples < MIN_OVERLAP_SAMPLES:
        warnings.append(f"overlap too short: at most {fit.samples} log samples fall inside the "
                        f"trace at any offset tried; need {MIN_OVERLAP_SAMPLES} to match them")
    if best is None or fit.ambiguous:
        at_clock = _fit_at(log, span, base)
        detail = ("the log's SM utilisation or the trace's GPU busy fraction is flat"
                  if best is None else
                  f"best {_r(fit.correlation)} at {_s(best)}, next {_r(fit.runner_up_correlation)} at "
                  f"{_s(fit.runner_up_offset_ns)}")
        warnings.append(f"automatic alignment is ambiguous ({detail}); kept the clock offset "
                        f"{_s(base)}; set --dmon-offset to fix it")
        return Alignment(source, src.clock, CLOCK, base, base, zone, 0,
                         Fit(at_clock.correlation, at_clock.samples, fit.runner_up_correlation,
                             fit.runner_up_offset_ns, True), device_map, tuple(warnings))
    if abs(best - base) <= log.period_ns:
        at_clock = _fit_at(log, span, base)
        return Alignment(source, src.clock, CLOCK, base, base, zone, 0,
                         Fit(at_clock.correlation, at_clock.samples, fit.runner_up_correlation,
                             fit.runner_up_offset_ns, False), device_map, tuple(warnings))
    skew, found_zone = _split_offset(clock, best, base, span)
    how = f"{found_zone}, skew {_s(skew)}" if found_zone else "the log has no real times"
    warnings.append(f"the log's clock disagrees with the trace: shifted by {_s(best - base)} from "
                    f"what the clocks say ({how})")
    return Alignment(source, src.clock, SEARCHED, best, base, found_zone or zone, skew, fit,
                     device_map, tuple(warnings))


def clock_base(clock: str, span: tuple[int, int] | None, first_ns: int, last_ns: int, period_ns: int,
               tz: str | None) -> tuple[int, str]:
    """What the clocks alone say: the offset (log time + offset = trace time) of a log on `clock`
    whose samples run first_ns..last_ns, and the zone behind it ("" when none). `clock` is
    CLOCK_SAMPLES for a trace without epoch times: the log is then taken to start with the trace."""
    if span is None or clock == T.CLOCK_EPOCH:
        return 0, ""
    if clock == T.CLOCK_WALL:
        zoff, zone = zone_offset_ns(first_ns, tz)
        return -zoff, zone
    if clock == T.CLOCK_TIME_OF_DAY:
        return _time_of_day_base(first_ns, last_ns, span, tz)
    return span[0] - first_ns + period_ns, ""


def host_log_offset(trace: TraceClock | None, source: int, clock: str, first_ns: int, last_ns: int,
                    period_ns: int | None, options: AlignOptions) -> HostLogAlignment:
    """The offset of host log `source` on `clock` (its Source.clock), by the same rules as counter logs:
    the zone (`--dmon-tz`, else this machine's), the trace's date for time-of-day logs, then the
    given skew (`--dmon-offset`)."""
    span = trace.span_ns if trace is not None else None
    epoch_trace = trace is not None and trace.epoch
    kind = clock if epoch_trace else T.CLOCK_SAMPLES
    base, zone = clock_base(kind, span, first_ns, last_ns, period_ns or 10**9, options.tz)
    warnings: list[str] = []
    if span is not None and not epoch_trace:
        warnings.append("the trace has no wall-clock times: the host log is taken to start with the trace; "
                        "set --dmon-offset to place it")
    offset = base + (options.offset_ns or 0)
    if span is not None and (first_ns + offset > span[1] or last_ns + offset < span[0]):
        warnings.append(f"the host log does not overlap the trace (it is {_s(first_ns + offset - span[0])} from "
                        f"the trace's start after the clock offset {_s(offset)}); check --dmon-tz / --dmon-offset")
    return HostLogAlignment(source, offset, GIVEN if options.offset_ns is not None else CLOCK, zone, tuple(warnings))


def place_counters(logs: Timeline, alignments: tuple[Alignment, ...]) -> Timeline:
    """The logs' counters moved onto the trace clock, GPU indices mapped to trace devices.
    Samples of a log GPU whose index another GPU was mapped onto are dropped (and counted)."""
    frame = logs.counters.copy()
    ts = frame["ts_ns"].to_numpy().copy()
    device = frame["device"].to_numpy().copy()
    keep = np.ones(len(frame), dtype=bool)
    source = frame["source"].to_numpy()
    out_sources = [replace(s, not_kept=dict(s.not_kept), warnings=list(s.warnings)) for s in logs.sources]
    for a in alignments:
        rows = source == a.source
        ts[rows] += np.int64(a.offset_ns)
        mapping = dict(a.device_map)
        uniq, inverse = np.unique(device[rows], return_inverse=True)
        new = np.array([mapping.get(int(d), -1) for d in uniq], dtype=np.int32)[inverse]
        dropped = int((new < 0).sum())
        if dropped:
            out_sources[a.source].not_kept["gpu_not_mapped"] = dropped
        keep[np.flatnonzero(rows)[new < 0]] = False
        device[rows] = new
    frame["ts_ns"] = ts
    frame["device"] = device.astype(np.int32)
    frame = frame[keep].reset_index(drop=True)
    return Timeline(counters=frame, sources=out_sources).validate()


# --- internals ------------------------------------------------------------------------------------
def _device_map(log_devices: list[int], gpu_map: tuple[tuple[int, int], ...],
                warnings: list[str]) -> tuple[tuple[int, int], ...]:
    mapping = dict(gpu_map)
    taken = set(mapping.values())
    out = []
    for d in log_devices:
        if d in mapping:
            out.append((d, mapping[d]))
        elif d in taken:
            warnings.append(f"log GPU {d} left out: --dmon-gpu maps another log GPU onto device {d}")
        else:
            out.append((d, d))
    missing = sorted(set(mapping) - set(log_devices))
    if missing:
        warnings.append(f"--dmon-gpu names log GPU(s) {missing} that the log does not have")
    return tuple(out)


def _period_ns(counters: pd.DataFrame) -> int:
    """Median spacing of one GPU's samples (the log's sample period)."""
    periods = []
    for _, _, ts in device_series(counters, None):
        if len(ts) > 1:
            d = np.diff(np.unique(ts))
            if len(d):
                periods.append(float(np.median(d)))
    return int(np.median(periods)) if periods else 10**9


def _log_for_fit(trace: TraceClock, counters: pd.DataFrame, device_map: tuple[tuple[int, int], ...]) -> _Log:
    log = _Log(period_ns=_period_ns(counters))
    busy = trace.busy
    for log_dev, trace_dev in device_map:
        if trace_dev not in busy:
            continue
        for _, values, ts in device_series(counters, log_dev, UTIL_METRIC):
            ok = ~np.isnan(values)
            if ok.sum() == 0:
                continue
            log.ends.append(ts[ok])
            log.util.append(np.clip(values[ok], 0, 100) / 100.0)
            log.busy.append(busy[trace_dev])
    return log


def _time_of_day_base(first_ns: int, last_ns: int, span: tuple[int, int], tz: str | None) -> tuple[int, str]:
    """Offset for a time-of-day log: the trace's local date (the one putting the log's middle
    nearest the trace's middle) minus the zone's UTC offset."""
    zoff, zone = _zone_at_epoch(span[0], tz)
    local_mid = (span[0] + span[1]) // 2 + zoff
    log_mid = (first_ns + last_ns) // 2
    day = local_mid - local_mid % _DAY_NS
    best = min((day + k * _DAY_NS for k in (-1, 0, 1)), key=lambda d: abs(d + log_mid - local_mid))
    return best - zoff, zone


def _zone_at_epoch(epoch_ns: int, tz: str | None) -> tuple[int, str]:
    instant = datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(microseconds=epoch_ns // 1000)
    aware = instant.astimezone() if tz is None else instant.astimezone(parse_zone(tz))
    delta = aware.utcoffset() or timedelta(0)
    ns = int(delta.total_seconds()) * 10**9
    label = _utc_label(ns)
    name = aware.tzname() if tz is None else tz
    return ns, label if name == label else f"{label} ({name})"


@dataclass(frozen=True)
class _Candidates:
    lo_ns: int  # smallest and largest total offset considered
    hi_ns: int
    centres: np.ndarray  # allowed offsets: within FINE_RANGE_NS of a centre; empty = any


def _candidates(clock: str, base: int, span: tuple[int, int], first_ns: int, last_ns: int,
                period_ns: int, tz: str | None) -> _Candidates:
    if clock == T.CLOCK_EPOCH:
        centres = np.array([0], dtype=np.int64)
    elif clock in (T.CLOCK_WALL, T.CLOCK_TIME_OF_DAY):
        if tz is not None:
            centres = np.array([base], dtype=np.int64)
        else:
            shifts = np.arange(ZONE_MIN_NS, ZONE_MAX_NS + 1, ZONE_STEP_NS, dtype=np.int64)
            if clock == T.CLOCK_WALL:
                centres = -shifts
            else:  # the date is unknown too: the trace's UTC date, a day either side
                day = span[0] - span[0] % _DAY_NS
                centres = np.unique(np.concatenate([day + k * _DAY_NS - shifts for k in (-1, 0, 1)]))
                # keep only centres that can put the log near the trace
                near = (first_ns + centres <= span[1] + FINE_RANGE_NS) & \
                       (last_ns + centres >= span[0] - FINE_RANGE_NS)
                centres = centres[near] if near.any() else centres
        centres = np.unique(np.r_[centres, base])
    else:  # any offset that overlaps the log with the trace
        lo = span[0] - last_ns
        hi = span[1] - first_ns + period_ns
        return _Candidates(lo, hi, np.zeros(0, dtype=np.int64))
    return _Candidates(int(centres.min()) - FINE_RANGE_NS, int(centres.max()) + FINE_RANGE_NS, centres)


@dataclass(frozen=True)
class _Scores:
    offsets: np.ndarray  # int64 total offsets, one per lag
    n: np.ndarray  # bins compared
    r: np.ndarray  # Pearson r (NaN when undefined)
    bin_ns: int


def _scores(log: _Log, span: tuple[int, int], lo_ns: int, hi_ns: int) -> _Scores:
    """Pearson r between binned log utilisation and trace busy fraction for every offset from
    lo_ns to hi_ns in steps of one bin, with FFT cross-correlations of the six running sums."""
    w0, w1 = span
    period = log.period_ns
    bin_ns = max(_round_ms(period), 1_000_000)
    # Only samples that some offset in [lo, hi] puts inside the trace can matter.
    s_lo, s_hi = w0 - hi_ns, w1 - lo_ns + period
    total_span = (s_hi - s_lo) + (w1 - w0)
    if total_span // bin_ns > MAX_BINS:
        bin_ns = _round_ms(-(-total_span // MAX_BINS)) + 1_000_000
    starts_all = [e - period for e in log.ends]
    kept = [(s >= s_lo) & (s < s_hi) for s in starts_all]
    if not any(k.any() for k in kept):
        return _Scores(np.zeros(0, np.int64), np.zeros(0), np.zeros(0), bin_ns)
    l0 = min(int(s[k].min()) for s, k in zip(starts_all, kept) if k.any())
    nl = max(int((s[k].max() - l0) // bin_ns) + 1 for s, k in zip(starts_all, kept) if k.any())
    # trace bin m covers [l0 + lo + m*bin, +bin); log bin j meets trace bin j + lag at offset lo + lag*bin
    m0 = -(-(w0 - l0 - lo_ns) // bin_ns)
    m1 = (w1 - l0 - lo_ns) // bin_ns  # exclusive: bins that end by w1
    nt = int(m1 - m0)
    nlags = int((hi_ns - lo_ns) // bin_ns) + 1
    if nt <= 0:
        return _Scores(np.zeros(0, np.int64), np.zeros(0), np.zeros(0), bin_ns)
    size = int(2 ** np.ceil(np.log2(nl + nt + 1)))
    sums = np.zeros((6, size))
    edges = l0 + lo_ns + (m0 + np.arange(nt + 1, dtype=np.int64)) * bin_ns
    for s, k, u, busy in zip(starts_all, kept, log.util, log.busy):
        if not k.any():
            continue
        j = ((s[k] - l0) // bin_ns).astype(np.int64)
        cnt = np.bincount(j, minlength=nl).astype(np.float64)
        tot = np.bincount(j, weights=u[k], minlength=nl)
        v = (cnt > 0).astype(np.float64)
        x = np.divide(tot, cnt, out=np.zeros(nl), where=cnt > 0)
        y = iv.overlap_per_window(busy, edges[:-1], edges[1:]) / bin_ns
        fa = np.fft.rfft(np.stack([v, v * x, v * x * x]), size)
        fb = np.fft.rfft(np.stack([np.ones(nt), y, y * y]), size)
        conj = np.conj(fa)
        pairs = ((0, 0), (1, 0), (2, 0), (0, 1), (0, 2), (1, 1))  # n, sx, sxx, sy, syy, sxy
        sums += np.fft.irfft(np.stack([fb[b] * conj[a] for a, b in pairs]), size)
    # lag index k' (trace bin = log bin + k') is stored at k' mod size; lag = k' + m0
    lags = np.arange(nlags, dtype=np.int64)
    kprime = lags - m0
    valid = (kprime > -nl) & (kprime < nt)
    idx = np.mod(kprime, size)
    n, sx, sxx, sy, syy, sxy = (np.where(valid, sums[i][idx], 0.0) for i in range(6))
    n = np.rint(n)
    with np.errstate(divide="ignore", invalid="ignore"):
        vx = sxx / n - (sx / n) ** 2
        vy = syy / n - (sy / n) ** 2
        cov = sxy / n - (sx / n) * (sy / n)
        r = cov / np.sqrt(vx * vy)
    r = np.where((n >= 2) & (vx > MIN_VARIANCE) & (vy > MIN_VARIANCE), np.clip(r, -1, 1), np.nan)
    return _Scores(lo_ns + lags * bin_ns, n, r, bin_ns)


def _search(log: _Log, span: tuple[int, int], cand: _Candidates) -> tuple[int | None, Fit]:
    sc = _scores(log, span, cand.lo_ns, cand.hi_ns)
    if not len(sc.offsets):
        return None, Fit(None, 0)
    allowed = np.ones(len(sc.offsets), dtype=bool)
    if len(cand.centres):
        pos = np.searchsorted(cand.centres, sc.offsets)
        left = np.abs(sc.offsets - cand.centres[np.clip(pos - 1, 0, len(cand.centres) - 1)])
        right = np.abs(cand.centres[np.clip(pos, 0, len(cand.centres) - 1)] - sc.offsets)
        allowed = np.minimum(left, right) <= FINE_RANGE_NS + sc.bin_ns // 2
    n_max = int(sc.n[allowed].max()) if allowed.any() else 0
    enough = allowed & (sc.n >= max(MIN_OVERLAP_SAMPLES, n_max // 2)) & ~np.isnan(sc.r)
    if not enough.any():
        return None, Fit(None, n_max)
    r = np.where(enough, sc.r, -np.inf)
    k = int(np.argmax(r))
    best = int(sc.offsets[k])
    if sc.bin_ns > log.period_ns * 2:  # coarse bins: refine around the best at the sample period
        fine = _scores(log, span, best - 2 * sc.bin_ns, best + 2 * sc.bin_ns)
        ok = (fine.n >= max(MIN_OVERLAP_SAMPLES, int(fine.n.max()) // 2)) & ~np.isnan(fine.r)
        if ok.any() and fine.bin_ns < sc.bin_ns:
            best = int(fine.offsets[int(np.argmax(np.where(ok, fine.r, -np.inf)))])
    exclusion = max(RUNNER_UP_EXCLUSION_NS, 3 * sc.bin_ns)
    far = enough & (np.abs(sc.offsets - sc.offsets[k]) > exclusion)
    runner, runner_at = None, None
    if far.any():
        j = int(np.argmax(np.where(far, sc.r, -np.inf)))
        runner, runner_at = float(sc.r[j]), int(sc.offsets[j])
    best_r = float(sc.r[k])
    ambiguous = (best_r < MIN_FIT_CORRELATION or n_max < MIN_OVERLAP_SAMPLES
                 or (runner is not None and best_r - runner < AMBIGUITY_MARGIN))
    best += _subbin(sc, k, enough)
    return best, Fit(best_r, int(sc.n[k]), runner, runner_at, ambiguous)


def _subbin(sc: _Scores, k: int, ok: np.ndarray) -> int:
    """Parabolic interpolation of r around the peak: a fraction of a bin, in ns."""
    if k == 0 or k >= len(sc.r) - 1 or not (ok[k - 1] and ok[k + 1]):
        return 0
    a, b, c = sc.r[k - 1], sc.r[k], sc.r[k + 1]
    denom = a - 2 * b + c
    if denom >= 0:
        return 0
    return int(np.clip(0.5 * (a - c) / denom, -0.5, 0.5) * sc.bin_ns)


def _fit_at(log: _Log, span: tuple[int, int], offset: int) -> Fit:
    sc = _scores(log, span, offset, offset)
    if not len(sc.offsets):
        return Fit(None, 0)
    r = float(sc.r[0])
    return Fit(None if np.isnan(r) else r, int(sc.n[0]))


def _split_offset(clock: str, offset: int, base: int, span: tuple[int, int]) -> tuple[int, str]:
    """A searched offset as zone shift + skew: (skew ns, 'UTC+05:30')."""
    if clock == T.CLOCK_WALL:
        shift = -int(round(offset / ZONE_STEP_NS)) * ZONE_STEP_NS
        return offset + shift, _utc_label(shift)
    if clock == T.CLOCK_TIME_OF_DAY:
        day = span[0] - span[0] % _DAY_NS
        rest = offset - day
        rest -= int(round(rest / _DAY_NS)) * _DAY_NS if abs(rest) > ZONE_MAX_NS else 0
        shift = -int(round(rest / ZONE_STEP_NS)) * ZONE_STEP_NS
        return rest + shift, _utc_label(shift)
    return offset - base, ""


def _round_ms(ns: int) -> int:
    return int(round(ns / 1e6)) * 1_000_000


def _r(x: float | None) -> str:
    return "r n/a" if x is None else f"r={x:.2f}"


def _s(ns: int | None) -> str:
    return "n/a" if ns is None else f"{ns / 1e9:+.3f} s"


def place_host_logs(logs: Timeline, trace: TraceClock | None,
                    options: AlignOptions) -> tuple[Timeline, tuple[HostLogAlignment, ...]]:
    """Every host log of `logs` moved from its own clock onto the trace's (`host_log_offset`: the counter
    logs' zone and skew options; `trace` None: no trace events), with how; the other tables are left as
    they are."""
    if not logs.host_logs:
        return logs, ()
    hm = logs.host_metrics
    ts = hm["ts_ns"].to_numpy().copy()
    source = hm["source"].to_numpy()
    out = []
    for h in logs.host_logs:
        rows = source == h.source
        mine = np.unique(ts[rows])
        first, last = (int(mine[0]), int(mine[-1])) if len(mine) else (0, 0)
        a = host_log_offset(trace, h.source, logs.sources[h.source].clock, first, last, host_period_ns(mine),
                            options)
        ts[rows] += np.int64(a.offset_ns)
        out.append(a)
    moved = hm.copy()
    moved["ts_ns"] = ts
    return replace(logs, host_metrics=moved).validate(), tuple(out)


@dataclass(frozen=True)
class RequestAlignment:
    """How a request-span export (OpenTelemetry: epoch ns, the serving host's wall clock) was put on the trace's
    clock: as it is when the trace's times are epoch times too (PyTorch traces with `baseTimeNanoseconds`,
    written on the same machine), else not at all."""

    on_trace_clock: bool
    warnings: tuple[str, ...] = ()


def place_requests(requests: Timeline, trace: TraceClock | None) -> tuple[Timeline, RequestAlignment]:
    """The request spans on the trace's clock: spans and trace both on the Unix epoch clock of the same host
    need no move (the assumption: the trace and the spans were written on one machine, whose clock the
    profiler's epoch base and the span exporter both read). A trace without epoch times cannot be matched:
    the spans' own figures are kept, no iteration is joined, and a warning says why."""
    if trace is None or not trace.epoch:
        return requests, RequestAlignment(False, (
            "request spans not joined to the serving iterations: the trace's times are not on the Unix epoch "
            "clock (no baseTimeNanoseconds), so the spans' epoch times cannot be placed on it; each request's "
            "own queue / prefill / decode times are shown",))
    warnings: tuple[str, ...] = ()
    ts, end = requests.requests["ts_ns"].to_numpy(), requests.requests["end_ns"].to_numpy()
    if trace.span_ns is not None and len(ts) and not ((ts < trace.span_ns[1]) & (end > trace.span_ns[0])).any():
        far = _s(_nearest(ts, end, trace.span_ns))
        warnings = (f"no request span overlaps the trace's capture (the nearest is {far} away): were they recorded "
                    f"in the same run, on the same machine?",)
    return requests, RequestAlignment(True, warnings)


def _nearest(ts: np.ndarray, end: np.ndarray, span: tuple[int, int]) -> int:
    """How far the closest span lies from a trace span it does not overlap (ns)."""
    before = span[0] - end[end <= span[0]]
    after = ts[ts >= span[1]] - span[1]
    return int(min(before.min() if len(before) else 2**62, after.min() if len(after) else 2**62))
