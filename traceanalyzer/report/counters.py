"""Counter figures and alignments -> plain report data (part of the JSON interface).

Adds to a Report:
* `counter_logs[i]`: one per nvidia-smi / DCGM log: `offset_s` (log time + offset_s = trace
  time), `offset_method` (`given` | `clock` | `searched`), the clock offset, zone and skew,
  the `fit`, the GPU mapping and the log's warnings;
* `counters[j]`: one per GPU in the logs (after mapping to trace devices);
* `ranks[r].devices[j].counters`: the same per-GPU figures for a trace device, with the
  `offset_s`, `offset_method` and `fit` of the log they came from.
Times inside the counters are seconds (`*_s`) from the GPU's first sample; absolute times are
text in the clock they are on. No computation beyond unit conversion and rounding.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from .. import timeline as T
from ..align import Alignment
from ..analyses.counters import CROSS_CHECK_MARGIN_PCT, DeviceCounters
from ..timeline import Timeline
from .build import Report


def add_counters(report: Report, tl: Timeline, figures: tuple[DeviceCounters, ...],
                 alignments: tuple[Alignment, ...], aligned: bool) -> Report:
    """`aligned`: counters are on the trace clock (a trace was read with the logs)."""
    by_source = {a.source: a for a in alignments}
    trace_clock = _trace_clock(tl)
    logs = []
    for i, src in enumerate(tl.sources):
        if not src.clock:
            continue
        a = by_source.get(i)
        logs.append(_log(src, a))
        report["warnings"].extend(f"{src.path}: {w}" for w in (a.warnings if a else ()))
    devices = []
    for d in figures:
        clock = trace_clock if aligned else tl.sources[d.sources[0]].clock
        entry = _device(tl, d, clock, by_source)
        devices.append(entry)
        cc = entry["cross_check"]
        if cc and cc["disagrees"]:
            report["warnings"].append(
                f"GPU {d.device}: the trace says the GPU was busy {cc['trace_busy_pct']:.1f}% of the "
                f"sampled periods inside the window, nvidia-smi says {cc['log_util_pct']:.1f}% (more than "
                f"{CROSS_CHECK_MARGIN_PCT:.0f} points apart): another process on the GPU, or a wrong "
                f"alignment (see counter_logs[].fit)")
    report["counter_logs"] = logs
    report["counters"] = devices
    by_device = {e["device"]: e for e in devices}
    for rank in report["ranks"]:
        for dev in rank["devices"]:
            dev["counters"] = by_device.get(dev["index"]) if aligned else None
    return report


def _trace_clock(tl: Timeline) -> str:
    return "epoch" if tl.ranks and all(r.clock == "epoch" for r in tl.ranks) else "trace"


def _log(src: T.Source, a: Alignment | None) -> dict[str, Any]:
    return {
        "path": src.path,
        "format": src.format,
        "clock": src.clock,
        "samples_read": src.events_read,
        "samples_kept": src.events_kept,
        "offset_s": None if a is None else _r(a.offset_ns / 1e9, 6),
        "offset_method": None if a is None else a.method,
        "clock_offset_s": None if a is None else _r(a.clock_offset_ns / 1e9, 6),
        "zone": None if a is None else a.zone,
        "skew_s": None if a is None else _r(a.skew_ns / 1e9, 6),
        "fit": None if a is None else _fit(a),
        "gpu_map": None if a is None else [{"log_gpu": g, "device": d} for g, d in a.device_map],
        "warnings": list(src.warnings) + ([] if a is None else list(a.warnings)),
    }


def _fit(a: Alignment) -> dict[str, Any] | None:
    f = a.fit
    if f is None:
        return None
    return {
        "correlation": _r(f.correlation, 4),
        "bins": f.samples,
        "runner_up_correlation": _r(f.runner_up_correlation, 4),
        "runner_up_offset_s": None if f.runner_up_offset_ns is None else _r(f.runner_up_offset_ns / 1e9, 3),
        "ambiguous": f.ambiguous,
    }


def _device(tl: Timeline, d: DeviceCounters, clock: str, by_source: dict[int, Alignment]) -> dict[str, Any]:
    a = next((by_source[s] for s in d.sources if s in by_source), None)
    z, cc = d.zero_runs, d.cross_check
    return {
        "device": d.device,
        "sources": [tl.sources[s].path for s in d.sources],
        "period_s": _r(d.period_ns / 1e9, 6),
        "samples": d.samples,
        "first_sample": time_text(d.first_ns, clock),
        "last_sample": time_text(d.last_ns, clock),
        "duration_s": _r((d.last_ns - d.first_ns) / 1e9, 3),
        "offset_s": None if a is None else _r(a.offset_ns / 1e9, 6),
        "offset_method": None if a is None else a.method,
        "fit": None if a is None else _fit(a),
        "metrics": {
            m.metric: {"samples": m.samples, "mean": _r(m.mean), "min": _r(m.min), "max": _r(m.max),
                       "window_samples": m.window_samples, "window_mean": _r(m.window_mean),
                       "outside_samples": m.outside_samples, "outside_mean": _r(m.outside_mean)}
            for m in d.metrics
        },
        "zero_util_runs": None if z is None else {
            "runs": z.runs,
            "total_samples": z.total_samples,
            "total_s": _r(z.total_ns / 1e9, 3),
            "longest_samples": z.longest_samples,
            "longest_s": _r(z.longest_ns / 1e9, 3),
            "longest_start_s": None if z.longest_first_ns is None else _r((z.longest_first_ns - d.first_ns) / 1e9, 3),
            "longest_first_sample": None if z.longest_first_ns is None else time_text(z.longest_first_ns, clock),
            "longest_last_sample": None if z.longest_last_ns is None else time_text(z.longest_last_ns, clock),
        },
        "cross_check": None if cc is None else {
            "samples": cc.samples, "trace_busy_pct": _r(cc.trace_busy_pct, 2),
            "log_util_pct": _r(cc.log_util_pct, 2), "difference_pct": _r(cc.difference_pct, 2),
            "margin_pct": CROSS_CHECK_MARGIN_PCT, "disagrees": cc.disagrees,
        },
        "utilisation": [{"start_s": _r((t - d.first_ns) / 1e9, 3), "sm_util_pct": _r(v, 2)}
                        for t, v in d.utilisation],
    }


def time_text(ns: int, clock: str) -> str:
    """An absolute time as text, in the clock it is on."""
    if clock == T.CLOCK_SAMPLES:
        return f"sample at {ns / 1e9:.3f} s"
    if clock == "trace":
        return f"{ns / 1e9:.6f} s (trace clock)"
    if clock == T.CLOCK_TIME_OF_DAY:
        day_ns = ns % (86_400 * 10**9)
        t = datetime(1970, 1, 1) + timedelta(microseconds=day_ns // 1000)
        return t.strftime("%H:%M:%S.%f")[:-3] + " (local time of day)"
    t = datetime(1970, 1, 1) + timedelta(microseconds=ns // 1000)
    text = t.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    return text + (" UTC" if clock == T.CLOCK_EPOCH else " (local)")


def _r(x: float | None, digits: int = 3) -> float | None:
    return None if x is None else round(float(x), digits)
