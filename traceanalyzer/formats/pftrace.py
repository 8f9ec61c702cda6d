"""Reader for Perfetto protobuf traces (`.pftrace`, `.perfetto-trace`; gzip or not), as PyTorch's
Perfetto backend and Kineto's `PerfettoTraceBuilder` write them.

A trace is a `Trace` message: repeated `TracePacket`s. Track descriptors say what a track is (a
process: pid, name, labels; a thread: pid, tid, name; a counter; or a named child track, whose events
belong to the thread or process above it); track events are slice begin / end pairs, instants and
counter values, with their names, categories and debug-annotation names interned per packet sequence
(`InternedData`, reset when `sequence_flags` says the incremental state was cleared). Debug annotations
carry the Kineto args (device, stream, correlation, External id, bytes...), typed or as one JSON
"metadata" string (Kineto's builder); `flow_ids` / `terminating_flow_ids` are the flow arrows.
Instants named "trace_metadata" / "device_properties" carry the JSON header's keys. PyTorch's encoder
writes each group of slices as all its begins, then all its ends (`pair_slices`), no categories (they
are inferred from the args, `infer_category`), and its GPU hardware counters as GpuCounterEvents
(read as the samples of the JSON export's "GPU N Counters" process).

The events are turned into the Kineto JSON event model (`kineto_columns`) and handed to the Kineto reader
as its event structs (`kineto.timeline_from_events`; `kineto_document` writes them as a JSON document):
one mapping of categories and args to Timeline kinds and columns for both formats, so a trace read
from `.pftrace` gives the figures of the same trace read from JSON. Slice begins and ends are paired
with array operations (`pair_columns`). Timestamps are absolute nanoseconds; they reach the Kineto
reader relative to a base time, so no nanosecond is lost.
Decoding is `_perfetto_pb`'s (our own wire-format walker): damage raises an `InputError` with the
byte offset and what was expected; a file cut inside its last packet is read up to the cut, with a
warning. Packet compression: deflate (`compressed_packets`) is read within the input limit; zstd is not.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
import zlib
from collections import Counter
from itertools import repeat
from operator import is_, is_not
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from .. import timeline as T
from ..errors import InputError
from ..timeline import Timeline
from . import kineto, pftrace_vec
from ._base import MAX_DEVICE_INDEX, ReadOptions
from ._perfetto_pb import (
    LEN,
    SEQ_INCREMENTAL_STATE_CLEARED,
    SEQ_NEEDS_INCREMENTAL_STATE,
    TYPE_COUNTER,
    TYPE_INSTANT,
    TYPE_SLICE_BEGIN,
    TYPE_SLICE_END,
    VARINT,
    WireError,
    int32_unwrapped,
    packed,
    read_varint,
    scan,
    signed32,
    signed64,
    text,
)

FORMAT = "pftrace"
KIND = "trace"  # registry.KINDS: what its files are in a job

# Instants that carry the JSON header (Kineto's builder: one per metadata key; the device properties).
METADATA_EVENT = "trace_metadata"
DEVICE_PROPERTIES_EVENT = "device_properties"
# Debug annotations of Kineto's builder: the activity's args as one JSON text, and its correlation.
METADATA_ANNOTATION = "metadata"
CORRELATION_ANNOTATION = "correlation_id"

MAX_NESTING = 32  # debug annotations nested deeper than this are damage (Kineto args nest 2 levels)
MAX_TRACK_DEPTH = 64  # parent links followed from a track (a cycle or a deeper chain stops there)
MAX_HEADER_KEYS = 1024  # metadata instants kept as header keys
_EPOCH_NS_FLOOR = 10**18  # the Kineto reader's test for epoch times (median ts > 1e15 us)
_MAX_BASE_NS = 7 * 10**18  # a base time the Kineto reader accepts (below the year 2200)

# Field numbers (see _perfetto_pb.SCHEMA; named here for the packet loop).
_P_TIMESTAMP, _P_SEQ, _P_EVENT, _P_INTERNED, _P_FLAGS, _P_CLEARED = 8, 10, 11, 12, 13, 41
_P_DEFAULTS, _P_DESCRIPTOR, _P_THREAD, _P_COMPRESSED, _P_ZSTD = 59, 60, 44, 50, 133
_P_GPU_COUNTERS, _P_RENDER_STAGE = 52, 53
# Chrome's legacy events (TrackEvent.legacy_event): JSON phases as track-event types; X is complete.
_LEGACY_COMPLETE = -1
_LEGACY_TYPES = {ord("B"): TYPE_SLICE_BEGIN, ord("E"): TYPE_SLICE_END, ord("I"): TYPE_INSTANT, ord("i"): TYPE_INSTANT,
                 ord("n"): TYPE_INSTANT}
# The process a GPU's hardware counters belong to, as in the JSON export ("GPU N Counters").
GPU_COUNTERS_PROCESS = "GPU {} Counters"

# What the first packet of a Perfetto trace holds, and no XSpace plane does (an XSpace also starts
# with field 1, length-delimited), with the wire type each has: timestamp, sequence id, track event /
# descriptor, interned data, sequence flags, trace config, synchronization marker, process / thread
# descriptor, compressed packets, clock id, packet defaults.
_PERFETTO_FIELDS = {8: VARINT, 10: VARINT, 11: LEN, 12: LEN, 13: VARINT, 33: LEN, 36: LEN, 41: VARINT, 43: LEN,
                    44: LEN, 50: LEN, 52: LEN, 53: LEN, 58: VARINT, 59: LEN, 60: LEN, 133: LEN}


def sniff(head: bytes) -> bool:
    """A `Trace`: field 1 length-delimited, whose first packet's fields are well formed, include one only
    a TracePacket has, and have a TracePacket's wire types."""
    if head[:1] != b"\x0a":
        return False
    numbers: set[int] = set()
    try:
        length, pos = read_varint(head, 1, min(len(head), 11))
        end = min(pos + length, len(head))
        while pos < end:
            tag, pos = read_varint(head, pos, end)
            number, wire = tag >> 3, tag & 7
            if number == 0 or wire not in (0, 1, 2, 5) or _PERFETTO_FIELDS.get(number, wire) != wire:
                return False
            numbers.add(number)
            if wire == VARINT:
                _, pos = read_varint(head, pos, end)
            elif wire == LEN:
                n, pos = read_varint(head, pos, end)
                pos += n
            else:
                pos += 8 if wire == 1 else 4
    except WireError:
        pass  # the head ends inside the packet: judged on the fields seen
    return bool(numbers & _PERFETTO_FIELDS.keys())


@dataclasses.dataclass
class _Track:
    parent: int = 0
    name: str | None = None
    pid: int | None = None
    process_name: str | None = None
    labels: list[str] = dataclasses.field(default_factory=list)
    process_sort: int | None = None
    is_process: bool = False
    is_thread: bool = False
    thread_pid: int | None = None
    tid: int | None = None
    thread_name: str | None = None
    thread_sort: int | None = None
    is_counter: bool = False
    incremental: bool = False  # counter values are deltas, summed per packet sequence


_GENERATIONS = itertools.count()
_ANNOTATION_CACHE_SIZE = 65536  # decoded annotations kept by their bytes (most repeat: device, stream...)


class SequenceState:
    """Incremental state of one packet sequence (`trusted_packet_sequence_id`)."""

    def __init__(self) -> None:
        self.clear()
        self.valid = False
        self.thread: tuple[int, int] | None = None  # legacy: the sequence's own thread descriptor

    def clear(self) -> None:
        self.generation = next(_GENERATIONS)  # decoded annotations are cached per generation of state
        self.names: dict[int, str] = {}
        self.cats: dict[int, str] = {}
        self.ann_names: dict[int, str] = {}
        self.strings: dict[int, str] = {}
        self.gpu_counters: dict[int, tuple[int | None, dict[int, str]]] = {}  # iid -> (gpu, counter names)
        self.default_track: int | None = None
        self.valid = True


# One decoded event: (order, ph, name, cat, track key, ts ns, dur ns, args, flow id)
_Event = tuple[int, str, str, "str | None", Any, int, int, "dict[str, Any] | None", int]


@dataclasses.dataclass
class SliceColumns:
    """Slice events as columns, one row each: begins and ends (`is_begin`), or, once paired, complete
    events (`dur`). Times are nanoseconds as written (uint64), `track` a code of the decoder's track keys."""

    is_begin: np.ndarray  # bool
    ts: np.ndarray  # uint64
    order: np.ndarray  # int64: where the event stands among all events
    track: np.ndarray  # int64: index into PacketDecoder.track_keys
    name: np.ndarray  # object: str
    cat: np.ndarray  # object: str | None
    args: np.ndarray  # object: dict | None
    dur: np.ndarray  # uint64 (complete events; 0 before pairing)

    @classmethod
    def empty(cls) -> SliceColumns:
        return cls.of(np.zeros(0, bool), np.zeros(0, np.uint64), np.zeros(0, np.int64), np.zeros(0, np.int64),
                      [], [], [])

    @classmethod
    def of(cls, is_begin: np.ndarray, ts: np.ndarray, order: np.ndarray, track: np.ndarray, name: Any, cat: Any,
           args: Any) -> SliceColumns:
        def obj(values: Any) -> np.ndarray:
            return values if isinstance(values, np.ndarray) else pftrace_vec.object_array(values)

        return cls(is_begin, ts.astype(np.uint64, copy=False), order.astype(np.int64, copy=False),
                   track.astype(np.int64, copy=False), obj(name), obj(cat), obj(args), np.zeros(len(ts), np.uint64))

    def __len__(self) -> int:
        return len(self.ts)

    def take(self, rows: np.ndarray) -> SliceColumns:
        return SliceColumns(*(getattr(self, f.name)[rows] for f in dataclasses.fields(self)))

    @classmethod
    def concat(cls, parts: list[SliceColumns]) -> SliceColumns:
        if len(parts) == 1:
            return parts[0]
        if not parts:
            return cls.empty()
        return SliceColumns(*(np.concatenate([getattr(p, f.name) for p in parts]) for f in dataclasses.fields(cls)))


@dataclasses.dataclass
class FlowColumns:
    """Flow ids met on events (`flow_ids`, `terminating_flow_ids`) as columns, one row each; `phase` the
    JSON phase each stands for once all are known (`finish`)."""

    order: np.ndarray  # int64: the order of the event it is on
    is_end: np.ndarray  # bool
    track: np.ndarray  # int64: index into PacketDecoder.track_keys
    ts: np.ndarray  # uint64
    fid: np.ndarray  # uint64
    phase: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, object))  # "s", "t", "f"

    @classmethod
    def empty(cls) -> FlowColumns:
        return cls(np.zeros(0, np.int64), np.zeros(0, bool), np.zeros(0, np.int64), np.zeros(0, np.uint64),
                   np.zeros(0, np.uint64))

    def take(self, rows: np.ndarray) -> FlowColumns:
        return FlowColumns(self.order[rows], self.is_end[rows], self.track[rows], self.ts[rows], self.fid[rows])


class PacketDecoder:
    def __init__(self, path: Path, max_bytes: int) -> None:
        self.path = path
        self.budget = max_bytes  # bytes compressed packets may still inflate to
        self.tracks: dict[int, _Track] = {}
        self.sequences: dict[int, SequenceState] = {}
        # the events that are no slice begin / end (instants, counters, Chrome's complete events, flows)
        self.others: list[_Event] = []
        # slice begins / ends the walker met, per track, in file order: (is begin, ts, order, name, cat, args);
        # the vectorized decoder adds its own as columns (`slice_chunks`); all paired in `finish`, by track and order
        self.slices: dict[Any, list[tuple[bool, int, int, str, str | None, dict[str, Any] | None]]] = {}
        self.slice_chunks: list[SliceColumns] = []
        self.track_codes: dict[Any, int] = {}  # track key -> code in the slice columns
        self.track_keys: list[Any] = []
        self.complete = SliceColumns.empty()  # the paired slices (`finish`), complete events in columns
        # flow ids met (order, is an end, track, ts, id) and metadata instants (order, name, args), taken in
        # order in `finish` (the vectorized decoder adds them out of file order)
        self.flow_items: list[tuple[int, bool, Any, int, int]] = []
        self.flow_chunks: list[FlowColumns] = []  # the vectorized decoder's flow ids
        self.flows = FlowColumns.empty()  # all of them, in order, with their phases (`finish`)
        self.header_items: list[tuple[int, str, dict[str, Any]]] = []
        # what the vectorized decoder (`pftrace_vec`) needs of the packets it leaves to `packet`: when each
        # sequence's state was cleared, and what was interned or made the default track, by packet index
        self.recording = False
        self.at_packet = 0
        self.cleared: list[tuple[int, int, int]] = []  # (sequence id, packet, generation)
        self.interned: list[tuple[int, int, int, int, str]] = []  # (table, generation, iid, packet, value)
        self.defaults: list[tuple[int, int, int]] = []  # (generation, packet, track uuid)
        self.header: dict[str, Any] = {}
        self.not_kept: Counter[str] = Counter()
        self.warnings: list[str] = []
        self.order = 0
        self.packets = 0
        self.inflating = False
        self.counter_sums: dict[tuple[int, Any], int | float] = {}  # incremental counters' running sums
        self.inline_counters: dict[int | None, dict[int, str]] = {}  # GPU counter names given inline, by GPU
        # (state generation, annotation bytes) -> (key, value); values are shared, never modified
        self.annotations: dict[tuple[int, bytes], tuple[str, Any]] = {}

    # --- packets ---------------------------------------------------------------------------------

    def trace(self, buf: bytes, where: str = "") -> None:
        """Every packet of a Trace in `buf`; a cut inside the last one ends the trace with a warning."""
        pos, end = 0, len(buf)
        while pos < end:
            tag_at = pos
            try:
                tag, pos = read_varint(buf, pos, end)
                if tag != (1 << 3 | LEN):
                    raise WireError(tag_at, f"tag {tag} (field {tag >> 3}, wire type {tag & 7}): expected field 1 "
                                            f"(a length-delimited TracePacket) at the top level of a Perfetto trace")
                length, pos = read_varint(buf, pos, end)
            except WireError as exc:
                if pos >= end or "cut off" in exc.what:
                    self._truncated(tag_at, end, where)
                    return
                raise
            if pos + length > end:
                self._truncated(tag_at, end, where)
                return
            self.packet(buf, pos, pos + length)
            pos += length

    def _truncated(self, at: int, end: int, where: str) -> None:
        self.warnings.insert(0, f"TRUNCATED: the trace{where} ends inside the packet starting at byte {at} "
                                f"({end - at} bytes of it present); the {self.packets} complete packets before the "
                                f"cut were read and analysed, everything after it is missing "
                                f"(was the profiler killed?)")

    def packet(self, buf: bytes, start: int, end: int, with_event: bool = True) -> None:
        """One packet; without `with_event`, its track event is left out (the vectorized decoder reads it)."""
        self.packets += 1
        fields = scan(buf, start, end, "TracePacket")
        ts = 0
        seq_id = 0
        flags = 0
        event = interned = defaults = descriptor = thread = gpu_counters = None
        for number, value, at in fields:
            if number == _P_TIMESTAMP:
                ts = value
            elif number == _P_SEQ:
                seq_id = value
            elif number == _P_EVENT:
                event = value
            elif number == _P_INTERNED:
                interned = value
            elif number == _P_FLAGS:
                flags |= value
            elif number == _P_CLEARED:
                flags |= SEQ_INCREMENTAL_STATE_CLEARED if value else 0
            elif number == _P_DEFAULTS:
                defaults = value
            elif number == _P_DESCRIPTOR:
                descriptor = value
            elif number == _P_THREAD:
                thread = value
            elif number == _P_COMPRESSED:
                self._compressed(buf, value, at)
            elif number == _P_ZSTD:
                self.not_kept["zstd_compressed_packets"] += 1
            elif number == _P_GPU_COUNTERS:
                gpu_counters = value
            elif number == _P_RENDER_STAGE:  # PyTorch also writes each GPU op as a slice: those are read
                self.not_kept["gpu_render_stage_event"] += 1
        if not with_event:
            event = None
        seq = self.sequences.get(seq_id)
        if seq is None:
            seq = self.sequences[seq_id] = SequenceState()
        if flags & SEQ_INCREMENTAL_STATE_CLEARED:
            seq.clear()
            if self.recording:
                self.cleared.append((seq_id, self.at_packet, seq.generation))
        if descriptor is not None:
            self._descriptor(buf, descriptor)
        if thread is not None:
            t = _thread_fields(buf, thread)
            seq.thread = (t.get("pid", 0), t.get("tid", 0))
        if (flags & SEQ_NEEDS_INCREMENTAL_STATE) and not seq.valid:
            if event is not None:
                self.not_kept["incremental_state_lost"] += 1
            return
        if interned is not None:
            self._interned(buf, interned, seq)
        if defaults is not None:
            for number, value, _ in scan(buf, defaults[0], defaults[1], "TracePacketDefaults"):
                if number == 11:
                    for n2, v2, _ in scan(buf, value[0], value[1], "TrackEventDefaults"):
                        if n2 == 11:
                            seq.default_track = v2
                            if self.recording:
                                self.defaults.append((seq.generation, self.at_packet, v2))
        if event is not None:
            self._event(buf, event, seq, seq_id, ts)
        if gpu_counters is not None:
            self._gpu_counters(buf, gpu_counters, seq, ts)

    def _compressed(self, buf: bytes, span: tuple[int, int], at: int) -> None:
        """Packets deflated into one field (Perfetto's packet compression), inflated within the input limit."""
        if self.inflating:
            raise WireError(at, "compressed packets inside compressed packets (Perfetto never nests them)")
        raw = bytes(buf[span[0]:span[1]])
        for wbits in (15, -15):  # a zlib stream, or raw deflate
            d = zlib.decompressobj(wbits=wbits)
            try:
                inner = d.decompress(raw, self.budget + 1)
            except zlib.error:
                continue
            if len(inner) > self.budget or d.unconsumed_tail:
                raise InputError(self.path, f"compressed packets at byte {at} inflate to more than the input limit "
                                            f"({self.budget} bytes left)")
            self.budget -= len(inner)
            self.inflating = True
            try:
                self.trace(inner, where=f"'s compressed packets at byte {at}")
            except WireError as exc:
                raise WireError(at, f"inside the compressed packets starting here, at their byte {exc.offset}: "
                                    f"{exc.what}") from None
            finally:
                self.inflating = False
            return
        raise WireError(at, "compressed packets that are not deflate data")

    # --- descriptors and interning ---------------------------------------------------------------

    def _descriptor(self, buf: bytes, span: tuple[int, int]) -> None:
        fields = scan(buf, span[0], span[1], "TrackDescriptor")
        uuid = next((v for n, v, _ in fields if n == 1), None)
        if uuid is None:
            self.not_kept["track_without_uuid"] += 1
            return
        track = self.tracks.get(uuid)
        if track is None:
            track = self.tracks[uuid] = _Track()
        for number, value, _ in fields:
            if number == 5:
                track.parent = value
            elif number in (2, 10):
                track.name = text(buf, value)
            elif number == 3:
                track.is_process = True
                for n2, v2, _ in scan(buf, value[0], value[1], "ProcessDescriptor"):
                    if n2 == 1:
                        track.pid = int32_unwrapped(v2)
                    elif n2 == 6:
                        track.process_name = text(buf, v2)
                    elif n2 == 8:
                        track.labels.append(text(buf, v2))
                    elif n2 == 3:
                        track.process_sort = signed32(v2)
            elif number == 4:
                track.is_thread = True
                t = _thread_fields(buf, value)
                track.thread_pid = t.get("pid")
                track.tid = t.get("tid")
                track.thread_name = t.get("thread_name")
                track.thread_sort = t.get("legacy_sort_index")
            elif number == 8:
                track.is_counter = True
                track.incremental = any(n2 == 5 and v2 for n2, v2, _ in
                                        scan(buf, value[0], value[1], "CounterDescriptor"))

    def _interned(self, buf: bytes, span: tuple[int, int], seq: SequenceState) -> None:
        tables = {1: ("EventCategory", seq.cats), 2: ("EventName", seq.names),
                  3: ("DebugAnnotationName", seq.ann_names), 29: ("InternedString", seq.strings)}
        recording = self.recording
        for number, value, _ in scan(buf, span[0], span[1], "InternedData"):
            if number == 47:
                iid, gpu, names = 0, None, {}
                for n2, v2, _ in scan(buf, value[0], value[1], "InternedGpuCounterDescriptor"):
                    if n2 == 1:
                        iid = v2
                    elif n2 == 3:
                        gpu = int32_unwrapped(v2)
                    else:
                        names = _counter_names(buf, v2)
                seq.gpu_counters[iid] = (gpu, names)
                continue
            message, table = tables[number]
            iid, name = 0, ""
            for n2, v2, _ in scan(buf, value[0], value[1], message):
                if n2 == 1:
                    iid = v2
                else:
                    name = text(buf, v2)
            table[iid] = name
            if recording:
                self.interned.append((number, seq.generation, iid, self.at_packet, name))

    def _gpu_counters(self, buf: bytes, span: tuple[int, int], seq: SequenceState, ts: int) -> None:
        """A GpuCounterEvent (PyTorch's hardware counters): one counter sample per value, on the GPU's
        counter process, named by the (interned or inline) descriptor."""
        gpu: int | None = None
        names: dict[int, str] | None = None
        samples: list[tuple[int, int | float]] = []
        for number, value, _ in scan(buf, span[0], span[1], "GpuCounterEvent"):
            if number == 3:
                gpu = int32_unwrapped(value)
            elif number == 4:
                found = seq.gpu_counters.get(value)
                if found is None:
                    self.not_kept["unknown_interned_counter_descriptor"] += 1
                else:
                    gpu = found[0] if gpu is None else gpu
                    names = found[1]
            elif number == 1:
                names = _counter_names(buf, value)
                self.inline_counters[gpu] = names
            elif number == 2:
                cid = 0
                sample: int | float | None = None
                for n2, v2, _ in scan(buf, value[0], value[1], "GpuCounter"):
                    if n2 == 1:
                        cid = v2
                    elif n2 == 2:
                        sample = signed64(v2)
                    else:
                        sample = v2
                if sample is not None:
                    samples.append((cid, sample))
        if names is None:
            names = self.inline_counters.get(gpu) or self.inline_counters.get(None) or {}
        gpu = gpu if gpu is not None else 0
        if gpu > MAX_DEVICE_INDEX:  # beyond int32: no GPU's (never wrapped onto another)
            self.not_kept["gpu_id_out_of_range"] += len(samples)
            return
        for cid, sample in samples:
            order = self.order
            self.order += 1
            self.others.append((order, "C", names.get(cid, f"counter {cid}"), None, ("gpu", gpu), ts, 0,
                                {"": sample}, 0))

    # --- events ----------------------------------------------------------------------------------

    def _event(self, buf: bytes, span: tuple[int, int], seq: SequenceState, seq_id: int, ts: int) -> None:
        typ = 0
        track: Any = None
        name: str | None = None
        cats: list[str] = []
        annotations: list[tuple[int, int]] = []
        counter: int | float | None = None
        flows: list[int] = []
        ends: list[int] = []
        correlation = None
        legacy_phase: int | None = None
        legacy_dur = 0
        for number, value, at in scan(buf, span[0], span[1], "TrackEvent"):
            if number == 9:
                typ = value
            elif number == 11:
                track = value
            elif number == 23:
                name = text(buf, value)
            elif number == 10:
                name = seq.names.get(value)
                if name is None:
                    self.not_kept["unknown_interned_name"] += 1
                    name = ""
            elif number == 22:
                cats.append(text(buf, value))
            elif number == 3:
                for iid in packed(buf, value, VARINT, at):
                    cat = seq.cats.get(iid)
                    if cat is None:
                        self.not_kept["unknown_interned_category"] += 1
                    else:
                        cats.append(cat)
            elif number == 4:
                annotations.append(value)
            elif number == 30:
                counter = signed64(value)
            elif number == 44:
                counter = value
            elif number in (47, 36):
                flows.extend(packed(buf, value, VARINT if number == 36 else 1, at))
            elif number in (48, 42):
                ends.extend(packed(buf, value, VARINT if number == 42 else 1, at))
            elif number == 52:
                correlation = value
            elif number == 6:  # Chrome's legacy form: a JSON phase, a duration in us
                for n2, v2, _ in scan(buf, value[0], value[1], "LegacyEvent"):
                    if n2 == 1 and name is None:
                        name = seq.names.get(v2, "")
                    elif n2 == 2:
                        legacy_phase = signed32(v2)
                    elif n2 == 3:
                        legacy_dur = signed64(v2)
        if typ == 0 and legacy_phase is not None:
            typ = _LEGACY_TYPES.get(legacy_phase, 0)
            if legacy_phase == ord("X"):
                typ = _LEGACY_COMPLETE
        if track is None:
            track = seq.default_track
        if track is None:
            track = ("sequence", seq_id)
        if typ == TYPE_SLICE_END:
            end_args = self._args(buf, annotations, seq) if annotations else None
            self.slices.setdefault(track, []).append((False, ts, self.order, "", None, end_args))
            return
        args = self._args(buf, annotations, seq) if annotations else None
        if correlation is not None:
            args = args if args is not None else {}
            args.setdefault("correlation", correlation)
        cat = ",".join(cats) if cats else None
        name = name if name is not None else ""
        order = self.order
        self.order += 1
        if typ == TYPE_SLICE_BEGIN:
            self.slices.setdefault(track, []).append((True, ts, order, name, cat, args))
        elif typ == _LEGACY_COMPLETE:
            self.others.append((order, "X", name, cat, track, ts, legacy_dur * 1000, args, 0))
        elif typ == TYPE_INSTANT:
            if name in (METADATA_EVENT, DEVICE_PROPERTIES_EVENT) and args:
                self.header_items.append((order, name, args))
                return
            self.others.append((order, "i", name, cat, track, ts, 0, args, 0))
        elif typ == TYPE_COUNTER:
            if counter is None:
                self.not_kept["counter_without_value"] += 1
            else:
                desc = self.tracks.get(track) if not isinstance(track, tuple) else None
                if desc is not None and desc.incremental:  # a delta: the sum since the state was cleared
                    key = (seq.generation, track)
                    counter = self.counter_sums[key] = self.counter_sums.get(key, 0) + counter
                self.others.append((order, "C", name, cat, track, ts, 0, {"": counter}, 0))
        else:
            self.not_kept["track_event_type_unspecified" if typ == 0 else "track_event_type_unknown"] += 1
        for fid in flows:
            self.flow_items.append((order, False, track, ts, fid))
        for fid in ends:
            self.flow_items.append((order, True, track, ts, fid))

    def _args(self, buf: bytes, spans: list[tuple[int, int]], seq: SequenceState) -> dict[str, Any]:
        args: dict[str, Any] = {}
        cache = self.annotations
        generation = seq.generation
        for span in spans:
            raw = buf[span[0]:span[1]]
            found = cache.get((generation, raw))
            if found is None:
                if len(cache) >= _ANNOTATION_CACHE_SIZE:
                    cache.clear()
                found = cache[(generation, raw)] = self._annotation(buf, span, seq, 0)
            args[found[0]] = found[1]
        return kineto_args(args)

    def _annotation(self, buf: bytes, span: tuple[int, int], seq: SequenceState, depth: int) -> tuple[str, Any]:
        if depth > MAX_NESTING:
            raise WireError(span[0], f"debug annotations nested deeper than {MAX_NESTING} levels")
        key = ""
        value: Any = None
        entries: dict[str, Any] | None = None
        items: list[Any] | None = None
        for number, v, _ in scan(buf, span[0], span[1], "DebugAnnotation"):
            if number == 10:
                key = text(buf, v)
            elif number == 1:
                key = seq.ann_names.get(v, "")
            elif number == 2:
                value = bool(v)
            elif number in (3, 7):
                value = v
            elif number == 4:
                value = signed64(v)
            elif number == 5:
                value = v
            elif number == 6:
                value = text(buf, v)
            elif number == 17:
                value = seq.strings.get(v, "")
            elif number == 9:
                raw = text(buf, v)
                try:
                    value = msgspec.json.decode(raw)
                except msgspec.DecodeError:
                    value = raw
            elif number == 11:
                k, sub = self._annotation(buf, v, seq, depth + 1)
                entries = entries if entries is not None else {}
                entries[k] = sub
            elif number == 12:
                items = items if items is not None else []
                items.append(self._annotation(buf, v, seq, depth + 1)[1])
        if entries is not None:
            value = entries
        elif items is not None:
            value = items
        return key, value

    def _header(self, name: str, args: dict[str, Any]) -> None:
        if name == DEVICE_PROPERTIES_EVENT:
            props = args.get("properties")
            if isinstance(props, str):  # Kineto writes the device objects comma-separated, no brackets
                parsed = json_value("[" + props + "]")
                if isinstance(parsed, list):
                    self.header["deviceProperties"] = parsed
            return
        for key, value in args.items():
            if len(self.header) >= MAX_HEADER_KEYS:
                self.not_kept["metadata_key"] += 1
                continue
            self.header[key] = json_value(value) if isinstance(value, str) else value

    # --- the end -----------------------------------------------------------------------------------

    def finish(self) -> None:
        """Begins and ends paired into complete events, track by track (`pair_slices`)."""
        self.header_items.sort(key=lambda h: h[0])
        for _, name, header_args in self.header_items:
            self._header(name, header_args)
        self.header_items.clear()
        self.flows = self._flow_columns()
        cols = self._slice_columns()
        by_track = np.lexsort((cols.order, cols.track))  # the walker's ends carry the next event's order: stable
        begins, ends, unended, unbegun = pair_columns(cols.is_begin[by_track], cols.ts[by_track], cols.track[by_track])
        begins, ends = by_track[begins], by_track[ends]
        in_order = np.argsort(cols.order[begins], kind="stable")
        begins, ends = begins[in_order], ends[in_order]
        done = cols.take(begins)
        done.dur = cols.ts[ends] - done.ts
        end_args = cols.args[ends]
        given = np.flatnonzero(np.fromiter(map(is_not, end_args, repeat(None)), bool, count=len(end_args)))
        for i in given.tolist():  # args given at the end count too
            done.args[i] = {**(done.args[i] or {}), **end_args[i]}
        self.complete = done
        if unended:
            self.not_kept["slice_not_ended"] += unended
            self.warnings.append(f"{unended} slices begun but never ended (no end event on their track): not kept")
        if unbegun:
            self.not_kept["slice_end_without_begin"] += unbegun

    def track_code(self, key: Any) -> int:
        """The code of a track key (a track uuid, or ("sequence", id)) in the slice columns."""
        code = self.track_codes.get(key)
        if code is None:
            code = self.track_codes[key] = len(self.track_keys)
            self.track_keys.append(key)
        return code

    def _flow_columns(self) -> FlowColumns:
        """Every flow id met, in order, with its phase: an end "f"; a flow's first id starts it ("s"), the ids
        after it step it ("t") until an end (the id may then start a new flow)."""
        parts = list(self.flow_chunks)
        if self.flow_items:
            order, is_end, track, ts, fid = zip(*self.flow_items)
            parts.insert(0, FlowColumns(np.array(order, np.int64), np.array(is_end, bool),
                                        np.array([self.track_code(t) for t in track], np.int64),
                                        np.array(ts, np.uint64), np.array(fid, np.uint64)))
        self.flow_items.clear()
        self.flow_chunks.clear()
        if not parts:
            return FlowColumns.empty()
        flows = FlowColumns(*(np.concatenate([getattr(p, name) for p in parts])
                              for name in ("order", "is_end", "track", "ts", "fid")))
        flows = flows.take(np.argsort(flows.order, kind="stable"))
        by_id = np.lexsort((np.arange(len(flows.fid)), flows.fid))
        ids, ends = flows.fid[by_id], flows.is_end[by_id]
        step = np.r_[False, (ids[1:] == ids[:-1]) & ~ends[:-1]] & ~ends  # the id's last before it started
        phase = np.where(flows.is_end, "f", "s").astype(object)
        phase[by_id[step]] = "t"
        flows.phase = phase
        return flows

    def _slice_columns(self) -> SliceColumns:
        """Every slice begin and end: the walker's, track by track, then the vectorized decoder's."""
        parts = []
        for track, items in self.slices.items():
            is_begin, ts, order, name, cat, args = zip(*items)
            parts.append(SliceColumns.of(np.array(is_begin, bool), np.array(ts, np.uint64), np.array(order, np.int64),
                                         np.full(len(items), self.track_code(track), np.int64), name, cat, args))
        self.slices.clear()
        cols = SliceColumns.concat(parts + self.slice_chunks)
        self.slice_chunks.clear()
        return cols

    @property
    def events(self) -> list[_Event]:
        """Every event as a tuple, the flows and the complete ones from paired slices included (`finish`), in
        no set order."""
        c = self.complete
        keys = self.track_keys
        f = self.flows
        flows = list(zip(f.order.tolist(), f.phase.tolist(), repeat(""), repeat(None),
                         [keys[t] for t in f.track.tolist()], f.ts.tolist(), repeat(0), repeat(None), f.fid.tolist()))
        return self.others + flows + list(zip(c.order.tolist(), repeat("X"), c.name.tolist(), c.cat.tolist(),
                                      [keys[t] for t in c.track.tolist()], c.ts.tolist(), c.dur.tolist(),
                                      c.args.tolist(), repeat(0)))

    def owner(self, key: Any, cache: dict[Any, tuple[Any, Any]]) -> tuple[Any, Any]:
        """(pid, tid) of the events of a track: the thread above it, else the closest named track below
        the process (its name is the tid, a string), else the process itself."""
        found = cache.get(key)
        if found is not None:
            return found
        if isinstance(key, tuple) and key[0] == "gpu":  # a GPU's hardware counters
            return GPU_COUNTERS_PROCESS.format(key[1]), 0
        if isinstance(key, tuple):  # no track: the sequence's own thread, if it named one
            seq = self.sequences.get(key[1])
            out: tuple[Any, Any] = seq.thread if seq is not None and seq.thread is not None else (-1, -1)
            cache[key] = out
            return out
        pid: Any = None
        tid: Any = None
        named: str | None = None
        uuid = key
        seen: set[int] = set()
        for _ in range(MAX_TRACK_DEPTH):
            track = self.tracks.get(uuid)
            if track is None or uuid in seen:
                break
            seen.add(uuid)
            if track.is_thread and tid is None:
                tid = track.tid if track.tid is not None else -1
                if track.thread_pid is not None:
                    pid = track.thread_pid
            if track.is_process:
                if pid is None:
                    pid = track.pid if track.pid is not None else (track.name or track.process_name or "")
                break
            if not track.is_thread and tid is None and named is None and uuid != key:
                named = track.name or ""
            if not track.parent:
                break
            uuid = track.parent
        if tid is None:
            first = self.tracks.get(key)
            own = first.name if first is not None and not first.is_process and not first.is_counter else None
            tid = own if own is not None else named if named is not None else pid
        out = (pid if pid is not None else -1, tid if tid is not None else -1)
        cache[key] = out
        return out

    def on_process(self, key: Any) -> bool:
        track = self.tracks.get(key) if not isinstance(key, tuple) else None
        return track is not None and track.is_process

    def counter_name(self, key: Any, name: str) -> str:
        track = self.tracks.get(key) if not isinstance(key, tuple) else None
        return (track.name or name) if track is not None else name

    def metadata_events(self) -> list[dict[str, Any]]:
        """The JSON `M` events the descriptors stand for (process and thread names, labels, order)."""
        out: list[dict[str, Any]] = []
        cache: dict[Any, tuple[Any, Any]] = {}
        for uuid, t in self.tracks.items():
            if t.is_process:
                pid = t.pid if t.pid is not None else (t.name or t.process_name or "")
                if t.process_name is not None:
                    out.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                                "args": {"name": t.process_name}})
                if t.labels:
                    out.append({"ph": "M", "name": "process_labels", "pid": pid, "tid": 0,
                                "args": {"labels": ",".join(t.labels)}})
                if t.process_sort is not None:
                    out.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0,
                                "args": {"sort_index": t.process_sort}})
            elif t.is_thread:
                pid, tid = self.owner(uuid, cache)
                if t.thread_name is not None:
                    out.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                                "args": {"name": t.thread_name}})
                if t.thread_sort is not None:
                    out.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid,
                                "args": {"sort_index": t.thread_sort}})
        return out


_Slice = tuple[bool, int, int, str, "str | None", "dict[str, Any] | None"]


def pair_slices(items: list[_Slice]) -> tuple[list[tuple[_Slice, _Slice]], int, int]:
    """(begin, end) pairs of one track's slice events (given in file order), in the order their ends
    are met, and the counts of begins never ended and ends without a begin (see `pair_columns`)."""
    is_begin = np.array([it[0] for it in items], bool)
    ts = np.array([it[1] for it in items], np.uint64)
    begins, ends, unended, unbegun = pair_columns(is_begin, ts, np.zeros(len(items), np.int64))
    return [(items[b], items[e]) for b, e in zip(begins.tolist(), ends.tolist())], unended, unbegun


def pair_columns(is_begin: np.ndarray, ts: np.ndarray, track: np.ndarray) -> tuple[np.ndarray, np.ndarray, int, int]:
    """Rows of the begins and of the ends they pair with, for slice events grouped by `track` and in file
    order within each track; and the counts of begins never ended and of ends without a begin.

    A writer that emits events as they happen (Perfetto's SDK, Kineto's builder) writes a track's
    events in time order: an end closes the latest open begin. PyTorch's Perfetto encoder writes
    each group of slices as all its begins, then all its ends in the same order (and lets Perfetto
    sort by time): where a track's events go back in time, runs of begins followed by as many ends
    are paired first to first. Anything else is sorted by time (ties in file order) and paired
    latest-open first, as Perfetto's trace processor does. Pairs of one track come in the order of
    their ends (in time order where the track was sorted)."""
    n = len(ts)
    none = np.zeros(0, np.intp)
    if not n:
        return none, none, 0, 0
    first = np.r_[True, track[1:] != track[:-1]]
    group = np.cumsum(first) - 1
    n_groups = int(group[-1]) + 1
    unordered = np.zeros(n_groups, bool)
    unordered[group[1:][(ts[1:] < ts[:-1]) & ~first[1:]]] = True
    layout = np.zeros(n_groups, bool)
    parts: list[tuple[np.ndarray, np.ndarray]] = []
    if unordered.any():
        layout, begins, ends = _begins_then_ends(is_begin, ts, first, group, unordered)
        parts.append((begins, ends))
    rest = np.flatnonzero(~layout[group])
    unended = unbegun = 0
    if len(rest):
        seq = rest
        if (unordered & ~layout).any():  # tracks neither rule fits: sorted by time
            by_time = np.where(unordered[group[rest]], ts[rest], np.uint64(0))
            seq = rest[np.lexsort((rest, by_time, group[rest]))]
        begins, ends, unended, unbegun = _pair_latest(is_begin[seq], group[seq])
        parts.append((seq[begins], seq[ends]))
    return (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]), unended, unbegun)


def _begins_then_ends(is_begin: np.ndarray, ts: np.ndarray, first: np.ndarray, group: np.ndarray,
                      candidate: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Which `candidate` groups are runs of begins each followed by as many ends, each end at or after
    the begin of the same rank in the run before it; and those groups' (begin, end) rows, paired in order."""
    n = len(ts)
    run_first = first | np.r_[True, is_begin[1:] != is_begin[:-1]]
    run_at = np.flatnonzero(run_first)
    run_len = np.diff(np.r_[run_at, n])
    run_begins = is_begin[run_at]
    run_group = group[run_at]
    same_as_next = np.r_[run_group[1:] == run_group[:-1], False]
    next_len = np.r_[run_len[1:], 0]
    bad = run_begins & ~(same_as_next & (next_len == run_len))  # begins not followed by as many ends
    bad |= ~run_begins & ~np.r_[False, same_as_next[:-1]]  # ends opening their track
    fits = candidate.copy()
    fits[run_group[bad]] = False
    rows = np.flatnonzero(fits[group] & is_begin)
    partner = rows + run_len[(np.cumsum(run_first) - 1)[rows]]
    fits[group[rows[ts[rows] > ts[partner]]]] = False
    keep = fits[group[rows]]
    return fits, rows[keep], partner[keep]


def _pair_latest(is_begin: np.ndarray, group: np.ndarray) -> tuple[np.ndarray, np.ndarray, int, int]:
    """Each end closes the latest open begin of its group (an end with none open is dropped): (begin, end)
    positions in the order of the ends, begins never ended, ends without a begin. The depth of open
    slices after each event, an end on an empty stack not counting, is the running sum of +1 / -1 less
    its lowest point below 0 so far; a begin and the end that closes it are the consecutive events of
    one depth in their group."""
    m = len(is_begin)
    step = np.where(is_begin, 1, -1).astype(np.int64)
    start = np.r_[True, group[1:] != group[:-1]]
    gid = np.cumsum(start) - 1
    total = np.cumsum(step)
    total -= (total - step)[start][gid]  # the running sum within each group
    spread = np.int64(2 * m + 1)  # each group's sums below all earlier groups': one running minimum for all
    lowest = np.minimum.accumulate(total - gid * spread) + gid * spread
    depth = total - np.minimum(lowest, 0)
    before = np.r_[np.int64(0), depth[:-1]]
    before[start] = 0
    unbegun = ~is_begin & (before == 0)
    level = np.where(is_begin, depth, before)
    rows = np.flatnonzero(~unbegun)
    rows = rows[np.argsort(gid[rows] * (m + 1) + level[rows], kind="stable")]
    kind = is_begin[rows]
    same = (gid[rows[1:]] == gid[rows[:-1]]) & (level[rows[1:]] == level[rows[:-1]])
    at = np.flatnonzero(kind[:-1] & ~kind[1:] & same)
    begins, ends = rows[at], rows[at + 1]
    by_end = np.argsort(ends, kind="stable")
    return begins[by_end], ends[by_end], int(is_begin.sum()) - len(at), int(unbegun.sum())


def _counter_names(buf: bytes, span: tuple[int, int]) -> dict[int, str]:
    """counter id -> name, from a GpuCounterDescriptor."""
    names: dict[int, str] = {}
    for number, value, _ in scan(buf, span[0], span[1], "GpuCounterDescriptor"):
        if number == 1:
            cid, name = 0, ""
            for n2, v2, _ in scan(buf, value[0], value[1], "GpuCounterSpec"):
                if n2 == 1:
                    cid = v2
                else:
                    name = text(buf, v2)
            names[cid] = name
    return names


def _thread_fields(buf: bytes, span: tuple[int, int]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for number, value, _ in scan(buf, span[0], span[1], "ThreadDescriptor"):
        if number == 1:
            out["pid"] = int32_unwrapped(value)
        elif number == 2:
            out["tid"] = signed64(value)
        elif number == 5:
            out["thread_name"] = text(buf, value)
        elif number == 3:
            out["legacy_sort_index"] = signed32(value)
    return out


def json_value(raw: str) -> Any:
    """A JSON text decoded, or the text itself when it is not JSON."""
    try:
        return msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return raw


def kineto_args(args: dict[str, Any]) -> dict[str, Any]:
    """An event's annotations as the Kineto JSON args they stand for: Kineto's builder writes the activity's
    args as one JSON text (`METADATA_ANNOTATION`), and the correlation id under its own name."""
    meta = args.get(METADATA_ANNOTATION)
    if isinstance(meta, str):
        parsed = json_object(meta)
        if parsed is not None:
            del args[METADATA_ANNOTATION]
            args = {**parsed, **args}
    if CORRELATION_ANNOTATION in args and "correlation" not in args:
        args["correlation"] = args.pop(CORRELATION_ANNOTATION)
    return args


def json_object(raw: str) -> dict[str, Any] | None:
    """A JSON object, or the members of one without their braces (Kineto's `metadataJson()`)."""
    for candidate in (raw, "{" + raw + "}"):
        try:
            value = msgspec.json.decode(candidate)
        except msgspec.DecodeError:
            continue
        if isinstance(value, dict):
            return value
    return None


# Categories for events that carry none (Kineto's builder and PyTorch's encoder write no category):
# from the args and the name, and from whether the event sits on a GPU's process.
_DRIVER_NAME = re.compile(r"^cu[A-Z]")
_RUNTIME_NAME = re.compile(r"^(cuda|hip)[A-Z_]")
_KERNEL_ARGS = ("grid", "block", "registers per thread", "shared memory")
_GPU_LABEL = re.compile(r"^GPU \d+$")


def device_work(name: str, args: dict[str, Any] | None) -> str | None:
    """The category of GPU work an uncategorised event's args show (they name its device and stream),
    else None."""
    a = args or {}
    if "cuda_sync_kind" in a:
        return "cuda_sync"
    if "stream" not in a or "device" not in a or "cbid" in a:
        return None
    if name.startswith("Memcpy") or "copy kind" in a:
        return "gpu_memcpy"
    if name.startswith("Memset"):
        return "gpu_memset"
    if name == "EventRecord":  # a CUDA-graph event-record node (PyTorch's export): no GPU work
        return "graph_event_node"
    return "kernel"


def infer_category(name: str, args: dict[str, Any] | None, on_process: bool = False, on_gpu: bool = False,
                   pid: Any = None) -> str:
    """What Kineto would have written as `cat`, for an event written without one. `on_process`: the slice
    sits on a process track itself, not on a thread (Kineto's builder puts only its trace span there);
    `on_gpu`: on the process of a GPU (where everything but GPU work is an annotation); `pid` -1: the
    profiler's own overhead (PyTorch's export) or no process at all."""
    if on_process:
        return "Trace"
    if pid == -1:
        return "overhead"
    work = device_work(name, args)
    if work is not None:
        return work
    a = args or {}
    if any(k in a for k in _KERNEL_ARGS):
        return "kernel"
    if on_gpu:
        return "gpu_user_annotation"
    if "cbid" in a or _RUNTIME_NAME.match(name) or _DRIVER_NAME.match(name):
        return "cuda_driver" if _DRIVER_NAME.match(name) else "cuda_runtime"
    if kineto.STEP_NAME.match(name):
        return "user_annotation"
    return "cpu_op"


def decode(data: bytes, path: Path, max_bytes: int, vectorized: bool = True) -> PacketDecoder:
    """Every packet of `data` decoded; raises `InputError` (byte offset, what was expected) on damage.
    The packets are decoded all together (`pftrace_vec`) where that path covers the trace, else (or
    with `vectorized` False) one by one: the same events either way."""
    dec = PacketDecoder(path, max(0, max_bytes - len(data)))
    if vectorized and pftrace_vec.decode(dec, data, MAX_NESTING):
        dec.finish()
        return dec
    dec = PacketDecoder(path, max(0, max_bytes - len(data)))
    try:
        dec.trace(data)
    except WireError as exc:
        raise InputError(path, f"not a valid Perfetto trace: {exc}") from None
    except RecursionError:
        raise InputError(path, "not a valid Perfetto trace: messages nested too deeply") from None
    dec.finish()
    return dec


# The args keys the Kineto reader reads of a slice or an instant (a counter's are read whole): the
# others (input shapes, call stacks...) would be written and parsed again for nothing.
_READ_ARGS = frozenset(f.encode_name for f in msgspec.structs.fields(kineto.KinetoArgs))
# The args whose values a slice needs (what the document keeps, and what the decoder merges in).
VALUE_ARGS = _READ_ARGS | {METADATA_ANNOTATION, CORRELATION_ANNOTATION}
# The args a slice keeps at all (the vectorized decoder drops the others): those, and those whose presence
# tells its category (`device_work`, `infer_category`).
SLICE_ARGS = VALUE_ARGS | {"cuda_sync_kind", "stream", "device", "cbid", "copy kind", *_KERNEL_ARGS}


@dataclasses.dataclass
class KinetoColumns:
    """The decoded events as the Kineto JSON events they stand for, in file order, one list per key:
    times in microseconds relative to the header's `baseTimeNanoseconds` (exact nanoseconds); `dur`
    None but for complete events, `flow` the id of flow events; `args` only what the Kineto reader
    reads of them (all of a counter's; None where it reads none). See `kineto_columns`."""

    header: dict[str, Any]
    metadata: list[dict[str, Any]]  # the `M` events (process and thread names...), before the others
    ph: list[str]
    name: list[str]
    cat: list[str]
    pid: list[Any]
    tid: list[Any]
    ts: list[float]
    dur: list[float | None]
    args: list[dict[str, Any] | None]
    flow: list[int]

    def columns(self) -> tuple[list[Any], ...]:
        """The per-event lists, in the order of the fields."""
        return (self.ph, self.name, self.cat, self.pid, self.tid, self.ts, self.dur, self.args, self.flow)


def kineto_columns(dec: PacketDecoder, for_document: bool = True) -> KinetoColumns:
    """What `kineto_document` writes, as columns: per-event Python only for the events that are no
    complete slice or flow (instants, counters: few), the complete slices and flows taken as arrays.
    Not `for_document` (for the Kineto reader's structs): the instants and counters first, then the flows,
    then the complete slices, each in file order, and the args not cut to the keys the reader reads (its
    decoder skips the others). The reader keeps each kind of event in a table of its own, in the order it
    meets them, and only counts the flows: it gives the same timeline."""
    others = sorted(dec.others, key=lambda e: e[0])
    done = dec.complete
    flows = dec.flows
    times = np.concatenate([np.array([e[5] for e in others], np.uint64), flows.ts, done.ts])
    times = times[times <= _MAX_BASE_NS]
    base = 0
    if len(times) and int(np.partition(times, len(times) // 2)[len(times) // 2]) >= _EPOCH_NS_FLOOR:
        base = int(times.min())
    owners = _TrackOwners(dec)
    # GPU processes: labelled "GPU N", or holding uncategorised events whose args show GPU work
    gpu_pids = {t.pid if t.pid is not None else t.name for t in dec.tracks.values()
                if t.is_process and any(_GPU_LABEL.match(label) for label in t.labels)}
    gpu_pids |= {owners.of(e[4])[0] for e in others
                 if e[1] == "X" and e[3] is None and device_work(e[2], e[7]) not in (None, "cuda_sync")}
    signatures = _Signatures(done)
    gpu_pids |= {owners.pid[t] for t in signatures.tracks_with_work().tolist()}
    out = KinetoColumns(_header(dec, base), dec.metadata_events(), [], [], [], [], [], [], [], [], [])
    for _, ph, name, cat, track, ts, dur, args, fid in others:
        pid, tid = owners.of(track)
        if ph == "C":
            name = dec.counter_name(track, name)
        elif cat is None:
            cat = infer_category(name, args, dec.on_process(track), pid in gpu_pids, pid) if ph == "X" else ""
        if args is not None and ph != "C" and for_document:
            args = {k: v for k, v in args.items() if k in _READ_ARGS} or None
        for column, value in zip(out.columns(), (ph, name, cat, pid, tid, (ts - base) / 1000,
                                                 dur / 1000 if ph == "X" else None, args, fid)):
            column.append(value)
    # then the flows and the complete slices, all placed by order (at the same order, the others first,
    # then the flows: an event's instant or counter, its flows, its slice)
    m, n = len(flows.order), len(done)
    for column, values in zip(out.columns(), (
            flows.phase.tolist(), [""] * m, ["flow"] * m, owners.pid[flows.track].tolist(),
            owners.tid[flows.track].tolist(), _micros(flows.ts, base), [None] * m, [None] * m, flows.fid.tolist())):
        column.extend(values)
    for column, values in zip(out.columns(), (
            ["X"] * n, done.name.tolist(), signatures.categories(owners, gpu_pids, dec),
            owners.pid[done.track].tolist(), owners.tid[done.track].tolist(), _micros(done.ts, base),
            _micros(done.dur, 0), _read_args(done.args) if for_document else done.args.tolist(), [0] * n)):
        column.extend(values)
    orders = np.concatenate([np.array([e[0] for e in others], np.int64), flows.order, done.order])
    if for_document and (orders[1:] < orders[:-1]).any():
        place = np.argsort(orders, kind="stable")
        for column in out.columns():
            column[:] = pftrace_vec.object_array(column)[place].tolist()
    return out


class _TrackOwners:
    """(pid, tid) of each track key (`PacketDecoder.owner`), also as arrays by track code."""

    def __init__(self, dec: PacketDecoder) -> None:
        self.dec = dec
        self.cache: dict[Any, tuple[Any, Any]] = {}
        pairs = [self.of(key) for key in dec.track_keys]
        self.pid = pftrace_vec.object_array([p for p, _ in pairs])
        self.tid = pftrace_vec.object_array([t for _, t in pairs])

    def of(self, key: Any) -> tuple[Any, Any]:
        return self.dec.owner(key, self.cache)


class _Signatures:
    """The uncategorised complete slices grouped by what their category is inferred from (name, args
    keys), so that `infer_category` runs once per group and track, not per event."""

    def __init__(self, done: SliceColumns) -> None:
        self.done = done
        self.rows = np.flatnonzero(np.fromiter(map(is_, done.cat, repeat(None)), bool, count=len(done)))
        index: dict[str | tuple[str, tuple[str, ...]], int] = {}
        self.code = np.fromiter(
            (index.setdefault((name, tuple(args)) if args else name, len(index))  # type: ignore[arg-type]
             for name, args in zip(done.name[self.rows].tolist(), done.args[self.rows].tolist())),
            np.int64, count=len(self.rows))
        self.keys = [key if isinstance(key, tuple) else (key, ()) for key in index]
        self.work = [device_work(name, dict.fromkeys(keys)) for name, keys in self.keys]

    def tracks_with_work(self) -> np.ndarray:
        """Track codes holding uncategorised GPU work."""
        works = np.array([w not in (None, "cuda_sync") for w in self.work], bool)
        return np.unique(self.done.track[self.rows][works[self.code]]) if len(self.rows) else np.zeros(0, np.int64)

    def categories(self, owners: _TrackOwners, gpu_pids: set[Any], dec: PacketDecoder) -> list[str]:
        """Every complete slice's category: its own, else inferred."""
        cats = self.done.cat.copy()
        if len(self.rows):
            tracks = self.done.track[self.rows]
            pairs, inverse = np.unique(self.code * max(1, len(owners.pid)) + tracks, return_inverse=True)
            found = []
            for code, track in zip((pairs // max(1, len(owners.pid))).tolist(),
                                   (pairs % max(1, len(owners.pid))).tolist()):
                name, keys = self.keys[code]
                pid = owners.pid[track]
                found.append(infer_category(name, dict.fromkeys(keys), dec.on_process(dec.track_keys[track]),
                                            pid in gpu_pids, pid))
            cats[self.rows] = pftrace_vec.object_array(found)[inverse.ravel()]
        return cats.tolist()  # type: ignore[no-any-return]


def _micros(ns: np.ndarray, base: int) -> list[float]:
    """(ns - base) / 1000 of each, as Python divides the integers (exact below 2**53 ns, else in Python)."""
    exact = (ns >= np.uint64(base)) & (ns - np.uint64(base) < np.uint64(1 << 53))
    out = np.empty(len(ns), np.float64)
    out[exact] = (ns[exact] - np.uint64(base)).astype(np.float64) / 1000
    values = out.tolist()
    for i in np.flatnonzero(~exact).tolist():
        values[i] = (int(ns[i]) - base) / 1000
    return values


def _read_args(args: np.ndarray) -> list[dict[str, Any] | None]:
    """Each slice's args, with only the keys the Kineto reader reads (the key lists are looked at once);
    None where it reads none of them."""
    wanted: dict[tuple[str, ...], tuple[str, ...]] = {}
    out: list[dict[str, Any] | None] = [None] * len(args)
    present = np.flatnonzero(np.fromiter(map(is_not, args, repeat(None)), bool, count=len(args)))
    for i, a in zip(present.tolist(), args[present].tolist()):
        keys = tuple(a)
        read = wanted.get(keys)
        if read is None:
            read = wanted[keys] = tuple(k for k in keys if k in _READ_ARGS)
        if read:
            out[i] = {k: a[k] for k in read}
    return out


def _header(dec: PacketDecoder, base: int) -> dict[str, Any]:
    header = {k: v for k, v in dec.header.items() if k not in ("traceEvents", "baseTimeNanoseconds")}
    if base:
        header["baseTimeNanoseconds"] = base
    return header


def kineto_document(dec: PacketDecoder) -> bytes:
    """The decoded events as a Kineto JSON document, times relative to a base (exact nanoseconds)."""
    cols = kineto_columns(dec)
    out: list[dict[str, Any]] = cols.metadata
    for ph, name, cat, pid, tid, ts, dur, args, fid in zip(cols.ph, cols.name, cols.cat, cols.pid, cols.tid, cols.ts,
                                                           cols.dur, cols.args, cols.flow):
        ev: dict[str, Any] = {"ph": ph, "name": name, "pid": pid, "tid": tid, "ts": ts}
        if ph == "X":
            ev["dur"] = dur
        elif ph in ("s", "t", "f"):
            ev["id"] = fid
            if ph == "f":
                ev["bp"] = "e"
        ev["cat"] = cat
        if args is not None:
            ev["args"] = args
        out.append(ev)
    header = cols.header
    header["traceEvents"] = out
    return msgspec.json.encode(header)


_ARGS_ENCODER = msgspec.json.Encoder()
_EVENTS_PER_CHUNK = 65536


def kineto_events(cols: KinetoColumns) -> Any:
    """The events of `cols` as the Kineto reader's structs, in chunks, as its typed decoder makes them of
    a JSON document's events (`kineto_document`), without writing and parsing one: args are encoded,
    one event's at a time, only where there are any."""
    make = kineto.KinetoEvent
    nan = float("nan")
    yield [make(e.get("ph"), e.get("name", ""), e.get("cat", ""), e.get("pid", -1), e.get("tid", -1),
                e.get("ts", nan), nan, msgspec.Raw(_ARGS_ENCODER.encode(e["args"])) if "args" in e else _NO_ARGS)
           for e in cols.metadata]
    n = len(cols.ph)
    for lo in range(0, n, _EVENTS_PER_CHUNK):
        hi = min(n, lo + _EVENTS_PER_CHUNK)
        raw = [msgspec.Raw(_ARGS_ENCODER.encode(a)) if a else _NO_ARGS for a in cols.args[lo:hi]]
        durs = [nan if d is None else d for d in cols.dur[lo:hi]]
        yield list(map(make, cols.ph[lo:hi], cols.name[lo:hi], cols.cat[lo:hi], cols.pid[lo:hi], cols.tid[lo:hi],
                       cols.ts[lo:hi], durs, raw))


_NO_ARGS = msgspec.Raw(b"{}")


def _json_round_trip(header: dict[str, Any]) -> dict[str, Any]:
    """The header's values as the Kineto reader gets them from a JSON document (a value it cannot
    write or read back: None)."""
    out: dict[str, Any] = {}
    for key, value in header.items():
        try:
            out[key] = msgspec.json.decode(msgspec.json.encode(value))
        except (msgspec.EncodeError, msgspec.DecodeError, RecursionError, UnicodeDecodeError):
            out[key] = None
    return out


def read(path: Path, data: bytes, options: ReadOptions) -> Timeline:
    dec = decode(data, path, options.max_input_bytes)
    cols = kineto_columns(dec, for_document=False)
    dec.others, dec.complete, dec.flows = [], SliceColumns.empty(), FlowColumns.empty()
    tl = kineto.timeline_from_events(_json_round_trip(cols.header), kineto_events(cols), path, kineto.FORMAT)
    if options.progress:
        options.progress(len(data))
    source = tl.sources[0]
    source.format = FORMAT
    for reason, n in sorted(dec.not_kept.items()):
        if n:
            source.not_kept[reason] = source.not_kept.get(reason, 0) + n
    if dec.not_kept.get("zstd_compressed_packets"):
        dec.warnings.append(f"{dec.not_kept['zstd_compressed_packets']} zstd-compressed packet groups not read "
                            f"(only deflate packet compression is supported)")
    if dec.not_kept.get("incremental_state_lost"):
        dec.warnings.append(f"{dec.not_kept['incremental_state_lost']} track events dropped: their packet sequence "
                            f"lost its interned names (the writer's buffer overflowed?)")
    if dec.not_kept.get("gpu_id_out_of_range"):
        dec.warnings.append(f"{dec.not_kept['gpu_id_out_of_range']} GPU counter samples dropped: their GPU id is "
                            f"beyond int32 (no GPU's; not wrapped onto another)")
    stages = dec.not_kept.get("gpu_render_stage_event", 0)
    if stages and not T.category_mask(tl.events["kind"], T.GPU_WORK_KINDS).any():
        dec.warnings.append(f"{stages} GPU render-stage events not read and no GPU work among the slices: "
                            f"this trace's GPU activity is not analysed")
    for message in reversed(dec.warnings):
        source.warnings.insert(0, message)
    if dec.warnings and dec.warnings[0].startswith("TRUNCATED"):
        tl.warnings.insert(0, f"{path}: {dec.warnings[0]}")
    return tl
