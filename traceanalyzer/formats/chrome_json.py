"""Chrome-trace JSON envelope shared by the Kineto and TF trace-viewer readers.

Two paths, same events:

* `stream_events(path, ...)`: the file is read (and gunzipped) block by block; the top-level
  keys before `traceEvents` are decoded on the way, the events array is cut at event boundaries
  into pieces of about `CHUNK_BYTES` and each piece is decoded into typed structs as soon as it
  is complete, then dropped; the keys after the array are decoded at the end. Memory stays at
  about one piece plus what the caller keeps. Documents it cannot follow (no top-level
  `traceEvents` list, odd key layouts) are handed to the whole-content path below, which owns
  the error messages.
* `parse_envelope(data)` + `iter_event_chunks(env)`: the whole (decompressed) content in
  memory, the `traceEvents` array kept as raw bytes and decoded in the same pieces.

Either way, a split point is a `}` `,` `{` sequence; one that falls inside a string or a nested
value makes the piece fail to decode as a truncated document, and the next candidate is tried.
Structs hold only the fields the readers use (every other key is skipped by the decoder) and
are not tracked by the cyclic garbage collector (decoded JSON has no cycles).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from ..errors import InputError
from ._io import DEFAULT_MAX_INPUT_BYTES, TruncatedInput, iter_input_blocks, read_input

CHUNK_BYTES = 32 * 1024 * 1024
# The header before `traceEvents` is looked for in at most this many bytes before giving up
# streaming (the whole-content path then reads the file and says what is wrong).
_MAX_HEADER_BYTES = 256 * 1024 * 1024


class ChromeArgs(msgspec.Struct, gc=False):
    """The `args` keys any reader looks at; every other key is skipped by the decoder."""

    name: Any = None  # M events: process / thread name
    labels: Any = None  # M process_labels: "CPU", "GPU 0"
    device: Any = None
    stream: Any = None
    original_stream: Any = None  # torch >= 2.15: the real stream of work moved onto a display lane
    correlation: Any = None
    external_id: Any = msgspec.field(default=None, name="External id")
    external_id_2021: Any = msgspec.field(default=None, name="external id")
    bytes: Any = None
    collective: Any = msgspec.field(default=None, name="Collective name")
    in_nelems: Any = msgspec.field(default=None, name="In msg nelems")  # NCCL kernels: message size
    out_nelems: Any = msgspec.field(default=None, name="Out msg nelems")
    dtype: Any = None
    pg_name: Any = msgspec.field(default=None, name="Process Group Name")  # NCCL kernels: process group
    pg_desc: Any = msgspec.field(default=None, name="Process Group Description")
    pg_ranks: Any = msgspec.field(default=None, name="Process Group Ranks")
    group_size: Any = msgspec.field(default=None, name="Group size")
    kind: Any = None  # ROCm memcpy direction ("HtoD")
    # Kineto 2026: CUDA graph of GPU work, NCCL sequence number of communication kernels (kineto.KinetoArgs)
    graph_id: Any = msgspec.field(default=None, name="graph id")
    graph_id_camel: Any = msgspec.field(default=None, name="graphId")
    seq: Any = msgspec.field(default=None, name="Seq")
    seq_lower: Any = msgspec.field(default=None, name="seq")
    # Kineto cuda_sync rows: the event record waited on and its stream (kineto.KinetoArgs)
    wait_corr: Any = msgspec.field(default=None, name="wait_on_cuda_event_record_corr_id")
    wait_stream: Any = msgspec.field(default=None, name="wait_on_stream")
    counter_value: Any = msgspec.field(default=None, name="")  # Kineto 2026 hardware counters' value key
    step_num: Any = None  # TF "Profiled batch"
    correlation_id: Any = None  # TF / xprof trace viewer: kernel <-> launch
    memcpy_details: Any = None  # TF / xprof: "kind:HtoD size:655360 dest:2 async:1"
    memset_details: Any = None
    input_dims: Any = msgspec.field(default=None, name="Input Dims")
    # torch.profiler(profile_memory=True) "[memory]" instants
    device_type: Any = msgspec.field(default=None, name="Device Type")
    device_id: Any = msgspec.field(default=None, name="Device Id")
    total_allocated: Any = msgspec.field(default=None, name="Total Allocated")
    total_reserved: Any = msgspec.field(default=None, name="Total Reserved")
    mem_bytes: Any = msgspec.field(default=None, name="Bytes")


class ChromeEvent(msgspec.Struct, gc=False):
    """One event with loosely typed fields: any JSON value decodes, readers coerce."""

    ph: Any = None
    name: Any = None
    cat: Any = None
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None
    args: ChromeArgs | None = None


_EVENTS_DECODER = msgspec.json.Decoder(list[ChromeEvent])
_EVENT_DECODER = msgspec.json.Decoder(ChromeEvent)
_RAW_LIST_DECODER = msgspec.json.Decoder(list[msgspec.Raw])
# What decoding repaired or dropped, by reason ("malformed_event": events of the wrong shape,
# dropped one by one; "invalid_utf8": pieces whose invalid UTF-8 bytes were replaced). A reader
# clears it before a file and reports it after (decoding is single-threaded).
DECODE_NOTES: Counter[str] = Counter()
_ENVELOPE_DECODER = msgspec.json.Decoder(dict[str, msgspec.Raw])
EVENT_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
# Strings (a lone '"' when the buffer ends inside one) and brackets: the header's structure.
_HEADER_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|"|[\[\]{}]', re.DOTALL)
_KEY_COLON = re.compile(rb'[ \t\r\n]*(:?)[ \t\r\n]*')
_BYTE_POS = re.compile(r"\(byte (\d+)\)")
_SPACE = b" \t\r\n"
# Whitespace runs this long are squeezed while streaming (see StreamReader._append_squeezed).
_SPACE_RUN = b" " * 65536
_SPACE_BYTES = (b" ", b"\t", b"\r", b"\n")
_LONG_SPACE = re.compile(rb"[ \t\r\n]{65536,}")
_SPACE_STRIDE = len(_SPACE_RUN) // 2


def holds_space_run(block: bytes) -> bool:
    """Whether `block` holds a run of whitespace long enough that the reader keeps only its first byte
    (a hostile gzip can hold gigabytes of it): a run of `_SPACE_RUN`, or a block of whitespace alone."""
    return (_may_hold_space_run(block) and _SPACE_RUN in block) or (
        len(block) >= len(_SPACE_RUN) and block[:1] in _SPACE_BYTES and block[-1:] in _SPACE_BYTES
        and not block.strip(_SPACE))


def _may_hold_space_run(block: bytes) -> bool:
    """False when `block` cannot hold `_SPACE_RUN`: such a run covers two neighbouring bytes of every
    `_SPACE_STRIDE`-th, so those samples (a few hundred bytes) are searched instead of the block (a
    search of every block cost half a second per GB)."""
    return b"  " in block[::_SPACE_STRIDE]


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
        raise InputError(path, "not a trace: the JSON document is a list whose first element is no trace "
                               "event (an object with a 'ph' key); a profiler trace is a JSON object with a "
                               "'traceEvents' list, or a list of trace events")
    if stripped[:1] != b"{":
        raise InputError(path, f"not a trace: expected JSON (optionally gzip-compressed), "
                               f"file starts with {data[:16]!r}")
    try:
        top = _ENVELOPE_DECODER.decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        if invalid_utf8(exc):
            at = exc.start if isinstance(exc, UnicodeDecodeError) else utf8_error_offset(data)
            raise InputError(path, f"not a trace: invalid UTF-8 at byte {at}") from None
        raise InputError(path, describe_decode_error(exc, data, 0)) from None
    except RecursionError:
        raise InputError(path, "not a trace: JSON nested too deeply") from None
    except msgspec.ValidationError:
        raise InputError(path, "not a trace: expected a JSON object with a 'traceEvents' list") from None
    raw = top.pop("traceEvents", None)
    if raw is None:
        keys = ", ".join(list(top)[:6]) or "none"
        raise InputError(path, f"not a trace: JSON object without a 'traceEvents' list (its keys: {keys})")
    view = memoryview(raw)
    if view.nbytes == 0 or bytes(view[:1]) != b"[":
        raise InputError(path, "not a trace: 'traceEvents' is not a list")
    header = decode_values(top)
    offset = _offset_in(data, view)
    return Envelope(header=header, events_raw=view, events_offset=offset, data=data)


def iter_event_chunks(env: Envelope, path: Path, chunk_bytes: int = CHUNK_BYTES,
                      progress: Callable[[int], None] | None = None,
                      decoder: msgspec.json.Decoder | None = None) -> Iterator[list[Any]]:
    """Decode the events array of an in-memory envelope in pieces split at event boundaries.

    `decoder` (a `Decoder(list[SomeStruct])`) decodes into a reader's own typed structs; a piece
    that does not validate against them is decoded into `ChromeEvent`s instead, so a chunk holds
    either kind and readers must accept both. Default: `ChromeEvent`s only.
    """
    raw = env.events_raw
    end = raw.nbytes
    pos = 1  # after '['
    while pos < end:
        if end - pos <= chunk_bytes * 3 // 2:
            piece = b"[" + bytes(raw[pos:end])
            yield _decode_piece(piece, env, path, pos - 1, decoder)
            if progress:
                progress(end - pos)
            return
        search_from = pos + chunk_bytes
        skip = 0
        while True:
            m = EVENT_BOUNDARY.search(raw, search_from)
            if m is None:
                piece = b"[" + bytes(raw[pos:end])
                yield _decode_piece(piece, env, path, pos - 1, decoder)
                if progress:
                    progress(end - pos)
                return
            piece = b"[" + bytes(raw[pos:m.start() + 1]) + b"]"
            try:
                events = _decode(piece, decoder)
            except msgspec.DecodeError as exc:
                if "truncated" in str(exc) or error_at_end(exc, len(piece)):
                    search_from = m.end() + skip  # inside a string or nested value: try further on
                    skip = next_skip(skip)
                    continue
                raise InputError(path, describe_decode_error(exc, env.data, env.events_offset + pos - 1)) from None
            break
        yield events
        if progress:
            progress(m.end() - 1 - pos)
        pos = m.end() - 1  # at the '{' of the next event


# After a split candidate fails (it sat inside a string or nested value), the next one is looked
# for this much further on, doubling each time: a value holding a million `},{` costs a few
# dozen decodes of the piece, not a million.
_FIRST_SKIP = 64 * 1024
# A piece of the events list longer than this without a usable event boundary is refused: no
# profiler writes such an event, and holding it would take the memory of a hostile input's size.
_MAX_PIECE_BYTES = 2 * 1024**3


def next_skip(skip: int) -> int:
    return max(2 * skip, _FIRST_SKIP)


class NestingError(ValueError):
    """JSON nested deeper than the decoder follows (a hostile or broken document)."""


def invalid_utf8(exc: Exception) -> bool:
    """Whether a decode error is invalid UTF-8 in the input: msgspec before 0.23 raises
    UnicodeDecodeError, later versions a DecodeError saying so."""
    return isinstance(exc, UnicodeDecodeError) or (isinstance(exc, msgspec.DecodeError) and "UTF-8" in str(exc))


def utf8_error_offset(data: Any) -> int:
    """The byte offset of the first invalid UTF-8 sequence in `data` (0 when there is none)."""
    try:
        bytes(data).decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start
    return 0


def _decode(piece: Any, decoder: msgspec.json.Decoder | None, transient: bool = False) -> list[Any]:
    """A piece of the events array: typed structs, else loose ones; events that fit neither are
    dropped one by one (counted in DECODE_NOTES); invalid UTF-8 is replaced, not fatal.
    `transient`: the caller lets go of the events before the buffer under `piece` changes, so
    typed structs may point into it (else they are given a copy, see `_unchanging`)."""
    try:
        if decoder is not None:
            try:
                return decoder.decode(piece if transient else _unchanging(piece))  # type: ignore[no-any-return]
            except msgspec.ValidationError:
                pass  # a value of an unexpected type somewhere in the piece: decode it loosely
        try:
            return _EVENTS_DECODER.decode(piece)
        except msgspec.ValidationError:
            return _decode_one_by_one(piece)
    except (UnicodeDecodeError, msgspec.DecodeError) as exc:
        if not invalid_utf8(exc):
            raise
        DECODE_NOTES["invalid_utf8"] += 1
        fixed = bytes(piece).decode("utf-8", "replace").encode("utf-8")
        return _decode(fixed, decoder, transient)
    except RecursionError:
        raise NestingError("JSON nested too deeply inside an event") from None


def _unchanging(piece: Any) -> Any:
    """`piece`, or a copy of it where it is a view of a buffer that may later be resized or
    overwritten: typed structs keep undecoded values (msgspec.Raw) that point into what they were
    decoded from."""
    if isinstance(piece, bytes) or (isinstance(piece, memoryview) and isinstance(piece.obj, bytes)):
        return piece
    return bytes(piece)


def _decode_one_by_one(piece: Any) -> list[Any]:
    out = []
    for raw in _RAW_LIST_DECODER.decode(piece):
        try:
            out.append(_EVENT_DECODER.decode(raw))
        except msgspec.ValidationError:
            DECODE_NOTES["malformed_event"] += 1
    return out


def decode_span(buf: bytearray, start: int, end: int, decoder: msgspec.json.Decoder | None,
                 transient: bool = False) -> list[Any]:
    """Decode buf[start:end] as a list, with '[' written over buf[start] and ']' over buf[end]
    (both restored after): the events between two boundaries, without copying them. `transient`:
    see `_decode` (the two bytes written lie outside every event)."""
    saved_start = buf[start]
    saved_end = buf[end]
    buf[start] = 0x5B  # '['
    buf[end] = 0x5D  # ']'
    try:
        with memoryview(buf) as view:
            return _decode(view[start:end + 1], decoder, transient)
    finally:
        buf[start] = saved_start
        buf[end] = saved_end


def _decode_piece(piece: bytes, env: Envelope, path: Path, base: int,
                  decoder: msgspec.json.Decoder | None = None) -> list[Any]:
    try:
        return _decode(piece, decoder)
    except msgspec.DecodeError as exc:
        raise InputError(path, describe_decode_error(exc, env.data, env.events_offset + base)) from None


def error_at_end(exc: Exception, length: int) -> bool:
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


def decode_values(top: dict[str, msgspec.Raw]) -> dict[str, Any]:
    header: dict[str, Any] = {}
    for key, value in top.items():
        try:
            header[key] = msgspec.json.decode(value)
        except (msgspec.DecodeError, RecursionError, UnicodeDecodeError):
            header[key] = None
    return header


# --- streaming -----------------------------------------------------------------------------------


@dataclass
class EventStream:
    """The events of one Chrome-trace file, decoded while it is read: iterate `chunks()`.

    `header` (every top-level key except traceEvents) is complete only once `chunks()` is
    exhausted, since keys may follow the events array (e.g. `baseTimeNanoseconds`).
    """

    path: Path
    max_bytes: int = DEFAULT_MAX_INPUT_BYTES
    chunk_bytes: int = CHUNK_BYTES
    progress: Callable[[int], None] | None = None
    decoder: msgspec.json.Decoder | None = None
    header: dict[str, Any] = field(default_factory=dict)
    streamed: bool = False  # True when the streaming path was taken (False: whole content)
    # Set when the content ends inside the events list (a capture cut off by a crash): what is
    # missing; the complete events before the cut were yielded.
    truncated: str | None = None
    # The document is a bare list of events (the Trace Event Format's JSON Array Format), whose
    # closing ']' may be left out: its end after a complete event is no truncation.
    array_format: bool = False

    def chunks(self) -> Iterator[list[Any]]:
        blocks = iter_input_blocks(self.path, self.max_bytes, self.progress)
        reader = StreamReader(blocks)
        if not self._find_events_start(reader):
            reader.close()
            yield from self._whole_content()
            return
        self.streamed = True
        yield from self.events_from(reader)

    def events_from(self, r: StreamReader) -> Iterator[list[Any]]:
        """The events from `r` on to the end of the document, whose `buf[0]` is the array's '[' or
        the byte before an event's '{' (see `chrome_parallel`, which streams a file's tail so)."""
        try:
            yield from self._stream(r)
        except NestingError as exc:
            raise InputError(self.path, f"not a trace: {exc}") from None

    # The whole-content path, for documents the streaming scanner does not follow.
    def _whole_content(self) -> Iterator[list[Any]]:
        data = read_input(self.path, self.max_bytes, self.progress)
        env = parse_envelope(data, self.path)
        self.header = env.header
        try:
            yield from iter_event_chunks(env, self.path, self.chunk_bytes, decoder=self.decoder)
        except NestingError as exc:
            raise InputError(self.path, f"not a trace: {exc}") from None

    def _find_events_start(self, r: StreamReader) -> bool:
        """Read up to the '[' of a top-level traceEvents list; decode the keys before it.

        One pass over strings and brackets (linear however many `"traceEvents"` keys are nested
        in values before the real one); the keys before it are decoded once.
        """
        while not r.eof and len(r.buf) < 64 * 1024:
            r.more()
        lead = len(r.buf) - len(r.buf.lstrip(_SPACE))
        while lead == len(r.buf) and not r.eof:  # a blank start (squeezed while read)
            r.more()
            lead = len(r.buf) - len(r.buf.lstrip(_SPACE))
        if r.buf[lead:lead + 1] == b"[" and self._array_of_events(r, lead):
            r.drop(lead)  # the JSON Array Format: the document is the events list itself
            self.array_format = True
            return True
        if r.buf[lead:lead + 1] != b"{":  # not an object: say so without reading the rest
            parse_envelope(bytes(r.buf[lead:lead + 64 * 1024]), self.path)
            return False
        depth = 0
        pos = lead
        while True:
            m = _HEADER_TOKEN.search(r.buf, pos)
            # None found, or a lone '"': a string cut by the buffer's end.
            if m is None or (m.end() - m.start() == 1 and r.buf[m.start()] == 0x22):
                if r.eof or len(r.buf) > _MAX_HEADER_BYTES:
                    return False
                if m is None:
                    pos = len(r.buf)
                    r.more()
                else:  # rescan the cut string once the buffer has doubled: linear overall
                    r.more_until(2 * len(r.buf))
                continue
            tok = r.buf[m.start()]
            if tok in b"{[":
                depth += 1
            elif tok in b"}]":
                depth -= 1
                if depth <= 0:
                    return False  # the top-level object closed without a traceEvents key
            elif depth == 1 and m.end() - m.start() == 13 and r.buf[m.start():m.end()] == b'"traceEvents"':
                colon = _KEY_COLON.match(r.buf, m.end())
                if colon is None or colon.end() >= len(r.buf):
                    if r.eof or len(r.buf) > _MAX_HEADER_BYTES:
                        return False
                    r.more()
                    continue  # search again from the same token
                if colon.group(1) == b"":  # a value "traceEvents", not a key
                    pos = m.end()
                    continue
                return self._header_before(r, m.start(), colon.end())
            pos = m.end()

    def _array_of_events(self, r: StreamReader, lead: int) -> bool:
        """Whether the list starting at buf[lead] is the Trace Event Format's JSON Array Format: its
        first element an object with a "ph" key (other JSON lists, such as tool outputs, are not)."""
        r.more_until(lead + _MAX_FIRST_EVENT_BYTES)
        start = lead + 1
        while start < len(r.buf) and r.buf[start] in _SPACE:
            start += 1
        if r.buf[start:start + 1] != b"{":
            return False
        end = _last_event_end(r.buf, start, first=True)
        if end <= start:
            return False
        try:
            first = msgspec.json.decode(bytes(r.buf[start:end]))
        except (msgspec.DecodeError, RecursionError, UnicodeDecodeError):
            return False
        return isinstance(first, dict) and "ph" in first

    def _header_before(self, r: StreamReader, key_start: int, list_start: int) -> bool:
        """Decode the top-level keys before `"traceEvents":` and drop them from the buffer."""
        if r.buf[list_start:list_start + 1] != b"[":
            return False
        prefix = bytes(r.buf[:key_start]).rstrip(_SPACE)
        if prefix.endswith(b","):
            prefix = prefix[:-1]
        try:
            top = _ENVELOPE_DECODER.decode(prefix + b"}")
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError, UnicodeDecodeError):
            return False  # the whole-content path says what is wrong
        self.header = decode_values(top)
        r.drop(list_start)  # buf now starts with '['
        return True

    def _stream(self, r: StreamReader) -> Iterator[list[Any]]:
        pos = 1  # in r.buf: the start of the next event, after '[' (or ',')
        chunk = self.chunk_bytes
        while True:
            search_from = pos + chunk
            skip = 0
            while len(r.buf) < search_from + 4096 and not r.eof:
                r.more()
            while True:
                if len(r.buf) - pos > _MAX_PIECE_BYTES:
                    raise InputError(self.path, f"no end of an event in {len(r.buf) - pos} bytes from byte "
                                                f"{r.offset(pos)}: not a profiler trace (or one event larger "
                                                f"than {_MAX_PIECE_BYTES} bytes)")
                m = EVENT_BOUNDARY.search(r.buf, search_from) if len(r.buf) > search_from else None
                if m is None:
                    if r.eof:
                        yield from self._final(r, pos)
                        return
                    r.more()
                    continue
                try:
                    # transient: the events are let go of (below, and by every consumer of `chunks`)
                    # before the buffer is dropped from or grown, so they are decoded without a copy
                    events = r.decode(pos - 1, m.start() + 1, self.decoder, transient=True)
                except msgspec.DecodeError as exc:
                    if "truncated" in str(exc) or error_at_end(exc, m.start() + 2 - (pos - 1)):
                        # The candidate is inside a string or nested value: try one further on.
                        search_from = m.end() + skip
                        skip = next_skip(skip)
                        continue
                    if "trailing characters" in str(exc):  # the array ends in this piece
                        while not r.eof:
                            r.more()
                        yield from self._final(r, pos)
                        return
                    raise InputError(self.path, r.describe(exc, pos - 1)) from None
                break
            yield events
            del events
            r.drop(m.end() - 2)  # keep one byte before the next event's '{'
            pos = 1

    def _final(self, r: StreamReader, pos: int) -> Iterator[list[Any]]:
        """The last events, the ']' closing the array and the keys after it."""
        buf = r.buf
        hi = len(buf)
        for _ in range(10000):
            j = buf.rfind(b"]", pos - 1, hi)
            if j < 0:
                break
            tail: dict[str, msgspec.Raw] | None
            if self.array_format:  # a bare list: nothing but blanks may follow its ']'
                tail = None if bytes(buf[j + 1:]).strip(_SPACE) else {}
            else:
                tail = r.decode_tail(j + 1)
            if tail is None:
                hi = j
                continue
            try:
                events = r.decode_closed(pos - 1, j + 1, self.decoder)
            except msgspec.DecodeError as exc:
                m = _BYTE_POS.search(str(exc))
                if "trailing characters" in str(exc) and m:
                    hi = pos - 1 + int(m.group(1))  # the array closes before the guessed ']'
                    continue
                if "truncated" in str(exc):  # the guessed ']' closes a list inside an event of a file
                    hi = j  # cut just after that event's args (what follows read as the keys after the array)
                    continue
                raise InputError(self.path, r.describe(exc, pos - 1)) from None
            if "traceEvents" in tail:
                raise InputError(self.path, "not a trace: more than one top-level 'traceEvents' key")
            self.header.update(decode_values(tail))
            yield events
            return
        try:  # no usable ']': decode what is there to say what is wrong
            r.decode_closed(pos - 1, len(buf), self.decoder)
        except msgspec.DecodeError as exc:
            if "truncated" in str(exc) or r.cut is not None or error_at_end(exc, len(buf) - (pos - 1)):
                # cut off inside the events (inside a number, msgspec says "invalid number"): salvage
                yield self._salvage(r, pos)
                return
            m = _BYTE_POS.search(str(exc))
            if "trailing characters" in str(exc) and m:  # the array is fine: the keys after it are not
                comma = buf.rfind(b",", pos - 1, pos + int(m.group(1)))  # msgspec points at or after it
                if comma >= 0 and not bytes(buf[comma + 1:pos - 1 + int(m.group(1))]).strip(_SPACE):
                    buf[comma] = 0x7B  # '{' over the ','
                    pos_tail: int | None = None
                    try:
                        with memoryview(buf) as view:
                            _ENVELOPE_DECODER.decode(view[comma:])
                    except (msgspec.DecodeError, msgspec.ValidationError) as tail_exc:
                        exc = tail_exc
                        pos_tail = comma + 1
                    finally:
                        buf[comma] = 0x2C
                    if pos_tail is not None and "truncated" in str(exc):  # cut inside the keys after the list
                        events = r.decode_closed(pos - 1, comma, self.decoder)
                        self.truncated = (f"the JSON document ends inside the keys after the event list "
                                          f"(content cut at byte {r.offset(len(buf))}; e.g. baseTimeNanoseconds "
                                          f"may be missing)")
                        yield events
                        return
                    if pos_tail is not None:
                        pos = pos_tail
            raise InputError(self.path, r.describe(exc, pos - 1)) from None
        yield self._salvage(r, pos)

    def _salvage(self, r: StreamReader, pos: int) -> list[Any]:
        """The complete events before a cut: the array is closed after the last complete event (found
        by following strings and brackets from `pos`, so `}, {` inside strings cannot mislead it);
        if that does not decode, after the last event boundary that does (tried from the end, a
        bounded number of times)."""
        r.buf = buf = bytearray(r.buf)  # a fresh copy: views left by the failed decode pin the old one
        ends = [m.start() + 1 for m in EVENT_BOUNDARY.finditer(buf, max(pos - 1, len(buf) - (4 << 20)))]
        last = buf.rfind(b"}")
        if last >= pos:
            ends.append(last + 1)
        exact = _last_event_end(buf, pos) if len(buf) - pos <= _MAX_SALVAGE_SCAN else pos
        events: list[Any] = []
        for end in ([exact] if exact > pos else []) + sorted(set(ends), reverse=True)[:_SALVAGE_TRIES]:
            if end >= len(buf):
                buf += b" "
            try:
                events = r.decode(pos - 1, end, self.decoder)
                break
            except msgspec.DecodeError:
                continue
        where = r.offset(len(r.buf))
        self.truncated = (r.cut or "the JSON document ends inside the event list") + \
            f" (content cut at byte {where})"
        if self.array_format and r.cut is None and events and not bytes(buf[end:]).strip(b" \t\r\n,\x00"):
            self.truncated = None  # the JSON Array Format may leave out its closing ']'
        return events


_SALVAGE_TRIES = 64
# The exact scan of `_salvage` follows at most this many bytes (a Python step per string or bracket).
_MAX_SALVAGE_SCAN = 64 * 1024 * 1024


# The first element of a JSON list is looked for in at most this many bytes (JSON Array Format sniffing).
_MAX_FIRST_EVENT_BYTES = 1024 * 1024


def _last_event_end(buf: bytearray, pos: int, first: bool = False) -> int:
    """Index just after the last object that closes at depth 0 from `pos` (an event's '{') on, i.e.
    the end of the last complete event before a cut; `pos` when none closes. `first`: stop at the
    first one."""
    depth = 0
    end = pos
    for m in _HEADER_TOKEN.finditer(buf, pos):
        if first and end > pos:
            break
        tok = buf[m.start()]
        if tok == 0x22:  # a string; a lone '"' is one the cut left open
            if m.end() - m.start() == 1:
                break
        elif tok in b"{[":
            depth += 1
        else:
            depth -= 1
            if depth == 0 and tok == 0x7D:
                end = m.end()
            elif depth < 0:  # the array's own ']': nothing to salvage beyond it
                break
    return end


def count_newlines(buf: bytearray, lo: int, hi: int) -> int:
    """`buf.count(b"\\n", lo, hi)`, vectorized in cache-sized slices (bytes.count looks at one byte at
    a time; a comparison of the whole range at once writes a mask as large as the range)."""
    if hi <= lo:
        return 0
    n = 0
    with memoryview(buf) as view:  # released at once: the window may grow afterwards
        data = np.frombuffer(view[lo:hi], dtype=np.uint8)
        for at in range(0, len(data), _NEWLINE_SLICE):
            n += int(np.count_nonzero(data[at:at + _NEWLINE_SLICE] == 10))
        del data
    return n


_NEWLINE_SLICE = 1 << 18


class StreamReader:
    """A growing window on the content: blocks are appended at the end, dropped at the front;
    `base` is the content offset of `buf[0]`, and newlines before it are counted for errors."""

    def __init__(self, blocks: Iterator[bytes]) -> None:
        self.blocks = blocks
        self.buf = bytearray()
        self.base = 0
        self.eof = False
        self.lines_before = 0  # newlines in the content before buf[0]
        self.last_newline = -1  # content offset of the last newline before buf[0]
        self.cut: str | None = None  # the compressed stream ended early (what the gunzip said)
        # Long whitespace runs are not kept (a hostile gzip can hold gigabytes of it): where
        # they were (offset in the kept content, i.e. base + index), bytes and newlines skipped.
        self.holes: list[tuple[int, int, int]] = []
        self.skipped_bytes = 0

    def more(self) -> None:
        if self.eof:
            return
        try:
            block = next(self.blocks, None)
        except TruncatedInput as exc:  # a gzip stream cut off: what came before it stays usable
            self.cut = exc.message
            block = None
        if block is None:
            self.eof = True
        elif holds_space_run(block):
            self._append_squeezed(block)
        else:
            self.buf += block

    def _append_squeezed(self, block: bytes) -> None:
        """Append `block` with each long run of whitespace kept as its first byte."""
        if not block.strip(_SPACE):
            runs = [(0, len(block))]
        else:
            runs = [m.span() for m in _LONG_SPACE.finditer(block)]
        prev = 0
        for lo, hi in runs:
            self.buf += block[prev:lo + 1]
            at = self.base + len(self.buf)
            newlines = block.count(b"\n", lo + 1, hi)
            if self.holes and self.holes[-1][0] >= at - 1:
                _, n0, nl0 = self.holes[-1]
                self.holes[-1] = (self.holes[-1][0], n0 + hi - lo - 1, nl0 + newlines)
            else:
                self.holes.append((at, hi - lo - 1, newlines))
            self.skipped_bytes += hi - lo - 1
            prev = hi
        self.buf += block[prev:]

    def _skipped_before(self, kept_offset: int) -> tuple[int, int]:
        """(bytes, newlines) of whitespace skipped before this offset in the kept content."""
        n = lines = 0
        for at, size, newlines in self.holes:
            if at > kept_offset:
                break
            n += size
            lines += newlines
        return n, lines

    def offset(self, index: int) -> int:
        """The content (file or decompressed) offset of buf[index]."""
        kept = self.base + index
        return kept + self._skipped_before(kept)[0]

    def more_until(self, size: int) -> None:
        while not self.eof and len(self.buf) < size:
            self.more()

    def close(self) -> None:
        close = getattr(self.blocks, "close", None)
        if close:
            close()

    def drop(self, n: int) -> None:
        if n <= 0:
            return
        newlines = count_newlines(self.buf, 0, n)
        if newlines:
            self.lines_before += newlines
            self.last_newline = self.offset(self.buf.rfind(b"\n", 0, n))
        del self.buf[:n]
        self.base += n

    def decode(self, start: int, end: int, decoder: msgspec.json.Decoder | None, transient: bool = False) -> list[Any]:
        """Decode buf[start:end] as a list, with '[' written over buf[start] and ']' over buf[end]
        (`transient`: see `_decode`)."""
        return decode_span(self.buf, start, end, decoder, transient)

    def decode_closed(self, start: int, end: int, decoder: msgspec.json.Decoder | None) -> list[Any]:
        """Decode buf[start:end] (which ends with its own ']') with '[' written over buf[start]."""
        buf = self.buf
        saved = buf[start]
        buf[start] = 0x5B
        try:
            with memoryview(buf) as view:
                return _decode(view[start:end], decoder)
        finally:
            buf[start] = saved

    def decode_tail(self, start: int) -> dict[str, msgspec.Raw] | None:
        """The keys after the events array (`, "k": v ... }` from buf[start]), or None if what
        follows is no such tail. Fails fast on bytes that are not one, and copies nothing."""
        buf = self.buf
        i = start
        n = len(buf)
        while i < n and buf[i] in _SPACE:
            i += 1
        if i == n:
            return None
        if buf[i] == 0x7D:  # '}': the document ends here; only whitespace may follow
            k = i + 1
            while k < n and buf[k] in _SPACE:
                k += 1
            return {} if k == n else None
        if buf[i] != 0x2C:  # ','
            return None
        buf[i] = 0x7B  # '{' over the ',': decode the rest as an object
        try:
            with memoryview(buf) as view:
                return _ENVELOPE_DECODER.decode(view[i:])
        except (msgspec.DecodeError, msgspec.ValidationError):
            return None
        finally:
            buf[i] = 0x2C

    def describe(self, exc: Exception, start: int) -> str:
        text = str(exc)
        if "truncated" in text:
            while not self.eof:  # the content's length, as the whole-content path says it
                self.more()
            return (f"truncated JSON: the document ends early at byte {self.offset(len(self.buf))}; "
                    f"expected more events")
        m = _BYTE_POS.search(text)
        if not m:
            return f"malformed JSON: {text}"
        rel = start + int(m.group(1))
        offset = self.offset(rel)
        line = self.lines_before + self.buf.count(b"\n", 0, rel) + self._skipped_before(self.base + rel)[1] + 1
        nl = self.buf.rfind(b"\n", 0, rel)
        last_newline = self.offset(nl) if nl >= 0 else self.last_newline
        column = offset - (last_newline + 1) + 1
        what = _BYTE_POS.sub("", text).replace("JSON is malformed: ", "").strip()
        return f"malformed JSON at line {line}, column {column} (byte {offset}): {what}"


def stream_events(path: Path, *, max_bytes: int = DEFAULT_MAX_INPUT_BYTES, chunk_bytes: int = CHUNK_BYTES,
                  progress: Callable[[int], None] | None = None,
                  decoder: msgspec.json.Decoder | None = None) -> EventStream:
    """An `EventStream` over `path` (see the module docstring)."""
    return EventStream(path, max_bytes=max_bytes, chunk_bytes=chunk_bytes, progress=progress, decoder=decoder)
