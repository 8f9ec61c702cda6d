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

The events are turned into the Kineto JSON event model and read by the Kineto reader (`kineto.read`):
one mapping of categories and args to Timeline kinds and columns for both formats, so a trace read
from `.pftrace` gives the figures of the same trace read from JSON. Timestamps are absolute
nanoseconds; they reach the Kineto reader relative to a base time, so no nanosecond is lost.
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
from pathlib import Path
from typing import Any

import msgspec

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


class PacketDecoder:
    def __init__(self, path: Path, max_bytes: int) -> None:
        self.path = path
        self.budget = max_bytes  # bytes compressed packets may still inflate to
        self.tracks: dict[int, _Track] = {}
        self.sequences: dict[int, SequenceState] = {}
        self.events: list[_Event] = []
        # per track, in file order: (is begin, ts, order, name, cat, args); paired in `finish`
        self.slices: dict[Any, list[tuple[bool, int, int, str, str | None, dict[str, Any] | None]]] = {}
        # flow ids met (order, is an end, track, ts, id) and metadata instants (order, name, args), taken in
        # order in `finish` (the vectorized decoder adds them out of file order)
        self.flow_items: list[tuple[int, bool, Any, int, int]] = []
        self.header_items: list[tuple[int, str, dict[str, Any]]] = []
        # what the vectorized decoder (`pftrace_vec`) needs of the packets it leaves to `packet`: when each
        # sequence's state was cleared, and what was interned or made the default track, by packet index
        self.recording = False
        self.at_packet = 0
        self.cleared: list[tuple[int, int, int]] = []  # (sequence id, packet, generation)
        self.interned: list[tuple[int, int, int, int, str]] = []  # (table, generation, iid, packet, value)
        self.defaults: list[tuple[int, int, int]] = []  # (generation, packet, track uuid)
        self.by_order = False  # slices added out of file order: sorted by order before pairing
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

    def packet(self, buf: bytes, start: int, end: int) -> None:
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
            self.events.append((order, "C", names.get(cid, f"counter {cid}"), None, ("gpu", gpu), ts, 0,
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
            self.events.append((order, "X", name, cat, track, ts, legacy_dur * 1000, args, 0))
        elif typ == TYPE_INSTANT:
            if name in (METADATA_EVENT, DEVICE_PROPERTIES_EVENT) and args:
                self.header_items.append((order, name, args))
                return
            self.events.append((order, "i", name, cat, track, ts, 0, args, 0))
        elif typ == TYPE_COUNTER:
            if counter is None:
                self.not_kept["counter_without_value"] += 1
            else:
                desc = self.tracks.get(track) if not isinstance(track, tuple) else None
                if desc is not None and desc.incremental:  # a delta: the sum since the state was cleared
                    key = (seq.generation, track)
                    counter = self.counter_sums[key] = self.counter_sums.get(key, 0) + counter
                self.events.append((order, "C", name, cat, track, ts, 0, {"": counter}, 0))
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
        self.flow_items.sort(key=lambda f: f[0])
        seen: set[int] = set()
        for order, is_end, track, ts, fid in self.flow_items:  # a flow's first id starts it, the rest step
            if is_end:
                self.events.append((order, "f", "", None, track, ts, 0, None, fid))
                seen.discard(fid)  # the id may start a new flow later
            else:
                self.events.append((order, "t" if fid in seen else "s", "", None, track, ts, 0, None, fid))
                seen.add(fid)
        self.flow_items.clear()
        unended = unbegun = 0
        for track, items in self.slices.items():
            if self.by_order:
                items.sort(key=lambda it: it[2])
            pairs, n_unended, n_unbegun = pair_slices(items)
            unended += n_unended
            unbegun += n_unbegun
            for b, e in pairs:
                args = b[5] if e[5] is None else {**(b[5] or {}), **e[5]}  # args given at the end count too
                self.events.append((b[2], "X", b[3], b[4], track, b[1], e[1] - b[1], args, 0))
        self.slices.clear()
        if unended:
            self.not_kept["slice_not_ended"] += unended
            self.warnings.append(f"{unended} slices begun but never ended (no end event on their track): not kept")
        if unbegun:
            self.not_kept["slice_end_without_begin"] += unbegun

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
    """(begin, end) pairs of one track's slice events (given in file order), and the counts of begins
    never ended and ends without a begin.

    A writer that emits events as they happen (Perfetto's SDK, Kineto's builder) writes a track's
    events in time order: an end closes the latest open begin. PyTorch's Perfetto encoder writes
    each group of slices as all its begins, then all its ends in the same order (and lets Perfetto
    sort by time): where a track's events go back in time, runs of begins followed by as many ends
    are paired first to first. Anything else is sorted by time (ties in file order) and paired
    latest-open first, as Perfetto's trace processor does."""
    times = [it[1] for it in items]
    if all(a <= b for a, b in zip(times, times[1:])):
        return _pair_latest(items)
    pairs: list[tuple[_Slice, _Slice]] = []
    i, n = 0, len(items)
    while i < n:
        j = i
        while j < n and items[j][0]:
            j += 1
        k = j
        while k < n and not items[k][0]:
            k += 1
        if j - i != k - j or any(items[i + m][1] > items[j + m][1] for m in range(j - i)):
            order = sorted(range(n), key=lambda x: items[x][1])
            return _pair_latest([items[x] for x in order])
        pairs.extend(zip(items[i:j], items[j:k]))
        i = k
    return pairs, 0, 0


def _pair_latest(items: list[_Slice]) -> tuple[list[tuple[_Slice, _Slice]], int, int]:
    stack: list[_Slice] = []
    pairs: list[tuple[_Slice, _Slice]] = []
    unbegun = 0
    for it in items:
        if it[0]:
            stack.append(it)
        elif stack:
            pairs.append((stack.pop(), it))
        else:
            unbegun += 1
    return pairs, len(stack), unbegun


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


def kineto_document(dec: PacketDecoder) -> bytes:
    """The decoded events as a Kineto JSON document, times relative to a base (exact nanoseconds)."""
    dec.events.sort(key=lambda e: e[0])
    times = sorted(e[5] for e in dec.events if 0 <= e[5] <= _MAX_BASE_NS)
    base = 0
    if times and times[len(times) // 2] >= _EPOCH_NS_FLOOR:
        base = times[0]
    cache: dict[Any, tuple[Any, Any]] = {}
    out: list[dict[str, Any]] = dec.metadata_events()
    # GPU processes: labelled "GPU N", or holding uncategorised events whose args show GPU work
    gpu_pids = {t.pid if t.pid is not None else t.name for t in dec.tracks.values()
                if t.is_process and any(_GPU_LABEL.match(label) for label in t.labels)}
    gpu_pids |= {dec.owner(e[4], cache)[0] for e in dec.events
                 if e[1] == "X" and e[3] is None and device_work(e[2], e[7]) not in (None, "cuda_sync")}
    for _, ph, name, cat, track, ts, dur, args, fid in dec.events:
        pid, tid = dec.owner(track, cache)
        ev: dict[str, Any] = {"ph": ph, "name": name, "pid": pid, "tid": tid, "ts": (ts - base) / 1000}
        if ph == "X":
            ev["dur"] = dur / 1000
        elif ph == "C":
            ev["name"] = dec.counter_name(track, name)
        elif ph in ("s", "t", "f"):
            ev["id"] = fid
            ev["cat"] = "flow"
            if ph == "f":
                ev["bp"] = "e"
        if ph not in ("s", "t", "f"):
            ev["cat"] = cat if cat is not None else \
                infer_category(name, args, dec.on_process(track), pid in gpu_pids, pid) if ph == "X" else ""
        if args is not None:  # only what the Kineto reader reads of them (all of a counter's)
            ev["args"] = args if ph == "C" else {k: v for k, v in args.items() if k in _READ_ARGS}
        out.append(ev)
    header = {k: v for k, v in dec.header.items() if k not in ("traceEvents", "baseTimeNanoseconds")}
    if base:
        header["baseTimeNanoseconds"] = base
    header["traceEvents"] = out
    return msgspec.json.encode(header)


def read(path: Path, data: bytes, options: ReadOptions) -> Timeline:
    dec = decode(data, path, options.max_input_bytes)
    doc = kineto_document(dec)
    del dec.events
    tl = kineto.read(path, doc, dataclasses.replace(options, progress=None))
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
