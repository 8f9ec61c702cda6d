"""The compiled field scanner (`_scan.c`): when it is built, Kineto JSON traces are read by one pass over
their bytes into typed columns instead of being decoded event by event (see docs/inputs.md).

It reads only documents it is sure to read exactly as the pure-Python reader does; for any other (an
unexpected value type, invalid UTF-8, a cut or malformed document...) it says why and the pure-Python
reader reads the file, with its own warnings and errors. `TRACEANALYZER_PURE_PYTHON=1` always uses the
pure-Python reader (to compare the two, or to rule the scanner out)."""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError
from ._columns import MAX_NAME_CHARS
from ._io import GZIP_MAGIC, UTF8_BOM, UTF16_BOMS, read_input

try:
    from . import _scan  # type: ignore[attr-defined]
except ImportError:  # no compiler at install time, or an unusual platform
    _scan = None

PURE_PYTHON_ENV = "TRACEANALYZER_PURE_PYTHON"
# An event larger than this is left to the pure-Python reader (its own bound on one event is larger).
MAX_EVENT_BYTES = 256 * 1024 * 1024

_COLUMN_TYPES = {"ts": np.float64, "dur": np.float64, "name": np.int32, "cat": np.int32, "pid": np.int64,
                 "tid": np.int64, "device": np.int64, "stream": np.int64, "original_stream": np.int64,
                 "correlation": np.int64, "bytes": np.int64, "graph": np.int64, "seq": np.int64,
                 "args_at": np.int64, "args_end": np.int64, "complex": np.bool_}


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
    """What the scanner read: typed columns of the "X" events (in file order), their names and categories
    (codes index `names` / `cats`), the other events' phases counted, the byte spans of the instant and
    counter events and of the args of every "X" event (into `data`), the top-level keys other than
    traceEvents (decoded), and the number of events."""

    data: Any
    columns: dict[str, np.ndarray]
    names: list[str]
    cats: list[str]
    phase_counts: list[tuple[str | None, int]]
    special: np.ndarray  # (n, 2) int64: [start, end) of each instant / counter event
    header: list[tuple[str, bytes]]
    events: int


def scan_path(path: Path, max_bytes: int, progress: Any = None) -> Scanned | str:
    """The scan of `path`, or why it is left to the pure-Python reader."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(3)
            size = os.fstat(fh.fileno()).st_size
            if head[:2] == GZIP_MAGIC:
                try:
                    data: Any = read_input(path, max_bytes, progress)
                except InputError as exc:  # cut off, over the limit: the pure-Python reader says so
                    return f"gzip not read whole ({exc.message[:80]})"
            else:
                if size == 0 or size > max_bytes or not path.is_file():
                    return "empty, over the input limit or no regular file"
                if any(head.startswith(bom) for bom, _ in UTF16_BOMS):
                    return "UTF-16 text"
                mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
                data = memoryview(mm)[len(UTF8_BOM):] if head == UTF8_BOM else memoryview(mm)
                if progress is not None:
                    progress(size)
    except (OSError, ValueError) as exc:
        return f"not mapped ({exc})"
    return scan_bytes(data)


def scan_bytes(data: Any) -> Scanned | str:
    """The scan of a whole (decompressed) document, or why it is left to the pure-Python reader."""
    if _scan is None:
        return "not built"
    out = _scan.scan(data, MAX_NAME_CHARS, MAX_EVENT_BYTES)
    if isinstance(out, str):
        return out
    columns = {k: np.frombuffer(out[k], dtype=t) for k, t in _COLUMN_TYPES.items()}
    counts = np.frombuffer(out["phase_counts"], dtype=np.int64).tolist()
    phase_counts: list[tuple[str | None, int]] = list(zip(out["phases"], counts))
    if out["null_phase"]:
        phase_counts.append((None, out["null_phase"]))
    spans = np.frombuffer(out["header"], dtype=np.int64).reshape(-1, 4).tolist()
    header = [(bytes(data[k0:k1]).decode("utf-8"), bytes(data[v0:v1])) for k0, k1, v0, v1 in spans
              if bytes(data[k0:k1]) != b"traceEvents"]
    return Scanned(data=data, columns=columns, names=out["names"], cats=out["cats"], phase_counts=phase_counts,
                   special=np.frombuffer(out["special"], dtype=np.int64).reshape(-1, 2), header=header,
                   events=out["events"])
