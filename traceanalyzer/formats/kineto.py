"""Reader for torch.profiler / Kineto Chrome-trace JSON (every generation, CUDA and ROCm).

What an event *is* comes from its category (`cat`), never from which pid it sits on:
GPU work is `kernel` / `gpu_memcpy` / `gpu_memset` (2021: `Kernel` / `Memcpy` / `Memset`);
`gpu_user_annotation` copies of ProfilerStep on GPU streams are annotations, not work.
Steps are host `ProfilerStep#N` ranges; DataLoader waits are the host op
`enumerate(DataLoader)#..._DataLoaderIter.__next__` (not python frames that mention DataLoader).
Times: `ts`/`dur` are always microseconds whatever `displayTimeUnit` says; with
`baseTimeNanoseconds` the epoch time is base + ts.
"""

from __future__ import annotations

import gc
import logging
import re
from collections import Counter
from collections.abc import Callable, Iterable
from itertools import compress, repeat
from operator import attrgetter, contains, eq
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from .. import timeline as T
from ..errors import InputError
from ..heap import return_freed_memory
from ..names import is_comm_kernel, name_flags
from ..timeline import DeviceInfo, RankInfo, Source, Timeline
from . import scanner
from ._base import ReadOptions
from ._columns import (
    ID_OUT_OF_RANGE,
    Interner,
    cut_text,
    int_or_none,
    names_cut_warning,
    small_int_or_none,
    to_float,
    to_int_id,
    us_to_ns,
)
from ._counters import check_device_count
from .chrome_json import (
    CHUNK_BYTES,
    DECODE_NOTES,
    Envelope,
    decode_values,
    invalid_utf8,
    iter_event_chunks,
    looks_like_json_object,
    parse_envelope,
    stream_events,
)
from .chrome_parallel import RangeResult, RangeTask, collect_events, decode_range

# Plausibility bounds: an event outside them is dropped and counted (see docs/inputs.md).
MAX_ABS_TIME_US = 7.3e15  # |time| beyond the year 2200 in epoch microseconds
MAX_DURATION_US = 1e11  # longer than about 28 hours
MAX_DEVICE_ID = 2**31 - 1  # device ids are int32 in the Timeline; larger ones would wrap
MAX_STEP_NUMBER = 2**31 - 1  # ProfilerStep#N beyond int32: kept as an annotation, counted

FORMAT = "kineto"
_LOG = logging.getLogger("traceanalyzer")

# Kineto category -> Timeline kind. Anything else is kept as "other" and reported.
CATEGORY_KINDS: dict[str, str] = {
    "kernel": T.KERNEL, "Kernel": T.KERNEL,
    "gpu_memcpy": T.MEMCPY, "Memcpy": T.MEMCPY,
    "gpu_memset": T.MEMSET, "Memset": T.MEMSET,
    "gpu_user_annotation": T.GPU_ANNOTATION, "cuda_sync": T.GPU_ANNOTATION,
    "cuda_profiler_range": T.GPU_ANNOTATION,
    "cpu_op": T.CPU_OP, "Operator": T.CPU_OP,
    "user_annotation": T.ANNOTATION,
    "cuda_runtime": T.RUNTIME, "Runtime": T.RUNTIME, "cuda_driver": T.RUNTIME,
    "mtia_runtime": T.RUNTIME,
    "python_function": T.PYTHON,
    "Trace": T.TRACE_SPAN,
    "overhead": T.OTHER,
}
_KNOWN_OTHER = {"overhead"}

STEP_NAME = re.compile(r"^ProfilerStep#(\d+)$")
# The DataLoader wait op, single- and multi-process iterators (and any custom *Iter.__next__).
DATALOADER_NAME = re.compile(r"^enumerate\(DataLoader\)#.*__next__$")
MEMCPY_DIRECTION = re.compile(r"\b(HtoD|DtoH|DtoD|PtoP|HtoH)\b")

_FLOW_PHASES = {"s", "f", "t"}
# Kineto 2026: CUPTI hardware counters on a process of their own, the string pid "GPU N Counters"
# (output_json.cpp, handleCounterEvent); read as the device's trace counters, never as a rank or device.
COUNTER_PID = re.compile(r"^GPU (\d{1,9}) Counters$")
MAX_COUNTER_METRICS = 256  # distinct counter names kept per trace; samples of more are dropped, counted
MAX_COUNTER_SAMPLES = 2_000_000  # counter samples kept per trace (a bound on memory); later ones dropped, counted
MAX_METRIC_CHARS = 256
_MAX_COUNTER_ARGS = 64  # values read from one counter event
# Kineto 2026 puts "Stream Sync" events on a virtual thread, the stream's id + this offset, named
# "stream N (sync)" (output_json.h kSyncStreamTidOffset): their stream is the real one.
SYNC_TID_OFFSET = 1_000_000
# The runtime / driver calls that replay a graph; the GPU work of a replay shares the call's correlation.
GRAPH_LAUNCH_CALL = re.compile(r"^(cuda|hip|cu)GraphLaunch(_v\d+|_spt|_ptsz)?$", re.IGNORECASE)
UNKNOWN_GRAPH_ID = 0  # graph_id of work replayed by a graph launch in a trace that records no graph ids
MEMORY_EVENT = "[memory]"  # torch.profiler(profile_memory=True): one instant per allocation / release
# c10::DeviceType numbers as Kineto writes them in "Device Type" (HIP: the GPU of ROCm builds).
_MEMORY_DEVICE_TYPE = {0: T.MEMORY_CPU, 1: T.MEMORY_GPU, 6: T.MEMORY_GPU}


KIND = "trace"  # registry.KINDS: what its files are in a job


def sniff(head: bytes) -> bool:
    """Any JSON document: the envelope check then says precisely what is wrong if it is no trace."""
    return looks_like_json_object(head) or head.lstrip()[:1] == b"["


class KinetoArgs(msgspec.Struct, gc=False):
    """The args keys this reader uses, typed; -1 / "" when absent (what the loose path makes of
    a missing value too). Ids may be strings ("bytes": "616" in ROCm runtime calls)."""

    device: int | str = -1
    stream: int | str = -1
    # torch >= 2.15 exports that move graphed work onto display lanes: the stream it really ran on
    # (args.stream and the tid then name the lane; an unmoved event's lane is args.annotated_stream)
    original_stream: int | str = -1
    correlation: int | str = -1
    bytes: int | str = -1
    collective: Any = msgspec.field(default=None, name="Collective name")
    in_nelems: Any = msgspec.field(default=None, name="In msg nelems")  # NCCL kernels: message size
    out_nelems: Any = msgspec.field(default=None, name="Out msg nelems")
    dtype: Any = None
    # NCCL kernels (torch >= 2.1): the process group the collective runs in (see `group_identity`)
    pg_name: Any = msgspec.field(default=None, name="Process Group Name")
    pg_desc: Any = msgspec.field(default=None, name="Process Group Description")
    pg_ranks: Any = msgspec.field(default=None, name="Process Group Ranks")
    group_size: Any = msgspec.field(default=None, name="Group size")
    kind: str = ""  # ROCm memcpy direction ("HtoD")
    # CUDA graphs (Kineto 2026, CUDA >= 12): the graph a kernel / copy / memset ran in; 0 outside graphs.
    # Kineto writes "graph id"; "graphId" is read too (other writers, CUPTI's own field name).
    graph_id: Any = msgspec.field(default=None, name="graph id")
    graph_id_camel: Any = msgspec.field(default=None, name="graphId")
    # NCCL kernels (Kineto 2026): the process group's collective sequence number, the same on every
    # rank of the group ("Seq"; "seq" read too)
    seq: Any = msgspec.field(default=None, name="Seq")
    seq_lower: Any = msgspec.field(default=None, name="seq")
    # cuda_sync rows of an event synchronize / stream wait: the event record waited on (its call's
    # correlation) and the stream it was recorded on
    wait_corr: Any = msgspec.field(default=None, name="wait_on_cuda_event_record_corr_id")
    wait_stream: Any = msgspec.field(default=None, name="wait_on_stream")
    # "[memory]" instants (profile_memory=True); loosely typed, read only for those events
    device_type: Any = msgspec.field(default=None, name="Device Type")
    device_id: Any = msgspec.field(default=None, name="Device Id")
    total_allocated: Any = msgspec.field(default=None, name="Total Allocated")
    total_reserved: Any = msgspec.field(default=None, name="Total Reserved")
    mem_bytes: Any = msgspec.field(default=None, name="Bytes")


# The same keys, any JSON value: what args of an unexpected type are read as (the columns then
# coerce them as the loose path does); null: no args.
_LooseKinetoArgs = msgspec.defstruct(
    "_LooseKinetoArgs", [(f.name, Any, f.default) for f in msgspec.structs.fields(KinetoArgs)],
    rename={f.name: f.encode_name for f in msgspec.structs.fields(KinetoArgs)}, gc=False)
_ARGS_DECODER = msgspec.json.Decoder(list[KinetoArgs])
_ONE_ARGS_DECODER = msgspec.json.Decoder(KinetoArgs)
_LOOSE_ARGS_DECODER = msgspec.json.Decoder(_LooseKinetoArgs | None)
_NO_ARGS = msgspec.Raw(b"{}")


class KinetoEvent(msgspec.Struct, gc=False):
    """A Kineto event, typed. A piece of the events array with a value of another type (a null,
    a string ts) fails validation and is decoded into loose `ChromeEvent`s instead.

    `args` stays undecoded JSON: most events are operators and python frames whose args hold no key
    this reader uses, and building a struct for each cost a quarter of the decoding. The args of the
    events that need them are decoded together (`_decode_args`). The struct then refers to the
    bytes it was decoded from, so the typed decoder is given bytes that never change (`_decode`)."""

    ph: str | None = None
    name: str = ""
    cat: str = ""
    pid: int | str = -1
    tid: int | str = -1
    ts: float = float("nan")
    dur: float = float("nan")
    args: msgspec.Raw = _NO_ARGS


TYPED_DECODER = msgspec.json.Decoder(list[KinetoEvent])


def _decode_args(raws: list[msgspec.Raw]) -> tuple[list[Any], list[int]]:
    """The args of some events, decoded (one call for all in the usual case), and the positions of
    those that are no JSON object (the event is malformed, as the loose path counts it). Values of
    an unexpected type come back loosely typed; null or absent args as the defaults."""
    if not raws:
        return [], []
    try:
        return _ARGS_DECODER.decode(b"[" + b",".join(raws) + b"]"), []
    except (msgspec.ValidationError, UnicodeDecodeError):
        pass
    except msgspec.DecodeError as exc:  # invalid UTF-8 (msgspec >= 0.23): found and replaced one by one
        if not invalid_utf8(exc):
            raise
    out: list[Any] = []
    bad: list[int] = []
    for i, raw in enumerate(raws):
        text: Any = raw
        try:
            out.append(_ONE_ARGS_DECODER.decode(text))
            continue
        except msgspec.ValidationError:
            pass
        except (UnicodeDecodeError, msgspec.DecodeError) as exc:  # invalid UTF-8 in a value: replaced, as
            if not invalid_utf8(exc):                                # in the rest of the file
                raise
            DECODE_NOTES["invalid_utf8"] += 1
            text = bytes(raw).decode("utf-8", "replace").encode("utf-8")
        try:
            args = _LOOSE_ARGS_DECODER.decode(text)
        except msgspec.ValidationError:  # not an object: the event is malformed
            bad.append(i)
            args = None
        out.append(KinetoArgs() if args is None else args)
    return out, bad


def read(path: Path, data: bytes, options: ReadOptions) -> Timeline:
    """From the whole content in memory (kept for callers that already hold it)."""
    env = parse_envelope(data, path)
    return timeline_from_envelope(env, path, options, FORMAT)


def read_path(path: Path, options: ReadOptions, chunk_bytes: int = CHUNK_BYTES, typed: bool = True) -> Timeline:
    """From the file, decoded while it is read: the content is never held whole.

    `chunk_bytes` and `typed=False` (loose structs only) exist for tests of the decoding itself. With the
    compiled scanner built (`scanner`), the file is read by it unless it leaves the file to this reader."""
    if typed and chunk_bytes == CHUNK_BYTES:
        if scanner.available():
            # the cores the job gives this file (decode_workers) decide whether a second thread scans
            scanned = scanner.scan_path(path, options.max_input_bytes, options.progress,
                                        threads=min(2, options.decode_workers))
            if isinstance(scanned, scanner.Scanned):
                return _timeline_scanned(scanned, path)
            _LOG.debug("%s: read by the pure-Python reader: %s", path, scanned)
    stream = stream_events(path, max_bytes=options.max_input_bytes, chunk_bytes=chunk_bytes,
                           progress=options.progress, decoder=TYPED_DECODER if typed else None)
    DECODE_NOTES.clear()
    if typed and options.decode_workers > 1:  # a big uncompressed file: ranges decoded in parallel
        cols = _paused_gc(lambda: collect_events(stream, _Collector, decode_range_task, options.decode_workers))
    else:
        cols = _collect(stream.chunks())
    tl = _timeline(cols, stream.header, path, FORMAT)
    source = tl.sources[0]
    add_decode_notes(source)
    malformed = source.not_kept.get("malformed_event", 0)
    if malformed and malformed == source.events_read:
        raise InputError(path, f"not a trace: its 'traceEvents' list holds {malformed} values and not one event "
                               f"object (expected objects such as {{\"ph\": \"X\", \"name\": ..., \"ts\": ...}})")
    if stream.truncated:
        msg = (f"TRUNCATED: {stream.truncated}; the {source.events_read} complete events before the cut were "
               f"read and analysed; everything after it is missing (was the profiler killed?)")
        source.warnings.insert(0, msg)
        source.truncated = stream.truncated
        tl.warnings.insert(0, f"{path}: {msg}")
    return tl


def _timeline_scanned(scanned: scanner.Scanned, path: Path) -> Timeline:
    """The Timeline from the scanner's columns: what `read_path` makes of the same file."""
    DECODE_NOTES.clear()
    cols = _paused_gc(lambda: _Collector.from_scan(scanned))
    header = decode_values({k: msgspec.Raw(v) for k, v in scanned.header})
    tl = _timeline(cols, header, path, FORMAT)
    add_decode_notes(tl.sources[0])
    return tl


def add_decode_notes(source: Source) -> None:
    """What decoding dropped or repaired (chrome_json.DECODE_NOTES) into the source's counts."""
    bad = DECODE_NOTES.pop("malformed_event", 0)
    if bad:
        source.events_read += bad  # read, though never decoded into an event
        source.not_kept["malformed_event"] = source.not_kept.get("malformed_event", 0) + bad
        source.warnings.append(f"{bad} malformed events dropped (a field of the wrong type, e.g. args not an object)")
    utf8 = DECODE_NOTES.pop("invalid_utf8", 0)
    if utf8:
        source.warnings.append(f"invalid UTF-8 bytes replaced by U+FFFD in {utf8} piece(s) of the file")


def timeline_from_envelope(env: Envelope, path: Path, options: ReadOptions, fmt: str) -> Timeline:
    cols = _collect(iter_event_chunks(env, path, progress=options.progress, decoder=TYPED_DECODER))
    return _timeline(cols, env.header, path, fmt)


def timeline_from_events(header: dict[str, Any], chunks: Iterable[list[KinetoEvent]], path: Path, fmt: str) -> Timeline:
    """From events another reader made into `KinetoEvent` structs (chunk by chunk) and the header's keys, as
    decoded from JSON: what reading them from a Kineto JSON document gives, without the document."""
    return _timeline(_collect(chunks), header, path, fmt)


def _collect(chunks: Any) -> _Collector:
    """Columns from decoded chunks."""
    def run() -> _Collector:
        cols = _Collector()
        for chunk in chunks:
            cols.add(chunk)
            del chunk  # the chunk's structs may point into the reader's buffer: let go before it moves on
        return cols
    return _paused_gc(run)


def _paused_gc(fn: Callable[[], _Collector]) -> _Collector:
    """`fn()` with the cyclic garbage collector paused: decoding creates millions of short-lived
    objects and a collection pass over them would only cost time."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return fn()
    finally:
        if was_enabled:
            gc.enable()


def decode_range_task(task: RangeTask) -> RangeResult:
    """One range of a big file decoded into typed columns (run by `chrome_parallel`'s workers)."""
    return decode_range(task, TYPED_DECODER, _Collector)


def _timeline(cols: _Collector, header: dict[str, Any], path: Path, fmt: str) -> Timeline:
    source = Source(path=str(path), format=fmt)
    source.events_read = cols.events_read
    for phase, n in sorted(cols.not_kept.items()):
        if n:
            source.not_kept[phase] = n

    base_ns = int_or_none(header.get("baseTimeNanoseconds")) or 0
    if not 0 <= base_ns <= MAX_ABS_TIME_US * 1000:
        raise InputError(path, f"baseTimeNanoseconds {str(base_ns)[:30]} is out of range (negative or "
                               f"beyond the year 2200): every event time would be wrong")
    events = cols.frame(base_ns)
    events, dropped = _drop_bad(events)
    for reason, n in cols.dropped.items():
        dropped[reason] = dropped.get(reason, 0) + n
    if cols.odd_steps:
        source.warnings.append(f"{cols.odd_steps} ProfilerStep events with a step number beyond {MAX_STEP_NUMBER} "
                               f"kept as annotations, not steps")
    for reason, n in dropped.items():
        if n:
            source.not_kept[reason] = source.not_kept.get(reason, 0) + n
            source.warnings.append(f"{n} events dropped: {reason.replace('_', ' ')}")
    before = len(events)
    events = _drop_duplicates(events)
    duplicates = before - len(events)
    if duplicates:
        source.not_kept["duplicate"] = duplicates
        source.warnings.append(f"{duplicates} exact duplicate events removed")
    odd_ids = _odd_device_ids(header)
    if odd_ids:
        source.warnings.append(f"deviceProperties: {len(odd_ids)} entries whose id is no device index (negative, "
                               f"beyond {MAX_DEVICE_ID} or not a whole number: {', '.join(odd_ids[:5])}) ignored")
    timed = int((events["kind"] != T.TRACE_SPAN).sum()) if len(events) else 0
    if timed and not events["dur_ns"].to_numpy().any():
        source.warnings.append(f"every one of the {timed} events has zero duration: there is no busy or step "
                               f"time to measure (a trace written without durations?)")
    source.warnings.extend(names_cut_warning(cols.names, cols.cats, cols.copy_kinds))
    unknown = {c: n for c, n in cols.categories.items() if c not in CATEGORY_KINDS}
    if unknown:
        listed = ", ".join(f"{c or '(none)'} ({n})" for c, n in sorted(unknown.items()))
        source.warnings.append(f"categories not recognised, kept as 'other': {listed}")
    memory = cols.memory(base_ns)
    if cols.rebuilt:
        source.warnings.append(f"{cols.rebuilt} [memory] events carry no 'Total Allocated' (PyTorch before 1.10): "
                               f"the allocated curve is the running sum of their 'Bytes' from the start of the "
                               f"capture (what was allocated before it is not known; no reserved total)")
    n_memory_dropped = cols.dropped.pop("memory_event_unusable", 0)
    if n_memory_dropped:
        source.not_kept["memory_event_unusable"] = n_memory_dropped
        source.warnings.append(f"{n_memory_dropped} [memory] events dropped: no time, no allocated total, "
                               f"or an implausible time or device")
    counters = cols.counters(base_ns)
    if cols.counters_dropped:
        source.not_kept["counter_unusable"] = cols.counters_dropped
        source.warnings.append(f"{cols.counters_dropped} hardware counter samples dropped: no numeric value, an "
                               f"implausible time, beyond {MAX_COUNTER_METRICS} distinct counters or "
                               f"{MAX_COUNTER_SAMPLES} samples")
    events = _sync_streams(_graph_launches(events))
    source.events_kept = len(events) + len(memory) + len(counters)

    info = header.get("distributedInfo") if isinstance(header.get("distributedInfo"), dict) else {}
    rank = small_int_or_none(info.get("rank")) if info else None
    world = small_int_or_none(info.get("world_size")) if info else None
    for key, value in (("rank", rank), ("world_size", world)):
        if info and info.get(key) is not None and value is None:
            source.warnings.append(f"distributedInfo.{key} {str(info.get(key))[:40]!r} is not a plausible "
                                   f"number; ignored")
    ts_us_median = float(np.median(events["ts_ns"].to_numpy())) / 1000 if len(events) else 0.0
    epoch = bool(base_ns) or ts_us_median > 1e15  # > 2001-09-09 in epoch microseconds
    tl = Timeline(events=events, memory=memory, counters=counters, sources=[source],
                  ranks=[RankInfo(index=0, rank=rank, source=0, world_size=world,
                                  clock="epoch" if epoch else "relative", framework="pytorch",
                                  host=host_of(header, path), gpus_listed=gpus_listed(header),
                                  memory_from_sizes=cols.rebuilt > 0, gpu_api=gpu_api(header, cols.names.values))])
    devices = np.concatenate([events["device"].to_numpy(), memory["device"].to_numpy()]).astype(np.int64)
    check_device_count(path, devices[devices >= 0])
    tl.devices = _devices(header, events, memory)
    return tl.validate()


def _graph_launches(events: pd.DataFrame) -> pd.DataFrame:
    """CUDA graphs: a runtime call (cudaGraphLaunch) whose correlation id is that of GPU work run in a
    graph gets that graph's id: CUPTI gives every kernel of one replay its launch call's correlation.
    Traces before 2026 record no graph ids: GPU work sharing a graph launch call's correlation is
    marked as replayed by a graph whose id is not recorded (UNKNOWN_GRAPH_ID), and so is the call."""
    graph = events["graph_id"].to_numpy()
    corr = events["correlation"].to_numpy()
    has_corr = corr != -1  # ids are uint64 kept as int64 bits: any value but -1 is one
    launch = np.flatnonzero(name_flags(events, GRAPH_LAUNCH_CALL) & (events["kind"] == T.RUNTIME).to_numpy()
                            & has_corr)
    if len(launch):
        work = T.category_mask(events["kind"], T.GPU_WORK_KINDS) & (graph == -1) & has_corr
        replayed = work & np.isin(corr, corr[launch])
        if replayed.any():
            graph = graph.copy()
            graph[replayed] = UNKNOWN_GRAPH_ID
            events["graph_id"] = graph
    in_graph = graph != -1
    if not in_graph.any():
        return events
    runtime = (events["kind"] == T.RUNTIME).to_numpy() & has_corr & ~in_graph
    if not runtime.any():
        return events
    g_corr, g_graph = corr[in_graph & has_corr], graph[in_graph & has_corr]
    if not len(g_corr):
        return events
    order = np.argsort(g_corr, kind="stable")
    g_corr, g_graph = g_corr[order], g_graph[order]
    rows = np.flatnonzero(runtime)
    pos = np.clip(np.searchsorted(g_corr, corr[rows]), 0, len(g_corr) - 1)
    found = g_corr[pos] == corr[rows]
    if not found.any():
        return events
    graph = graph.copy()
    graph[rows[found]] = g_graph[pos[found]]
    events["graph_id"] = graph
    return events


def _sync_streams(events: pd.DataFrame) -> pd.DataFrame:
    """Kineto 2026 "Stream Sync" events sit on a virtual thread (stream + SYNC_TID_OFFSET); one without a
    "stream" arg is put back on its real stream (never a stream of its own). They stay synchronisation
    annotations on the device, not GPU work."""
    stream = events["stream"].to_numpy()
    virtual = (stream >= SYNC_TID_OFFSET) & (events["kind"] == T.GPU_ANNOTATION).to_numpy()
    if not virtual.any():
        return events
    virtual &= (events["category"] == "cuda_sync").to_numpy()
    if virtual.any():
        events["stream"] = np.where(virtual, stream - SYNC_TID_OFFSET, stream)
    return events


class _NameFacts:
    """What a name, a category or a copy-kind value says about its events, per interned code: computed
    once per distinct value as new ones appear, then spread to rows by code."""

    def __init__(self) -> None:
        self.n_names = self.n_cats = self.n_copy_kinds = 0
        self.step = np.zeros(0, dtype=np.int32)  # ProfilerStep#N: N (-1: not a step, or N beyond int32)
        self.odd_step = np.zeros(0, dtype=bool)  # ProfilerStep#N with N beyond int32
        self.loader = np.zeros(0, dtype=bool)
        self.direction = np.zeros(0, dtype=np.int8)  # copy direction from the name (T.COPY_KINDS index)
        self.pinned = np.zeros(0, dtype=np.int8)
        self.comm = np.zeros(0, dtype=bool)
        self.kind = np.zeros(0, dtype=np.int8)  # by category: T.EVENT_KINDS index
        self.arg_direction = np.zeros(0, dtype=np.int8)  # by "kind" arg value

    def update(self, names: list[str], cats: list[str], copy_kinds: list[str]) -> None:
        if len(names) > self.n_names:
            new = names[self.n_names:]
            numbers = [_step_number(v) for v in new]
            self.step = np.r_[self.step, np.array([v if v <= MAX_STEP_NUMBER else -1 for v in numbers], np.int32)]
            self.odd_step = np.r_[self.odd_step, np.array([v > MAX_STEP_NUMBER for v in numbers], bool)]
            self.loader = np.r_[self.loader, np.array([bool(DATALOADER_NAME.match(v)) for v in new], bool)]
            self.direction = np.r_[self.direction, np.array([_COPY_CODE[_copy_direction(v)] for v in new], np.int8)]
            self.pinned = np.r_[self.pinned, np.array([_pinned(v) for v in new], np.int8)]
            self.comm = np.r_[self.comm, np.array([_is_comm_name(v) for v in new], bool)]
            self.n_names = len(names)
        if len(cats) > self.n_cats:
            new = cats[self.n_cats:]
            self.kind = np.r_[self.kind, np.array([_KIND_CODE[CATEGORY_KINDS.get(c, T.OTHER)] for c in new], np.int8)]
            self.n_cats = len(cats)
        if len(copy_kinds) > self.n_copy_kinds:
            new = copy_kinds[self.n_copy_kinds:]
            self.arg_direction = np.r_[self.arg_direction, np.array([_COPY_CODE.get(v, 0) for v in new], np.int8)]
            self.n_copy_kinds = len(copy_kinds)


_KIND_CODE = {k: np.int8(i) for i, k in enumerate(T.EVENT_KINDS)}
_COPY_CODE = {k: np.int8(i) for i, k in enumerate(T.COPY_KINDS)}
_DEVICE_KIND = np.array([k in T.DEVICE_KINDS for k in T.EVENT_KINDS])
_WORK_KIND = np.array([k in T.GPU_WORK_KINDS for k in T.EVENT_KINDS])
# Events of these categories carry no args key this reader uses (operators, python frames and
# annotations hold ids of their own and input shapes, never a correlation or a device): their args
# are not decoded. Every other category's are (runtime calls, GPU work, and any category not known).
_ARGS_READ = np.array([k not in (T.CPU_OP, T.PYTHON, T.ANNOTATION) for k in T.EVENT_KINDS])
# The columns a chunk leaves, and those holding interned codes (remapped when collectors merge).
_PARTS = ("ts", "dur", "ts_ns", "dur_ns", "name", "cat", "kind", "step", "device", "stream", "pid", "tid",
          "bytes", "copy_kind", "pinned", "comm", "correlation", "bad_id", "bad_device", "group", "graph",
          "comm_seq", "wait_corr", "wait_stream")
_CODED_PARTS = ("name", "cat", "group")


class _Collector:
    """Accumulates typed columns chunk by chunk; no per-event objects survive a chunk.

    Everything a row's own values decide (its kind, step, copy direction, nanosecond times, which
    ids are implausible) is computed per chunk, where the chunk was decoded (in parallel for big
    files, see `chrome_parallel`); `frame` then only joins the chunks and drops what the header's
    base time makes implausible. Args that only device events use (device, stream, bytes, copy
    direction, collective) are read only for events whose category is a device one.
    """

    def __init__(self) -> None:
        self.names = Interner()
        self.cats = Interner()
        self.copy_kinds = Interner()
        self.copy_kinds.code("")  # code 0: no direction
        self.groups = Interner()  # communication kernels' process groups (`group_identity`)
        self.groups.code("")  # code 0: no group recorded
        self.facts = _NameFacts()
        self.parts: dict[str, list[np.ndarray]] = {k: [] for k in _PARTS}
        self.events_read = 0
        self.not_kept: Counter[str] = Counter()
        self.categories: Counter[str] = Counter()
        self.dropped: Counter[str] = Counter()  # events dropped for implausible values, by reason
        self.odd_steps = 0  # ProfilerStep#N events with N beyond int32: kept as annotations
        # "[memory]" instants: ts, device type, device id, allocated, reserved, bytes (kept apart)
        self.memory_parts: list[tuple[np.ndarray, ...]] = []
        # hardware counters of "GPU N Counters" processes: (ts us, device, metric, value) per sample
        self.counter_rows: list[tuple[float, int, str, float]] = []
        self.counter_metrics: set[str] = set()
        self.counters_dropped = 0  # samples beyond MAX_COUNTER_METRICS distinct metrics or without a value
        self.rebuilt = 0  # memory events whose allocated total was rebuilt from their sizes

    def add(self, chunk: list[Any]) -> None:
        n = len(chunk)
        if not n:
            return
        self.events_read += n
        phs = list(map(_PH, chunk))
        n_x = phs.count("X")
        if n_x != n:
            typed = type(chunk[0]) is KinetoEvent  # a chunk holds one kind of struct; typed ph: str | None
            if not typed and not all(isinstance(ph, (str, int, float)) or ph is None for ph in phs):
                phs = [ph if isinstance(ph, (str, int, float)) or ph is None else type(ph).__name__ for ph in phs]
            phases = Counter(phs)
            for ph, count in phases.items():
                if ph != "X":
                    self.not_kept[_phase_reason(ph)] += count
            if phases.get("i") or phases.get("I"):
                self._add_memory(chunk, phs)
            if phases.get("C"):
                self._add_counters(chunk, phs)
        if not n_x:
            return
        xs = chunk if n_x == n else list(compress(chunk, map(eq, phs, repeat("X"))))
        if type(xs[0]) is KinetoEvent:  # a chunk holds one kind of struct
            self._add_typed(xs)
            return
        args = [e.args for e in xs]
        ts = to_float([e.ts for e in xs])
        dur = to_float([e.dur for e in xs])
        names = self.names.codes([e.name for e in xs])
        cats = self.cats.codes([e.cat for e in xs])
        nbytes = to_int_id([a.bytes if a is not None else None for a in args])
        collective = np.fromiter((a is not None and (a.collective is not None or a.pg_desc is not None)
                                  for a in args), dtype=bool, count=len(args))
        _message_bytes(nbytes, args, collective)
        group = _group_codes(self.groups, args)
        graph, seq = _graph_and_seq(args)
        self.facts.update(self.names.values, self.cats.values, self.copy_kinds.values)
        correlation = to_int_id([a.correlation if a is not None else None for a in args], unsigned64=True)
        correlation[~_ARGS_READ[self.facts.kind[cats]]] = -1  # as the typed path: args not read there
        self._add_rows(ts, dur, names, cats,
                       pid=to_int_id([e.pid for e in xs]), tid=to_int_id([e.tid for e in xs]),
                       device=to_int_id([a.device if a is not None else None for a in args]),
                       stream=_real_stream(to_int_id([a.stream if a is not None else None for a in args]),
                                           to_int_id([a.original_stream if a is not None else None for a in args])),
                       nbytes=nbytes,
                       correlation=correlation,
                       copy_kind=self.copy_kinds.codes([a.kind if a is not None else None for a in args]),
                       collective=collective, group=group, graph=graph, seq=seq, waits=_sync_waits(args))

    @classmethod
    def from_scan(cls, s: scanner.Scanned) -> _Collector:
        """The columns of a scanned file (`scanner.scan_path`): what `add` makes of its events, chunk after
        chunk, computed from the scanner's arrays; only the args the scanner leaves untyped ("complex"
        events: collectives, string ids) and the instant and counter events are decoded here."""
        self = cls()
        self.events_read = s.events
        for ph, count in s.phase_counts:
            self.not_kept[_phase_reason(ph)] += count
        if s.special:
            special = TYPED_DECODER.decode(b"[" + b",".join(s.special) + b"]")
            phs = list(map(_PH, special))
            self._add_memory(special, phs)
            self._add_counters(special, phs)
            del special
        if not s.columns["ts"]:
            return self
        for interner, values in ((self.names, s.names), (self.cats, s.cats)):
            interner.values = list(values)
            interner._index = {v: i for i, v in enumerate(values)}
        self.facts.update(self.names.values, self.cats.values, self.copy_kinds.values)
        start = 0
        while s.columns["ts"]:  # piece by piece, each let go of once used: the rows are never held twice
            piece = {k: parts.pop(0) for k, parts in s.columns.items()}
            end = start + len(piece["ts"])
            lo, hi = np.searchsorted(s.complex_rows, [start, end])
            self._add_scanned(piece, s.complex_rows[lo:hi] - start, s.complex_args[lo:hi])
            del piece
            start = end
        return self

    def _add_scanned(self, c: dict[str, np.ndarray], complex_rows: np.ndarray, complex_args: list[bytes]) -> None:
        """One piece of the scanned columns (`from_scan`); `complex_rows` (in the piece) and `complex_args`: the
        events whose args the scanner left to this reader, and their args' text."""
        cats = c.pop("cat")
        n = len(cats)
        kinds = self.facts.kind[cats]
        read = _ARGS_READ[kinds]
        on_device = _DEVICE_KIND[kinds]
        del kinds
        correlation = np.where(read, c.pop("correlation"), -1)
        device = np.where(on_device, c.pop("device"), -1)
        stream = np.where(on_device, c.pop("stream"), -1)  # the scanner applied `_real_stream`
        nbytes = np.where(on_device, c.pop("bytes"), -1)
        graph, seq = c.pop("graph"), c.pop("seq")
        graph = np.where(on_device & (graph != ID_OUT_OF_RANGE), graph, -1)
        seq = np.where(on_device & (seq != ID_OUT_OF_RANGE), seq, -1)
        copy_kind = np.zeros(n, dtype=np.int32)
        collective = np.zeros(n, dtype=bool)
        group = np.zeros(n, dtype=np.int32)
        wait_corr = np.full(n, -1, dtype=np.int64)
        wait_stream = np.full(n, -1, dtype=np.int64)
        wanted = read[complex_rows]
        rows = complex_rows[wanted]
        if len(rows):  # decoded here, as `_add_typed` decodes every event's
            args, _ = _decode_args([msgspec.Raw(t) for t in compress(complex_args, wanted.tolist())])
            correlation[rows] = _ids(args, _A_CORRELATION, unsigned64=True)
            dev_rows = np.flatnonzero(on_device[rows])
            if len(dev_rows):
                at = rows[dev_rows]
                (device[at], stream[at], nbytes[at], copy_kind[at], collective[at], group[at], graph[at], seq[at],
                 wait_corr[at], wait_stream[at]) = self._device_args(list(map(args.__getitem__, dev_rows.tolist())))
        self._add_rows(c.pop("ts"), c.pop("dur"), c.pop("name"), cats, pid=c.pop("pid"), tid=c.pop("tid"),
                       device=device, stream=stream, nbytes=nbytes, correlation=correlation, copy_kind=copy_kind,
                       collective=collective, group=group, graph=graph, seq=seq, waits=(wait_corr, wait_stream))

    def _device_args(self, sub: list[Any]) -> tuple[np.ndarray, ...]:
        """The columns of GPU events that come from their decoded args, for both read paths (typed structs and
        the scanner's "complex" rows): device, stream, bytes, copy kind, collective, group, graph, NCCL
        sequence number, and the event record a cuda_sync row waits on with its stream."""
        nbytes = _ids(sub, _A_BYTES)
        collective = np.array([c is not None or d is not None  # a collective, or work marked with its group
                               for c, d in zip(map(_A_COLLECTIVE, sub), map(_A_PG_DESC, sub))], dtype=bool)
        _message_bytes(nbytes, sub, collective)
        return (_ids(sub, _A_DEVICE), _real_stream(_ids(sub, _A_STREAM), _ids(sub, _A_ORIGINAL_STREAM)), nbytes,
                self.copy_kinds.codes(list(map(_A_KIND, sub))), collective, _group_codes(self.groups, sub),
                *_graph_and_seq(sub), *_sync_waits(sub))

    def _add_typed(self, xs: list[KinetoEvent]) -> None:
        """`add` for typed structs: the same columns, one C-level pass per field; args decoded only
        for the events whose category's args are read (`_ARGS_READ`)."""
        n = len(xs)
        cats = self.cats.codes(list(map(_CAT, xs)))
        self.facts.update(self.names.values, self.cats.values, self.copy_kinds.values)
        kinds = self.facts.kind[cats]
        read = np.flatnonzero(_ARGS_READ[kinds])
        args, bad = _decode_args(list(map(_ARGS, map(xs.__getitem__, read.tolist()))))
        if bad:  # args that are no JSON object: those events dropped, counted as malformed
            self._malformed(len(bad))
            drop = set(read[bad].tolist())
            xs = [e for i, e in enumerate(xs) if i not in drop]
            if xs:
                self._add_typed(xs)
            return
        ts = np.fromiter(map(_TS, xs), np.float64, count=n)
        dur = np.fromiter(map(_DUR, xs), np.float64, count=n)
        names = self.names.codes(list(map(_NAME, xs)))
        self.facts.update(self.names.values, self.cats.values, self.copy_kinds.values)
        correlation = np.full(n, -1, dtype=np.int64)
        correlation[read] = _ids(args, _A_CORRELATION, unsigned64=True)
        device = np.full(n, -1, dtype=np.int64)
        stream = np.full(n, -1, dtype=np.int64)
        nbytes = np.full(n, -1, dtype=np.int64)
        copy_kind = np.zeros(n, dtype=np.int32)
        collective = np.zeros(n, dtype=bool)
        group = np.zeros(n, dtype=np.int32)
        graph = np.full(n, -1, dtype=np.int64)
        seq = np.full(n, -1, dtype=np.int64)
        wait_corr = np.full(n, -1, dtype=np.int64)
        wait_stream = np.full(n, -1, dtype=np.int64)
        on_device = np.flatnonzero(_DEVICE_KIND[kinds])  # device kinds are among those whose args are read
        if len(on_device):
            sub = list(map(args.__getitem__, np.searchsorted(read, on_device).tolist()))
            (device[on_device], stream[on_device], nbytes[on_device], copy_kind[on_device], collective[on_device],
             group[on_device], graph[on_device], seq[on_device], wait_corr[on_device],
             wait_stream[on_device]) = self._device_args(sub)
        self._add_rows(ts, dur, names, cats, pid=_ids(xs, _PID), tid=_ids(xs, _TID), device=device, stream=stream,
                       nbytes=nbytes, correlation=correlation, copy_kind=copy_kind, collective=collective,
                       group=group, graph=graph, seq=seq, waits=(wait_corr, wait_stream))

    def _add_rows(self, ts: np.ndarray, dur: np.ndarray, names: np.ndarray, cats: np.ndarray, *, pid: np.ndarray,
                  tid: np.ndarray, device: np.ndarray, stream: np.ndarray, nbytes: np.ndarray,
                  correlation: np.ndarray, copy_kind: np.ndarray, collective: np.ndarray,
                  group: np.ndarray, graph: np.ndarray, seq: np.ndarray,
                  waits: tuple[np.ndarray, np.ndarray] | None = None) -> None:
        """A chunk's rows, from its raw values: event kinds and copy directions as small-int codes
        (from per-name / per-category facts spread by code, never per row on strings). `group`:
        interned process-group codes, kept for communication kernels only; `graph`: the CUDA graph id
        (kept for GPU work, > 0 only); `seq`: the NCCL sequence number (communication kernels only); `waits`:
        the event record waited on and its stream (`_sync_waits`, GPU annotations only: the cuda_sync rows;
        None: not read, -1)."""
        f = self.facts
        f.update(self.names.values, self.cats.values, self.copy_kinds.values)
        name_codes = names.astype(np.intp)
        kind = f.kind[cats.astype(np.intp)]
        on_device = _DEVICE_KIND[kind]
        host_op = (kind == _KIND_CODE[T.CPU_OP]) | (kind == _KIND_CODE[T.ANNOTATION])
        step = np.where(host_op, f.step[name_codes], np.int32(-1)).astype(np.int32)
        kind = np.where(step >= 0, _KIND_CODE[T.STEP], kind)
        kind = np.where(host_op & f.loader[name_codes] & (step < 0), _KIND_CODE[T.DATALOADER], kind)
        self.odd_steps += int(f.odd_step[name_codes].sum())

        is_copy = kind == _KIND_CODE[T.MEMCPY]
        direction = np.where(is_copy, f.direction[name_codes], np.int8(0))
        direction = np.where(is_copy & (direction == 0), f.arg_direction[copy_kind.astype(np.intp)], direction)
        pinned = np.where(is_copy, f.pinned[name_codes], np.int8(-1)).astype(np.int8)
        comm = (kind == _KIND_CODE[T.KERNEL]) & (f.comm[name_codes] | collective)
        moved = (kind == _KIND_CODE[T.MEMCPY]) | (kind == _KIND_CODE[T.MEMSET]) | comm

        sync_row = kind == _KIND_CODE[T.GPU_ANNOTATION]
        if waits is None:
            waits = (np.full(len(ts), -1, np.int64), np.full(len(ts), -1, np.int64))
        bad_id = np.zeros(len(ts), dtype=bool)
        for ids in (pid, tid, device, stream, correlation, nbytes):
            bad_id |= ids == ID_OUT_OF_RANGE
        dev = np.where(on_device, np.where(device >= 0, device, pid), -1)
        p = self.parts
        for key, value in (
                ("ts", ts), ("dur", dur), ("ts_ns", us_to_ns(ts)), ("dur_ns", us_to_ns(dur)),
                ("name", names), ("cat", cats), ("kind", kind.astype(np.int8)), ("step", step), ("device", dev),
                ("stream", np.where(on_device, np.where(stream >= 0, stream, tid), -1)),
                ("pid", np.where(on_device, -1, pid)), ("tid", np.where(on_device, -1, tid)),
                ("bytes", np.where(moved, nbytes, -1)), ("copy_kind", direction.astype(np.int8)),
                ("pinned", pinned), ("comm", comm), ("correlation", correlation), ("bad_id", bad_id),
                ("bad_device", on_device & ((dev > MAX_DEVICE_ID) | (dev < -1)) & ~bad_id),
                ("group", np.where(comm, group, 0).astype(np.int32)),
                ("graph", np.where(_WORK_KIND[kind] & (graph != 0) & (graph != -1), graph, -1).astype(np.int64)),
                ("comm_seq", np.where(comm & (seq >= 0), seq, -1).astype(np.int64)),
                ("wait_corr", np.where(sync_row & (waits[0] >= 0), waits[0], -1).astype(np.int64)),
                ("wait_stream", np.where(sync_row & (waits[1] >= 0), waits[1], -1).astype(np.int64))):
            p[key].append(value)

    def merge(self, later: _Collector) -> None:
        """Append the columns `later` collected from the stretch of the file after this one's (in
        another process): its interned codes are mapped onto this collector's."""
        for key, mine, theirs in (("name", self.names, later.names), ("cat", self.cats, later.cats),
                                  ("group", self.groups, later.groups)):
            codes = np.fromiter(map(mine.code, theirs.values), dtype=np.int32, count=len(theirs.values))
            self.parts[key].extend(codes[p] for p in later.parts[key])
        for value in later.copy_kinds.values:  # rows hold directions; the values only count cut names
            self.copy_kinds.code(value)
        for key, parts in later.parts.items():
            if key not in _CODED_PARTS:
                self.parts[key].extend(parts)
        self.events_read += later.events_read
        self.not_kept.update(later.not_kept)
        self.odd_steps += later.odd_steps
        self.memory_parts.extend(later.memory_parts)
        for row in later.counter_rows:
            self._counter_row(*row)
        self.counters_dropped += later.counters_dropped

    def _malformed(self, n: int) -> None:
        """`n` events of this chunk dropped for args that are no JSON object: counted where the loose
        path counts the events it cannot decode (they are read, but never became events)."""
        DECODE_NOTES["malformed_event"] += n
        self.events_read -= n

    def _add_counters(self, chunk: list[Any], phs: list[Any]) -> None:
        """The hardware-counter samples of a chunk: "ph": "C" events of a process named by the string
        pid "GPU N Counters" (Kineto's CUPTI PM sampling: one event per metric and sample, its value
        under the args key ""). Other counter events stay not kept, as before. Read events are kept."""
        for e in compress(chunk, map(eq, phs, repeat("C"))):
            m = COUNTER_PID.match(e.pid) if isinstance(e.pid, str) else None
            if m is None:
                continue
            raw = e.args
            args: Any = None
            if isinstance(raw, msgspec.Raw):
                try:
                    args = msgspec.json.decode(raw)
                except (msgspec.DecodeError, UnicodeDecodeError):
                    pass
            elif raw is not None:  # loose structs hold only the keys the reader knows: the "" value
                args = {"": getattr(raw, "counter_value", None)}
            self.not_kept["counter"] -= 1
            ts = e.ts if isinstance(e.ts, (int, float)) else float("nan")
            name = e.name if isinstance(e.name, str) else ""
            values = [(k, v) for k, v in args.items() if isinstance(v, (int, float)) and not isinstance(v, bool)] \
                if isinstance(args, dict) else []
            if not values or not np.isfinite(ts):
                self.counters_dropped += 1
                continue
            for key, value in values[:_MAX_COUNTER_ARGS]:
                metric = cut_text(name if key == "" else f"{name}.{key}" if name else key, MAX_METRIC_CHARS)
                self._counter_row(float(ts), int(m.group(1)), metric, float(value))

    def _counter_row(self, ts: float, device: int, metric: str, value: float) -> None:
        if len(self.counter_rows) >= MAX_COUNTER_SAMPLES:
            self.counters_dropped += 1
            return
        if metric not in self.counter_metrics:
            if len(self.counter_metrics) >= MAX_COUNTER_METRICS:
                self.counters_dropped += 1
                return
            self.counter_metrics.add(metric)
        self.counter_rows.append((ts, device, metric, value))

    def counters(self, base_ns: int) -> pd.DataFrame:
        """The hardware counters as a counters table (source 0: the trace itself), on the events' clock;
        samples at implausible times dropped and counted."""
        if not self.counter_rows:
            return T.empty_counters()
        ts, device, metric, value = zip(*self.counter_rows)
        t = np.array(ts, dtype=np.float64)
        ok = np.abs(t + base_ns / 1000.0) <= MAX_ABS_TIME_US
        self.counters_dropped += int((~ok).sum())
        return pd.DataFrame({
            "ts_ns": (us_to_ns(t) + np.int64(base_ns))[ok],
            "device": np.array(device, dtype=np.int32)[ok],
            "metric": pd.Categorical(np.array(metric, dtype=object)[ok]),
            "value": np.array(value, dtype=np.float64)[ok],
            "source": np.zeros(int(ok.sum()), dtype=np.int32),
        })

    def _add_memory(self, chunk: list[Any], phs: list[Any]) -> None:
        """The "[memory]" instants of a chunk, as columns (the other instants stay not kept)."""
        # C-level passes (phases are hashable here, see `add`): no Python call per event
        instants = list(compress(chunk, map(contains, repeat(_INSTANT_PHASES), phs)))
        mem = list(compress(instants, map(eq, map(_NAME, instants), repeat(MEMORY_EVENT))))
        if mem and type(mem[0]) is not KinetoEvent:  # loose structs: null args are no memory event
            mem = [e for e in mem if e.args is not None]
        if mem and type(mem[0]) is KinetoEvent:  # typed: args still undecoded
            args, bad = _decode_args(list(map(_ARGS, mem)))
            if bad:  # args that are no JSON object: malformed events, not instants
                self._malformed(len(bad))
                self.not_kept["instant"] -= len(bad)
                drop = set(bad)
                mem = [e for i, e in enumerate(mem) if i not in drop]
                args = [a for i, a in enumerate(args) if i not in drop]
        else:
            args = [e.args for e in mem]
        if not mem:
            return
        self.not_kept["instant"] -= len(mem)
        self.memory_parts.append((
            to_float([e.ts for e in mem]),
            np.array([_memory_device_type(a.device_type) for a in args], dtype=np.int8),
            to_float([a.device_id for a in args]),
            to_float([a.total_allocated for a in args]),
            to_float([a.total_reserved for a in args]),
            to_float([a.mem_bytes for a in args]),
        ))

    def memory(self, base_ns: int) -> pd.DataFrame:
        """The memory table; events without a time or an allocated total are dropped and counted."""
        if not self.memory_parts:
            return T.empty_memory()
        ts, dtype, dev, alloc, reserved, nbytes = (np.concatenate(c) for c in zip(*self.memory_parts))
        alloc = self._rebuilt_totals(ts, dtype, dev, alloc, nbytes)
        bad = ~np.isfinite(ts) | (np.abs(ts + base_ns / 1000.0) > MAX_ABS_TIME_US) | (ts + base_ns / 1000.0 < 0)
        bad |= ~(np.abs(alloc) < _MAX_BYTES)
        bad |= np.isfinite(dev) & ((dev > MAX_DEVICE_ID) | (dev < -1))
        if bad.any():
            self.dropped["memory_event_unusable"] += int(bad.sum())
            keep = ~bad
            ts, dtype, dev, alloc, reserved, nbytes = (a[keep] for a in (ts, dtype, dev, alloc, reserved, nbytes))
        types = np.array(T.MEMORY_DEVICE_TYPES, dtype=object)[dtype.astype(np.intp)]
        device = np.where(np.isfinite(dev) & (types != T.MEMORY_CPU), np.nan_to_num(dev, nan=-1.0), -1.0)
        return T.memory_frame({
            "rank": np.zeros(len(ts), dtype=np.int32), "device_type": types, "device": device,
            "ts_ns": us_to_ns(ts) + np.int64(base_ns), "allocated_bytes": alloc,
            "reserved_bytes": np.where(np.abs(reserved) < _MAX_BYTES, reserved, -1.0),
            "bytes": np.where(np.abs(nbytes) < _MAX_BYTES, nbytes, 0.0),
        })

    def _rebuilt_totals(self, ts: np.ndarray, dtype: np.ndarray, dev: np.ndarray, alloc: np.ndarray,
                        nbytes: np.ndarray) -> np.ndarray:
        """`alloc` with the totals that events without `Total Allocated` (PyTorch before 1.10 wrote only
        `Bytes`) leave out rebuilt, when no event of the file has one: per device, in time order, the
        running sum of the sizes, raised so that it never goes below 0 (memory freed that was allocated
        before the capture). Counted in `rebuilt`."""
        rebuilt = ~np.isfinite(alloc) & np.isfinite(nbytes) & (np.abs(nbytes) < _MAX_BYTES) & np.isfinite(ts)
        if not rebuilt.any() or np.isfinite(alloc).any():  # a file with totals: one without is broken, not old
            return alloc
        idx = np.flatnonzero(rebuilt)
        key = dtype[idx].astype(np.int64) * (MAX_DEVICE_ID + 3) + np.clip(np.nan_to_num(dev[idx], nan=-1.0),
                                                                         -2, MAX_DEVICE_ID).astype(np.int64) + 2
        order = np.lexsort((ts[idx], key))
        k, b = key[order], nbytes[idx][order]
        start = np.r_[True, k[1:] != k[:-1]]
        group = np.cumsum(start) - 1
        cums = np.cumsum(b)
        running = cums - (cums - b)[start][group]
        lowest = np.minimum.reduceat(running, np.flatnonzero(start))
        running -= np.minimum(lowest, 0.0)[group]
        out = alloc.copy()
        out[idx[order]] = running
        self.rebuilt = len(idx)
        return out

    def frame(self, base_ns: int) -> pd.DataFrame:
        """The events table: the chunks joined; rows with values no real capture holds dropped and
        counted (times beyond the plausible range only once the base time is known).

        Called once: each column's chunks are released as soon as they are joined, and the joined
        columns are modified in place, so that a GB-size trace's rows are never held twice over
        (on a small machine, zeroing fresh memory is much of what the end of a big read costs)."""
        p: dict[str, np.ndarray] = {}
        for key in list(self.parts):
            chunks = self.parts.pop(key)
            p[key] = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int64)
            del chunks
            return_freed_memory()  # the chunks' pages, before the next column is joined
        n = len(p["ts"])
        cat_codes = p["cat"]
        counts: Any = np.bincount(cat_codes, minlength=len(self.cats.values)) if n else []
        for value, count in zip(self.cats.values, counts):
            if count:
                self.categories[value] += int(count)
        ts = p.pop("ts").astype(np.float64, copy=False)
        dur = p.pop("dur").astype(np.float64, copy=False)
        finite_ts = np.isfinite(ts)
        finite_dur = np.isfinite(dur)
        bad = {  # in this order: a row is counted for its first reason
            "time_out_of_range": finite_ts & (np.abs(ts + base_ns / 1000.0) > MAX_ABS_TIME_US),
            # epoch time before 1970 (no profiler writes one; relative clocks start at 0)
            "time_before_1970": finite_ts & (ts + base_ns / 1000.0 < 0),
            "no_duration": ~finite_dur & finite_ts,
            "duration_out_of_range": finite_dur & (dur > MAX_DURATION_US),
            "id_out_of_range": p["bad_id"].astype(bool),
            "device_id_out_of_range": p["bad_device"].astype(bool),
        }
        drop = np.zeros(n, dtype=bool)
        for reason, mask in bad.items():
            mask &= ~drop
            if mask.any():
                self.dropped[reason] += int(mask.sum())
            drop |= mask
        del bad
        # Times in place: the base added (a dropped row's value may wrap; it is dropped below), a row
        # without a time marked for `_drop_bad`, a missing duration 0.
        ts_ns = p["ts_ns"]
        if base_ns:
            ts_ns += np.int64(base_ns)
        ts_ns[np.isnan(ts)] = np.iinfo(np.int64).min
        dur_ns = p["dur_ns"]
        dur_ns[np.isnan(dur)] = 0
        del ts, dur, finite_ts, finite_dur
        if drop.any():
            keep = ~drop
            p = {key: value[keep] for key, value in p.items()}
        return T.events_frame({
            "ts_ns": p["ts_ns"], "dur_ns": p["dur_ns"],
            "kind": pd.Categorical.from_codes(p["kind"].astype(np.int8, copy=False), categories=T.EVENT_KINDS),
            "name": self.names.categorical(p["name"]),
            "category": self.cats.categorical(p["cat"]),
            "rank": 0, "device": p["device"], "stream": p["stream"], "pid": p["pid"], "tid": p["tid"],
            "step": p["step"], "bytes": p["bytes"],
            "copy_kind": pd.Categorical.from_codes(p["copy_kind"].astype(np.int8, copy=False), categories=T.COPY_KINDS),
            "pinned": p["pinned"], "comm": p["comm"], "correlation": p["correlation"],
            "comm_group": self.groups.categorical(p["group"]),
            "graph_id": p["graph"], "comm_seq": p["comm_seq"], "wait_corr": p["wait_corr"],
            "wait_stream": p["wait_stream"],
        })


_PH, _TS, _DUR, _NAME, _CAT, _PID, _TID, _ARGS = (
    attrgetter(a) for a in ("ph", "ts", "dur", "name", "cat", "pid", "tid", "args"))
_A_DEVICE, _A_STREAM, _A_BYTES, _A_CORRELATION, _A_KIND, _A_COLLECTIVE, _A_ORIGINAL_STREAM, _A_PG_DESC = (
    attrgetter(a) for a in ("device", "stream", "bytes", "correlation", "kind", "collective", "original_stream",
                            "pg_desc"))


def _real_stream(stream: np.ndarray, original: np.ndarray) -> np.ndarray:
    """The stream work ran on: `original_stream` where an export moved it onto a display lane, else `stream`."""
    return np.where(original >= 0, original, stream)


# Bytes per element of the dtypes NCCL kernels record ("dtype" arg, torch's scalar type names).
DTYPE_BYTES = {"Float": 4, "Double": 8, "Half": 2, "BFloat16": 2, "Long": 8, "Int": 4, "Short": 2,
               "Char": 1, "Byte": 1, "Bool": 1, "Float8_e4m3fn": 1, "Float8_e5m2": 1, "ComplexFloat": 8}


MAX_MESSAGE_BYTES = 1 << 50  # a larger message is no real one: left unknown


def _message_bytes(nbytes: np.ndarray, args: list[Any], collective: np.ndarray) -> None:
    """Communication kernels that record their message (`In/Out msg nelems`, `dtype`): its size in
    bytes (the larger of input and output, as collective benchmarks count it) into `nbytes`. Only
    rows flagged `collective` are looked at: a few per step."""
    for i in np.flatnonzero(collective).tolist():
        a = args[i]
        size = DTYPE_BYTES.get(a.dtype) if isinstance(a.dtype, str) else None
        counts = [v for v in (int_or_none(a.in_nelems), int_or_none(a.out_nelems)) if v is not None and v >= 0]
        if size and counts and nbytes[i] < 0 and max(counts) * size < MAX_MESSAGE_BYTES:
            nbytes[i] = max(counts) * size


def _graph_and_seq(args: list[Any]) -> tuple[np.ndarray, np.ndarray]:
    """Each of `args`' CUDA graph id ("graph id", else "graphId"; -1 when absent or not a number)
    and NCCL sequence number ("Seq", else "seq"; -1 likewise)."""
    if not args:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    graph = [_first(getattr(a, "graph_id", None), getattr(a, "graph_id_camel", None)) for a in args]
    seq = [_first(getattr(a, "seq", None), getattr(a, "seq_lower", None)) for a in args]
    out = []
    for values, unsigned in ((graph, True), (seq, False)):  # graph ids are uint64 (kept exact, `to_int_id`)
        if values.count(None) == len(values):
            out.append(np.full(len(values), -1, dtype=np.int64))
        else:
            ids = to_int_id(values, unsigned64=unsigned)
            out.append(np.where(ids == ID_OUT_OF_RANGE, -1, ids))
    return out[0], out[1]


def _sync_waits(args: list[Any]) -> tuple[np.ndarray, np.ndarray]:
    """Each of `args`' event record waited on (its call's correlation, "wait_on_cuda_event_record_corr_id") and
    the stream it was recorded on ("wait_on_stream"); -1 when absent or not a number."""
    out = []
    for key in ("wait_corr", "wait_stream"):
        values = [getattr(a, key, None) for a in args]
        if values.count(None) == len(values):
            out.append(np.full(len(values), -1, dtype=np.int64))
        else:
            ids = to_int_id(values, unsigned64=key == "wait_corr")
            out.append(np.where(ids == ID_OUT_OF_RANGE, -1, ids))
    return out[0], out[1]


def _first(a: Any, b: Any) -> Any:
    return a if a is not None else b


def group_identity(ranks: Any, name: Any) -> str:
    """A collective's process group as one string: its ranks "0,1,2,3" when the trace lists them
    (`Process Group Ranks`, a list or its text "[0, 1, 2, 3]"), else "pg:" + `Process Group Name`,
    else "" (traces before torch 2.1: no group recorded)."""
    items = ranks if isinstance(ranks, list) else (ranks.strip().strip("[]").split(",")
                                                    if isinstance(ranks, str) else None)
    if items:
        numbers = [int_or_none(v) for v in items]
        if all(v is not None and 0 <= v <= MAX_DEVICE_ID for v in numbers):
            return ",".join(str(v) for v in numbers)
    if name is not None and not isinstance(name, (list, dict)) and str(name) != "":
        return "pg:" + str(name)
    return ""


def _group_codes(groups: Interner, args: list[Any]) -> np.ndarray:
    """Interned `group_identity` of each of `args` (None: no args); distinct raw values are
    turned into identities once (a trace repeats a handful of groups)."""
    out = np.zeros(len(args), dtype=np.int32)
    ranks = [getattr(a, "pg_ranks", None) for a in args]
    names = [getattr(a, "pg_name", None) for a in args]
    if ranks.count(None) == len(ranks) and names.count(None) == len(names):
        return out
    seen: dict[tuple[str, str], int] = {}
    for i, (r, n) in enumerate(zip(ranks, names)):
        if r is None and n is None:
            continue
        key = (repr(r), repr(n))
        code = seen.get(key)
        if code is None:
            code = seen[key] = groups.code(group_identity(r, n))
        out[i] = code
    return out


_INSTANT_PHASES = frozenset(("i", "I"))


def _memory_device_type(value: Any) -> int:
    """Index into T.MEMORY_DEVICE_TYPES of a "Device Type" value (a c10 number, or a name)."""
    if isinstance(value, str):
        v = value.strip().lower()
        kind = T.MEMORY_CPU if v == "cpu" else T.MEMORY_GPU if v in ("cuda", "hip", "gpu") else T.MEMORY_OTHER
    else:
        kind = _MEMORY_DEVICE_TYPE.get(int_or_none(value), T.MEMORY_OTHER)  # type: ignore[arg-type]
    return T.MEMORY_DEVICE_TYPES.index(kind)


def _ids(xs: list[Any], get: attrgetter[Any], unsigned64: bool = False) -> np.ndarray:
    """Ids as int64: ints straight through; a chunk with string ids ("Spans", "616") goes the
    way of the loose path (`to_int_id`), which also parses them (and ids beyond int64, `unsigned64`)."""
    try:
        return np.fromiter(map(get, xs), np.int64, count=len(xs))
    except (TypeError, ValueError, OverflowError):
        pass
    values = list(map(get, xs))
    # Usually a handful of strings among ints (the profiler's own "Spans" / "PyTorch Profiler" span):
    # only those parsed, the ints taken as they are.
    is_int = np.fromiter(map(isinstance, values, repeat(int)), bool, count=len(values))
    n_int = int(is_int.sum())
    if (len(values) - n_int) * 8 > len(values):
        return to_int_id(values, unsigned64=unsigned64)
    out = np.empty(len(values), dtype=np.int64)
    try:
        out[is_int] = np.fromiter(compress(values, is_int.tolist()), np.int64, count=n_int)
    except OverflowError:  # an int beyond int64: the loose path marks it
        return to_int_id(values, unsigned64=unsigned64)
    odd = ~is_int
    out[odd] = to_int_id(list(compress(values, odd.tolist())), unsigned64=unsigned64)
    return out


_DUPLICATE_KEY = ["kind", "name", "category", "pid", "tid", "device", "stream", "ts_ns", "dur_ns"]


def _drop_duplicates(events: pd.DataFrame) -> pd.DataFrame:
    """`events.drop_duplicates(subset=_DUPLICATE_KEY, ignore_index=True)`, faster: rows are
    hashed over the key columns, and only rows whose hash occurs twice are compared exactly."""
    n = len(events)
    if n < 2:
        return events.reset_index(drop=True)
    h = np.zeros(n, dtype=np.uint64)
    mult = np.uint64(0x9E3779B97F4A7C15)
    for col in _DUPLICATE_KEY:
        s = events[col]
        values = s.cat.codes.to_numpy() if isinstance(s.dtype, pd.CategoricalDtype) else s.to_numpy()
        h ^= values.astype(np.int64).view(np.uint64)
        h *= mult
        h ^= h >> np.uint64(31)
    # rows whose hash occurs twice or more: one sort (no hash table over millions of rows). All 64
    # bits: with fewer, chance matches among millions of rows are certain, and finding their rows
    # (np.isin over every row) costs more than the shorter sort saves.
    sorted_h = np.sort(h)
    repeated_h = sorted_h[1:][sorted_h[1:] == sorted_h[:-1]]
    del sorted_h
    candidates = np.flatnonzero(np.isin(h, repeated_h)) if len(repeated_h) else np.zeros(0, dtype=np.intp)
    if not len(candidates):
        return events.reset_index(drop=True)
    repeated = events.iloc[candidates][_DUPLICATE_KEY].duplicated(keep="first").to_numpy()
    keep = np.ones(n, dtype=bool)
    keep[candidates[repeated]] = False
    return events[keep].reset_index(drop=True)


def _drop_bad(events: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, int]]:
    ts = events["ts_ns"].to_numpy()
    dur = events["dur_ns"].to_numpy()
    no_ts = ts == np.iinfo(np.int64).min
    negative = (dur < 0) & ~no_ts
    bad = no_ts | negative
    if not bad.any():
        return events, {}
    return (events[~bad].reset_index(drop=True),
            {"no_timestamp": int(no_ts.sum()), "negative_duration": int(negative.sum())})


def gpus_listed(header: dict[str, Any]) -> int:
    """How many GPUs the header lists (deviceProperties, or the legacy computeProperties): the visible
    ones, used or not. What tells a capture cut before its GPU events from one without a GPU."""
    return sum(isinstance(p, dict) for p in _device_properties(header))


def _device_properties(header: dict[str, Any]) -> list[Any]:
    props = header.get("deviceProperties")
    if not isinstance(props, list):
        props = header.get("computeProperties")
    return props if isinstance(props, list) else []


# Header keys ROCm builds of Kineto write (instead of cupti_version / cuda_*_version).
ROCM_HEADER_KEYS = ("roctracer_version", "hip_runtime_version", "hip_driver_version")
HIP_RUNTIME = re.compile(r"^hip(Ext)?(Module)?Launch|^hipMemcpy|^hipMalloc|^hipDeviceSynchronize$")


def gpu_api(header: dict[str, Any], names: list[str]) -> str:
    """"hip" when the trace says its GPUs ran ROCm/HIP: the header's roctracer / hip_* keys (2025+), or HIP
    runtime calls among the event names (older ROCm traces reuse the CUDA categories); "" otherwise."""
    if any(k in header for k in ROCM_HEADER_KEYS):
        return "hip"
    return "hip" if any(HIP_RUNTIME.match(n) for n in names if n[:3] == "hip") else ""


def _odd_device_ids(header: dict[str, Any]) -> list[str]:
    """deviceProperties ids that are no device index (negative, beyond int32, not a whole number)."""
    out = []
    for entry in _device_properties(header):
        if isinstance(entry, dict) and "id" in entry:
            v = int_or_none(entry["id"])
            if v is None or not 0 <= v <= MAX_DEVICE_ID or isinstance(entry["id"], bool):
                out.append(str(entry["id"])[:24])
    return out


def _devices(header: dict[str, Any], events: pd.DataFrame, memory: pd.DataFrame) -> list[DeviceInfo]:
    """GPUs with work or with GPU memory events, with their deviceProperties (name, totalGlobalMem)."""
    by_id: dict[int, dict[str, Any]] = {}
    for entry in _device_properties(header):
        if isinstance(entry, dict) and not isinstance(entry.get("id"), bool):
            v = int_or_none(entry.get("id"))
            if v is not None and 0 <= v <= MAX_DEVICE_ID:
                by_id[v] = entry
    work = T.category_mask(events["kind"], T.GPU_WORK_KINDS)
    gpu_memory = (memory["device_type"] == T.MEMORY_GPU).to_numpy() & (memory["device"].to_numpy() >= 0)
    used = sorted({int(d) for d in np.unique(events["device"].to_numpy()[work])}
                  | {int(d) for d in np.unique(memory["device"].to_numpy()[gpu_memory])})
    out = []
    for d in used:
        entry = by_id.get(d, {})
        name = cut_text(entry["name"], 256) if isinstance(entry.get("name"), str) else ""
        out.append(DeviceInfo(rank=0, index=d, name=name or "", properties={
            cut_text(k, 256): cut_text(v, 1024) if isinstance(v, str) else v
            for k, v in list(entry.items())[:_MAX_PROPERTIES] if isinstance(v, (int, float, str))}))
    return out


_MAX_PROPERTIES = 64  # deviceProperties keys kept per device
_MAX_BYTES = 9e18  # memory sizes beyond int64 (or not finite) are no sizes

# Header keys a trace may name its machine under (torch.profiler's add_metadata_json lets a job add one).
HOST_KEYS = ("hostname", "hostName", "host_name", "host")
# torch.profiler.tensorboard_trace_handler's default file name: "<hostname>_<pid>.<time>.pt.trace.json".
HANDLER_FILE_NAME = re.compile(r"^(?P<host>[A-Za-z0-9][A-Za-z0-9.-]*)_\d+\.\d+\.pt\.trace\.json(\.gz)?$")
MAX_HOST_CHARS = 255  # a DNS name's limit


def host_of(header: dict[str, Any], path: Path) -> str | None:
    """The machine a trace was taken on: a host key of the header, else the trace handler's default
    file name; None when neither says (ranks of unknown hosts are placed on one clock by collectives)."""
    for key in HOST_KEYS:
        value = header.get(key)
        if isinstance(value, str) and 0 < len(value.strip()) <= MAX_HOST_CHARS:
            return value.strip()
    m = HANDLER_FILE_NAME.match(path.name)
    return m.group("host")[:MAX_HOST_CHARS] if m else None


def _phase_reason(ph: Any) -> str:
    if ph == "M":
        return "metadata"
    if ph in ("i", "I"):
        return "instant"
    if ph in _FLOW_PHASES:
        return "flow"
    if ph == "C":
        return "counter"
    return f"phase_{str(ph)[:32]}"


def _step_number(name: str) -> int:
    m = STEP_NAME.match(name)
    if not m:
        return -1
    return int(m.group(1)) if len(m.group(1)) <= 18 else MAX_STEP_NUMBER + 1


def _copy_direction(name: str) -> str:
    m = MEMCPY_DIRECTION.search(name)
    return m.group(1) if m else ""


def _pinned(name: str) -> int:
    if "Pinned" in name:
        return 1
    if "Pageable" in name:
        return 0
    return -1


def _is_comm_name(name: str) -> bool:
    return is_comm_kernel(name)
