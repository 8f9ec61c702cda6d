"""The one model: every reader produces a `Timeline`, every analysis reads only a `Timeline`.

A Timeline holds tables with fixed, validated columns and a little metadata:

* `events`: one row per duration event (GPU kernels, copies, host ops, steps, waits).
  Times are int64 nanoseconds; strings are pandas categories.
* `counters`: one row per sampled counter value (e.g. nvidia-smi SM utilisation).
* `memory`: one row per allocator event of torch.profiler(profile_memory=True) (the `[memory]`
  instants): the bytes allocated and reserved on a device (or the host) after that event.
* `host_metrics`: one row per sampled host figure of a host monitor log (glances: CPU, load,
  memory, disk and network), `host_logs` saying what each log's sums are made of.
* `requests`: one row per request span of a serving engine (an OpenTelemetry export: vLLM's
  `llm_request`): its arrival, end and the engine's own queue / prefill / decode / TTFT times.

Readers classify their format's events into the fixed vocabulary `EVENT_KINDS`, so that
analyses never look at format-specific categories or names to decide what an event is.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

# --- event kinds -------------------------------------------------------------------------------
# GPU work: these (and only these) make a device busy.
KERNEL = "kernel"
MEMCPY = "memcpy"
MEMSET = "memset"
GPU_WORK_KINDS = (KERNEL, MEMCPY, MEMSET)
# On a device track but not GPU work (e.g. Kineto's gpu_user_annotation copies of ProfilerStep).
GPU_ANNOTATION = "gpu_annotation"
# Host side.
STEP = "step"  # one training/inference step span on the host (ProfilerStep#N, Keras batch)
DATALOADER = "dataloader"  # host blocked waiting for the next batch (DataLoader __next__, IteratorGetNext)
CPU_OP = "cpu_op"  # framework operator on the host
ANNOTATION = "annotation"  # user-defined host range (record_function) other than steps
RUNTIME = "runtime"  # CUDA/HIP runtime or driver API call (launches, syncs, copies)
PYTHON = "python"  # python stack frame (with_stack=True)
TRACE_SPAN = "trace_span"  # the profiler's own span of the capture; not work
OTHER = "other"  # anything else the reader kept

EVENT_KINDS = (
    KERNEL, MEMCPY, MEMSET, GPU_ANNOTATION,
    STEP, DATALOADER, CPU_OP, ANNOTATION, RUNTIME, PYTHON, TRACE_SPAN, OTHER,
)
DEVICE_KINDS = (KERNEL, MEMCPY, MEMSET, GPU_ANNOTATION)

# Direction of a memory copy; "" when the event is not a copy or the direction is unknown.
COPY_KINDS = ("", "HtoD", "DtoH", "DtoD", "PtoP", "HtoH")

# --- column contracts --------------------------------------------------------------------------
EVENT_COLUMNS: dict[str, str] = {
    "ts_ns": "int64",  # start, nanoseconds on the rank's clock (epoch when `RankInfo.clock == "epoch"`)
    "dur_ns": "int64",  # duration, nanoseconds, >= 0
    "kind": "category",  # one of EVENT_KINDS
    "name": "category",  # event name as written in the trace
    "category": "category",  # the format's own category string ("" when absent), kept for evidence
    "rank": "int32",  # index into Timeline.ranks
    "device": "int32",  # GPU index for device events, -1 on the host
    "stream": "int64",  # stream / line id for device events, -1 on the host
    "pid": "int64",  # host process id, -1 for device events or when unknown
    "tid": "int64",  # host thread id, -1 for device events or when unknown
    "step": "int32",  # step number for kind == "step", else -1
    "bytes": "int64",  # bytes moved/set for memcpy/memset, -1 when unknown
    "copy_kind": "category",  # one of COPY_KINDS
    "pinned": "int8",  # copies: 1 pinned host memory, 0 pageable, -1 unknown / not a host copy
    "comm": "bool",  # collective-communication kernel (NCCL/RCCL)
    "correlation": "int64",  # links a runtime launch to its GPU activity, -1 when absent
    # communication kernels: their process group, "0,1,2,3" (its ranks) when the trace lists them,
    # else "pg:<name>", else "" (no group recorded: every rank's collectives are taken as one group)
    "comm_group": "category",
    # CUDA graphs: the graph a kernel / memcpy / memset ran in (Kineto `graphId`), or that a
    # `cudaGraphLaunch` replayed; 0: replayed by a graph launch in a trace that records no graph ids
    # (before 2026, matched by correlation); -1 outside graphs
    "graph_id": "int64",
    # communication kernels: the collective's sequence number in its process group (Kineto `Seq`, the
    # same on every rank of the group); -1 when the trace does not record it
    "comm_seq": "int64",
    # Kineto's cuda_sync rows of an event synchronize or a stream wait (`wait_on_cuda_event_record_corr_id`,
    # `wait_on_stream`): the correlation id of the event record call waited on, and the stream the event was
    # recorded on; -1 elsewhere and when the trace does not record them
    "wait_corr": "int64",
    "wait_stream": "int64",
}

COUNTER_COLUMNS: dict[str, str] = {
    "ts_ns": "int64",  # sample time, nanoseconds (epoch after alignment)
    "device": "int32",  # GPU index the sample belongs to
    "metric": "category",  # e.g. "sm_util_pct", "mem_util_pct", "power_w", "sm_clock_mhz"
    "value": "float64",  # NaN when the log said the value was missing
    "source": "int32",  # index into Timeline.sources
}

# Device types of memory rows: GPU memory (CUDA, and HIP on ROCm builds) and host memory, kept apart.
MEMORY_GPU = "cuda"
MEMORY_CPU = "cpu"
MEMORY_OTHER = "other"  # another accelerator type (XPU, MTIA, ...): kept, not analysed
MEMORY_DEVICE_TYPES = (MEMORY_GPU, MEMORY_CPU, MEMORY_OTHER)

MEMORY_COLUMNS: dict[str, str] = {
    "rank": "int32",  # index into Timeline.ranks
    "device_type": "category",  # one of MEMORY_DEVICE_TYPES
    "device": "int32",  # device index (GPU index as the events use it; -1 for the host)
    "ts_ns": "int64",  # when the allocation or release happened, on the rank's events clock
    "allocated_bytes": "int64",  # bytes held by tensors on that device after the event
    "reserved_bytes": "int64",  # bytes the caching allocator holds (allocated + cached); -1 when absent
    "bytes": "int64",  # the event's own size: > 0 allocation, < 0 release
}

# Host monitor logs (glances). Rows of one source and metric are in sample order; every metric a log
# has holds one row per sample of that log (NaN where the sample had no number for it).
HOST_METRIC_COLUMNS: dict[str, str] = {
    "ts_ns": "int64",  # sample time (the end of the refresh period it describes), nanoseconds: the log's
                       # own clock (Source.clock) as read, the trace's clock once align.place_host_logs moved it
    "metric": "category",  # one of HOST_METRICS
    "value": "float64",  # in the metric's unit (its name says which); NaN when missing
    "source": "int32",  # index into Timeline.sources: the log
}

# Serving requests (formats/otel_json.py): one row per request span, times on the Unix epoch clock as the span
# export writes them (align.place_requests puts them on a rank's clock). Durations are the engine's own figures
# (vLLM writes them in seconds as span attributes); -1 where the span does not carry one.
REQUEST_COLUMNS: dict[str, str] = {
    "request_id": "category",  # the engine's request id (gen_ai.request.id), else the span id
    "ts_ns": "int64",  # the span's start (the request's arrival), ns
    "end_ns": "int64",  # the span's end (the request finished), ns, >= ts_ns
    "queue_ns": "int64",  # waiting in the engine's queue before it was first scheduled
    "prefill_ns": "int64",  # from first scheduled to its first token
    "decode_ns": "int64",  # from its first token to its last
    "ttft_ns": "int64",  # time to first token, from arrival
    "e2e_ns": "int64",  # arrival to finish as the engine measured it (end_ns - ts_ns when the span has none)
    "prompt_tokens": "int64",  # -1 when unknown
    "output_tokens": "int64",  # -1 when unknown
    "source": "int32",  # index into Timeline.sources: the export
}


# Host metrics (units in the name), what a host monitor log's columns map onto; docs/inputs.md lists them (generated).
HOST_METRICS: dict[str, str] = {
    "cpu_user_pct": "CPU time in user space over the refresh period, % of all cores",
    "cpu_system_pct": "CPU time in the kernel, % of all cores",
    "cpu_iowait_pct": "CPU time idle while waiting for disk I/O, % of all cores",
    "cpu_idle_pct": "CPU time idle, % of all cores",
    "cpu_total_pct": "CPU time busy (all but idle), % of all cores",
    "load_1m": "load average over 1 minute (runnable and waiting tasks)",
    "load_5m": "load average over 5 minutes",
    "load_15m": "load average over 15 minutes",
    "mem_used_pct": "memory in use, % of physical memory",
    "swap_used_pct": "swap in use, % of swap space",
    "disk_read_bytes_per_s": "bytes read per second, summed over whole disks (`HostLogInfo.disks`)",
    "disk_write_bytes_per_s": "bytes written per second, summed over whole disks",
    "net_rx_bytes_per_s": "bytes received per second, summed over network interfaces (`HostLogInfo.interfaces`)",
    "net_tx_bytes_per_s": "bytes sent per second, summed over network interfaces",
}

# --- counter metrics -----------------------------------------------------------------------------
# Counter-log readers map their columns onto these names (units in the name); docs/inputs.md lists them (generated).
# Columns a reader does not know are kept as "<format>_<column>" (e.g. "dmon_xyz").
COUNTER_METRICS: dict[str, str] = {
    "sm_util_pct": "percent of the sample period in which at least one kernel ran "
                   "(dmon `sm`, --query-gpu `utilization.gpu`, DCGM `gpu_utilization`)",
    "mem_util_pct": "percent of the sample period in which device memory was read or written",
    "enc_util_pct": "video encoder utilisation, percent",
    "dec_util_pct": "video decoder utilisation, percent",
    "jpg_util_pct": "JPEG decoder utilisation, percent",
    "ofa_util_pct": "optical-flow accelerator utilisation, percent",
    "power_w": "board power draw, watts",
    "power_instant_w": "instantaneous board power draw, watts (DCGM)",
    "power_limit_w": "enforced power limit, watts",
    "gpu_temp_c": "GPU core temperature, degrees Celsius",
    "mem_temp_c": "memory temperature, degrees Celsius",
    "sm_clock_mhz": "SM (processor) clock, MHz",
    "graphics_clock_mhz": "graphics clock, MHz",
    "mem_clock_mhz": "memory clock, MHz",
    "fb_used_mib": "frame-buffer (device) memory in use, MiB",
    "fb_free_mib": "frame-buffer memory free, MiB",
    "fb_total_mib": "frame-buffer memory total, MiB",
    "bar1_used_mib": "BAR1 memory in use, MiB",
    "ccpm_used_mib": "confidential-compute protected memory in use, MiB",
    "pcie_rx_mbps": "PCIe receive throughput, MB/s",
    "pcie_tx_mbps": "PCIe transmit throughput, MB/s",
    "power_violation_pct": "percent of time throttled by the power limit",
    "thermal_violation": "1 when throttled for temperature in the sample, else 0",
    "sbecc_errors": "single-bit ECC errors",
    "dbecc_errors": "double-bit ECC errors",
    "pcie_replay_errors": "PCIe replay errors",
    "pstate": "performance state number (P0 = 0, fastest)",
    "fan_pct": "fan speed, percent of maximum",
}

# The utilisation metric alignment, the cross-check and the zero-utilisation runs use.
UTIL_METRIC = "sm_util_pct"


class TimelineError(ValueError):
    """A reader produced tables that break the column contract (a bug, not bad input)."""


@dataclass
class Source:
    """One input file as read: what it was, how much of it was used, and what looked wrong."""

    path: str
    format: str
    events_read: int = 0
    events_kept: int = 0
    # Events not turned into rows, by reason (e.g. {"flow": 120, "instant": 4}); never silent.
    not_kept: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    # Counter logs only: what the counters' ts_ns means before alignment (one of COUNTER_CLOCKS).
    clock: str = ""
    # Where and how the file was cut off ("" when it was read to its end): its events stop early.
    truncated: str = ""


# How a counter log's own times relate to real time (Source.clock), before `align` moves them:
CLOCK_EPOCH = "epoch"  # ns since the Unix epoch (UTC), e.g. DCGM's TimeStampUs
CLOCK_WALL = "wall"  # the logging machine's local date and time, written as if it were UTC
CLOCK_TIME_OF_DAY = "time_of_day"  # local time of day only (dmon -o T): ns since a midnight
CLOCK_SAMPLES = "samples"  # no times in the log: sample number x interval, from 0
COUNTER_CLOCKS = (CLOCK_EPOCH, CLOCK_WALL, CLOCK_TIME_OF_DAY, CLOCK_SAMPLES)


@dataclass
class DeviceInfo:
    rank: int  # index into Timeline.ranks
    index: int  # device index as the events use it
    name: str = ""
    properties: dict[str, Any] = field(default_factory=dict)


@dataclass
class HostLogInfo:
    """A host monitor log's facts beside its `host_metrics` rows: what its sums are made of."""

    source: int  # index into Timeline.sources (format, clock, counts and warnings are there)
    cores: int | None = None  # logical CPUs of the host, as the log counted them
    disks: tuple[str, ...] = ()  # the disks summed into disk_*_bytes_per_s
    interfaces: tuple[str, ...] = ()  # the network interfaces summed into net_*_bytes_per_s


@dataclass
class RankInfo:
    """One process of the job (one trace file, usually)."""

    index: int  # position in Timeline.ranks, what events' `rank` column holds
    rank: int | None  # the job rank (distributedInfo) or None when unknown
    source: int  # index into Timeline.sources
    world_size: int | None = None
    # "epoch": ts_ns is nanoseconds since the Unix epoch; "relative": an unknown origin.
    clock: str = "relative"
    framework: str = ""  # e.g. "pytorch", "tensorflow"
    host: str | None = None  # the machine it ran on (trace metadata); ranks of one host share a clock
    gpus_listed: int = 0  # GPUs the trace's header lists (deviceProperties: all visible ones, used or not)
    # The memory events carry no totals (PyTorch before 1.10): allocated_bytes is the running sum of their
    # sizes from the capture's start, so it says what changed, not how full the device was.
    memory_from_sizes: bool = False
    gpu_api: str = ""  # "hip" when the trace says its GPUs ran ROCm/HIP (devices then named rocm:N); else CUDA


def empty_events() -> pd.DataFrame:
    return _empty(EVENT_COLUMNS)


def empty_counters() -> pd.DataFrame:
    return _empty(COUNTER_COLUMNS)


def empty_memory() -> pd.DataFrame:
    return memory_frame({c: [] for c in MEMORY_COLUMNS})


def empty_host_metrics() -> pd.DataFrame:
    return host_metrics_frame({c: [] for c in HOST_METRIC_COLUMNS})


def empty_requests() -> pd.DataFrame:
    return requests_frame({c: [] for c in REQUEST_COLUMNS})


def requests_frame(columns: dict[str, Any]) -> pd.DataFrame:
    """A request table from arrays (every column of REQUEST_COLUMNS), typed by the contract."""
    return pd.DataFrame({col: pd.Categorical([str(v) for v in columns[col]]) if dtype == "category"
                         else np.asarray(columns[col]).astype(dtype) for col, dtype in REQUEST_COLUMNS.items()})


def host_metrics_frame(columns: dict[str, Any]) -> pd.DataFrame:
    """A host-metrics table from arrays (every column of HOST_METRIC_COLUMNS), typed by the contract."""
    data: dict[str, Any] = {}
    for col, dtype in HOST_METRIC_COLUMNS.items():
        value = columns[col]
        if dtype == "category":
            data[col] = pd.Categorical(value, categories=tuple(HOST_METRICS))
        else:
            data[col] = np.asarray(value).astype(dtype, copy=False)
    return pd.DataFrame(data)


def memory_frame(columns: dict[str, Any]) -> pd.DataFrame:
    """A memory table from arrays (every column of MEMORY_COLUMNS), typed by the contract."""
    data: dict[str, Any] = {}
    for col, dtype in MEMORY_COLUMNS.items():
        value = columns[col]
        if dtype == "category":
            data[col] = pd.Categorical(value, categories=MEMORY_DEVICE_TYPES)
        else:
            data[col] = np.asarray(value).astype(dtype, copy=False)
    return pd.DataFrame(data)


def _empty(columns: dict[str, str]) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series([], dtype=t) for c, t in columns.items()})


def events_frame(columns: dict[str, Any]) -> pd.DataFrame:
    """Build an events table from arrays, filling absent optional columns with their defaults."""
    n = len(columns["ts_ns"])
    defaults: dict[str, Any] = {
        "category": "", "rank": 0, "device": -1, "stream": -1, "pid": -1, "tid": -1,
        "step": -1, "bytes": -1, "copy_kind": "", "pinned": -1, "comm": False, "correlation": -1,
        "comm_group": "", "graph_id": -1, "comm_seq": -1, "wait_corr": -1, "wait_stream": -1,
    }
    data: dict[str, Any] = {}
    for col, dtype in EVENT_COLUMNS.items():
        value = columns.get(col, defaults.get(col))
        if value is None:
            raise TimelineError(f"events column {col!r} is required")
        if np.isscalar(value):
            value = np.full(n, value, dtype=object if dtype == "category" else dtype)
        if dtype == "category":
            data[col] = value if isinstance(value, pd.Categorical) else pd.Categorical(value)
        else:
            data[col] = np.asarray(value).astype(dtype, copy=False)
    # copy=False: the columns are the arrays given (made for this table), not stacked into a second
    # copy of every row: a GB-size trace's table would otherwise be held twice while it is built.
    frame = pd.DataFrame(data, copy=False)
    frame["kind"] = frame["kind"].cat.set_categories(EVENT_KINDS)
    frame["copy_kind"] = frame["copy_kind"].cat.set_categories(COPY_KINDS)
    return frame


def validate_columns(frame: pd.DataFrame, columns: dict[str, str], what: str) -> None:
    """Check a table against its column contract; raise TimelineError naming the first breach."""
    if list(frame.columns) != list(columns):
        raise TimelineError(f"{what}: columns {list(frame.columns)} != contract {list(columns)}")
    for col, dtype in columns.items():
        actual = str(frame[col].dtype)
        if actual != dtype:
            raise TimelineError(f"{what}: column {col!r} has dtype {actual}, contract says {dtype}")


def category_mask(column: pd.Series, values: tuple[str, ...] | list[str]) -> np.ndarray:
    """`column.isin(values)` for a categorical column, as one lookup of its codes in a per-category
    table (the table has millions of rows and a handful of categories)."""
    categories = column.cat.categories
    table = np.zeros(len(categories) + 1, dtype=bool)  # the last slot: code -1 (missing) -> False
    at = categories.get_indexer(list(values))
    table[at[at >= 0]] = True
    return table[column.cat.codes.to_numpy()]


@dataclass
class Timeline:
    events: pd.DataFrame = field(default_factory=empty_events)
    counters: pd.DataFrame = field(default_factory=empty_counters)
    memory: pd.DataFrame = field(default_factory=empty_memory)
    host_metrics: pd.DataFrame = field(default_factory=empty_host_metrics)
    requests: pd.DataFrame = field(default_factory=empty_requests)
    sources: list[Source] = field(default_factory=list)
    ranks: list[RankInfo] = field(default_factory=list)
    devices: list[DeviceInfo] = field(default_factory=list)
    host_logs: list[HostLogInfo] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # Selections analyses ask for many times (`gpu_work`), made once per events table.
    _derived: dict[Any, Any] = field(default_factory=dict, init=False, repr=False, compare=False)
    _derived_of: Any = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Cheap (columns and dtypes only), so a host table built wrong fails where it is built.
        _validate_host_columns(self.host_metrics)

    def validate(self) -> Timeline:
        """Check the column contracts and the invariants analyses rely on; return self."""
        validate_columns(self.events, EVENT_COLUMNS, "events")
        validate_columns(self.counters, COUNTER_COLUMNS, "counters")
        validate_columns(self.memory, MEMORY_COLUMNS, "memory")
        _validate_host_columns(self.host_metrics)
        _validate_requests(self.requests, len(self.sources))
        logs = {h.source for h in self.host_logs}
        if any(not 0 <= s < len(self.sources) for s in logs) or len(logs) != len(self.host_logs):
            raise TimelineError("host_logs: source index outside Timeline.sources, or one log twice")
        if len(self.host_metrics) and not set(np.unique(self.host_metrics["source"].to_numpy()).tolist()) <= logs:
            raise TimelineError("host_metrics: rows of a source that Timeline.host_logs does not describe")
        if len(self.memory):
            ranks = self.memory["rank"].to_numpy()
            if ranks.min() < 0 or ranks.max() >= max(len(self.ranks), 1):
                raise TimelineError("memory: rank index outside Timeline.ranks")
        ev = self.events
        if len(ev):
            if (ev["dur_ns"].to_numpy() < 0).any():
                raise TimelineError("events: negative dur_ns")
            unknown = set(ev["kind"].cat.categories) - set(EVENT_KINDS)
            if unknown or ev["kind"].isna().any():
                raise TimelineError(f"events: kind outside EVENT_KINDS {sorted(unknown)}")
            ranks = ev["rank"].to_numpy()
            if ranks.min() < 0 or ranks.max() >= max(len(self.ranks), 1):
                raise TimelineError("events: rank index outside Timeline.ranks")
        return self

    @staticmethod
    def concat(parts: list[Timeline]) -> Timeline:
        """Join timelines (e.g. one per rank file), renumbering rank and source indices."""
        out = Timeline()
        frames, counter_frames, memory_frames, request_frames = [], [], [], []
        for part in parts:
            rank_offset, source_offset = len(out.ranks), len(out.sources)
            out.sources.extend(part.sources)
            for r in part.ranks:
                out.ranks.append(RankInfo(r.index + rank_offset, r.rank, r.source + source_offset,
                                          r.world_size, r.clock, r.framework, r.host, r.gpus_listed,
                                          r.memory_from_sizes, r.gpu_api))
            for d in part.devices:
                out.devices.append(DeviceInfo(d.rank + rank_offset, d.index, d.name, d.properties))
            out.warnings.extend(part.warnings)
            _add_host_logs(out, part, source_offset)
            ev = part.events.copy()
            ev["rank"] = (ev["rank"] + rank_offset).astype("int32")
            frames.append(ev)
            co = part.counters.copy()
            co["source"] = (co["source"] + source_offset).astype("int32")
            counter_frames.append(co)
            mem = part.memory.copy()
            mem["rank"] = (mem["rank"] + rank_offset).astype("int32")
            memory_frames.append(mem)
            req = part.requests.copy()
            req["source"] = (req["source"] + source_offset).astype("int32")
            request_frames.append(req)
        if frames:
            out.events = _concat_frames(frames, EVENT_COLUMNS)
            out.counters = _concat_frames(counter_frames, COUNTER_COLUMNS)
            out.memory = _concat_frames(memory_frames, MEMORY_COLUMNS)
            kept = [f for f in request_frames if len(f)] or request_frames[:1]
            req = pd.concat(kept, ignore_index=True)[list(REQUEST_COLUMNS)]
            out.requests = requests_frame({c: req[c].to_numpy() for c in REQUEST_COLUMNS})
        return out.validate()

    def with_host_logs(self, logs: Timeline) -> Timeline:
        """This Timeline with the host logs of `logs` added (their sources appended and renumbered);
        the other tables are shared, not copied, so adding a small log to a big trace costs little."""
        out = replace(self, sources=list(self.sources), host_logs=list(self.host_logs),
                      warnings=list(self.warnings))
        _add_host_logs(out, logs, len(out.sources))
        out.sources.extend(logs.sources)
        out.warnings.extend(logs.warnings)
        return out.validate()

    def host_log_sources(self) -> frozenset[int]:
        """Indices of the sources that are host monitor logs (neither ranks nor counter logs)."""
        return frozenset(h.source for h in self.host_logs)

    # --- convenience views used by analyses (no computation beyond selection) -----------------
    def host_samples(self, source: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """One host log's sample times and its metrics (HOST_METRICS order, NaN: missing) per sample."""
        hm = self.host_metrics
        rows = hm[hm["source"].to_numpy() == source]
        codes = rows["metric"].cat.codes.to_numpy()
        ts, values = rows["ts_ns"].to_numpy(), rows["value"].to_numpy()
        metrics = {m: values[codes == k] for k, m in enumerate(HOST_METRICS) if (codes == k).any()}
        first = int(codes.min()) if len(codes) else -1
        return ts[codes == first].astype(np.int64), metrics

    def rank_events(self, rank: int) -> pd.DataFrame:
        """The rank's rows (read-only: the table itself when every row is the rank's, as in a
        one-rank file, which analyses ask for many times: no copy of millions of rows each time)."""
        ev = self.events
        mine = ev["rank"].to_numpy() == rank
        return ev if mine.all() else ev[mine]

    def gpu_work(self, rank: int) -> pd.DataFrame:
        """The rank's GPU work rows (GPU_WORK_KINDS), selected once per events table: figures ask for
        them per device and per kind, and each fresh selection would scan millions of host rows."""
        derived = self._derived
        if self._derived_of is not self.events:
            derived = {}
            self._derived, self._derived_of = derived, self.events
        key = ("gpu_work", rank)
        got = derived.get(key)
        if got is None:  # two analyses in two threads may both make it: the same rows either way
            ev = self.rank_events(rank)
            got = derived[key] = ev[category_mask(ev["kind"], GPU_WORK_KINDS)]
        return got  # type: ignore[no-any-return]

    def device_indices(self, rank: int) -> list[int]:
        """Devices of a rank that have GPU work, sorted."""
        return sorted(int(d) for d in np.unique(self.gpu_work(rank)["device"].to_numpy()))


def _validate_requests(frame: pd.DataFrame, sources: int) -> None:
    validate_columns(frame, REQUEST_COLUMNS, "requests")
    if not len(frame):
        return
    src = frame["source"].to_numpy()
    if src.min() < 0 or src.max() >= max(sources, 1):
        raise TimelineError("requests: source index outside Timeline.sources")
    if (frame["end_ns"].to_numpy() < frame["ts_ns"].to_numpy()).any():
        raise TimelineError("requests: end_ns before ts_ns")


def _validate_host_columns(frame: pd.DataFrame) -> None:
    validate_columns(frame, HOST_METRIC_COLUMNS, "host_metrics")
    metric = frame["metric"]
    if list(metric.cat.categories) != list(HOST_METRICS) or (len(frame) and bool(metric.isna().any())):
        raise TimelineError("host_metrics: metric outside HOST_METRICS")


def _add_host_logs(out: Timeline, part: Timeline, source_offset: int) -> None:
    """`part`'s host logs appended to `out`'s, their source indices moved by `source_offset`."""
    out.host_logs.extend(replace(h, source=h.source + source_offset) for h in part.host_logs)
    if not len(part.host_metrics):
        return
    both = [f for f in (out.host_metrics, part.host_metrics) if len(f)]
    shift = [0] * (len(both) - 1) + [source_offset]
    # Through the metric codes (the contract fixes the categories): pandas concatenates categoricals
    # whose categories differ only in dtype (str / object) to plain objects.
    out.host_metrics = pd.DataFrame({
        "ts_ns": np.concatenate([f["ts_ns"].to_numpy() for f in both]),
        "metric": pd.Categorical.from_codes(np.concatenate([f["metric"].cat.codes.to_numpy() for f in both]),
                                            categories=list(HOST_METRICS)),
        "value": np.concatenate([f["value"].to_numpy() for f in both]),
        "source": np.concatenate([f["source"].to_numpy() + k for f, k in zip(both, shift)]).astype(np.int32),
    })


def _concat_frames(frames: list[pd.DataFrame], columns: dict[str, str]) -> pd.DataFrame:
    cats = [c for c, t in columns.items() if t == "category"]
    merged = {}
    for c in cats:
        # Categories as object dtype: pandas infers "str" for some and "object" for others (e.g.
        # empty tables), and union_categoricals refuses to mix them.
        union = pd.api.types.union_categoricals(
            [f[c].cat.set_categories(f[c].cat.categories.astype(object)) for f in frames], ignore_order=True)
        merged[c] = union
    out = pd.concat([f.drop(columns=cats) for f in frames], ignore_index=True)
    for c in cats:
        out[c] = merged[c]
    out = out[list(columns)]
    if "kind" in out:
        out["kind"] = out["kind"].cat.set_categories(EVENT_KINDS)
        out["copy_kind"] = out["copy_kind"].cat.set_categories(COPY_KINDS)
    if "device_type" in out:
        out["device_type"] = out["device_type"].cat.set_categories(MEMORY_DEVICE_TYPES)
    return out
