"""The compiled field scanner (`_scan.c`): when it is built, Kineto JSON traces are read by one pass over
their bytes into typed columns instead of being decoded event by event (see docs/inputs.md).

It reads only documents it is sure to read exactly as the pure-Python reader does; for any other (an
unexpected value type, invalid UTF-8, a cut or malformed document...) it says why and the pure-Python
reader reads the file, with its own warnings and errors. `TRACEANALYZER_PURE_PYTHON=1` always uses the
pure-Python reader (to compare the two, or to rule the scanner out)."""

from __future__ import annotations

import mmap
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError
from ._columns import MAX_NAME_CHARS
from ._io import GZIP_MAGIC, UTF8_BOM, UTF16_BOMS, iter_input_blocks
from .chrome_json import EventStream, holds_space_run
from .chrome_parallel import spool_gzip

try:
    from . import _scan  # type: ignore[attr-defined]
except ImportError:  # no compiler at install time, or an unusual platform
    _scan = None

PURE_PYTHON_ENV = "TRACEANALYZER_PURE_PYTHON"
# An event larger than this is left to the pure-Python reader (its own bound on one event is larger).
MAX_EVENT_BYTES = 256 * 1024 * 1024
# A gzip file from this size on is spooled to a temporary plain file and mapped (where that is safe):
# its content is then never held in memory whole. Smaller ones are inflated in memory.
_SPOOL_MIN_COMPRESSED = 8 * 1024 * 1024
# A gzip file not spooled (small, or the temporary folder in memory or short of disk) is inflated in memory
# up to this size; beyond it the file is left to the streaming pure-Python reader.
MAX_INFLATED_IN_MEMORY = 512 * 1024 * 1024
# With two threads, a document's events are cut in two halves scanned at once when each is at least this
# big (below, the second thread's start costs more than it saves).
MIN_SPLIT_BYTES = 32 * 1024 * 1024
# The columns come in pieces of this many rows, each let go of once the Timeline's columns are made from it:
# the file's rows are never held twice over (as raw values and as the table's columns).
PIECE_ROWS = 1 << 20

# stream: args.original_stream where it is a stream (>= 0), else args.stream (kineto._real_stream)
_COLUMN_TYPES = {"ts": np.float64, "dur": np.float64, "name": np.int32, "cat": np.int32, "pid": np.int64,
                 "tid": np.int64, "device": np.int64, "stream": np.int64, "correlation": np.int64,
                 "bytes": np.int64, "graph": np.int64, "seq": np.int64}


def available() -> bool:
    """Whether the compiled scanner is built and not switched off."""
    return _scan is not None and os.environ.get(PURE_PYTHON_ENV, "") in ("", "0")


def status() -> str:
    """One line saying which reader reads Kineto JSON, and why."""
    if _scan is None:
        return "JSON traces are read by the pure-Python reader: the compiled scanner is not built here"
    if not available():
        return f"JSON traces are read by the pure-Python reader ({PURE_PYTHON_ENV} is set)"
    return "JSON traces are read by the compiled scanner"


@dataclass
class Scanned:
    """What the scanner read: typed columns of the "X" events (in file order, in pieces of PIECE_ROWS rows), their
    names and categories
    (codes index `names` / `cats`), the other events' phases counted, the text of the instant and counter
    events and of the args the scanner leaves to Python (copied out of the file, which is let go of at
    once), the top-level keys other than traceEvents (undecoded), and the number of events."""

    columns: dict[str, list[np.ndarray]]
    names: list[str]
    cats: list[str]
    phase_counts: list[tuple[str | None, int]]
    special: list[bytes]  # each instant / counter event's text
    complex_rows: np.ndarray  # the rows of the "X" events whose args Python reads (the scanner types them not)
    complex_args: list[bytes]  # their args' text
    header: list[tuple[str, bytes]]
    events: int


def scan_path(path: Path, max_bytes: int, progress: Any = None, threads: int = 1) -> Scanned | str:
    """The scan of `path`, or why it is left to the pure-Python reader. A plain file is mapped, not read;
    a gzip file's content spooled to a temporary plain file as the parallel reader spools it (where that is
    safe, else inflated in memory). `threads`: 2 scans the second half of a big file's events in a second
    thread (the interpreter lock is released while scanning)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(3)
            size = os.fstat(fh.fileno()).st_size
            if head[:2] == GZIP_MAGIC:
                spooled = spool_gzip(EventStream(path, max_bytes=max_bytes), min_compressed=_SPOOL_MIN_COMPRESSED)
                if spooled is None:
                    data = _inflate_small(path, max_bytes, progress)
                    return data if isinstance(data, str) else scan_bytes(data, threads=threads)
                try:
                    if progress is not None:
                        progress(size)
                    return _scan_mapped(spooled.fd, threads, spooled.close)
                except BaseException:
                    spooled.close()
                    raise
            if size == 0 or size > max_bytes or not path.is_file():
                return "empty, over the input limit or no regular file"
            if any(head.startswith(bom) for bom, _ in UTF16_BOMS):
                return "UTF-16 text"
            out = _scan_mapped(fh.fileno(), threads)
            if progress is not None:
                progress(size)
            return out
    except (OSError, ValueError) as exc:
        return f"not mapped ({exc})"


def _inflate_small(path: Path, max_bytes: int, progress: Any) -> bytes | str:
    """A gzip file's content in memory, or why not: content beyond MAX_INFLATED_IN_MEMORY, holding the long
    whitespace runs the streaming reader squeezes (a hostile gzip), cut off or over the input limit, UTF-16
    text. Those are left to the pure-Python reader, which streams them and says what is wrong."""
    blocks: list[bytes] = []
    total = 0
    try:
        for block in iter_input_blocks(path, max_bytes, progress):
            total += len(block)
            if total > MAX_INFLATED_IN_MEMORY or holds_space_run(block):
                return "gzip content too large to inflate in memory, or long runs of whitespace"
            blocks.append(block)
    except InputError as exc:
        return f"gzip not read whole ({exc.message[:80]})"
    data = b"".join(blocks)
    if any(data.startswith(bom) for bom, _ in UTF16_BOMS):
        return "UTF-16 text"
    return data


def _scan_mapped(fd: int, threads: int, close: Callable[[], None] | None = None) -> Scanned | str:
    """The scan of a plain file by its descriptor, mapped (a UTF-8 byte-order mark skipped, except in a spooled
    gzip's content, which had it removed); the mapping (and the spooled file, `close`) given back before it
    returns."""
    mm = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    whole = memoryview(mm)
    view = whole[len(UTF8_BOM):] if close is None and whole[:len(UTF8_BOM)] == UTF8_BOM else whole[:]
    try:
        return scan_bytes(view, mapped=True, threads=threads)
    finally:
        view.release()
        whole.release()
        mm.close()
        if close is not None:
            close()


def scan_bytes(data: Any, mapped: bool = False, threads: int = 1, min_split: int = MIN_SPLIT_BYTES,
               piece_rows: int = 0) -> Scanned | str:
    """The scan of a whole (decompressed) document, or why it is left to the pure-Python reader. `mapped`:
    `data` maps a file, whose pages the scan gives back behind it; `threads`, `min_split`: see `scan_path`."""
    if _scan is None:
        return "not built"
    out = _scan.scan(data, MAX_NAME_CHARS, MAX_EVENT_BYTES, mapped, min(max(threads, 1), 2), min_split,
                     piece_rows or PIECE_ROWS)
    if isinstance(out, str):
        return out
    columns = {k: [np.frombuffer(piece, dtype=t) for piece in out[k]] for k, t in _COLUMN_TYPES.items()}
    counts = np.frombuffer(out["phase_counts"], dtype=np.int64).tolist()
    phase_counts: list[tuple[str | None, int]] = list(zip(out["phases"], counts))
    if out["null_phase"]:
        phase_counts.append((None, out["null_phase"]))
    complex = np.frombuffer(out["complex"], dtype=np.int64).reshape(-1, 3)
    spans = np.frombuffer(out["header"], dtype=np.int64).reshape(-1, 4).tolist()
    header = [(bytes(data[k0:k1]).decode("utf-8"), bytes(data[v0:v1])) for k0, k1, v0, v1 in spans
              if bytes(data[k0:k1]) != b"traceEvents"]
    return Scanned(columns=columns, names=out["names"], cats=out["cats"], phase_counts=phase_counts,
                   special=_pieces(out["special_text"], np.frombuffer(out["special"], dtype=np.int64)),
                   complex_rows=complex[:, 0].copy(), complex_args=_pieces(out["complex_text"], complex[:, 1:]),
                   header=header, events=out["events"])


def _pieces(text: bytearray, spans: np.ndarray) -> list[bytes]:
    """The pieces of `text` at `spans` ([start, end) pairs)."""
    with memoryview(text) as view:
        return [bytes(view[a:b]) for a, b in np.asarray(spans).reshape(-1, 2).tolist()]
