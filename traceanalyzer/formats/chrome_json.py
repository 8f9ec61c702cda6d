"""Chrome-trace JSON envelope shared by the Kineto and TF trace-viewer readers.

The top-level object is decoded key by key with the `traceEvents` array kept as raw bytes; the
events are then decoded in chunks of about `CHUNK_BYTES` into typed structs holding only the
fields the readers use, so that a multi-GB trace never exists as millions of Python dicts.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from ..errors import InputError

CHUNK_BYTES = 32 * 1024 * 1024


class ChromeArgs(msgspec.Struct):
    """The `args` keys any reader looks at; every other key is skipped by the decoder."""

    name: Any = None  # M events: process / thread name
    labels: Any = None  # M process_labels: "CPU", "GPU 0"
    device: Any = None
    stream: Any = None
    correlation: Any = None
    external_id: Any = msgspec.field(default=None, name="External id")
    external_id_2021: Any = msgspec.field(default=None, name="external id")
    bytes: Any = None
    collective: Any = msgspec.field(default=None, name="Collective name")
    kind: Any = None  # ROCm memcpy direction ("HtoD")
    step_num: Any = None  # TF "Profiled batch"
    correlation_id: Any = None  # TF / xprof trace viewer: kernel <-> launch
    memcpy_details: Any = None  # TF / xprof: "kind:HtoD size:655360 dest:2 async:1"
    memset_details: Any = None
    input_dims: Any = msgspec.field(default=None, name="Input Dims")


class ChromeEvent(msgspec.Struct):
    ph: Any = None
    name: Any = None
    cat: Any = None
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None
    args: ChromeArgs | None = None


_EVENTS_DECODER = msgspec.json.Decoder(list[ChromeEvent])
_ENVELOPE_DECODER = msgspec.json.Decoder(dict[str, msgspec.Raw])
_EVENT_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_BYTE_POS = re.compile(r"\(byte (\d+)\)")


@dataclass
class Envelope:
    header: dict[str, Any]  # every top-level key except traceEvents, decoded
    events_raw: memoryview  # the bytes of the traceEvents array, '[' ... ']'
    events_offset: int  # where that array starts in the file's (decompressed) content
    data: bytes  # the whole content, kept to turn offsets into line numbers in errors


def looks_like_json_object(head: bytes) -> bool:
    return head.lstrip()[:1] == b"{"


def parse_envelope(data: bytes, path: Path) -> Envelope:
    """Split a Chrome-trace JSON document into its header and its raw events array."""
    stripped = data.lstrip()
    if not stripped:
        raise InputError(path, "empty file: expected a JSON object with a traceEvents list")
    if stripped[:1] == b"[":
        raise InputError(path, "not a trace: the JSON document is a list; a profiler trace is a "
                               "JSON object with a 'traceEvents' list")
    if stripped[:1] != b"{":
        raise InputError(path, f"not a trace: expected JSON (optionally gzip-compressed), "
                               f"file starts with {data[:16]!r}")
    try:
        top = _ENVELOPE_DECODER.decode(data)
    except msgspec.DecodeError as exc:
        raise InputError(path, describe_decode_error(exc, data, 0)) from None
    except msgspec.ValidationError:
        raise InputError(path, "not a trace: expected a JSON object with a 'traceEvents' list") from None
    raw = top.pop("traceEvents", None)
    if raw is None:
        keys = ", ".join(list(top)[:6]) or "none"
        raise InputError(path, f"not a trace: JSON object without a 'traceEvents' list (its keys: {keys})")
    view = memoryview(raw)
    if view.nbytes == 0 or bytes(view[:1]) != b"[":
        raise InputError(path, "not a trace: 'traceEvents' is not a list")
    header: dict[str, Any] = {}
    for key, value in top.items():
        try:
            header[key] = msgspec.json.decode(value)
        except msgspec.DecodeError:
            header[key] = None
    offset = _offset_in(data, view)
    return Envelope(header=header, events_raw=view, events_offset=offset, data=data)


def iter_event_chunks(env: Envelope, path: Path, chunk_bytes: int = CHUNK_BYTES,
                      progress: Callable[[int], None] | None = None) -> Iterator[list[ChromeEvent]]:
    """Decode the events array in pieces split at event boundaries.

    A split point is a `}` `,` `{` sequence; one that falls inside a string or a nested value
    makes the piece fail to decode as a truncated document, and the next candidate is tried.
    """
    raw = env.events_raw
    end = raw.nbytes
    pos = 1  # after '['
    while pos < end:
        if end - pos <= chunk_bytes * 3 // 2:
            piece = b"[" + bytes(raw[pos:end])
            yield _decode_piece(piece, env, path, pos - 1)
            if progress:
                progress(end - pos)
            return
        search_from = pos + chunk_bytes
        while True:
            m = _EVENT_BOUNDARY.search(raw, search_from)
            if m is None:
                piece = b"[" + bytes(raw[pos:end])
                yield _decode_piece(piece, env, path, pos - 1)
                if progress:
                    progress(end - pos)
                return
            piece = b"[" + bytes(raw[pos:m.start() + 1]) + b"]"
            try:
                events = _EVENTS_DECODER.decode(piece)
            except msgspec.DecodeError as exc:
                if "truncated" in str(exc) or _error_at_end(exc, len(piece)):
                    search_from = m.end()
                    continue
                raise InputError(path, describe_decode_error(exc, env.data, env.events_offset + pos - 1)) from None
            break
        yield events
        if progress:
            progress(m.end() - 1 - pos)
        pos = m.end() - 1  # at the '{' of the next event


def _decode_piece(piece: bytes, env: Envelope, path: Path, base: int) -> list[ChromeEvent]:
    try:
        return _EVENTS_DECODER.decode(piece)
    except msgspec.DecodeError as exc:
        raise InputError(path, describe_decode_error(exc, env.data, env.events_offset + base)) from None


def _error_at_end(exc: Exception, length: int) -> bool:
    m = _BYTE_POS.search(str(exc))
    return m is not None and int(m.group(1)) >= length - 2


def describe_decode_error(exc: Exception, data: bytes, base: int) -> str:
    """A decode error as 'line L, column C (byte B): what' in the file's own coordinates."""
    text = str(exc)
    if "truncated" in text:
        return f"truncated JSON: the document ends early at byte {len(data)}; expected more events"
    m = _BYTE_POS.search(text)
    if not m:
        return f"malformed JSON: {text}"
    offset = base + int(m.group(1))
    line = data.count(b"\n", 0, offset) + 1
    column = offset - (data.rfind(b"\n", 0, offset) + 1) + 1
    what = _BYTE_POS.sub("", text).replace("JSON is malformed: ", "").strip()
    return f"malformed JSON at line {line}, column {column} (byte {offset}): {what}"


def _offset_in(data: bytes, view: memoryview) -> int:
    """Where `view` (a slice msgspec returned) starts inside `data`."""
    head = bytes(view[:64])
    found = data.find(b'"traceEvents"')
    if found >= 0:
        idx = data.find(head, found)
        if idx >= 0:
            return idx
    return max(data.find(head), 0)
