"""Two analyses of one job (BASE before a change, HEAD after) -> a typed `Comparison`.

Did the change make training slower, by how much, and why:

* **step time**: median, p10 and p90 of the job's step durations on each side (a job step lasts
  as long as its slowest rank), the relative change of the median with a 95% bootstrap interval
  (fixed seed, so the same inputs give the same interval), and a verdict: `regressed` /
  `improved` when the interval excludes zero and the change is beyond the tolerance, `unchanged`
  when the whole interval lies within the tolerance, else `inconclusive` (also with fewer than
  `MIN_STEPS` steps on a side: never a guess).
* **attribution**: the mean step splits exactly into GPU compute, exposed communication, memcpy
  and GPU idle by cause (the diagnosis' causes); the change of each part per step adds up to the
  change of the mean step, so the parts explain the whole change.
* **kernels**: time per step by normalised name (template arguments, addresses and numbers
  removed, so one kernel is not split into many), the biggest movers, new and vanished kernels.

Pure: Analysis x Analysis -> Comparison. Rendering lives in `report/diff*.py`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._version import __version__
from .analyses.throughput import job_step_durations, step_time_stats
from .causes import CAUSES, cause_label
from .result.types import AnalysisData, to_data
from .units import format_us

SCHEMA = "traceanalyzer-diff/1"
MIN_STEPS = 3  # fewer steps on a side: the change is inconclusive
DEFAULT_TOLERANCE = 0.02  # +-2%: a change inside it (with its interval) is `unchanged`
BOOTSTRAP_RESAMPLES = 4000
BOOTSTRAP_SEED = 20261122
CONFIDENCE = 0.95
TOP_MOVERS = 15

REGRESSED = "regressed"
IMPROVED = "improved"
UNCHANGED = "unchanged"
INCONCLUSIVE = "inconclusive"
CHANGE_VERDICTS = (REGRESSED, IMPROVED, UNCHANGED, INCONCLUSIVE)

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
    change: float | None  # head median / base median - 1
    ci_low: float | None  # 95% interval of `change`
    ci_high: float | None


@dataclass(frozen=True)
class Part:
    """One part of the mean step on both sides: `delta_per_step_us` = head - base."""

    cause: str  # gpu_compute | exposed_communication | memcpy | idle:<cause> | idle:unattributed
    label: str
    base_per_step_us: float
    head_per_step_us: float
    delta_per_step_us: float
    share_of_change: float | None  # delta / change of the mean step


@dataclass(frozen=True)
class KernelMove:
    name: str  # normalised
    base_per_step_us: float
    head_per_step_us: float
    delta_per_step_us: float
    status: str  # "moved" | "new" | "vanished"


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


@dataclass(frozen=True)
class GateResult:
    rule: str
    value: float | str | None
    passed: bool
    detail: str


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


def _job_steps(a: AnalysisData) -> tuple[list[int], np.ndarray]:
    """Steady job steps (present on every rank with steps, warm-up left out) and each one's duration
    (the slowest rank's): the same measure as the report's step time (analyses/throughput.py)."""
    warmup = {n for r in a.ranks if r.diagnosis for n in r.diagnosis.warmup_steps}
    return job_step_durations([{s.step: s.duration_us for s in r.per_step} for r in a.ranks], warmup)


def _step_parts(a: AnalysisData, steps: list[int]) -> dict[str, np.ndarray]:
    """Per job step: compute, exposed communication, memcpy and idle by cause, averaged over ranks.

    For each rank, step = busy + idle; busy = memcpy + compute, and compute includes communication
    running alone (its rank-level exposed share per step is split off); idle splits by cause.
    """
    parts: dict[str, np.ndarray] = {}
    n_ranks = sum(1 for r in a.ranks if r.per_step)
    for r in a.ranks:
        if not r.per_step:
            continue
        rows = {s.step: s for s in r.per_step}
        by_step = {p.step: p.idle_by_cause_us for p in r.diagnosis.per_step} if r.diagnosis else {}
        exposed = sum(d.exposed_communication_us or 0.0 for d in r.devices) / max(len(r.per_step), 1)
        for k, n in enumerate(steps):
            s = rows[n]
            if not r.devices:  # CPU-only: the host loop's step = waiting for data + the rest
                wait = min(s.dataloader_wait_us, s.duration_us)
                for key, v in ((HOST_WAIT, wait), (HOST_OTHER, s.duration_us - wait)):
                    parts.setdefault(key, np.zeros(len(steps)))[k] += v / n_ranks
                continue
            memcpy = s.memcpy_us
            comm = min(exposed, max(s.gpu_busy_us - memcpy, 0.0))
            vals = {COMPUTE: max(s.gpu_busy_us - memcpy - comm, 0.0), EXPOSED_COMM: comm, MEMCPY_PART: memcpy}
            causes = by_step.get(n, {})
            for c in CAUSES:
                vals[IDLE_PREFIX + c] = float(causes.get(c, 0.0))
            vals[UNATTRIBUTED] = max(s.idle_us - sum(causes.values()), 0.0)
            for key, v in vals.items():
                parts.setdefault(key, np.zeros(len(steps)))[k] += v / n_ranks
    return parts


def _side(a: AnalysisData, root: str | None) -> tuple[Side, np.ndarray, dict[str, np.ndarray]]:
    steps, dur = _job_steps(a)
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
        inputs=tuple(_display(i.path, root) for i in a.inputs),
        primary=diag.primary if diag else None,
        host_primary=diag.host_primary if diag else None,
        headline=diag.headline if diag else "",
        ranks=len(a.ranks),
        steps=len(steps),
        mean_step_us=_r(mean(dur)),
        gpu_busy_per_step_us=_r(mean([s.gpu_busy_us for r in ranks_with for s in r.per_step])),
        gpu_idle_per_step_us=_r(mean([s.idle_us for r in ranks_with for s in r.per_step])),
        dataloader_wait_per_step_us=_r(mean([s.dataloader_wait_us for r in ranks_with for s in r.per_step])),
        memcpy_bytes_per_step={k: round(v, 1) for k, v in sorted(bytes_by_dir.items())},
        gpu_idle_fraction=a.summary.gpu_idle_fraction,
        dataloader_wait_fraction=a.summary.dataloader_wait_fraction,
        memcpy_share_of_busy=a.summary.memcpy_share_of_busy,
        sm_util_mean_pct=_r(mean(sm)),
        step_durations_us=tuple(round(float(v), 3) for v in dur),
        step_parts_us={k: tuple(round(float(x), 3) for x in v) for k, v in parts.items() if np.any(v > 0)},
        samples_per_s=a.summary.samples_per_s,
        batch_size=a.summary.batch_size,
        peak_memory_bytes=_peak_memory(a),
        stragglers=tuple(s.rank for s in diag.stragglers) if diag else (),
        straggler_wait_per_step_us=diag.stragglers[0].caused_wait_per_step_us if diag and diag.stragglers else None,
    )
    return side, dur, parts


def _peak_memory(a: AnalysisData) -> int | None:
    """The largest GPU memory peak of the run: reserved where the events carry it, else allocated."""
    peaks = [m.peak_reserved_bytes if m.peak_reserved_bytes is not None else m.peak_allocated_bytes
             for r in a.ranks for d in r.devices if (m := d.memory) is not None]
    return max(peaks) if peaks else None


def _r(x: float | None, digits: int = 3) -> float | None:
    return None if x is None else round(float(x), digits)


# --- step time ------------------------------------------------------------------------------------
def bootstrap_change(base: np.ndarray, head: np.ndarray, resamples: int = BOOTSTRAP_RESAMPLES,
                     seed: int = BOOTSTRAP_SEED) -> tuple[float, float, float]:
    """Relative change of the median (head / base - 1) and its percentile-bootstrap interval."""
    rng = np.random.default_rng(seed)
    b = np.median(base[rng.integers(0, len(base), (resamples, len(base)))], axis=1)
    h = np.median(head[rng.integers(0, len(head), (resamples, len(head)))], axis=1)
    ratio = h / np.where(b > 0, b, np.nan) - 1.0
    ratio = ratio[np.isfinite(ratio)]
    alpha = (1 - CONFIDENCE) / 2
    change = float(np.median(head) / np.median(base) - 1.0)
    return change, float(np.quantile(ratio, alpha)), float(np.quantile(ratio, 1 - alpha))


def step_time(base: np.ndarray, head: np.ndarray) -> StepTime:
    ok = len(base) >= MIN_STEPS and len(head) >= MIN_STEPS and np.median(base) > 0
    change = low = high = None
    if ok:
        change, low, high = bootstrap_change(base, head)
    elif len(base) and len(head) and np.median(base) > 0:
        change = float(np.median(head) / np.median(base) - 1.0)
    b_med, b_p10, b_p90 = step_time_stats(base)
    h_med, h_p10, h_p90 = step_time_stats(head)
    return StepTime(len(base), len(head), _r(b_med), _r(h_med), _r(b_p10), _r(b_p90),
                    _r(h_p10), _r(h_p90), _r(change, 6), _r(low, 6), _r(high, 6))


def change_verdict(st: StepTime, tolerance: float) -> str:
    if st.base_steps < MIN_STEPS or st.head_steps < MIN_STEPS or st.change is None:
        return INCONCLUSIVE
    assert st.ci_low is not None and st.ci_high is not None
    if st.ci_low > 0 and st.change > tolerance:
        return REGRESSED
    if st.ci_high < 0 and st.change < -tolerance:
        return IMPROVED
    if -tolerance <= st.ci_low and st.ci_high <= tolerance:
        return UNCHANGED
    return INCONCLUSIVE


# --- kernels --------------------------------------------------------------------------------------
def _kernel_per_step(a: AnalysisData) -> dict[str, float]:
    out: dict[str, float] = {}
    n_ranks = max(len(a.ranks), 1)
    for r in a.ranks:
        steps = max(r.steps, 1)
        for d in r.devices:
            for k in d.kernel_table or d.top_kernels:
                key = normalise_kernel(k.name)
                out[key] = out.get(key, 0.0) + k.total_us / steps / n_ranks
    return out


def kernel_moves(base: AnalysisData, head: AnalysisData, top: int = TOP_MOVERS) -> tuple[KernelMove, ...]:
    b, h = _kernel_per_step(base), _kernel_per_step(head)
    rows = []
    for name in set(b) | set(h):
        bv, hv = b.get(name, 0.0), h.get(name, 0.0)
        status = "new" if name not in b else "vanished" if name not in h else "moved"
        rows.append(KernelMove(name, round(bv, 3), round(hv, 3), round(hv - bv, 3), status))
    rows.sort(key=lambda m: (-abs(m.delta_per_step_us), m.name))
    return tuple(rows[:top])


# --- the comparison -------------------------------------------------------------------------------
def compare(base: AnalysisData, head: AnalysisData, tolerance: float = DEFAULT_TOLERANCE,
            root: str | None = None) -> Comparison:
    """`root`: input paths are shown relative to it (else by file name)."""
    b_side, b_dur, b_parts = _side(base, root)
    h_side, h_dur, h_parts = _side(head, root)
    st = step_time(b_dur, h_dur)
    verdict = change_verdict(st, tolerance)
    warnings: list[str] = []
    if st.base_steps < MIN_STEPS or st.head_steps < MIN_STEPS:
        warnings.append(f"fewer than {MIN_STEPS} steps on a side (base {st.base_steps}, head {st.head_steps}): "
                        f"the change cannot be judged; profile more steps")
    models = [sorted({d.name for r in a.ranks for d in r.devices if d.name}) for a in (base, head)]
    if models[0] and models[1] and models[0] != models[1]:
        warnings.append(f"different GPU models: base {', '.join(models[0])}, head {', '.join(models[1])}; "
                        f"the change includes the hardware")
    if base.summary.ranks != head.summary.ranks:
        warnings.append(f"base has {base.summary.ranks} rank(s), head {head.summary.ranks}: job totals compared")
    mean_change = (None if b_side.mean_step_us is None or h_side.mean_step_us is None or not len(b_dur)
                   or not len(h_dur) else round(h_side.mean_step_us - b_side.mean_step_us, 3))
    parts = []
    for key in sorted(set(b_parts) | set(h_parts)):
        bv = float(np.mean(b_parts[key])) if key in b_parts and len(b_parts[key]) else 0.0
        hv = float(np.mean(h_parts[key])) if key in h_parts and len(h_parts[key]) else 0.0
        if abs(bv) < 5e-4 and abs(hv) < 5e-4:
            continue
        delta = hv - bv
        share = delta / mean_change if mean_change else None
        parts.append(Part(key, _part_label(key), round(bv, 3), round(hv, 3), round(delta, 3),
                          None if share is None else round(share, 4)))
    parts.sort(key=lambda p: (-abs(p.delta_per_step_us), p.cause))
    verdict_changed = (b_side.primary or "") != (h_side.primary or "")
    comparison = Comparison(
        schema=SCHEMA, tool={"name": "traceanalyzer", "version": __version__}, change_verdict=verdict,
        headline="", tolerance=tolerance, step_time=st, mean_step_change_us=mean_change,
        attribution=tuple(parts), kernels=kernel_moves(base, head), base=b_side, head=h_side,
        verdict_changed=verdict_changed, warnings=tuple(warnings))
    return _with_headline(comparison)


def _part_label(key: str) -> str:
    if key.startswith(IDLE_PREFIX):
        cause = key[len(IDLE_PREFIX):]
        return "GPU idle, no cause given" if cause == "unattributed" else f"GPU idle: {cause_label(cause)}"
    return PART_LABELS.get(key, key)


def _with_headline(c: Comparison) -> Comparison:
    from dataclasses import replace

    st = c.step_time
    if st.change is None:
        text = "Step time cannot be compared: a side has no steps."
    else:
        pct = f"{abs(st.change) * 100:.1f}%"
        ci = "" if st.ci_low is None or st.ci_high is None else \
            f" (95% CI {st.ci_low * 100:+.1f}% to {st.ci_high * 100:+.1f}%)"
        if c.change_verdict == REGRESSED:
            text = f"HEAD is {pct} slower per step{ci}"
        elif c.change_verdict == IMPROVED:
            text = f"HEAD is {pct} faster per step{ci}"
        elif c.change_verdict == UNCHANGED:
            text = f"Step time unchanged: {st.change * 100:+.1f}%{ci}, within ±{c.tolerance * 100:.0f}%"
        else:
            text = f"Inconclusive: step time {st.change * 100:+.1f}%{ci}"
            if st.base_steps < MIN_STEPS or st.head_steps < MIN_STEPS:
                text += f", too few steps (base {st.base_steps}, head {st.head_steps})"
    movers = [p for p in c.attribution if c.mean_step_change_us and p.share_of_change is not None
              and p.share_of_change > 0.2 and (p.delta_per_step_us > 0) == (c.mean_step_change_us > 0)]
    if movers and c.change_verdict in (REGRESSED, IMPROVED):
        p = movers[0]
        more_less = "more" if p.delta_per_step_us > 0 else "less"
        text += (f"; {format_us(abs(p.delta_per_step_us))} {more_less} {p.label} per step explains "
                 f"{min(p.share_of_change or 0.0, 9.99) * 100:.0f}% of it")
    if c.verdict_changed:
        text += f"; verdict changed {c.base.primary or 'none'} → {c.head.primary or 'none'}"
    return replace(c, headline=text + ".")


def with_gates(c: Comparison, gates: tuple[GateResult, ...]) -> Comparison:
    from dataclasses import replace

    return replace(c, gates=gates)


__all__ = ["CHANGE_VERDICTS", "Comparison", "GateResult", "KernelMove", "Part", "SCHEMA", "Side", "StepTime",
           "compare", "normalise_kernel", "with_gates"]
