"""The typed result of one analysis, `Analysis`, and its one serialization (JSON `traceanalyzer/3`).

Every face reads an `Analysis`: the renderers (HTML, Markdown, JSON, terminal), the notebook
API (DataFrame views) and comparisons of two runs. It is made once by the pipeline
(`traceanalyzer.analyze`) and written and read back by `to_data` / `from_data`, which walk the
dataclasses below generically: a field's JSON key is its name, so the JSON interface is exactly
this file. `load(path)` of a written report gives an object equal to the original.

Units in the JSON are the report's: durations in microseconds as floats rounded to 0.001 (whole
nanoseconds) with names ending in `_us`, absolute times in integer nanoseconds (`_ns`),
fractions in [0, 1] or None when the figure has no meaning. Some figures are held as the analyses
computed them (a type of `analyses/`, durations in int ns, no twin here): `EDGE` below names their
JSON keys, and the edge (`to_data` / `from_data`) converts their durations once, so the JSON keeps the
keys and units above; a face shows such a duration through `us`, as the JSON has it.

The tree: `AnalysisData` holds the job's figures, its verdict (`diagnosis`) and one `RankResult` per
rank; each rank carries its own figures, its devices (each with a bounded table of every gap at
least `min_gap` long, with its cause) and its own diagnosis. Drawing payloads (the timeline's blocks,
the charts' series) are presentation, not figures: they live only under the `drawing` keys
(`RankResult.drawing`, `AnalysisData.drawing`), as plain JSON data bounded in size, and a result
saved without them (`Analysis.save(path, drawing=False)`) keeps every figure.

Maps keyed by gap cause (`idle_by_cause_us`) hold only the causes present (non-zero): a saved report
names no cause it has no time for, so adding a cause to `causes.py` does not change the shape of
saved reports; a reader takes an absent cause as 0 (`.get(cause, 0.0)`). The types holding one drop
zero entries when made (`_keep_present`), so reports that stored zeros load to the same result.

`migrate` reads a report of an older schema (`traceanalyzer/2`) into this one.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Union

# the figures held as computed (`EDGE`), part of this interface: faces import them from here
from ..analyses.collectives_job import RankComm as RankComm
from ..analyses.critical_path import Segment as Segment
from ..analyses.figures import CopyDirection as CopyDirection
from ..analyses.figures import GapBin as GapBin
from ..analyses.figures import KernelRow as KernelRow
from ..analyses.memory import MemoryStep as MemoryStep  # no units to convert: a field's key is its name

SCHEMA = "traceanalyzer/3"
OLD_SCHEMAS = ("traceanalyzer/2",)  # read through `migrate`
PlainData = dict[str, Any]  # JSON-shaped drawing payloads (lists of numbers and strings)


def causes_present(by_cause: dict[str, float]) -> dict[str, float]:
    """A map keyed by cause without its zero entries (what an `idle_by_cause_us` field holds)."""
    return {c: v for c, v in by_cause.items() if v}


def _keep_present(obj: Any) -> None:
    """`__post_init__` of a type holding `idle_by_cause_us`: the causes present only, however it is made
    (built, loaded from a report of any version, or by hand)."""
    object.__setattr__(obj, "idle_by_cause_us", causes_present(obj.idle_by_cause_us))


# --- inputs ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ToolInfo:
    name: str
    version: str


@dataclass(frozen=True)
class OptionsInfo:
    """The options the figures depend on (echoed so a saved report says how it was made)."""

    min_gap_us: float
    include_warmup: bool = False
    batch_size: int | None = None  # samples per step, as the user gave it (never guessed)


@dataclass(frozen=True)
class InputInfo:
    path: str
    format: str
    events_read: int
    events_kept: int
    not_kept: dict[str, int]  # reason -> events
    warnings: tuple[str, ...]


# --- figures per rank and device ----------------------------------------------------------------------
@dataclass(frozen=True)
class StepRow:
    step: int
    start_us: float  # from the rank's window start
    duration_us: float
    gpu_busy_us: float
    memcpy_us: float
    dataloader_wait_us: float
    idle_us: float
    comm_us: float = 0.0  # communication kernels (union) inside the step
    exposed_comm_us: float = 0.0  # communication with no other GPU work running
    samples_per_s: float | None = None  # batch size / step duration (only with --batch-size)


@dataclass(frozen=True)
class MemcpyResult:
    by_direction: tuple[CopyDirection, ...]
    memset_us: float
    memset_count: int
    memset_bytes: int


@dataclass(frozen=True)
class GapRow:
    """One idle gap, with the cause the attribution gave it (None when not diagnosed)."""

    start_us: float  # from the device's window start
    duration_us: float
    step: int | None
    cause: str | None


@dataclass(frozen=True)
class GapSummary:
    min_gap_us: float
    count: int
    total_us: float
    largest_us: float
    histogram: tuple[GapBin, ...]
    top: tuple[GapRow, ...]  # longest first


@dataclass(frozen=True)
class FitResult:
    correlation: float | None
    bins: int
    runner_up_correlation: float | None
    runner_up_offset_s: float | None
    ambiguous: bool


@dataclass(frozen=True)
class MetricSummary:
    samples: int
    mean: float | None
    min: float | None
    max: float | None
    window_samples: int
    window_mean: float | None
    outside_samples: int
    outside_mean: float | None


@dataclass(frozen=True)
class ZeroUtilRuns:
    runs: int
    total_samples: int
    total_s: float | None
    longest_samples: int
    longest_s: float | None
    longest_start_s: float | None
    longest_first_sample: str | None
    longest_last_sample: str | None


@dataclass(frozen=True)
class CrossCheck:
    samples: int
    trace_busy_pct: float | None
    log_util_pct: float | None
    difference_pct: float | None
    margin_pct: float
    disagrees: bool


@dataclass(frozen=True)
class UtilPoint:
    start_s: float | None
    sm_util_pct: float | None


@dataclass(frozen=True)
class DeviceCounters:
    """nvidia-smi / DCGM figures of one GPU (see definitions `counter_metrics`)."""

    device: int
    sources: tuple[str, ...]
    period_s: float | None
    samples: int
    first_sample: str
    last_sample: str
    duration_s: float | None
    offset_s: float | None
    offset_method: str | None
    fit: FitResult | None
    metrics: dict[str, MetricSummary]
    zero_util_runs: ZeroUtilRuns | None
    cross_check: CrossCheck | None
    utilisation: tuple[UtilPoint, ...]


@dataclass(frozen=True)
class GpuMapping:
    log_gpu: int
    device: int


@dataclass(frozen=True)
class CounterLog:
    path: str
    format: str
    clock: str
    samples_read: int
    samples_kept: int
    offset_s: float | None
    offset_method: str | None
    clock_offset_s: float | None
    zone: str | None
    skew_s: float | None
    fit: FitResult | None
    gpu_map: tuple[GpuMapping, ...] | None
    warnings: tuple[str, ...]


@dataclass(frozen=True)
class MemoryResult:
    """Memory of one device (or the host) from the profiler's [memory] events (definitions `memory`)."""

    samples: int  # memory events used
    peak_allocated_bytes: int
    peak_reserved_bytes: int | None  # None when the events carry no reserved total
    total_bytes: int | None  # the device's memory (deviceProperties totalGlobalMem); None for the host
    peak_allocated_fraction: float | None  # peak_allocated / total
    headroom_fraction: float | None  # 1 - peak_reserved (or allocated) / total
    growth_per_step_bytes: float | None  # median growth between steps (a leak shows as > 0 every step)
    per_step: tuple[MemoryStep, ...]  # its peak, and its end vs the previous step's end


@dataclass(frozen=True)
class GapTable:
    """Every idle gap of a device at least `min_gap` long, with its cause, by start time (columns).

    Bounded: past `MAX_GAP_ROWS` rows the longest are kept (still by start time) and `omitted` counts
    the rest, so `rows + omitted` is `GapSummary.count`."""

    start_us: tuple[float, ...]  # from the device's window start
    duration_us: tuple[float, ...]
    step: tuple[int | None, ...]  # the step holding the gap's start
    cause: tuple[str | None, ...]  # None when not diagnosed
    omitted: int = 0


# --- steps: where a rank's steps came from (issue: iterations without markers) ------------------------
@dataclass(frozen=True)
class StepSourceResult:
    """How the rank's steps were found: step markers, iterations detected from repeating work, or
    none (the whole window is one step)."""

    kind: str  # "markers" | "detected" | "window"
    # iterations found (detected; or markers: inside the single step, its sub-iterations): what repeats
    # ("kernel sequence", "annotation <name>"), the median length of one, how many
    basis: str | None = None
    period_us: float | None = None
    iterations: int | None = None


# --- operators and Python frames (issue: operator view) -----------------------------------------------
@dataclass(frozen=True)
class OperatorRow:
    """A host operator or annotation: how often it ran and the time it took."""

    name: str
    kind: str  # "cpu_op" | "annotation" | ...
    count: int
    total_us: float
    self_us: float
    share_of_steps: float | None = None  # in_steps_us / the summed step time (the window without steps)
    per_step_us: float | None = None  # total / steps (None without steps)
    in_steps_us: float | None = None  # the union of its calls inside the steps (the window without steps)
    idle_us: float | None = None  # the union of its calls inside GPU idle gaps, summed over devices
    share_of_idle: float | None = None  # idle_us / the devices' idle time (None without GPU idle)
    top_level: bool = False  # some call has no enclosing operator or annotation (only a step)
    threads: int = 1  # host threads it ran on (total_us: its outermost calls' time on each, summed)


@dataclass(frozen=True)
class KernelLaunchRow:
    """A kernel name with the host operator that launched it (through the runtime call's correlation)."""

    name: str
    device: str
    count: int
    total_us: float
    mean_us: float
    launched_by: str | None = None


@dataclass(frozen=True)
class FrameRow:
    """A user Python frame (innermost, `file:line function`) and the time it was running."""

    frame: str
    host_us: float
    idle_us: float = 0.0


@dataclass(frozen=True)
class OperatorView:
    ops: tuple[OperatorRow, ...] = ()
    kernels: tuple[KernelLaunchRow, ...] = ()
    frames: tuple[FrameRow, ...] = ()
    has_stacks: bool = False  # the trace held Python frames (with_stack=True)
    ops_omitted: int = 0  # operator names not kept (fewer total time than the last row)
    kernels_omitted: int = 0  # (device, kernel name) rows not kept
    frames_omitted: int = 0  # user frames not kept
    steps_us: float | None = None  # the shares' denominator: summed step time (the window without steps)
    idle_us: float | None = None  # the devices' idle time, summed (share_of_idle's denominator)
    frames_idle_us: float | None = None  # the host-compute and unknown idle time the frames are measured in


@dataclass(frozen=True)
class CaptureResult:
    """What the capture itself says about its completeness (truncation, GPUs listed but silent)."""

    gpus_listed: int = 0
    gpu_events_lost: bool = False
    note: str | None = None


# --- critical path (issue #44) ---------------------------------------------------------------------------
@dataclass(frozen=True)
class CriticalPathResult:
    """The critical path of the rank's median step (definitions `critical_path`): its segments in path order,
    whose durations add up to the step; the time on it per kind; the assumptions that stood in for edges the
    trace does not hold, with how many times each did."""

    step: int | None  # the step's number; None: the window (no steps)
    step_us: float
    segments: tuple[Segment, ...]  # kind, name, duration_us (the longest kept, the rest one "(other)" per kind)
    by_kind_us: dict[str, float]  # kind -> time on the path, the kinds present only
    assumptions: dict[str, int] = field(default_factory=dict)


# --- CUDA graphs (issue: traces of 2026) ----------------------------------------------------------------
@dataclass(frozen=True)
class GraphRow:
    graph_id: int
    replays: int
    kernels_per_replay: float
    replay_us: float  # median span of one replay on the GPU
    gpu_us: float  # GPU work inside this graph's replays


@dataclass(frozen=True)
class GraphSummary:
    gpu_us: float  # GPU work inside graph replays
    share_of_busy: float | None
    replays: int
    graphs: tuple[GraphRow, ...] = ()
    captures: int = 0  # graph captures on the rank's host (one-off; kept apart from the replays)
    capture_us: float = 0.0  # host time capturing and instantiating graphs


@dataclass(frozen=True)
class TraceCounterSummary:
    """A hardware counter the trace itself recorded for this device (Kineto "GPU N Counters")."""

    metric: str
    samples: int
    mean: float | None
    min: float | None
    max: float | None


@dataclass(frozen=True)
class DeviceResult:
    device: str  # "cuda:N"
    index: int
    name: str
    window_start_ns: int
    window_us: float | None
    window_basis: str
    gpu_busy_us: float | None
    gpu_idle_fraction: float | None
    kernel_us: float | None
    communication_us: float | None
    exposed_communication_us: float | None
    memcpy_us: float | None
    memcpy_share_of_busy: float | None
    memcpy_share_of_window: float | None
    memcpy: MemcpyResult
    gaps: GapSummary
    top_kernels: tuple[KernelRow, ...]
    counters: DeviceCounters | None = None
    kernel_table: tuple[KernelRow, ...] = ()  # every kernel name by time, bounded (for comparisons)
    memory: MemoryResult | None = None  # from memory events (torch.profiler profile_memory=True)
    gap_table: GapTable | None = None  # every gap >= min_gap with its cause (None: not recorded)
    graphs: GraphSummary | None = None  # CUDA graph replays on this device (None: no graphs)
    trace_counters: tuple[TraceCounterSummary, ...] = ()  # counters the trace recorded for this device


# --- serving engines' iterations (analyses/serving.py) ----------------------------------------------------
@dataclass(frozen=True)
class IterationRow:
    """One iteration of a serving engine, from its own annotation (definitions: serving_iterations)."""

    phase: str  # prefill, decode, mixed, or unknown (a model-runner range: no annotation names the phase)
    batch_size: int | None  # requests in the batch, where the annotation writes them
    tokens: int | None  # query tokens, likewise
    start_us: float  # its host range's start, from the rank's window start
    duration_us: float  # range start to the later of its end and its GPU work's end
    gpu_busy_us: float  # union of the GPU work launched inside it (graph replays included), within its span
    gpu_bubble_us: float  # idle between its first GPU work's start and its last's end
    host_gap_before_us: float | None  # no GPU work from the previous iteration's work end to this one's start
    graph_replays: int


@dataclass(frozen=True)
class ServingPhaseRow:
    """One phase's iterations: counts, sums and medians over all of them (definitions: serving_iterations)."""

    phase: str
    iterations: int
    median_iteration_us: float
    iteration_us: float  # summed durations
    gpu_busy_us: float  # summed GPU busy (each within its iteration)
    gpu_busy_share: float | None  # gpu_busy_us / iteration_us
    gpu_bubble_us: float
    median_host_gap_us: float | None  # over its iterations that follow another
    host_gap_us: float
    graph_replays: int
    median_batch_size: float | None  # where every iteration writes it
    median_us_per_token: float | None  # decode: median of duration / batch size


@dataclass(frozen=True)
class ServingResult:
    """A serving engine's iterations (`serving.iterations`, the first MAX_ITERATION_ROWS) and its phases."""

    sources: tuple[str, ...]  # annotation families read (analyses/serving.py SOURCE_WORDS)
    phases: tuple[ServingPhaseRow, ...]
    iterations: tuple[IterationRow, ...]
    iterations_omitted: int = 0
    requests: ServingRequests | None = None  # request spans given beside the trace (None: none given)


# --- serving requests (analyses/requests.py) --------------------------------------------------------------
@dataclass(frozen=True)
class RequestRow:
    """One request of a serving engine, from its span (definitions: serving_requests)."""

    request_id: str
    start_us: float  # arrival, from the rank's window start (joined), else from the first request's arrival
    queue_us: float | None  # the engine's own figures; None where the span does not carry them
    prefill_us: float | None
    decode_us: float | None
    ttft_us: float | None
    e2e_us: float
    prompt_tokens: int | None
    output_tokens: int | None
    iterations: int  # listed iterations overlapping its life (0 when not joined)
    first_iteration: int | None  # index into serving.iterations
    last_iteration: int | None


@dataclass(frozen=True)
class RequestStat:
    """One per-request figure (queue, prefill, decode, ttft, e2e) over the requests that carry it."""

    figure: str
    requests: int
    median_us: float | None
    p90_us: float | None


@dataclass(frozen=True)
class ServingRequests:
    """The requests of the run (`serving.requests`: summaries over all, the first MAX_REQUEST_ROWS rows)."""

    requests: int
    stats: tuple[RequestStat, ...]
    queued_longer_than_prefill: int
    joined: bool  # on the trace's clock: each request's iterations found
    with_iterations: int
    rows: tuple[RequestRow, ...] = ()
    rows_omitted: int = 0


@dataclass(frozen=True)
class RankDrawing:
    """What the page draws for one rank (presentation, bounded): times in us from the rank's window start."""

    timeline: PlainData  # drawn tracks (analyses/tracks.py)
    charts: PlainData  # per-step stacked series
    memory: dict[str, PlainData] = field(default_factory=dict)  # "cuda:N" / "host" -> t_us, allocated, reserved


@dataclass(frozen=True)
class RankResult:
    rank: int | None
    input: str
    framework: str
    clock: str
    window_start_ns: int
    window_us: float | None
    window_basis: str
    steps: int
    gpu_activity: bool
    dataloader_wait_us: float | None
    dataloader_wait_fraction: float | None
    per_step: tuple[StepRow, ...]
    devices: tuple[DeviceResult, ...]
    host_memory: MemoryResult | None = None  # CPU memory events, kept apart from the GPUs'
    host: str | None = None  # the machine the rank ran on (trace metadata), for the job clock
    diagnosis: RankDiagnosisResult | None = None  # this rank's verdict and findings (None: not diagnosed)
    step_source: StepSourceResult | None = None  # where the steps came from (None: read before this was recorded)
    operators: OperatorView | None = None  # top host operators, kernels with their launchers, Python frames
    capture: CaptureResult | None = None  # completeness of the capture (truncation)
    critical_path: CriticalPathResult | None = None  # the median step's critical path (None: no window)
    drawing: RankDrawing | None = None  # presentation only; None when saved without drawing
    serving: ServingResult | None = None  # a serving engine's annotated iterations (None: none annotated)


@dataclass(frozen=True)
class Summary:
    """The headline figures over all ranks and GPUs (definitions `summary`)."""

    ranks: int
    devices: int
    steps: int
    window_us: float
    gpu_busy_us: float
    gpu_idle_fraction: float | None
    memcpy_us: float
    memcpy_share_of_busy: float | None
    dataloader_wait_us: float
    dataloader_wait_fraction: float | None
    gaps: int
    gaps_total_us: float
    samples_per_s: float | None = None  # batch_size * steps / summed step time (only with --batch-size)
    steps_per_s: float | None = None  # steady-state steps / their summed duration
    step_time_median_us: float | None = None
    step_time_p10_us: float | None = None
    step_time_p90_us: float | None = None
    batch_size: int | None = None


# --- diagnosis ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class HostOp:
    """A host event name behind idle time: its share of that idle time and the time it covers."""

    name: str
    share: float
    time_us: float | None = None


@dataclass(frozen=True)
class FindingResult:
    """A finding: its numbers, and the prose rendered from them (`evidence`)."""

    id: str
    cause: str | None
    title: str
    severity: str  # "high" | "medium" | "low"
    explains_us: float  # GPU time the cause lost (or, for gpu_bound, the busy time)
    share_of_idle: float  # explains / GPU time lost on the rank
    evidence: tuple[str, ...]
    advice: tuple[str, ...]
    share_of_window: float | None = None
    gaps: int | None = None  # idle gaps of this cause
    host_ops: tuple[HostOp, ...] = ()  # the host events behind this idle time, best first
    figures: dict[str, float] = field(default_factory=dict)  # cause-specific numbers, units in names
    # per percentage in the title and evidence, in order: (numerator, denominator) keys into `figures`
    # (denominator "": the numerator is a fraction; "%": a figure in percent)
    shares: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class AttributedGap:
    device: str
    start_us: float  # from the device's window start
    duration_us: float
    step: int | None
    cause: str
    evidence: tuple[HostOp, ...]


@dataclass(frozen=True)
class DeviceDiagnosis:
    device: str
    window_us: float
    idle_us: float
    gap_count: int
    idle_by_cause_us: dict[str, float]  # causes present only
    exposed_memcpy_us: float
    exposed_communication_us: float

    def __post_init__(self) -> None:
        _keep_present(self)


@dataclass(frozen=True)
class StepCausesResult:
    step: int
    idle_by_cause_us: dict[str, float]  # causes present only

    def __post_init__(self) -> None:
        _keep_present(self)


@dataclass(frozen=True)
class LaunchThread:
    pid: int
    tid: int


@dataclass(frozen=True)
class PeriodicResult:
    steps: tuple[int, ...]
    every: int


@dataclass(frozen=True)
class HostStepParts:
    """One step of the host loop's breakdown (definitions `host_loop`)."""

    step: int
    data_wait_us: float
    optimizer_us: float
    annotations_us: float
    model_ops_us: float
    other_us: float


@dataclass(frozen=True)
class HostSharesResult:
    """Where the host loop's step time went, in disjoint parts (definitions `host_loop`): DataLoader wait,
    optimizer, named annotations, model ops, elsewhere (`other_us`); totals over the steps and per step."""

    total_us: float
    data_wait_us: float
    model_ops_us: float
    other_us: float
    optimizer_us: float = 0.0
    annotations_us: float = 0.0
    steps: int = 0  # steps the totals are summed over (0: no steps, the window)
    per_step: tuple[HostStepParts, ...] = ()
    top_annotations: tuple[HostOp, ...] = ()  # named annotations by their time in the annotations part
    elsewhere_others: tuple[HostOp, ...] = ()  # what other threads ran during the loop's "elsewhere" time


@dataclass(frozen=True)
class RankDiagnosisResult:
    """One rank's verdict, findings and idle time by cause (the rank is the `RankResult` holding it)."""

    primary: str
    host_primary: str | None
    reason: str
    headline: str
    lost_us: float
    window_us: float
    idle_us: float
    idle_by_cause_us: dict[str, float]  # causes present only
    exposed_memcpy_us: float
    exposed_communication_us: float
    launch_threads: tuple[LaunchThread, ...]
    launch_thread_basis: str
    periodic: PeriodicResult | None
    host_shares: HostSharesResult | None
    findings: tuple[FindingResult, ...]
    devices: tuple[DeviceDiagnosis, ...]
    per_step: tuple[StepCausesResult, ...]
    gaps: tuple[AttributedGap, ...]  # the rank's longest gaps over all devices
    runner_up: str | None = None  # the cause whose removal would save the second most (diagnosis/savings.py)
    runner_up_share: float | None = None  # its share of the steady-state time lost: how close the call was
    confidence: str | None = None  # "clear" | "close"
    warmup_steps: tuple[int, ...] = ()  # leading steps left out of the verdict
    startup_us: float = 0.0  # one-off start-up costs: start-up idle + time lost in warm-up steps
    input_split: str | None = None  # input_bound only: "cpu" | "storage" | "unknown" (host logs tell them apart)
    headline_figures: dict[str, float] = field(default_factory=dict)  # the figures the headline's shares are of
    headline_shares: tuple[tuple[str, str], ...] = ()  # per percentage in the headline (as FindingResult.shares)
    verdict_note: str | None = None  # why the verdict differs from the top finding, when it does
    headline_detail: str = ""  # how the headline's number was computed: durations a reader can check

    def __post_init__(self) -> None:
        _keep_present(self)


@dataclass(frozen=True)
class StragglerResult:
    """A rank the others wait for in their collectives (worst first in `DiagnosisResult.stragglers`)."""

    rank: int
    caused_wait_per_step_us: float  # time the other ranks spent waiting for this one, per step
    lateness_per_step_us: float  # how late it arrives at collectives (vs the median rank), per step
    collectives: int  # collectives in which it arrived last
    top_cause: str | None  # its own largest cause of lost time
    top_cause_per_step_us: float | None
    text: str  # e.g. "rank 5 is late by 31.0 ms per step; its DataLoader wait is 30.0 ms per step"


@dataclass(frozen=True)
class DiagnosisResult:
    """The job's verdict: that of the rank losing the most GPU time (`rank`, an index into `ranks`)."""

    primary: str
    host_primary: str | None
    headline: str
    findings: tuple[FindingResult, ...]
    rank: int | None = None  # index into AnalysisData.ranks of the rank that speaks for the job
    stragglers: tuple[StragglerResult, ...] = ()  # worst first; empty: no straggler (or one rank)
    headline_figures: dict[str, float] = field(default_factory=dict)  # the figures the headline's shares are of
    headline_shares: tuple[tuple[str, str], ...] = ()  # per percentage in the headline (as FindingResult.shares)
    verdict_note: str | None = None  # why the verdict differs from the top finding, when it does
    headline_detail: str = ""  # how the headline's number was computed: durations a reader can check


# --- many ranks: one clock, collectives ------------------------------------------------------------------
@dataclass(frozen=True)
class HostClock:
    """How one host's clock was put on the job's clock."""

    host: str
    ranks: tuple[int, ...]
    offset_us: float  # added to this host's times to put them on the job clock
    method: str  # "reference" (the first host) | "collectives" | "same clock" | "none"
    collectives_used: int
    residual_us: float | None  # median |end-time difference| of matched collectives after the shift


@dataclass(frozen=True)
class WorkerRow:
    """One worker of a job traced without GPU kernels, per step (`run.workers`): what a what-if needs."""

    rank: int
    steps: int  # steps counted on this worker (its optimizer steps, else its step markers, else 1)
    compute_us: float  # union of its compute events (not communication, not waits), per step
    comm_us: float  # communication events not beside its compute, per step
    wait_us: float  # its span with neither compute nor communication running, per step
    step_time_us: float  # its span per step (= compute + comm + wait)
    compute_vs_median: float  # compute per step / the median worker's


@dataclass(frozen=True)
class JobResult:
    """Figures of a many-rank job on one clock (absent for one rank)."""

    clocks: tuple[HostClock, ...]
    collectives_matched: int  # collectives found on every rank and matched across them
    ranks: tuple[RankComm, ...]  # per rank, per steady-state step (medians over steps)
    straggler_min_lateness_us: float | None = None  # lateness per step from which a rank is a straggler
    # Where each rank's window starts on the job clock, from the earliest rank's start (report order):
    # the timeline draws every rank on this one clock.
    timeline_shift_us: tuple[float, ...] = ()
    # workers traced without GPU kernels (one file, many workers): per worker, per step; empty otherwise
    workers: tuple[WorkerRow, ...] = ()
    worker_straggler_factor: float | None = None  # compute per step vs the median from which a worker straggles


# --- host logs (glances) ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class HostLogResult:
    """A host monitor log (glances CSV/JSON export) on the trace's clock (definitions `host_metrics`)."""

    path: str
    format: str
    samples_read: int
    samples_kept: int
    period_s: float | None
    offset_s: float | None  # log time + offset = trace time
    offset_method: str | None
    metrics: dict[str, MetricSummary]  # cpu_user_pct, cpu_iowait_pct, load_1m, disk_read_bytes_per_s, ...
    during_dataloader_wait: dict[str, float]  # metric -> mean over samples inside DataLoader waits
    warnings: tuple[str, ...]
    clock: str = ""  # the log's own clock: "epoch" (glances 4 now.iso) | "wall" (local timestamp)
    zone: str | None = None  # the zone behind the offset, for wall-clock logs
    cores: int | None = None  # logical CPUs of the host, as glances counted them
    wait_samples: int = 0  # samples whose period overlaps a DataLoader wait
    wait_covered_fraction: float | None = None  # DataLoader wait time inside sampled periods / all of it
    not_kept: dict[str, int] = field(default_factory=dict)  # rows dropped, by reason


# --- the whole result ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class JobDrawing:
    """What the page draws for the whole job (presentation, bounded)."""

    host_logs: dict[str, PlainData] = field(default_factory=dict)  # host log path -> its CPU series and waits


@dataclass(frozen=True)
class AnalysisData:
    """Everything one analysis found: what a renderer, a notebook or a comparison needs.

    The data only; `traceanalyzer.Analysis` adds the faces (renderers, DataFrame views, save)."""

    schema: str
    tool: ToolInfo
    options: OptionsInfo
    inputs: tuple[InputInfo, ...]
    warnings: tuple[str, ...]
    ranks: tuple[RankResult, ...]
    summary: Summary
    definitions: dict[str, str]
    diagnosis: DiagnosisResult | None = None
    counter_logs: tuple[CounterLog, ...] = ()
    counters: tuple[DeviceCounters, ...] = ()
    host_logs: tuple[HostLogResult, ...] = ()
    job: JobResult | None = None  # many ranks: one clock, collectives, per-rank communication
    drawing: JobDrawing | None = None  # presentation only; None when saved without drawing
    # counter logs used without being named (found beside a trace or in an input folder), by path
    implicit_logs: tuple[str, ...] = ()

    def to_data(self) -> dict[str, Any]:
        """Plain JSON data (dicts, lists, numbers, strings), dict keys sorted."""
        return to_data(self)  # type: ignore[no-any-return]

    def without_drawing(self) -> AnalysisData:
        """The same figures without any drawing payload (what `save(..., drawing=False)` writes)."""
        ranks = tuple(dataclasses.replace(r, drawing=None) for r in self.ranks)
        return dataclasses.replace(self, ranks=ranks, drawing=None)

    @property
    def speaking_rank(self) -> RankResult | None:
        """The rank whose verdict is the job's (None when not diagnosed)."""
        k = self.diagnosis.rank if self.diagnosis else None
        return self.ranks[k] if k is not None and 0 <= k < len(self.ranks) else None


# --- the edge: figures held as computed (int ns), written in the report's units ----------------------------
_REQUIRED = object()


@dataclass(frozen=True)
class Key:
    """One JSON key of a figure type the result holds as the analyses computed it (`EDGE`): the type's
    `field` written under `key`; `ns`: a duration in nanoseconds, written in microseconds rounded to whole
    nanoseconds (`us`) and read back to nanoseconds; `derived`: a property that follows from the fields,
    written and not read."""

    key: str
    field: str
    ns: bool = False
    derived: bool = False
    default: Any = _REQUIRED  # the value when a report saved before the key existed lacks it


# The figure types the result holds as they are (no twin in this file): their JSON keys, in the order written.
# Each field of such a type has one key that is not derived (tests/test_schema.py checks it).
EDGE: dict[type, tuple[Key, ...]] = {
    Segment: (Key("kind", "kind"), Key("name", "name"), Key("duration_us", "dur_ns", ns=True)),
    KernelRow: (Key("name", "name"), Key("count", "count"), Key("total_us", "total_ns", ns=True),
                Key("mean_us", "mean_ns", ns=True, derived=True), Key("communication", "comm")),
    GapBin: (Key("from_us", "lo_ns", ns=True), Key("to_us", "hi_ns", ns=True), Key("count", "count"),
             Key("total_us", "total_ns", ns=True)),
    CopyDirection: (Key("direction", "direction"), Key("count", "count"), Key("union_us", "union_ns", ns=True),
                    Key("bytes", "bytes"), Key("copies_with_size", "bytes_known"),
                    Key("bandwidth_gbps", "bandwidth_gbps"), Key("pageable", "pageable"), Key("pinned", "pinned")),
    RankComm: (Key("rank", "rank"), Key("host", "host"), Key("step_time_us", "step_time_ns", ns=True),
               Key("compute_us", "compute_ns", ns=True), Key("comm_us", "comm_ns", ns=True),
               Key("exposed_comm_us", "exposed_comm_ns", ns=True),
               Key("overlapped_comm_us", "overlapped_comm_ns", ns=True),
               Key("wait_in_collectives_us", "wait_ns", ns=True), Key("caused_wait_us", "caused_wait_ns", ns=True),
               Key("lateness_us", "lateness_ns", ns=True), Key("bus_bandwidth_gbps", "bus_bandwidth_gbps"),
               Key("last_arrivals", "last_arrivals", default=0)),
}


def us0(ns: float) -> float:
    """Nanoseconds as the report writes them: microseconds rounded to 0.001 (whole nanoseconds), here and
    in `build`. The faces show a figure held in ns through `us`, so a page says what the saved JSON says."""
    return round(float(ns) / 1000.0, 3)


def us(ns: float | None) -> float | None:
    """`us0`, None kept."""
    return None if ns is None else us0(ns)


def _from_us(hint: Any, data: Any, where: str) -> Any:
    """A duration the report wrote in microseconds (`us`) back in nanoseconds of the field's type `hint`."""
    if data is None and type(None) in typing.get_args(hint):
        return None
    if isinstance(data, bool) or not isinstance(data, (int, float)):
        raise ResultFormatError(f"{where}: expected a number")
    ns = round(data * 1000.0)
    return ns if int in (hint, *typing.get_args(hint)) else float(ns)


# --- generic (de)serialization -------------------------------------------------------------------------
def to_data(obj: Any) -> Any:
    """Dataclasses -> dicts, tuples -> lists, dict keys sorted (so saved and loaded results render alike);
    a figure type of `EDGE` -> its keys, durations in microseconds."""
    keys = EDGE.get(type(obj))
    if keys is not None:
        return {k.key: us(getattr(obj, k.field)) if k.ns else to_data(getattr(obj, k.field)) for k in keys}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_data(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): to_data(obj[k]) for k in sorted(obj, key=str)}
    if isinstance(obj, (list, tuple)):
        return [to_data(v) for v in obj]
    if hasattr(obj, "item") and not isinstance(obj, (str, bytes)):  # numpy scalar
        return obj.item()
    return obj


class ResultFormatError(ValueError):
    """Data that does not fit the result types (a saved report of another schema or version)."""


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def from_data(cls: Any, data: Any, where: str = "") -> Any:
    """The inverse of `to_data` for the type `cls`; raises ResultFormatError naming the bad field."""
    origin = typing.get_origin(cls)
    if cls is Any:
        return data
    if origin in (Union, types.UnionType):
        args = typing.get_args(cls)
        if data is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return from_data(inner[0], data, where)
    if cls in EDGE:
        if not isinstance(data, dict):
            raise ResultFormatError(f"{where or 'report'}: expected an object")
        hints = _hints(cls)
        fields = {}
        for k in EDGE[cls]:
            if k.derived:
                continue
            if k.key not in data:
                if k.default is _REQUIRED:
                    raise ResultFormatError(f"{where or 'report'}: missing field {k.key!r}")
                fields[k.field] = k.default
                continue
            at = f"{where}.{k.key}".lstrip(".")
            hint = hints[k.field]
            fields[k.field] = _from_us(hint, data[k.key], at) if k.ns else from_data(hint, data[k.key], at)
        return cls(**fields)
    if dataclasses.is_dataclass(cls):
        if not isinstance(data, dict):
            raise ResultFormatError(f"{where or 'report'}: expected an object")
        hints = _hints(cls)  # type: ignore[arg-type]
        kwargs = {}
        for f in dataclasses.fields(cls):
            if f.name in data:
                kwargs[f.name] = from_data(hints[f.name], data[f.name], f"{where}.{f.name}".lstrip("."))
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise ResultFormatError(f"{where or 'report'}: missing field {f.name!r}")
        return cls(**kwargs)  # type: ignore[operator]
    if origin is tuple:
        if not isinstance(data, list):
            raise ResultFormatError(f"{where}: expected a list")
        (item, *_rest) = typing.get_args(cls)
        return tuple(from_data(item, v, f"{where}[{i}]") for i, v in enumerate(data))
    if origin is dict:
        if not isinstance(data, dict):
            raise ResultFormatError(f"{where}: expected an object")
        _key, value = typing.get_args(cls)
        return {k: from_data(value, v, f"{where}.{k}") for k, v in data.items()}
    if cls is float:
        if isinstance(data, bool) or not isinstance(data, (int, float)):
            raise ResultFormatError(f"{where}: expected a number")
        return float(data)
    if cls in (int, str, bool) and not isinstance(data, cls):
        raise ResultFormatError(f"{where}: expected {cls.__name__}")
    return data


# --- older schemas -------------------------------------------------------------------------------------
def migrate(data: Any) -> Any:
    """A saved report's JSON data of an older schema (`OLD_SCHEMAS`) as data of this one; other data as is.

    `traceanalyzer/2` -> `/3`: each rank's diagnosis moves from `diagnosis.ranks[i]` into `ranks[i]`
    (the job's verdict names its rank by index); drawing payloads (`timeline`, `charts`, memory and
    host-log `series`) move under the `drawing` keys (the job's `chart`, drawn nowhere, is left out);
    each device's gap table is made from the gaps the /2 report drew (the longest of each device), the
    rest counted as omitted."""
    if not isinstance(data, dict) or data.get("schema") != "traceanalyzer/2":
        return data
    try:
        return _migrate_2(data)
    except (TypeError, ValueError, AttributeError, KeyError) as exc:  # a hand-edited or hostile file
        raise ResultFormatError(f"a traceanalyzer/2 report of an unexpected shape ({type(exc).__name__}: "
                                f"{str(exc)[:120]})") from None


def _migrate_2(data: dict[str, Any]) -> dict[str, Any]:
    """`migrate` of a `traceanalyzer/2` report; raises on data of another shape."""
    out = dict(data, schema=SCHEMA)
    diag = out.get("diagnosis")
    rank_diags = list(diag.get("ranks") or []) if isinstance(diag, dict) else []
    ranks = []
    for i, r in enumerate(out.get("ranks") or []):
        r = dict(r)
        rank_diag = _rank_diagnosis_of(r, i, rank_diags, len(out.get("ranks") or []))
        timeline = r.pop("timeline", None) or {}
        memory: dict[str, Any] = {}
        devices = []
        drawn = {d.get("device"): d.get("gaps") or {} for d in timeline.get("devices", [])}
        for d in r.get("devices") or []:
            d = dict(d)
            if isinstance(d.get("memory"), dict):
                d["memory"] = dict(d["memory"])
                memory[str(d.get("device"))] = d["memory"].pop("series", None)
            d["gap_table"] = _gap_table_of(drawn.get(d.get("device")), (d.get("gaps") or {}).get("count", 0))
            devices.append(d)
        r["devices"] = devices
        if isinstance(r.get("host_memory"), dict):
            r["host_memory"] = dict(r["host_memory"])
            memory["host"] = r["host_memory"].pop("series", None)
        r["drawing"] = {"timeline": timeline, "charts": r.pop("charts", None) or {},
                        "memory": {k: v for k, v in memory.items() if v is not None}}
        r["diagnosis"] = _host_verdict_of(rank_diag)
        ranks.append(r)
    out["ranks"] = ranks
    if isinstance(diag, dict):
        diag = _host_verdict_of(dict(diag))
        diag.pop("ranks", None)
        picked = [i for i, r in enumerate(ranks) if r["diagnosis"] is not None
                  and r["diagnosis"].get("findings") == diag.get("findings")
                  and r["diagnosis"].get("primary") == diag.get("primary")]
        diag["rank"] = picked[0] if picked else None
        out["diagnosis"] = diag
    host_series = {}
    hosts = []
    for h in out.get("host_logs") or []:
        h = dict(h)
        series = h.pop("series", None)
        if series is not None:
            host_series[str(h.get("path"))] = series
        hosts.append(h)
    out["host_logs"] = hosts
    if isinstance(out.get("job"), dict):  # the job's chart data was drawn nowhere: not kept
        out["job"] = dict(out["job"])
        out["job"].pop("chart", None)
    out["drawing"] = {"host_logs": host_series}
    return out


# /2 named the host loop's verdict with the GPU verdicts' names; /3 gives it its own (causes.py)
_HOST_VERDICTS_2 = {"input_bound": "cpu_input_bound", "host_bound": "cpu_compute_bound"}


def _host_verdict_of(diag: Any) -> Any:
    """A /2 diagnosis with its host-loop verdict under its /3 name (and its host-loop findings' ids)."""
    if not isinstance(diag, dict) or diag.get("host_primary") not in _HOST_VERDICTS_2:
        return diag
    out = dict(diag, host_primary=_HOST_VERDICTS_2[diag["host_primary"]])
    if out.get("primary") == "undetermined" and isinstance(out.get("findings"), list):
        out["findings"] = [dict(f, id=_HOST_VERDICTS_2.get(str(f.get("id")), f.get("id"))) if isinstance(f, dict) else f
                           for f in out["findings"]]
    return out


def _rank_diagnosis_of(rank: dict[str, Any], i: int, diags: list[Any], n: int) -> Any:
    """The /2 diagnosis of the i-th of n ranks: by position when every rank has one, else by rank number."""
    if len(diags) == n:
        found = diags[i]
    else:
        found = next((d for d in diags if isinstance(d, dict) and d.get("rank") == rank.get("rank")), None)
    if not isinstance(found, dict):
        return None
    found = dict(found)
    found.pop("rank", None)
    return found


def _gap_table_of(drawn: Any, count: Any) -> dict[str, Any] | None:
    """A /3 gap table from a /2 report's drawn gaps of one device (by start time)."""
    if not isinstance(drawn, dict) or "start_us" not in drawn:
        return None
    rows = sorted(zip(drawn.get("start_us") or [], drawn.get("dur_us") or [], drawn.get("step") or [],
                      drawn.get("cause") or []), key=lambda x: x[0])
    return {"start_us": [x[0] for x in rows], "duration_us": [x[1] for x in rows], "step": [x[2] for x in rows],
            "cause": [x[3] for x in rows], "omitted": max(int(count or 0) - len(rows), 0)}
