"""The protobuf wire format, for the subset of Perfetto's trace messages traceanalyzer reads and writes.

`SCHEMA` mirrors `perfetto_trace.proto` beside this module (a test keeps the two in step); the field
numbers are the public ones of google/perfetto `protos/perfetto/trace/` (cited there). Decoding is our
own small wire-format walker, not generated code: every field it meets is checked against the wire
type the schema gives (packed repeated scalars also as length-delimited), and any damage raises
`WireError` with the byte offset and what was expected there. Fields not in the schema are skipped
(their framing is still checked). `Writer` encodes the same messages (for `pftrace_write`).
"""

from __future__ import annotations

import struct
from typing import Any

VARINT, I64, LEN, I32 = 0, 1, 2, 5
_WIRE_NAMES = {0: "varint", 1: "64-bit", 2: "length-delimited", 3: "group start", 4: "group end", 5: "32-bit",
               6: "invalid wire type 6", 7: "invalid wire type 7"}

# message -> [(field name, number, type, repeated)]; a type that is not a scalar names a message.
SCHEMA: dict[str, list[tuple[str, int, str, bool]]] = {
    "Trace": [
        ("packet", 1, "TracePacket", True),
    ],
    "TracePacket": [
        ("timestamp", 8, "uint64", False),
        ("timestamp_clock_id", 58, "uint32", False),
        ("trusted_packet_sequence_id", 10, "uint32", False),
        ("track_event", 11, "TrackEvent", False),
        ("interned_data", 12, "InternedData", False),
        ("sequence_flags", 13, "uint32", False),
        ("incremental_state_cleared", 41, "bool", False),
        ("trace_packet_defaults", 59, "TracePacketDefaults", False),
        ("track_descriptor", 60, "TrackDescriptor", False),
        ("thread_descriptor", 44, "ThreadDescriptor", False),
        ("compressed_packets", 50, "bytes", False),
        ("zstd_compressed_packets", 133, "bytes", False),
        ("gpu_counter_event", 52, "GpuCounterEvent", False),
        ("gpu_render_stage_event", 53, "bytes", False),
    ],
    "TracePacketDefaults": [
        ("timestamp_clock_id", 58, "uint32", False),
        ("track_event_defaults", 11, "TrackEventDefaults", False),
    ],
    "TrackEventDefaults": [
        ("track_uuid", 11, "uint64", False),
    ],
    "TrackDescriptor": [
        ("uuid", 1, "uint64", False),
        ("parent_uuid", 5, "uint64", False),
        ("name", 2, "string", False),
        ("static_name", 10, "string", False),
        ("description", 14, "string", False),
        ("process", 3, "ProcessDescriptor", False),
        ("thread", 4, "ThreadDescriptor", False),
        ("counter", 8, "CounterDescriptor", False),
    ],
    "ProcessDescriptor": [
        ("pid", 1, "int32", False),
        ("process_name", 6, "string", False),
        ("legacy_sort_index", 3, "int32", False),
        ("process_labels", 8, "string", True),
    ],
    "ThreadDescriptor": [
        ("pid", 1, "int32", False),
        ("tid", 2, "int64", False),
        ("thread_name", 5, "string", False),
        ("legacy_sort_index", 3, "int32", False),
    ],
    "CounterDescriptor": [
        ("unit", 3, "int32", False),
        ("unit_name", 6, "string", False),
        ("is_incremental", 5, "bool", False),
    ],
    "TrackEvent": [
        ("category_iids", 3, "uint64", True),
        ("categories", 22, "string", True),
        ("name_iid", 10, "uint64", False),
        ("name", 23, "string", False),
        ("type", 9, "int32", False),
        ("track_uuid", 11, "uint64", False),
        ("counter_value", 30, "int64", False),
        ("double_counter_value", 44, "double", False),
        ("debug_annotations", 4, "DebugAnnotation", True),
        ("flow_ids_old", 36, "uint64", True),
        ("flow_ids", 47, "fixed64", True),
        ("terminating_flow_ids_old", 42, "uint64", True),
        ("terminating_flow_ids", 48, "fixed64", True),
        ("correlation_id", 52, "uint64", False),
        ("legacy_event", 6, "LegacyEvent", False),
    ],
    "LegacyEvent": [
        ("name_iid", 1, "uint64", False),
        ("phase", 2, "int32", False),
        ("duration_us", 3, "int64", False),
    ],
    "DebugAnnotation": [
        ("name_iid", 1, "uint64", False),
        ("name", 10, "string", False),
        ("bool_value", 2, "bool", False),
        ("uint_value", 3, "uint64", False),
        ("int_value", 4, "int64", False),
        ("double_value", 5, "double", False),
        ("pointer_value", 7, "uint64", False),
        ("legacy_json_value", 9, "string", False),
        ("string_value", 6, "string", False),
        ("string_value_iid", 17, "uint64", False),
        ("dict_entries", 11, "DebugAnnotation", True),
        ("array_values", 12, "DebugAnnotation", True),
    ],
    "InternedData": [
        ("event_categories", 1, "EventCategory", True),
        ("event_names", 2, "EventName", True),
        ("debug_annotation_names", 3, "DebugAnnotationName", True),
        ("debug_annotation_string_values", 29, "InternedString", True),
        ("gpu_counter_descriptors", 47, "InternedGpuCounterDescriptor", True),
    ],
    "EventCategory": [("iid", 1, "uint64", False), ("name", 2, "string", False)],
    "EventName": [("iid", 1, "uint64", False), ("name", 2, "string", False)],
    "DebugAnnotationName": [("iid", 1, "uint64", False), ("name", 2, "string", False)],
    "InternedString": [("iid", 1, "uint64", False), ("str", 2, "bytes", False)],
    "GpuCounterEvent": [
        ("counter_descriptor", 1, "GpuCounterDescriptor", False),
        ("counters", 2, "GpuCounter", True),
        ("gpu_id", 3, "int32", False),
        ("counter_descriptor_iid", 4, "uint64", False),
    ],
    "GpuCounter": [
        ("counter_id", 1, "uint32", False),
        ("int_value", 2, "int64", False),
        ("double_value", 3, "double", False),
    ],
    "GpuCounterDescriptor": [("specs", 1, "GpuCounterSpec", True)],
    "GpuCounterSpec": [("counter_id", 1, "uint32", False), ("name", 2, "string", False)],
    "InternedGpuCounterDescriptor": [
        ("iid", 1, "uint64", False),
        ("counter_descriptor", 2, "GpuCounterDescriptor", False),
        ("gpu_id", 3, "int32", False),
    ],
}

_SCALAR_WIRE = {"uint64": VARINT, "uint32": VARINT, "int64": VARINT, "int32": VARINT, "bool": VARINT,
                "double": I64, "fixed64": I64, "string": LEN, "bytes": LEN}
# TrackEvent.type values
TYPE_SLICE_BEGIN, TYPE_SLICE_END, TYPE_INSTANT, TYPE_COUNTER = 1, 2, 3, 4
# TracePacket.sequence_flags bits
SEQ_INCREMENTAL_STATE_CLEARED, SEQ_NEEDS_INCREMENTAL_STATE = 1, 2

MAX_VARINT_BYTES = 10


class WireError(ValueError):
    """Damage at a byte offset of the (decompressed) content: `what` says what was expected there."""

    def __init__(self, offset: int, what: str) -> None:
        super().__init__(f"at byte {offset}: {what}")
        self.offset = offset
        self.what = what


def _field_table() -> dict[str, dict[int, tuple[str, int, str, bool]]]:
    """message -> field number -> (name, wire type, type, repeated)."""
    out: dict[str, dict[int, tuple[str, int, str, bool]]] = {}
    for msg, fields in SCHEMA.items():
        out[msg] = {num: (name, _SCALAR_WIRE.get(ftype, LEN), ftype, rep) for name, num, ftype, rep in fields}
    return out


FIELDS = _field_table()


def read_varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """(value, position after it) of the varint at `pos`; its bytes must end before `end`."""
    if pos < end:
        b = buf[pos]
        if b < 0x80:
            return b, pos + 1
    start = pos
    result = 0
    shift = 0
    while True:
        if pos >= end:
            raise WireError(start, "a varint cut off by the end of its message or of the file (truncated data)")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift >= 7 * MAX_VARINT_BYTES:
            raise WireError(start, f"a varint longer than {MAX_VARINT_BYTES} bytes")


def signed64(value: int) -> int:
    """A varint's value as the int64 it encodes (two's complement)."""
    value &= 0xFFFFFFFFFFFFFFFF
    return value - (1 << 64) if value >= 1 << 63 else value


def signed32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def int32_unwrapped(value: int) -> int:
    """An int32 field's varint: negatives (sign-extended to 64 bits) as such, values that fit as they are,
    and a value beyond int32 (2^32: no writer's) kept whole rather than wrapped onto another id, so the
    reader refuses it (a device id 2^32 wrapped to 0 would merge into cuda:0)."""
    if value >= (1 << 64) - (1 << 31):
        return value - (1 << 64)
    return value


_DOUBLE = struct.Struct("<d")
_U64 = struct.Struct("<Q")


def scan(buf: bytes, pos: int, end: int, message: str) -> list[tuple[int, Any, int]]:
    """The fields of one `message` in buf[pos:end] as (number, value, offset of the tag): a varint or
    fixed-width value as an int (doubles as floats), a length-delimited one as (start, stop). Fields of
    the schema must have its wire type (repeated scalars may also come packed, length-delimited)."""
    known = ALLOWED_WIRE_TYPES[message]
    out: list[tuple[int, Any, int]] = []
    append = out.append
    while pos < end:
        tag_at = pos
        b = buf[pos]
        pos += 1
        if b < 0x80:
            tag = b
        elif pos < end and buf[pos] < 0x80:  # two-byte tags: fields 16 to 2047
            tag = (b & 0x7F) | (buf[pos] << 7)
            pos += 1
        else:
            tag, pos = read_varint(buf, tag_at, end)
        number = tag >> 3
        wire = tag & 7
        if number == 0:
            raise WireError(tag_at, f"a field tag of {message} with field number 0 (not a protobuf message here)")
        spec = known.get(number)
        if spec is not None and not spec[0] >> wire & 1:
            name, expected = FIELDS[message][number][:2]
            raise WireError(tag_at, f"field {number} ({name}) of {message} with wire type "
                                    f"{_WIRE_NAMES[wire]}, expected {_WIRE_NAMES[expected]}")
        if wire == VARINT:
            if pos < end and buf[pos] < 0x80:
                value: Any = buf[pos]
                pos += 1
            else:
                value, pos = read_varint(buf, pos, end)
        elif wire == LEN:
            if pos < end and buf[pos] < 0x80:
                length = buf[pos]
                pos += 1
            else:
                length, pos = read_varint(buf, pos, end)
            stop = pos + length
            if stop > end:
                raise WireError(tag_at, f"field {number} of {message} declares {length} bytes but only "
                                        f"{end - pos} remain in its message (truncated or damaged data)")
            value = (pos, stop)
            pos = stop
        elif wire == I64:
            if pos + 8 > end:
                raise WireError(tag_at, f"a 64-bit field {number} of {message} cut off (truncated data)")
            value = _DOUBLE.unpack_from(buf, pos)[0] if spec is not None and spec[1] \
                else _U64.unpack_from(buf, pos)[0]
            pos += 8
        elif wire == I32:
            if pos + 4 > end:
                raise WireError(tag_at, f"a 32-bit field {number} of {message} cut off (truncated data)")
            value = int.from_bytes(buf[pos:pos + 4], "little")
            pos += 4
        else:
            raise WireError(tag_at, f"field {number} of {message} with {_WIRE_NAMES[wire]} (groups and wire "
                                    f"types 6-7 never occur in a Perfetto trace: damaged data)")
        if spec is not None:
            append((number, value, tag_at))
    return out


def _allowed_table() -> dict[str, dict[int, tuple[int, bool]]]:
    """message -> field number -> (bit mask of the wire types it may come in, whether it is a double)."""
    out: dict[str, dict[int, tuple[int, bool]]] = {}
    for msg, fields in FIELDS.items():
        out[msg] = {num: ((1 << wire) | (1 << LEN if rep and wire != LEN else 0), ftype == "double")
                    for num, (_, wire, ftype, rep) in fields.items()}
    return out


ALLOWED_WIRE_TYPES = _allowed_table()


def packed(buf: bytes, value: Any, wire: int, at: int) -> list[int]:
    """The values of one occurrence of a repeated scalar: itself, or the packed list in (start, stop)."""
    if not isinstance(value, tuple):
        return [value]
    start, stop = value
    if wire == VARINT:
        out = []
        pos = start
        while pos < stop:
            v, pos = read_varint(buf, pos, stop)
            out.append(v)
        return out
    if (stop - start) % 8:
        raise WireError(at, "a packed list of 64-bit values whose length is no multiple of 8")
    return [v[0] for v in _U64.iter_unpack(buf[start:stop])]


def text(buf: bytes, span: tuple[int, int]) -> str:
    return bytes(buf[span[0]:span[1]]).decode("utf-8", "replace")


# --- encoding -------------------------------------------------------------------------------------


def _encode_varint(value: int) -> bytes:
    value &= 0xFFFFFFFFFFFFFFFF  # negative int64: ten-byte two's complement
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_SMALL_VARINTS = [_encode_varint(v) for v in range(1 << 14)]  # tags, small ids and lengths: looked up


def _varint_bytes(value: int) -> bytes:
    return _SMALL_VARINTS[value] if 0 <= value < 16384 else _encode_varint(value)


def f_varint(number: int, value: int) -> bytes:
    return _varint_bytes(number << 3 | VARINT) + _varint_bytes(int(value))


def f_bytes(number: int, value: bytes) -> bytes:
    return _varint_bytes(number << 3 | LEN) + _varint_bytes(len(value)) + value


def f_string(number: int, value: str) -> bytes:
    return f_bytes(number, value.encode("utf-8", "surrogatepass"))


def f_double(number: int, value: float) -> bytes:
    return _varint_bytes(number << 3 | I64) + _DOUBLE.pack(value)


def f_fixed64(number: int, value: int) -> bytes:
    return _varint_bytes(number << 3 | I64) + _U64.pack(value & 0xFFFFFFFFFFFFFFFF)


def number_of(message: str, field: str) -> int:
    """A field's number, by name (the writer names fields; the table holds the numbers)."""
    for name, num, _, _ in SCHEMA[message]:
        if name == field:
            return num
    raise KeyError(f"{message}.{field}")
