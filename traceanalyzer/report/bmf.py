"""Analysis -> Bencher Metric Format (BMF) JSON: the run's headline figures for a benchmark tracker.

BMF (https://bencher.dev/docs/reference/bencher-metric-format) is one JSON object
`{"<benchmark>": {"<measure>": {"value": v, "lower_value": lo, "upper_value": hi}}}`; `value` is
required, the bounds optional. One benchmark, `BENCHMARK`, holds one measure per figure the run has
(a figure the run lacks, e.g. GPU idle of a CPU-only capture, is left out, never written as 0). Measure
names carry their unit; docs/ci.md lists each with its definition. Numbers only: no string from a trace
is written, so the output is inert by construction.
"""

from __future__ import annotations

import orjson

from ..result.types import AnalysisData

BENCHMARK = "traceanalyzer"

# measure -> what it is (docs/ci.md repeats this table; tests check every measure written is listed here)
MEASURES = {
    "step-time-ms": "median step time (steady job steps, a job step lasts as long as its slowest rank); "
                    "lower_value p10, upper_value p90",
    "gpu-idle-fraction": "GPU idle fraction of the window (summary), 0-1",
    "dataloader-wait-fraction": "DataLoader wait fraction of the window (summary), 0-1",
    "memcpy-share-of-gpu-busy": "memcpy share of GPU busy time (summary), 0-1",
    "exposed-communication-fraction": "communication not overlapped with compute, summed over GPUs, over their "
                                      "summed windows, 0-1",
    "peak-gpu-memory-bytes": "largest GPU memory peak of the run: reserved where the memory events carry it, "
                             "else allocated",
    "samples-per-s": "samples per second (only with --batch-size)",
    "steps-per-s": "steady steps per second",
}


def _metric(value: float | None, low: float | None = None, high: float | None = None) -> dict[str, float] | None:
    if value is None:
        return None
    out = {"value": round(float(value), 6)}
    if low is not None and high is not None:
        out |= {"lower_value": round(float(low), 6), "upper_value": round(float(high), 6)}
    return out


def bmf_figures(a: AnalysisData) -> dict[str, dict[str, float]]:
    """The measures of one run (unit conversion and selection only; the figures are the result's)."""
    s = a.summary
    ms = (lambda us: None if us is None else us / 1000)  # noqa: E731
    devices = [d for r in a.ranks for d in r.devices
               if d.exposed_communication_us is not None and d.window_us]
    exposed = (sum(d.exposed_communication_us or 0.0 for d in devices) / sum(d.window_us or 0.0 for d in devices)
               if devices else None)
    peaks = [m.peak_reserved_bytes if m.peak_reserved_bytes is not None else m.peak_allocated_bytes
             for r in a.ranks for d in r.devices if (m := d.memory) is not None]
    peaks = [p for p in peaks if p is not None]
    values = {
        "step-time-ms": _metric(ms(s.step_time_median_us), ms(s.step_time_p10_us), ms(s.step_time_p90_us)),
        "gpu-idle-fraction": _metric(s.gpu_idle_fraction),
        "dataloader-wait-fraction": _metric(s.dataloader_wait_fraction),
        "memcpy-share-of-gpu-busy": _metric(s.memcpy_share_of_busy),
        "exposed-communication-fraction": _metric(exposed),
        "peak-gpu-memory-bytes": _metric(max(peaks) if peaks else None),
        "samples-per-s": _metric(s.samples_per_s),
        "steps-per-s": _metric(s.steps_per_s),
    }
    return {k: v for k, v in values.items() if v is not None}


def render_bmf(a: AnalysisData) -> bytes:
    return orjson.dumps({BENCHMARK: bmf_figures(a)}, option=orjson.OPT_INDENT_2) + b"\n"
