"""The run's metrics: each run-level figure defined once, and read from a result by every face.

A metric is a key (what `--fail-on` and the service's history call it), a label, a unit, its
direction, its definition and the function that reads it from an `AnalysisData`. The report's
summary, `--fail-on` (gates.py), `--format bmf` (report/bmf.py), `diff` (compare.py), the service's
stored figures and history (serve/) all read them here, so a run has one step time everywhere: the
**job step** (a step lasts as long as its slowest rank; steady steps only), the summary's
`step_time_median_us`, made by `result/build.summary` from `analyses/throughput.py`.

The figures not in the summary (exposed communication over the GPUs' windows, the largest GPU memory
peak) are computed here, once, from the ranks' devices, so saved reports of every schema have them. The
steady steps (`job_steps`) are also where `diff`'s per-step means and parts come from (`steady_step_mean`).
docs/architecture.md says, for every metric, where it is made and where it is defined in words.
docs/ci.md and docs/figures.md list the registry (`python docs/_generate.py`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..analyses.throughput import job_step_durations, step_time_stats
from .types import AnalysisData

# Units: how a value is written (the service's charts, docs). A fraction lies in [0, 1].
MS, FRACTION, BYTES, PER_S = "ms", "fraction", "bytes", "1/s"


@dataclass(frozen=True)
class Metric:
    """One run-level figure: its names, unit, direction and definition, and how it is read from a result."""

    key: str  # --fail-on name, the service's stored name (`run_metrics.metric`), the history's series
    label: str
    unit: str  # MS | FRACTION | BYTES | PER_S
    higher_is_worse: bool
    definition: str
    of: Callable[[AnalysisData], float | None]  # None: the run does not have the figure (no GPU, ...)
    bmf: str  # its Bencher Metric Format measure name
    bounds: Callable[[AnalysisData], tuple[float | None, float | None]] | None = None  # BMF lower/upper


@dataclass(frozen=True)
class Category:
    """A run-level figure that is a name, not a number (the verdict)."""

    key: str
    label: str
    definition: str
    of: Callable[[AnalysisData], str | None]


def _ms(us: float | None) -> float | None:
    return None if us is None else us / 1000


def step_time_ms(a: AnalysisData) -> float | None:
    """The run's step time: the median job step (the summary's), ms."""
    return _ms(a.summary.step_time_median_us)


def _step_bounds(a: AnalysisData) -> tuple[float | None, float | None]:
    return _ms(a.summary.step_time_p10_us), _ms(a.summary.step_time_p90_us)


def exposed_communication_fraction(a: AnalysisData) -> float | None:
    """Communication running alone (not overlapped with compute), summed over every GPU of every rank,
    over their summed windows; None without a GPU that measured it."""
    pairs = [(d.exposed_communication_us, d.window_us) for r in a.ranks for d in r.devices
             if d.exposed_communication_us is not None and d.window_us]
    if not pairs:
        return None
    return sum(e for e, _ in pairs) / sum(w for _, w in pairs)


def peak_gpu_memory_bytes(a: AnalysisData) -> float | None:
    """The largest GPU memory peak of the run: reserved where the memory events carry it, else allocated."""
    peaks = [m.peak_reserved_bytes if m.peak_reserved_bytes is not None else m.peak_allocated_bytes
             for r in a.ranks for d in r.devices if (m := d.memory) is not None]
    found = [p for p in peaks if p is not None]
    return float(max(found)) if found else None


def job_steps(a: AnalysisData) -> tuple[list[int], np.ndarray]:
    """The run's steady job steps and each one's duration in us (its slowest rank's): the steps the
    summary's step time is the median of (warm-up steps the ranks' diagnoses name left out)."""
    warmup = {n for r in a.ranks if r.diagnosis for n in r.diagnosis.warmup_steps}
    return job_step_durations([{s.step: s.duration_us for s in r.per_step} for r in a.ranks], warmup)


def steady_step_mean(a: AnalysisData, field: str, steps: list[int] | None = None) -> float | None:
    """The mean per step of a step row's figure (`StepRow.<field>`: "idle_us", "gpu_busy_us", ...) over the
    run's steady job steps (`job_steps`: the steps its step time is the median of) and every rank with steps;
    None without such steps. `diff`'s "GPU idle / step" and the like are this."""
    if steps is None:
        steps = job_steps(a)[0]
    keep = set(steps)
    xs = [float(getattr(s, field)) for r in a.ranks for s in r.per_step if s.step in keep]
    return float(np.mean(xs)) if xs else None


METRICS: tuple[Metric, ...] = (
    Metric("step_time_ms", "median step time", MS, True,
           "the median job step, ms: over steady steps (present on every rank with steps, warm-up left out), "
           "each lasting as long as its slowest rank (summary `step_time_median_us`); BMF bounds p10 and p90",
           step_time_ms, "step-time-ms", _step_bounds),
    Metric("gpu_idle", "GPU idle fraction", FRACTION, True,
           "1 - summed GPU busy / summed GPU windows (summary `gpu_idle_fraction`)",
           lambda a: a.summary.gpu_idle_fraction, "gpu-idle-fraction"),
    Metric("dataloader_wait", "DataLoader wait fraction", FRACTION, True,
           "summed DataLoader wait / summed rank windows (summary `dataloader_wait_fraction`)",
           lambda a: a.summary.dataloader_wait_fraction, "dataloader-wait-fraction"),
    Metric("memcpy_share", "memcpy share of GPU busy", FRACTION, True,
           "summed memcpy time / summed GPU busy time (summary `memcpy_share_of_busy`)",
           lambda a: a.summary.memcpy_share_of_busy, "memcpy-share-of-gpu-busy"),
    Metric("exposed_comm", "exposed communication fraction", FRACTION, True,
           "communication not overlapped with compute, summed over every GPU, / their summed windows",
           exposed_communication_fraction, "exposed-communication-fraction"),
    Metric("peak_memory_bytes", "peak GPU memory", BYTES, True,
           "the largest GPU memory peak of the run: reserved where the memory events carry it, else allocated",
           peak_gpu_memory_bytes, "peak-gpu-memory-bytes"),
    Metric("samples_per_s", "samples/s", PER_S, False,
           "batch size x ranks with steps x steady job steps / their summed duration (only with --batch-size; "
           "summary `samples_per_s`)",
           lambda a: a.summary.samples_per_s, "samples-per-s"),
    Metric("steps_per_s", "steps/s", PER_S, False,
           "steady job steps / their summed duration (summary `steps_per_s`)",
           lambda a: a.summary.steps_per_s, "steps-per-s"),
)
VERDICT = Category("verdict", "verdict", "the job's primary verdict (the diagnosis of its speaking rank)",
                   lambda a: a.diagnosis.primary if a.diagnosis else None)
BY_KEY: dict[str, Metric] = {m.key: m for m in METRICS}


def value(metric: Metric, a: AnalysisData) -> float | None:
    """The metric of a run as a finite float, or None when the run does not have it."""
    v = metric.of(a)
    return None if v is None or not math.isfinite(float(v)) else float(v)


def values(a: AnalysisData, digits: int = 9) -> dict[str, float | None]:
    """Every numeric metric of a run, by key (what the service stores per run)."""
    out: dict[str, float | None] = {}
    for m in METRICS:
        v = value(m, a)
        out[m.key] = None if v is None else round(v, digits)
    return out


__all__ = ["BY_KEY", "METRICS", "VERDICT", "Category", "Metric", "exposed_communication_fraction", "job_steps",
           "peak_gpu_memory_bytes", "steady_step_mean", "step_time_ms", "step_time_stats", "value", "values"]
