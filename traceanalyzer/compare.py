"""Two analyses of one job (BASE before a change, HEAD after), or several runs a side -> a typed `Comparison`.

Did the change make training slower, by how much, and why (docs/ci.md says each figure in words):

* **step time**: a job step lasts as long as its slowest rank. The change is the Hodges–Lehmann shift
  (the median of every pairwise difference head step - base step) relative to the base median, so one
  distorted step cannot swing it. With one run a side its 95% interval is the distribution-free one of
  the Mann–Whitney rank test (run-to-run variation not measured); with several runs a side, a two-level
  bootstrap (runs, then steps within runs; fixed seed) so the interval spans run-to-run variation.
* **parts**: every step splits exactly into GPU compute, exposed communication, memcpy and GPU idle by
  cause (host loop parts for CPU-only ranks), each read from the result's step rows (`StepRow`) and per-step
  causes over the steady steps the step time uses (`metrics.job_steps`); nothing here recomputes a figure.
  Each part gets its own evidence from its per-step values:
  its Hodges–Lehmann shift, a rank test, and whether the two sides' values overlap. A part whose values
  differ beyond chance and beyond their spread is **decisive**. The table's mean per step of each part
  adds up to the change of the mean step; parts moving against the net change are shown as offsetting it.
* **verdict**: `regressed` / `improved` when the step-time interval excludes zero and the shift is beyond
  the tolerance, or when decisive parts move the step beyond the tolerance and the step-time shift agrees;
  `unchanged` when the whole interval lies within the tolerance; else `inconclusive` (also with fewer than
  `MIN_STEPS` steps on a side: never a guess). With one capture on a side the steps show step-to-step
  variation only, not what two captures of one setting differ by, so a regressed / improved change must also
  exceed the run-to-run allowance (`run_noise`: from the runs' medians and a base history when there are
  enough, else `RUN_NOISE`); a smaller, consistent shift is `likely_slower` / `likely_faster` ("unconfirmed"),
  which gates do not fail on unless asked. Several runs on both sides keep the two-level interval alone.
* **headline**: two lines, the verdict with the size of the change (`title`) and the part that moved most
  (`lead`); the statistic, its interval and the run counts follow (`detail`).
* **kernels**: time per step by normalised name, the biggest movers, new and vanished kernels.
* **serving iterations**: per phase of a serving engine (prefill, decode, mixed), the median iteration time on
  each side over the listed iterations of every rank and run (result `serving.iterations`) and its change.
* **whole captures**: when a side has no real steps (no step markers and no loop the trace shows: one
  forward pass), per-step figures mean nothing; both sides are compared over their whole captures instead
  (`compared` = "whole_captures": each run one value, its window; the parts and kernels per capture), and
  the comparison says so. Such a change is called only beyond the tolerance and the run-to-run allowance
  (one capture a side has no spread), or from the runs' interval with `MIN_STEPS` runs a side.

Pure: Analysis x Analysis (or runs x runs) -> Comparison. Rendering lives in `report/diff*.py`.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ._version import __version__
from .causes import CAUSES, cause_label
from .gates import GateResult
from .ranktest import EXACT_MAX, rank_test, u_distribution
from .result import metrics as M
from .result.metrics import step_time_stats
from .result.types import AnalysisData, to_data, us
from .units import format_us

SCHEMA = "traceanalyzer-diff/1"
MIN_STEPS = 3  # fewer steps on a side: the change is inconclusive
DEFAULT_TOLERANCE = 0.02  # +-2%: a change inside it (with its interval) is `unchanged`
BOOTSTRAP_RESAMPLES = 4000
BOOTSTRAP_SEED = 20261122
CONFIDENCE = 0.95
TOP_MOVERS = 15
MAX_VALUES = 2000  # values a side beyond which the pairwise statistics use that many evenly spaced quantiles
RUN_VALUES = 128  # values per side (split over its runs) that one bootstrap resample of runs draws at most
BOOTSTRAP_BUDGET = 5e7  # pairwise differences over all resamples of runs (fewer resamples beyond it)
BOOTSTRAP_CHUNK = 5e6  # pairwise differences held at once
PART_ALPHA = 0.01  # a part is decisive only when the rank test gives p <= this (several parts are tested)
SPREAD_K = 3.0  # ... and its values do not overlap, or its shift exceeds SPREAD_K x the larger robust spread
OUTLIER_K = 4.0  # a distorted step: further than OUTLIER_K robust SDs and OUTLIER_MIN of the median from it
OUTLIER_MIN = 0.10
NORMAL_QUANTILE = {0.95: 1.959964, 0.99: 2.575829}

# Run-to-run variation: what two captures of one setting differ by. The default allowance for one capture a
# side (`diff --run-noise`); docs/ci.md gives its basis (repeated real captures, benchmarks/run_noise.py).
RUN_NOISE = 0.25
# Student's t, 97.5% quantile, by degrees of freedom (the largest listed at or below the df is used)
T_975 = {2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228, 12: 2.179,
         15: 2.131, 20: 2.086, 30: 2.042, 60: 2.000, 120: 1.980}
MIN_NOISE_DF = 2  # runs' medians needed (degrees of freedom) before a history replaces the allowance

REGRESSED = "regressed"
IMPROVED = "improved"
LIKELY_SLOWER = "likely_slower"  # a consistent shift within what captures of one setting differ by
LIKELY_FASTER = "likely_faster"
UNCHANGED = "unchanged"
INCONCLUSIVE = "inconclusive"
# What a side's steps are (StepSourceResult.kind), in words; a side whose ranks differ is "mixed".
# A side compared over its whole captures has the basis "window" (StepSourceResult.kind of a rank without steps).
WHOLE_BASIS = "window"
STEP_BASES = {"markers": "by step markers", "detected": "detected from repeating work",
              WHOLE_BASIS: "whole capture, no steps"}
# What was compared (Comparison.compared): each side's steps, or each run's whole capture (a side without steps).
STEPS = "steps"
WHOLE_CAPTURES = "whole_captures"
MIXED_BASIS = "mixed"
CHANGE_VERDICTS = (REGRESSED, IMPROVED, LIKELY_SLOWER, LIKELY_FASTER, UNCHANGED, INCONCLUSIVE)
VERDICT_WORDS = {REGRESSED: "regressed", IMPROVED: "improved", LIKELY_SLOWER: "likely slower, unconfirmed",
                 LIKELY_FASTER: "likely faster, unconfirmed", UNCHANGED: "unchanged", INCONCLUSIVE: "inconclusive"}

# Per-step parts of the mean step: what the attribution splits a change into.
COMPUTE = "gpu_compute"
EXPOSED_COMM = "exposed_communication"
MEMCPY_PART = "memcpy"
IDLE_PREFIX = "idle:"
UNATTRIBUTED = "idle:unattributed"
HOST_WAIT = "host:dataloader_wait"  # ranks without GPU activity: the host loop's step splits instead
HOST_OTHER = "host:other"
PART_LABELS = {COMPUTE: "GPU compute (kernels)", EXPOSED_COMM: "exposed communication", MEMCPY_PART: "GPU copies",
               HOST_WAIT: "host loop waiting for data (no GPU)", HOST_OTHER: "host loop, other work (no GPU)"}


@dataclass(frozen=True)
class StepTime:
    base_steps: int
    head_steps: int
    base_median_us: float | None
    head_median_us: float | None
    base_p10_us: float | None
    base_p90_us: float | None
    head_p10_us: float | None
    head_p90_us: float | None
    change: float | None  # Hodges–Lehmann shift of the step time / base median
    ci_low: float | None  # 95% interval of `change` (see `interval`)
    ci_high: float | None
    median_change: float | None = None  # head median / base median - 1 (the table's "median step" row)
    estimator: str = "hodges_lehmann"
    interval: str = ""  # "rank" (one run a side: steps only) | "runs" (several: two-level bootstrap) | ""
    p_value: float | None = None  # two-sided Mann–Whitney rank test of the steps
    base_runs: int = 1
    head_runs: int = 1
    base_outlier_steps: int = 0  # distorted steps (see outlier_steps)
    head_outlier_steps: int = 0


@dataclass(frozen=True)
class Part:
    """One part of the mean step on both sides: `delta_per_step_us` = head - base."""

    cause: str  # gpu_compute | exposed_communication | memcpy | idle:<cause> | idle:unattributed
    label: str
    base_per_step_us: float
    head_per_step_us: float
    delta_per_step_us: float  # change of the part's mean per step
    share_of_change: float | None  # delta / the summed deltas moving with the net change (< 0: offsets it)
    shift_per_step_us: float | None = None  # Hodges–Lehmann shift of the part's per-step values
    p_value: float | None = None  # two-sided rank test of the per-step values
    separated: bool = False  # every head value above (below) every base value
    decisive: bool = False  # see `part_evidence`
    role: str = ""  # "adds" (moves with the net change) | "offsets" (against it) | ""
    base_min_us: float | None = None  # range of the per-step values on each side
    base_max_us: float | None = None
    head_min_us: float | None = None
    head_max_us: float | None = None


@dataclass(frozen=True)
class KernelMove:
    name: str  # normalised
    base_per_step_us: float
    head_per_step_us: float
    delta_per_step_us: float
    status: str  # "moved" | "new" | "vanished"


@dataclass(frozen=True)
class PhaseChange:
    """A serving phase's median iteration on each side (the listed `serving.iterations` of every rank and run)."""

    phase: str
    base_iterations: int
    head_iterations: int
    base_median_iteration_us: float | None  # None: the side has no iteration of this phase
    head_median_iteration_us: float | None
    change: float | None  # head / base - 1


@dataclass(frozen=True)
class Side:
    inputs: tuple[str, ...]  # relative paths or file names, never a machine's absolute path
    primary: str | None
    host_primary: str | None
    headline: str
    ranks: int
    steps: int
    mean_step_us: float | None
    gpu_busy_per_step_us: float | None
    gpu_idle_per_step_us: float | None
    dataloader_wait_per_step_us: float | None
    memcpy_bytes_per_step: dict[str, float]  # by direction
    gpu_idle_fraction: float | None
    dataloader_wait_fraction: float | None
    memcpy_share_of_busy: float | None
    sm_util_mean_pct: float | None  # nvidia-smi logs, mean over GPUs, when present
    step_durations_us: tuple[float, ...]  # the job's step durations (for charts)
    step_parts_us: dict[str, tuple[float, ...]]  # per step, each part (for side-by-side charts)
    samples_per_s: float | None = None  # with --batch-size (Summary.samples_per_s)
    batch_size: int | None = None
    peak_memory_bytes: int | None = None  # largest GPU peak reserved (else allocated), memory events
    stragglers: tuple[int, ...] = ()  # straggler ranks, worst first (many-rank jobs)
    straggler_wait_per_step_us: float | None = None  # wait the worst straggler causes per step
    runs: int = 1  # runs on this side (several: `diff --base A --base B`)
    run_medians_us: tuple[float, ...] = ()  # each run's median step
    step_basis: str = ""  # what its steps are: "markers" | "detected" | "mixed" | "" (none, or not recorded)


@dataclass(frozen=True)
class RunNoise:
    """How far the step time of one capture a side can move with nothing changed (relative to the base median)."""

    allowance: float  # a |change| up to this is within run-to-run variation
    basis: str  # "history": from the runs' own medians | "default": the documented allowance (--run-noise)
    runs: int = 0  # runs whose medians the history estimate was made of
    spread: float | None = None  # their relative standard deviation (history)


@dataclass(frozen=True)
class Comparison:
    schema: str
    tool: dict[str, str]
    change_verdict: str
    headline: str
    tolerance: float
    step_time: StepTime
    mean_step_change_us: float | None
    attribution: tuple[Part, ...]  # largest |delta| first; adds up to mean_step_change_us
    kernels: tuple[KernelMove, ...]  # biggest movers, then new and vanished
    base: Side
    head: Side
    verdict_changed: bool
    warnings: tuple[str, ...]
    gates: tuple[GateResult, ...] = ()
    reason: str = ""  # why the verdict: "step_time" | "parts" | "within_run_noise" | "within_tolerance" |
    # "too_few_steps" | "step_basis_differs" ...
    run_to_run_measured: bool = False  # several runs on both sides: the interval spans runs
    run_noise: RunNoise | None = None  # the allowance for run-to-run variation (None: several runs a side)
    title: str = ""  # the headline's first line: the verdict and the size of the change
    lead: str = ""  # its second line: the part that moved most
    detail: tuple[str, ...] = ()  # the sentences below the headline
    compared: str = STEPS  # STEPS | WHOLE_CAPTURES (a side without steps: each run's whole capture)
    serving: tuple[PhaseChange, ...] = ()  # serving phases on either side, in the engines' phase order

    def to_data(self) -> dict[str, Any]:
        return to_data(self)  # type: ignore[no-any-return]


# --- kernel names ---------------------------------------------------------------------------------
_TEMPLATE = re.compile(r"<[^<>]*>")
_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")
_SPACES = re.compile(r"\s+")


def normalise_kernel(name: str) -> str:
    """One name per kernel: template arguments (nested), the argument list and addresses go; tile sizes
    and other numbers in the name stay (they name different kernels)."""
    s = name
    for _ in range(20):  # nested templates: innermost first
        t = _TEMPLATE.sub("", s)
        if t == s:
            break
        s = t
    s = re.sub(r"\(.*\)\s*$", "", s)  # a C++ signature's argument list
    s = _ADDRESS.sub("", s).rstrip("_")
    return _SPACES.sub(" ", s).strip() or name


# --- per side ------------------------------------------------------------------------------------
def _display(path: str, root: str | None) -> str:
    import os

    if root is not None:
        try:
            rel = os.path.relpath(path, root)
            if not rel.startswith(".."):
                return rel
        except ValueError:
            pass
    return os.path.basename(path.rstrip("/")) or path


def _step_parts(a: AnalysisData, steps: list[int]) -> dict[str, np.ndarray]:
    """Per steady job step (`steps`, those of the step time): compute, exposed communication, memcpy and idle
    by cause, each read from the rank's step row (`StepRow`) and its diagnosis' per-step causes, averaged
    over ranks.

    For each rank, step = busy + idle; busy = memcpy + exposed communication (the step row's own, measured in
    that step) + compute (the rest of busy); idle splits by cause, what no cause holds is unattributed.
    """
    parts: dict[str, np.ndarray] = {}
    n_ranks = sum(1 for r in a.ranks if r.per_step)
    for r in a.ranks:
        if not r.per_step:
            continue
        rows = {s.step: s for s in r.per_step}
        by_step = {p.step: p.idle_by_cause_us for p in r.diagnosis.per_step} if r.diagnosis else {}
        for k, n in enumerate(steps):
            s = rows[n]
            if not r.devices:  # CPU-only: the host loop's step = waiting for data + the rest
                wait = min(s.dataloader_wait_us, s.duration_us)
                for key, v in ((HOST_WAIT, wait), (HOST_OTHER, s.duration_us - wait)):
                    parts.setdefault(key, np.zeros(len(steps)))[k] += v / n_ranks
                continue
            memcpy = s.memcpy_us
            comm = min(s.exposed_comm_us, max(s.gpu_busy_us - memcpy, 0.0))  # bounded: parts add up to the step
            vals = {COMPUTE: max(s.gpu_busy_us - memcpy - comm, 0.0), EXPOSED_COMM: comm, MEMCPY_PART: memcpy}
            causes = by_step.get(n, {})
            for c in CAUSES:
                vals[IDLE_PREFIX + c] = float(causes.get(c, 0.0))
            vals[UNATTRIBUTED] = max(s.idle_us - sum(causes.values()), 0.0)
            for key, v in vals.items():
                parts.setdefault(key, np.zeros(len(steps)))[k] += v / n_ranks
    return parts


def _inputs(a: AnalysisData, root: str | None, report: str | None) -> tuple[str, ...]:
    """How a run is named: its inputs, or, for a run read from a saved report, the report's name with
    the traces it was made from."""
    traces = tuple(_display(i.path, root) for i in a.inputs)
    if report is None:
        return traces
    made_of = ", ".join(traces[:2]) + (f" and {len(traces) - 2} more" if len(traces) > 2 else "")
    return (f"{_display(report, root)} (saved report of {made_of})" if traces else _display(report, root),)


def _side(a: AnalysisData, root: str | None,
          report: str | None = None) -> tuple[Side, np.ndarray, dict[str, np.ndarray]]:
    steps, dur = M.job_steps(a)  # the steps the run's step time (result/metrics.py) is the median of
    parts = _step_parts(a, steps)
    ranks_with = [r for r in a.ranks if r.per_step]
    bytes_by_dir: dict[str, float] = {}
    for r in a.ranks:
        for d in r.devices:
            for c in d.memcpy.by_direction:
                bytes_by_dir[c.direction] = bytes_by_dir.get(c.direction, 0.0) + c.bytes / max(r.steps, 1) / max(
                    len(a.ranks), 1)
    sm = [c.metrics["sm_util_pct"].mean for c in a.counters if "sm_util_pct" in c.metrics
          and c.metrics["sm_util_pct"].mean is not None]
    diag = a.diagnosis
    mean = lambda xs: float(np.mean(xs)) if len(xs) else None  # noqa: E731
    side = Side(
        inputs=_inputs(a, root, report),
        primary=diag.primary if diag else None,
        host_primary=diag.host_primary if diag else None,
        headline=diag.headline if diag else "",
        ranks=len(a.ranks),
        steps=len(steps),
        mean_step_us=_r(mean(dur)),
        # over the steady steps of the step time, as the parts are (never the warm-up beside them)
        gpu_busy_per_step_us=_r(M.steady_step_mean(a, "gpu_busy_us", steps)),
        gpu_idle_per_step_us=_r(M.steady_step_mean(a, "idle_us", steps)),
        dataloader_wait_per_step_us=_r(M.steady_step_mean(a, "dataloader_wait_us", steps)),
        memcpy_bytes_per_step={k: round(v, 1) for k, v in sorted(bytes_by_dir.items())},
        gpu_idle_fraction=M.value(M.BY_KEY["gpu_idle"], a),
        dataloader_wait_fraction=M.value(M.BY_KEY["dataloader_wait"], a),
        memcpy_share_of_busy=M.value(M.BY_KEY["memcpy_share"], a),
        sm_util_mean_pct=_r(mean(sm)),
        step_durations_us=tuple(round(float(v), 3) for v in dur),
        step_parts_us={k: tuple(round(float(x), 3) for x in v) for k, v in parts.items() if np.any(v > 0)},
        samples_per_s=M.value(M.BY_KEY["samples_per_s"], a),
        batch_size=a.summary.batch_size,
        peak_memory_bytes=None if (peak := M.peak_gpu_memory_bytes(a)) is None else int(peak),
        stragglers=tuple(s.rank for s in diag.stragglers) if diag else (),
        straggler_wait_per_step_us=diag.stragglers[0].caused_wait_per_step_us if diag and diag.stragglers else None,
        step_basis=_step_basis({r.step_source.kind for r in ranks_with if r.step_source is not None}),
    )
    return side, dur, parts


def _step_basis(kinds: set[str]) -> str:
    """One side's step basis from its ranks' (or runs') step sources: the one kind, "mixed", or ""."""
    kinds = {k for k in kinds if k in STEP_BASES or k == MIXED_BASIS}
    return "" if not kinds else next(iter(kinds)) if len(kinds) == 1 else MIXED_BASIS


def basis_mismatch(base: str, head: str) -> str | None:
    """Why the two sides' steps are not like with like (one by step markers, the other detected from
    repeating work, or either mixed), or None when they are (or a side's basis is not recorded)."""
    if not base or not head or (base == head and base != MIXED_BASIS):
        return None
    return (f"steps {STEP_BASES.get(base, 'of mixed kinds')} on the base, {STEP_BASES.get(head, 'of mixed kinds')} "
            f"on the head: the step times are not like with like and the change is not judged; profile both "
            f"sides with the same step markers (or both without)")


def _r(x: float | None, digits: int = 3) -> float | None:
    return None if x is None else round(float(x), digits)


# --- robust statistics ----------------------------------------------------------------------------
def hl_shift(base: np.ndarray, head: np.ndarray) -> float:
    """Hodges–Lehmann shift: the median of all pairwise differences head[i] - base[j]."""
    return float(np.median(np.subtract.outer(head, base)))


def rank_interval(base: np.ndarray, head: np.ndarray, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The distribution-free interval of the Hodges–Lehmann shift (Lehmann/Moses): the k-th smallest and k-th
    largest pairwise difference, k from the rank test's null distribution so that the interval covers the
    true shift with at least `confidence`; with too few values for that, the smallest and largest difference."""
    d = np.sort(np.subtract.outer(head, base).ravel())
    n, m = len(head), len(base)
    alpha = (1 - confidence) / 2
    if n <= EXACT_MAX and m <= EXACT_MAX:
        cdf = np.cumsum(u_distribution(n, m))
        k = int(np.count_nonzero(cdf <= alpha + 1e-12))  # P(U <= k-1) <= alpha
    else:
        z = NORMAL_QUANTILE[confidence] if confidence in NORMAL_QUANTILE else 1.959964
        k = int(np.floor(n * m / 2 - z * np.sqrt(n * m * (n + m + 1) / 12)))
    k = max(k, 1)
    return float(d[k - 1]), float(d[len(d) - k])


def runs_bootstrap(base_runs: Sequence[np.ndarray], head_runs: Sequence[np.ndarray],
                   resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED) -> tuple[float, float]:
    """95% interval of the relative Hodges–Lehmann shift across runs: a two-level bootstrap (runs drawn with
    replacement on each side, then steps within each drawn run), so run-to-run variation widens it.

    Bounded work: a run longer than RUN_VALUES (fewer with many runs) enters as that many evenly spaced
    quantiles of its steps, fewer resamples are drawn when the pairs are many, and they are taken in chunks."""
    rng = np.random.default_rng(seed)
    cap = max(8, RUN_VALUES // max(len(base_runs), len(head_runs)))
    base_runs = [_thin(r, cap) for r in base_runs]
    head_runs = [_thin(r, cap) for r in head_runs]
    width_b, width_h = max(len(r) for r in base_runs), max(len(r) for r in head_runs)
    pairs = len(base_runs) * width_b * len(head_runs) * width_h
    resamples = min(resamples, max(1000, int(BOOTSTRAP_BUDGET / pairs)))

    def draw(runs: Sequence[np.ndarray], count: int) -> np.ndarray:
        """`count` resamples: k runs drawn with replacement, then `width` steps drawn from each drawn run
        (so each run weighs the same, whatever its length)."""
        k, width = len(runs), max(len(r) for r in runs)
        sizes = np.array([len(r) for r in runs])
        offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        flat = np.concatenate(list(runs))
        pick = rng.integers(0, k, (count, k))  # which runs
        idx = offsets[pick][:, :, None] + np.floor(rng.random((count, k, width)) * sizes[pick][:, :, None])
        return flat[idx.astype(np.int64)].reshape(count, k * width)

    rel = []
    chunk = max(1, int(BOOTSTRAP_CHUNK / pairs))
    for start in range(0, resamples, chunk):
        count = min(chunk, resamples - start)
        b, h = draw(base_runs, count), draw(head_runs, count)
        shift = np.median((h[:, :, None] - b[:, None, :]).reshape(count, -1), axis=1)
        rel.append(shift / np.median(b, axis=1))
    values = np.concatenate(rel)
    values = values[np.isfinite(values)]
    alpha = (1 - CONFIDENCE) / 2
    return float(np.quantile(values, alpha)), float(np.quantile(values, 1 - alpha))


def outlier_steps(values: np.ndarray) -> int:
    """Steps far from their side's median: more than OUTLIER_K robust standard deviations (1.4826 x the median
    absolute deviation) and more than OUTLIER_MIN of the median away (warm-up, the profiler's own stop)."""
    if len(values) < MIN_STEPS:
        return 0
    med = np.median(values)
    scale = 1.4826 * np.median(np.abs(values - med))
    far = np.abs(values - med) > np.maximum(OUTLIER_K * scale, OUTLIER_MIN * abs(med))
    return int(np.count_nonzero(far))


def _robust_scale(values: np.ndarray) -> float:
    return float(1.4826 * np.median(np.abs(values - np.median(values)))) if len(values) else 0.0


# --- step time ------------------------------------------------------------------------------------
def _thin(values: np.ndarray, most: int = MAX_VALUES) -> np.ndarray:
    """At most `most` values: evenly spaced quantiles of a longer sample (bounds the pairwise work)."""
    if len(values) <= most:
        return values
    return np.quantile(values, np.linspace(0, 1, most))


def step_time(base_runs: Sequence[np.ndarray], head_runs: Sequence[np.ndarray]) -> StepTime:
    """The step-time change of HEAD against BASE (module docstring), from each side's runs' steady steps."""
    base = np.concatenate(list(base_runs)) if base_runs else np.zeros(0)
    head = np.concatenate(list(head_runs)) if head_runs else np.zeros(0)
    b_med, b_p10, b_p90 = step_time_stats(base)
    h_med, h_p10, h_p90 = step_time_stats(head)
    change = low = high = p = median_change = None
    interval = ""
    if len(base) and len(head) and b_med:
        median_change = float(np.median(head) / b_med - 1.0)
        tb, th = _thin(base), _thin(head)
        change = hl_shift(tb, th) / b_med
        if len(base) >= MIN_STEPS and len(head) >= MIN_STEPS:
            p = rank_test(tb, th)
            if len(base_runs) > 1 and len(head_runs) > 1:
                low, high = runs_bootstrap([_thin(r) for r in base_runs], [_thin(r) for r in head_runs])
                interval = "runs"
            else:
                lo_us, hi_us = rank_interval(tb, th)
                low, high, interval = lo_us / b_med, hi_us / b_med, "rank"
            low, high = min(low, change), max(high, change)  # the point lies in its interval
    return StepTime(len(base), len(head), _r(b_med), _r(h_med), _r(b_p10), _r(b_p90), _r(h_p10), _r(h_p90),
                    _r(change, 6), _r(low, 6), _r(high, 6), median_change=_r(median_change, 6), interval=interval,
                    p_value=_r(p, 6), base_runs=len(base_runs), head_runs=len(head_runs),
                    base_outlier_steps=sum(outlier_steps(r) for r in base_runs),
                    head_outlier_steps=sum(outlier_steps(r) for r in head_runs))


def part_evidence(base_runs: Sequence[np.ndarray], head_runs: Sequence[np.ndarray]) -> dict[str, Any]:
    """A part's evidence from its per-step values on each side (one array per run).

    Decisive: at least MIN_DECISIVE... steps a side, the rank test gives p <= PART_ALPHA, and either no value
    of one side reaches the other's range (`separated`) or the shift exceeds SPREAD_K x the larger robust
    spread (1.4826 x MAD) of the two sides; with several runs on both sides, also every run's median of the
    part on one side lies beyond every run's median on the other (run-to-run variation counted).
    """
    base = np.concatenate(list(base_runs)) if base_runs else np.zeros(0)
    head = np.concatenate(list(head_runs)) if head_runs else np.zeros(0)
    if not len(base) or not len(head):
        return {}
    tb, th = _thin(base), _thin(head)
    shift = hl_shift(tb, th)
    p = rank_test(tb, th) if len(base) >= MIN_STEPS and len(head) >= MIN_STEPS else None
    separated = bool(head.min() > base.max() or head.max() < base.min())
    spread = max(_robust_scale(base), _robust_scale(head))
    decisive = p is not None and p <= PART_ALPHA and shift != 0 and (separated or abs(shift) > SPREAD_K * spread)
    if decisive and len(base_runs) > 1 and len(head_runs) > 1:
        bm = [float(np.median(r)) for r in base_runs if len(r)]
        hm = [float(np.median(r)) for r in head_runs if len(r)]
        decisive = bool(bm and hm and (min(hm) > max(bm) if shift > 0 else max(hm) < min(bm)))
    return {"shift_per_step_us": _r(shift), "p_value": _r(p, 6), "separated": separated, "decisive": decisive,
            "base_min_us": _r(float(base.min())), "base_max_us": _r(float(base.max())),
            "head_min_us": _r(float(head.min())), "head_max_us": _r(float(head.max()))}


def change_verdict(st: StepTime, tolerance: float, parts: Sequence[Part] = (),
                   noise: RunNoise | None = None) -> tuple[str, str]:
    """(verdict, reason): see the module docstring; `parts` with their evidence. With one capture on a side
    (`noise` given), a change the steps call regressed / improved is confirmed only beyond `noise.allowance`;
    within it the shift is `likely_slower` / `likely_faster` (reason `within_run_noise`)."""
    verdict, reason = _within_runs(st, tolerance, parts)
    several = st.base_runs > 1 and st.head_runs > 1
    if noise is None or several or verdict not in (REGRESSED, IMPROVED) or st.change is None:
        return verdict, reason
    if abs(st.change) > noise.allowance:
        return verdict, reason
    return (LIKELY_SLOWER if verdict == REGRESSED else LIKELY_FASTER), "within_run_noise"


def _within_runs(st: StepTime, tolerance: float, parts: Sequence[Part]) -> tuple[str, str]:
    """The verdict from the steps alone (one capture a side: step-to-step variation only)."""
    if st.base_steps < MIN_STEPS or st.head_steps < MIN_STEPS or st.change is None or not st.base_median_us:
        return INCONCLUSIVE, "too_few_steps"
    assert st.ci_low is not None and st.ci_high is not None
    if st.ci_low > 0 and st.change > tolerance:
        return REGRESSED, "step_time"
    if st.ci_high < 0 and st.change < -tolerance:
        return IMPROVED, "step_time"
    net = sum(p.shift_per_step_us or 0.0 for p in parts if p.decisive) / st.base_median_us
    if net > tolerance and st.change > tolerance:
        return REGRESSED, "parts"
    if net < -tolerance and st.change < -tolerance:
        return IMPROVED, "parts"
    if -tolerance <= st.ci_low and st.ci_high <= tolerance:
        return UNCHANGED, "within_tolerance"
    return INCONCLUSIVE, "interval_too_wide"


def run_noise(base_medians: Sequence[float], head_medians: Sequence[float], history: Sequence[float] = (),
              default: float = RUN_NOISE) -> RunNoise | None:
    """The allowance for run-to-run variation when a side has one capture (None: several runs on both sides,
    whose two-level interval already spans it).

    From a history when there is one: each group of runs of one setting (the base's runs, the head's, and
    `history`: more runs of the base's setting, e.g. the base branch's last runs) gives its medians' relative
    deviations from the group's mean; pooled, they give the relative standard deviation s of one run's median
    with df = sum(runs - 1) degrees of freedom. With df >= MIN_NOISE_DF, the allowance is the 95% bound of the
    difference of the two sides' mean run medians when nothing changed: t(0.975, df) x s x sqrt(1/kb + 1/kh).
    Else `default` (docs/ci.md)."""
    kb, kh = len(base_medians), len(head_medians)
    if kb > 1 and kh > 1:
        return None
    deviations: list[float] = []
    runs = df = 0
    for group in (base_medians, head_medians, history):
        g = np.asarray([m for m in group if m and np.isfinite(m)], dtype=float)
        if len(g) > 1:
            deviations += list(g / g.mean() - 1.0)
            runs += len(g)
            df += len(g) - 1
    if df < MIN_NOISE_DF or kb == 0 or kh == 0:
        return RunNoise(round(float(default), 6), "default")
    spread = float(np.sqrt(np.sum(np.square(deviations)) / df))
    t = T_975[max(k for k in T_975 if k <= df)]
    allowance = t * spread * float(np.sqrt(1 / kb + 1 / kh))
    return RunNoise(round(allowance, 6), "history", runs, round(spread, 6))


def _run_medians(runs: Sequence[np.ndarray]) -> list[float]:
    return [float(np.median(r)) for r in runs if len(r)]


# --- kernels --------------------------------------------------------------------------------------
def _kernel_per_step(a: AnalysisData, whole: bool = False) -> dict[str, float]:
    """Kernel time per step (`whole`: per capture) by normalised name, averaged over ranks."""
    out: dict[str, float] = {}
    n_ranks = max(len(a.ranks), 1)
    for r in a.ranks:
        steps = 1 if whole else max(r.steps, 1)
        for d in r.devices:
            for k in d.kernel_table or d.top_kernels:
                key = normalise_kernel(k.name)
                out[key] = out.get(key, 0.0) + (us(k.total_ns) or 0.0) / steps / n_ranks
    return out


def kernel_moves(base: AnalysisData | Sequence[AnalysisData], head: AnalysisData | Sequence[AnalysisData],
                 top: int = TOP_MOVERS, whole: bool = False) -> tuple[KernelMove, ...]:
    """Kernel time per step (`whole`: per capture) on each side (averaged over a side's runs): the biggest
    movers first."""
    def per_step(side: AnalysisData | Sequence[AnalysisData]) -> dict[str, float]:
        runs = [side] if isinstance(side, AnalysisData) else list(side)
        out: dict[str, float] = {}
        for a in runs:
            for k, v in _kernel_per_step(a, whole).items():
                out[k] = out.get(k, 0.0) + v / len(runs)
        return out

    b, h = per_step(base), per_step(head)
    rows = []
    for name in set(b) | set(h):
        bv, hv = b.get(name, 0.0), h.get(name, 0.0)
        status = "new" if name not in b else "vanished" if name not in h else "moved"
        rows.append(KernelMove(name, round(bv, 3), round(hv, 3), round(hv - bv, 3), status))
    rows.sort(key=lambda m: (-abs(m.delta_per_step_us), m.name))
    return tuple(rows[:top])


# --- the comparison -------------------------------------------------------------------------------
def compare(base: AnalysisData, head: AnalysisData, tolerance: float = DEFAULT_TOLERANCE,
            root: str | None = None, *, default_noise: float = RUN_NOISE,
            history: Sequence[AnalysisData] = ()) -> Comparison:
    """One run a side. `root`: input paths are shown relative to it (else by file name)."""
    return compare_runs([base], [head], tolerance=tolerance, root=root, default_noise=default_noise,
                        history=history)


def compare_runs(bases: Sequence[AnalysisData], heads: Sequence[AnalysisData],
                 tolerance: float = DEFAULT_TOLERANCE, root: str | None = None, *,
                 reports: tuple[Sequence[str | None], Sequence[str | None]] | None = None,
                 default_noise: float = RUN_NOISE, history: Sequence[AnalysisData] = ()) -> Comparison:
    """Several runs of the base (e.g. the last N runs of the base branch) against one or several of the head.

    Steps and parts are pooled over each side's runs; with several runs on both sides the step-time
    interval is taken across runs (two-level bootstrap), so run-to-run variation is measured.
    `reports`: per side, per run, the saved report the run was read from (None: analysed from traces),
    so the comparison names the file the user gave. With one capture on a side, run-to-run variation is
    allowed for (`run_noise`): from the runs' own spread and `history` (more runs of the base's setting, e.g.
    the base branch's last runs) when they are enough, else `default_noise`."""
    if not bases or not heads:
        raise ValueError("compare_runs needs at least one run on each side")
    b_reports, h_reports = reports or ([None] * len(bases), [None] * len(heads))
    b_sides = [_side(a, root, r) for a, r in zip(bases, b_reports, strict=True)]
    h_sides = [_side(a, root, r) for a, r in zip(heads, h_reports, strict=True)]
    no_steps = [not any(s.steps for s, _, _ in sides) for sides in (b_sides, h_sides)]
    whole = any(no_steps)
    if whole:  # a side without steps: each run's whole capture on both sides, like with like
        b_sides = [_whole_capture(a, s) for a, (s, _, _) in zip(bases, b_sides, strict=True)]
        h_sides = [_whole_capture(a, s) for a, (s, _, _) in zip(heads, h_sides, strict=True)]
    st = step_time([d for _, d, _ in b_sides], [d for _, d, _ in h_sides])
    b_side, h_side = _merge([s for s, _, _ in b_sides]), _merge([s for s, _, _ in h_sides])
    warnings: list[str] = []
    if whole:
        which = "either side" if all(no_steps) else "the base" if no_steps[0] else "the head"
        warnings.append(f"no steps on {which} (no step markers and no loop in the capture, e.g. one forward "
                        f"pass): whole captures compared, not steps; the change includes any change in what "
                        f"each capture holds")
    elif st.base_steps < MIN_STEPS or st.head_steps < MIN_STEPS:
        warnings.append(f"fewer than {MIN_STEPS} steps on a side (base {st.base_steps}, head {st.head_steps}): "
                        f"the change cannot be judged; profile more steps")
    models = [sorted({d.name for a in side for r in a.ranks for d in r.devices if d.name}) for side in (bases, heads)]
    if models[0] and models[1] and models[0] != models[1]:
        warnings.append(f"different GPU models: base {', '.join(models[0])}, head {', '.join(models[1])}; "
                        f"the change includes the hardware")
    b_ranks, h_ranks = {a.summary.ranks for a in bases}, {a.summary.ranks for a in heads}
    if b_ranks != h_ranks:
        warnings.append(f"base has {'/'.join(map(str, sorted(b_ranks)))} rank(s), head "
                        f"{'/'.join(map(str, sorted(h_ranks)))}: job totals compared")
    mean_change = (None if b_side.mean_step_us is None or h_side.mean_step_us is None
                   else round(h_side.mean_step_us - b_side.mean_step_us, 3))
    parts = _parts([p for _, _, p in b_sides], [p for _, _, p in h_sides], mean_change)
    history_medians = [m for a in history for m in _run_medians([M.job_steps(a)[1]])]
    noise = run_noise(_run_medians([d for _, d, _ in b_sides]), _run_medians([d for _, d, _ in h_sides]),
                      history_medians, default_noise)
    if whole:
        verdict, reason = whole_capture_verdict(st, tolerance, noise, default_noise)
    else:
        verdict, reason = change_verdict(st, tolerance, parts, noise)
        mismatch = basis_mismatch(b_side.step_basis, h_side.step_basis)
        if mismatch:  # one side by step markers, the other by detected iterations: never judged
            warnings.insert(0, mismatch)
            verdict, reason = INCONCLUSIVE, "step_basis_differs"
    comparison = Comparison(
        schema=SCHEMA, tool={"name": "traceanalyzer", "version": __version__}, change_verdict=verdict,
        headline="", tolerance=tolerance, step_time=st, mean_step_change_us=mean_change,
        attribution=parts, kernels=kernel_moves(bases, heads, whole=whole), base=b_side, head=h_side,
        verdict_changed=(b_side.primary or "") != (h_side.primary or ""), warnings=tuple(warnings),
        reason=reason, run_to_run_measured=len(bases) > 1 and len(heads) > 1, run_noise=noise,
        compared=WHOLE_CAPTURES if whole else STEPS, serving=serving_changes(bases, heads))
    return _with_headline(comparison)


SERVING_PHASES = ("prefill", "decode", "mixed")  # analyses/serving.py PHASES (compare reads results, not analyses)


def serving_changes(bases: Sequence[AnalysisData], heads: Sequence[AnalysisData]) -> tuple[PhaseChange, ...]:
    """Each serving phase on either side: its iterations and its median iteration time, pooled over ranks and
    runs, and the change of the median."""
    def side(runs: Sequence[AnalysisData]) -> tuple[dict[str, list[float]], Counter[str]]:
        durations: dict[str, list[float]] = {}
        counts: Counter[str] = Counter()
        for a in runs:
            for r in a.ranks:
                if r.serving is None:
                    continue
                for x in r.serving.iterations:
                    durations.setdefault(x.phase, []).append(x.duration_us)
                for p in r.serving.phases:
                    counts[p.phase] += p.iterations
        return durations, counts

    (b, bn), (h, hn) = side(bases), side(heads)
    out = []
    for phase in sorted(set(b) | set(h), key=lambda x: (SERVING_PHASES.index(x) if x in SERVING_PHASES else 9, x)):
        bm = _r(float(np.median(b[phase]))) if phase in b else None
        hm = _r(float(np.median(h[phase]))) if phase in h else None
        out.append(PhaseChange(phase, bn[phase], hn[phase], bm, hm,
                               _r(hm / bm - 1, 6) if bm and hm is not None else None))
    return tuple(out)


def _whole_capture(a: AnalysisData, side: Side) -> tuple[Side, np.ndarray, dict[str, np.ndarray]]:
    """A run compared over its whole capture: one value, the window of its slowest rank, split into the
    same parts as a step (averaged over ranks); the side's per-step figures become per-capture ones."""
    windows = [r.window_us for r in a.ranks if r.window_us]
    if not windows:
        return replace(side, step_basis=WHOLE_BASIS, step_durations_us=(), step_parts_us={}), np.zeros(0), {}
    dur = np.array([max(windows)], dtype=np.float64)
    parts = _window_parts(a)
    n = max(len(a.ranks), 1)
    devices = [d for r in a.ranks for d in r.devices]
    mean = lambda xs: float(np.mean(xs)) if len(xs) else None  # noqa: E731
    busy = [d.gpu_busy_us for d in devices if d.gpu_busy_us is not None]
    idle = [d.window_us - d.gpu_busy_us for d in devices if d.window_us is not None and d.gpu_busy_us is not None]
    bytes_by_dir: dict[str, float] = {}
    for d in devices:
        for c in d.memcpy.by_direction:
            bytes_by_dir[c.direction] = bytes_by_dir.get(c.direction, 0.0) + c.bytes / n
    return replace(
        side, step_basis=WHOLE_BASIS, mean_step_us=_r(float(dur[0])),
        gpu_busy_per_step_us=_r(mean(busy)), gpu_idle_per_step_us=_r(mean(idle)),
        dataloader_wait_per_step_us=_r(mean([r.dataloader_wait_us for r in a.ranks
                                             if r.dataloader_wait_us is not None])),
        memcpy_bytes_per_step={k: round(v, 1) for k, v in sorted(bytes_by_dir.items())},
        step_durations_us=(round(float(dur[0]), 3),),
        step_parts_us={k: (round(float(v[0]), 3),) for k, v in parts.items() if v[0] > 0},
    ), dur, parts


def _window_parts(a: AnalysisData) -> dict[str, np.ndarray]:
    """The whole window split as `_step_parts` splits a step (one value each), averaged over ranks: the mean
    GPU's compute, exposed communication, copies and idle, the idle split in the rank's proportions by
    cause; a rank without GPU work: waiting for data and the rest."""
    parts: dict[str, np.ndarray] = {}
    ranks = [r for r in a.ranks if r.window_us]
    for r in ranks:
        window = float(r.window_us or 0.0)
        vals: dict[str, float]
        devices = [d for d in r.devices if d.gpu_busy_us is not None]
        if not devices:
            wait = min(r.dataloader_wait_us or 0.0, window)
            vals = {HOST_WAIT: wait, HOST_OTHER: window - wait}
        else:
            busy = float(np.mean([d.gpu_busy_us or 0.0 for d in devices]))
            memcpy = float(np.mean([d.memcpy_us or 0.0 for d in devices]))
            comm = min(float(np.mean([d.exposed_communication_us or 0.0 for d in devices])), max(busy - memcpy, 0.0))
            idle = max(float(np.mean([(d.window_us or 0.0) - (d.gpu_busy_us or 0.0) for d in devices])), 0.0)
            vals = {COMPUTE: max(busy - memcpy - comm, 0.0), EXPOSED_COMM: comm, MEMCPY_PART: memcpy}
            causes = r.diagnosis.idle_by_cause_us if r.diagnosis else {}
            total = sum(causes.values())
            scale = min(idle / total, 1.0) if total > 0 else 0.0
            for c in CAUSES:
                vals[IDLE_PREFIX + c] = float(causes.get(c, 0.0)) * scale
            vals[UNATTRIBUTED] = max(idle - total * scale, 0.0)
        for key, v in vals.items():
            parts.setdefault(key, np.zeros(1))[0] += v / len(ranks)
    return parts


def whole_capture_verdict(st: StepTime, tolerance: float, noise: RunNoise | None,
                          default_noise: float = RUN_NOISE) -> tuple[str, str]:
    """(verdict, reason) of a comparison of whole captures (each run one value): with at least MIN_STEPS
    runs a side, the runs' interval judges as it does steps; with fewer, the change is called only beyond
    both the tolerance and the run-to-run allowance (nothing shows the captures' spread), else it is
    inconclusive. The reason is always WHOLE_CAPTURES."""
    if st.change is None:
        return INCONCLUSIVE, WHOLE_CAPTURES
    if st.base_steps >= MIN_STEPS and st.head_steps >= MIN_STEPS:
        return change_verdict(st, tolerance, (), noise)[0], WHOLE_CAPTURES
    allowance = noise.allowance if noise is not None else default_noise
    if abs(st.change) > max(tolerance, allowance):
        return (REGRESSED if st.change > 0 else IMPROVED), WHOLE_CAPTURES
    return INCONCLUSIVE, WHOLE_CAPTURES


def judge(base_steps: Sequence[np.ndarray], head_steps: Sequence[np.ndarray],
          base_parts: Sequence[dict[str, np.ndarray]], head_parts: Sequence[dict[str, np.ndarray]],
          tolerance: float = DEFAULT_TOLERANCE, default_noise: float = RUN_NOISE,
          history: Sequence[float] = ()) -> tuple[StepTime, tuple[Part, ...], str, str]:
    """The verdict from arrays alone (what `compare_runs` does after reading the analyses): each run's steady
    step durations and per-step parts on each side -> (step time, parts, verdict, reason). `history`: the
    median steps of more runs of the base's setting."""
    st = step_time(base_steps, head_steps)
    b_all, h_all = np.concatenate(list(base_steps)), np.concatenate(list(head_steps))
    mean_change = float(np.mean(h_all) - np.mean(b_all)) if len(b_all) and len(h_all) else None
    parts = _parts(list(base_parts), list(head_parts), mean_change)
    noise = run_noise(_run_medians(base_steps), _run_medians(head_steps), history, default_noise)
    verdict, reason = change_verdict(st, tolerance, parts, noise)
    return st, parts, verdict, reason


def _parts(b_runs: list[dict[str, np.ndarray]], h_runs: list[dict[str, np.ndarray]],
           mean_change: float | None) -> tuple[Part, ...]:
    """Each part's mean per step on both sides (pooled steps), its change, share and evidence; largest first."""
    keys = sorted(set().union(*b_runs, *h_runs))
    rows = []
    for key in keys:
        # a run without the part (e.g. no idle of that cause) counts it as zero in every step
        b = [r.get(key, np.zeros(_steps_of(r))) for r in b_runs]
        h = [r.get(key, np.zeros(_steps_of(r))) for r in h_runs]
        b_all, h_all = np.concatenate(b), np.concatenate(h)
        bv = float(np.mean(b_all)) if len(b_all) else 0.0
        hv = float(np.mean(h_all)) if len(h_all) else 0.0
        if abs(bv) < 5e-4 and abs(hv) < 5e-4:
            continue
        rows.append((key, bv, hv, hv - bv, part_evidence(b, h)))
    net = sum(d for _, _, _, d, _ in rows)
    gross = sum(d for _, _, _, d, _ in rows if d * net > 0)
    parts = []
    for key, bv, hv, delta, ev in rows:
        role = "" if abs(delta) < 5e-4 or not mean_change else "adds" if delta * net > 0 else "offsets"
        share = delta / gross if gross and role else None
        parts.append(Part(key, _part_label(key), round(bv, 3), round(hv, 3), round(delta, 3),
                          None if share is None else round(share, 4), role=role, **ev))
    parts.sort(key=lambda p: (-abs(p.delta_per_step_us), p.cause))
    return tuple(parts)


def _steps_of(parts: dict[str, np.ndarray]) -> int:
    return max((len(v) for v in parts.values()), default=0)


def _merge(sides: list[Side]) -> Side:
    """One side of several runs: inputs of all, the most common verdict, figures averaged over runs (the
    step durations pooled), each run's median step."""
    if len(sides) == 1:
        s = sides[0]
        med = float(np.median(s.step_durations_us)) if s.step_durations_us else None
        return replace(s, run_medians_us=() if med is None else (round(med, 3),))
    primary = Counter(s.primary for s in sides).most_common(1)[0][0]
    first = next(s for s in sides if s.primary == primary)

    def avg(values: list[float | None]) -> float | None:
        xs = [v for v in values if v is not None]
        return _r(float(np.mean(xs)), 6) if xs else None

    steps = tuple(d for s in sides for d in s.step_durations_us)
    keys = sorted({k for s in sides for k in s.step_parts_us})
    directions = sorted({k for s in sides for k in s.memcpy_bytes_per_step})
    peaks = [s.peak_memory_bytes for s in sides if s.peak_memory_bytes is not None]
    return Side(
        inputs=tuple(i for s in sides for i in s.inputs), primary=primary, host_primary=first.host_primary,
        headline=first.headline, ranks=max(s.ranks for s in sides), steps=sum(s.steps for s in sides),
        mean_step_us=_r(float(np.mean(steps))) if steps else None,
        gpu_busy_per_step_us=avg([s.gpu_busy_per_step_us for s in sides]),
        gpu_idle_per_step_us=avg([s.gpu_idle_per_step_us for s in sides]),
        dataloader_wait_per_step_us=avg([s.dataloader_wait_per_step_us for s in sides]),
        memcpy_bytes_per_step={k: round(float(np.mean([s.memcpy_bytes_per_step.get(k, 0.0) for s in sides])), 1)
                               for k in directions},
        gpu_idle_fraction=avg([s.gpu_idle_fraction for s in sides]),
        dataloader_wait_fraction=avg([s.dataloader_wait_fraction for s in sides]),
        memcpy_share_of_busy=avg([s.memcpy_share_of_busy for s in sides]),
        sm_util_mean_pct=avg([s.sm_util_mean_pct for s in sides]),
        step_durations_us=steps,
        step_parts_us={k: tuple(x for s in sides for x in s.step_parts_us.get(k, (0.0,) * len(s.step_durations_us)))
                       for k in keys},
        samples_per_s=avg([s.samples_per_s for s in sides]),
        batch_size=first.batch_size, peak_memory_bytes=max(peaks) if peaks else None,
        stragglers=first.stragglers, straggler_wait_per_step_us=first.straggler_wait_per_step_us,
        runs=len(sides), step_basis=_step_basis({s.step_basis for s in sides if s.step_basis}),
        run_medians_us=tuple(round(float(np.median(s.step_durations_us)), 3) for s in sides if s.step_durations_us))


def _part_label(key: str) -> str:
    if key.startswith(IDLE_PREFIX):
        cause = key[len(IDLE_PREFIX):]
        return "GPU idle, no cause given" if cause == "unattributed" else f"GPU idle: {cause_label(cause)}"
    return PART_LABELS.get(key, key)


def _pct(x: float) -> str:
    return f"{x * 100:+.1f}%"


def _interval_text(st: StepTime) -> str:
    return "" if st.ci_low is None or st.ci_high is None else f"95% interval {_pct(st.ci_low)} to {_pct(st.ci_high)}"


def _part_sentence(p: Part) -> str:
    """One decisive part, one statistic (its Hodges–Lehmann shift per step), labelled."""
    shift = p.shift_per_step_us or 0.0
    sign = "+" if shift > 0 else "−"
    how = (f"every head step {'above' if shift > 0 else 'below'} every base step" if p.separated
           else "beyond the steps' spread")
    label = p.label[:1].upper() + p.label[1:]
    return f"{label} {sign}{format_us(abs(shift))} per step (Hodges–Lehmann shift), decisive: {how}"


def runs_text(st: StepTime) -> str:
    """How many runs each side has, in words ("1 base run and 5 head runs")."""
    def n(k: int, side: str) -> str:
        return f"{k} {side} run{'s' if k != 1 else ''}"
    return f"{n(st.base_runs, 'base')} and {n(st.head_runs, 'head')}"


def noise_sentence(c: Comparison) -> str:
    """What the verdict allowed for run-to-run variation, with the run count of each side."""
    st, noise = c.step_time, c.run_noise
    if c.run_to_run_measured:
        return f"The interval spans run-to-run variation ({st.base_runs} base and {st.head_runs} head runs)"
    if noise is None:
        return ""
    allowance = f"±{noise.allowance * 100:.1f}%"
    if noise.basis == "history":
        return (f"Run-to-run variation from {noise.runs} runs of one setting (their medians spread "
                f"{(noise.spread or 0.0) * 100:.1f}%; {runs_text(st)}): a change within {allowance} is not confirmed")
    one = ("one run on a side" if st.base_runs == 1 and st.head_runs == 1
           else f"{runs_text(st)}, too few to measure it")
    return (f"Run-to-run variation was not measured ({one}): a change within the {allowance} allowance "
            f"(--run-noise) is not confirmed; compare several runs a side to measure it")


def _top_part(c: Comparison) -> str:
    """The part that moved the step most: the largest decisive part moving with the change, else the part
    whose mean moved most with it."""
    st = c.step_time
    direction = st.change or 0.0
    decisive = sorted((p for p in c.attribution if p.decisive and (p.shift_per_step_us or 0.0) * direction > 0),
                      key=lambda p: -abs(p.shift_per_step_us or 0.0))
    if decisive:
        return _part_sentence(decisive[0])
    adds = [p for p in c.attribution if p.role == "adds"]
    if not adds or not direction:
        return ""
    p = adds[0]
    share = f", {p.share_of_change * 100:.0f}% of the change" if p.share_of_change is not None else ""
    unit = "capture" if c.compared == WHOLE_CAPTURES else "step"
    return (f"Largest part: {p.label} {'+' if p.delta_per_step_us > 0 else '−'}{format_us(abs(p.delta_per_step_us))} "
            f"per {unit} (change of the mean{share}), not decisive")


def _title(c: Comparison) -> str:
    st, v = c.step_time, c.change_verdict
    if c.compared == WHOLE_CAPTURES:
        return _whole_title(c)
    if st.change is None:
        return "Step time cannot be compared: a side has no steps"
    size = f"{abs(st.change) * 100:.1f}%"
    if v in (REGRESSED, IMPROVED):
        return f"{VERDICT_WORDS[v].capitalize()}: HEAD is {size} {'slower' if v == REGRESSED else 'faster'} per step"
    if v in (LIKELY_SLOWER, LIKELY_FASTER):
        allowance = f"±{c.run_noise.allowance * 100:.1f}%" if c.run_noise else ""
        return (f"{VERDICT_WORDS[v].capitalize()}: HEAD {size} {'slower' if v == LIKELY_SLOWER else 'faster'} per "
                f"step, within run-to-run variation ({allowance}"
                + (", one capture a side)" if st.base_runs == 1 and st.head_runs == 1 else ")"))
    if v == UNCHANGED:
        return f"Unchanged: step time {_pct(st.change)}, within ±{c.tolerance * 100:.0f}%"
    if c.reason == "step_basis_differs":
        return (f"Inconclusive: step time {_pct(st.change)}, steps of different kinds (base "
                f"{STEP_BASES.get(c.base.step_basis, 'mixed')}, head {STEP_BASES.get(c.head.step_basis, 'mixed')})")
    if st.base_steps < MIN_STEPS or st.head_steps < MIN_STEPS:
        return f"Inconclusive: step time {_pct(st.change)}, too few steps (base {st.base_steps}, head {st.head_steps})"
    return f"Inconclusive: step time {_pct(st.change)}, its interval too wide to tell"


def _whole_title(c: Comparison) -> str:
    """The headline of a comparison of whole captures: it says what was compared."""
    st, v = c.step_time, c.change_verdict
    what = "no steps: whole captures compared, not steps"
    if st.change is None:
        return "Whole captures cannot be compared: a side has no window"
    size = f"{abs(st.change) * 100:.1f}%"
    if v in (REGRESSED, IMPROVED):
        return (f"{VERDICT_WORDS[v].capitalize()}: HEAD's whole capture is {size} "
                f"{'longer' if v == REGRESSED else 'shorter'} ({what})")
    if v == UNCHANGED:
        return f"Unchanged: whole capture {_pct(st.change)}, within ±{c.tolerance * 100:.0f}% ({what})"
    if st.base_steps < MIN_STEPS or st.head_steps < MIN_STEPS:
        bound = max(c.run_noise.allowance if c.run_noise is not None else 0.0, c.tolerance)
        return (f"Inconclusive: whole capture {_pct(st.change)}, within ±{bound * 100:.1f}% "
                f"(run-to-run variation, {runs_text(st)}; {what})")
    return f"Inconclusive: whole capture {_pct(st.change)}, its interval too wide to tell ({what})"


def _with_headline(c: Comparison) -> Comparison:
    """Two lines (the verdict with the size of the change; the part that moved most), then the detail."""
    st = c.step_time
    title, lead = _title(c), _top_part(c)
    detail: list[str] = []
    if st.change is not None and c.compared == WHOLE_CAPTURES:
        detail.append(f"Whole capture: base {format_us(st.base_median_us)}, head {format_us(st.head_median_us)} "
                      f"(median over {runs_text(st)}; the slowest rank's window)")
        if (ci := _interval_text(st)):
            detail.append(f"Across runs: {ci}")
    elif st.change is not None:
        ci = _interval_text(st)
        spans = f"Hodges–Lehmann shift of the step time {_pct(st.change)}" + (f"; {ci}" if ci else "")
        if c.reason == "parts" and st.ci_low is not None and st.ci_low <= 0 <= (st.ci_high or 0):
            spans += " spans zero"
            outliers = st.base_outlier_steps + st.head_outlier_steps
            if outliers:
                spans += f" because of {outliers} distorted step{'s' if outliers != 1 else ''}"
            spans += "; decisive parts carry the verdict"
        detail.append(spans)
        if c.change_verdict == INCONCLUSIVE and lead and "decisive" in lead and "not decisive" not in lead:
            detail.append("A decisive part moved, but within the tolerance or against the step time's direction")
        if st.ci_low is not None and (sentence := noise_sentence(c)):
            detail.append(sentence)
    if c.verdict_changed:
        detail.append(f"Verdict changed {c.base.primary or 'none'} → {c.head.primary or 'none'}")
    headline = ". ".join(x for x in (title, lead) if x) + "."
    return replace(c, headline=headline, title=title, lead=lead, detail=tuple(detail))


def with_gates(c: Comparison, gates: tuple[GateResult, ...]) -> Comparison:
    return replace(c, gates=gates)


__all__ = ["CHANGE_VERDICTS", "Comparison", "GateResult", "KernelMove", "LIKELY_FASTER", "LIKELY_SLOWER", "Part",
           "RUN_NOISE", "RunNoise", "SCHEMA", "STEPS", "Side", "StepTime", "VERDICT_WORDS", "WHOLE_CAPTURES", "compare",
           "compare_runs", "hl_shift", "judge", "normalise_kernel", "rank_interval", "rank_test", "run_noise",
           "whole_capture_verdict", "with_gates"]
