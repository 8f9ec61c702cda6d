"""A disk cache of decoded traces: a second `report` or `diff` of a big trace skips the decode.

One entry per input file: its Timeline's columns (numpy arrays; strings as UTF-8 bytes with
offsets) and a small JSON of the rest, in one uncompressed `.npz` read back with
`allow_pickle=False`, so nothing in the cache is ever executed. An entry is found by a hash of the
file's resolved path, size, modification time (ns), the path as given (results quote it), the
tool version and the reader options that change what is read, and used only when its own copy of
those equals them; anything unreadable or inconsistent is ignored and replaced. Entries are
written atomically (a temporary file renamed into place) and the oldest-used are removed past
`max_bytes()`. Only inputs of at least `CACHE_MIN_BYTES` are cached.

Where: `$TRACEANALYZER_CACHE_DIR`, else `$XDG_CACHE_HOME/traceanalyzer`, else
`~/.cache/traceanalyzer`. Size bound: `$TRACEANALYZER_CACHE_MAX_SIZE` (e.g. 10GiB), default 2 GiB.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pandas as pd

from ._version import __version__
from .formats._io import resolved
from .timeline import (
    COPY_KINDS,
    COUNTER_COLUMNS,
    EVENT_COLUMNS,
    EVENT_KINDS,
    HOST_METRIC_COLUMNS,
    HOST_METRICS,
    MEMORY_COLUMNS,
    MEMORY_DEVICE_TYPES,
    REQUEST_COLUMNS,
    DeviceInfo,
    HostLogInfo,
    RankInfo,
    Source,
    Timeline,
)

# Bump when the entry layout, the Timeline's columns or what a reader keeps change (5: which Kineto
# events' args are read; 7: whether a source was cut off and how many GPUs a trace lists, CUDA graph
# ids and NCCL sequence numbers; 9: ROCm devices and memory curves rebuilt from sizes; 10: the event record
# a cuda_sync row waits on, `wait_corr` / `wait_stream`; 11: the requests table).
CACHE_FORMAT = 11
# Every table of a Timeline, with its column contract (a test checks none is missing).
TABLES: dict[str, dict[str, str]] = {"events": EVENT_COLUMNS, "counters": COUNTER_COLUMNS, "memory": MEMORY_COLUMNS,
                                     "host_metrics": HOST_METRIC_COLUMNS, "requests": REQUEST_COLUMNS}
# Categories with a fixed vocabulary, set as the readers set them.
VOCABULARIES: dict[tuple[str, str], tuple[str, ...]] = {
    ("events", "kind"): EVENT_KINDS, ("events", "copy_kind"): COPY_KINDS,
    ("memory", "device_type"): MEMORY_DEVICE_TYPES, ("host_metrics", "metric"): tuple(HOST_METRICS)}
CACHE_MIN_BYTES = 32 * 1024 * 1024  # smaller inputs decode in about a second: not worth the disk
DEFAULT_MAX_BYTES = 2 * 1024**3
SUFFIX = ".npz"


def cache_dir() -> Path:
    """The cache directory (not created here)."""
    if os.environ.get("TRACEANALYZER_CACHE_DIR"):
        return Path(os.environ["TRACEANALYZER_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "traceanalyzer"


def max_bytes() -> int:
    """The bound on the cache's total size (`$TRACEANALYZER_CACHE_MAX_SIZE`, default 2 GiB)."""
    from .units import parse_size_bytes

    text = os.environ.get("TRACEANALYZER_CACHE_MAX_SIZE")
    if text:
        try:
            return parse_size_bytes(text)
        except ValueError:
            pass
    return DEFAULT_MAX_BYTES


def identity(path: Path, max_input_bytes: int) -> dict[str, Any]:
    """What an entry must match to stand for `path` as it is now."""
    st = path.stat()
    return {"format": CACHE_FORMAT, "tool": __version__, "path": str(resolved(path)), "given": str(path),
            "size": st.st_size, "mtime_ns": st.st_mtime_ns, "max_input_bytes": max_input_bytes}


def entry_path(ident: dict[str, Any], folder: Path | None = None) -> Path:
    digest = hashlib.sha256(orjson.dumps(ident, option=orjson.OPT_SORT_KEYS)).hexdigest()
    return (folder or cache_dir()) / f"{digest[:40]}{SUFFIX}"


def cached_read(path: Path, max_input_bytes: int, read: Callable[[], Timeline],
                progress: Callable[[int], None] | None = None, min_bytes: int | None = None) -> Timeline:
    """`read()`'s Timeline for `path`, from the cache when a valid entry is there (else read and stored)."""
    size = path.stat().st_size
    if size < (CACHE_MIN_BYTES if min_bytes is None else min_bytes):
        return read()
    ident = identity(path, max_input_bytes)
    entry = entry_path(ident)
    tl = load(entry, ident)
    if tl is not None:
        if progress:
            progress(size)
        return tl
    tl = read()
    try:
        store(entry, ident, tl)
    except (OSError, TypeError, ValueError):  # no room, read-only home, metadata JSON cannot hold
        pass
    return tl


# --- writing ----------------------------------------------------------------------------------------
def _strings(values: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Strings -> (UTF-8 bytes, end offsets): no fixed-width padding, no pickled objects."""
    encoded = [v.encode("utf-8", "surrogatepass") for v in values]
    ends = np.cumsum([len(b) for b in encoded], dtype=np.int64) if encoded else np.zeros(0, np.int64)
    return np.frombuffer(b"".join(encoded), dtype=np.uint8), ends


def _table_arrays(prefix: str, frame: pd.DataFrame, columns: dict[str, str]) -> dict[str, np.ndarray]:
    arrays: dict[str, np.ndarray] = {}
    for col, dtype in columns.items():
        if dtype == "category":
            cat = frame[col].cat
            data, ends = _strings([str(c) for c in cat.categories.tolist()])
            arrays[f"{prefix}.{col}.codes"] = cat.codes.to_numpy()
            arrays[f"{prefix}.{col}.data"] = data
            arrays[f"{prefix}.{col}.ends"] = ends
        else:
            arrays[f"{prefix}.{col}"] = frame[col].to_numpy()
    return arrays


def store(entry: Path, ident: dict[str, Any], tl: Timeline) -> None:
    """Write `tl` as the entry for `ident`, atomically, then trim the cache to its bound."""
    meta = {
        "identity": ident,
        "rows": {name: len(getattr(tl, name)) for name in TABLES},
        "sources": [dataclasses.asdict(x) for x in tl.sources],
        "ranks": [dataclasses.asdict(x) for x in tl.ranks],
        "devices": [dataclasses.asdict(x) for x in tl.devices],
        "host_logs": [dataclasses.asdict(x) for x in tl.host_logs],
        "warnings": tl.warnings,
    }
    arrays: dict[str, np.ndarray] = {}
    for name, columns in TABLES.items():
        arrays.update(_table_arrays(name, getattr(tl, name), columns))
    arrays["meta"] = np.frombuffer(orjson.dumps(meta), dtype=np.uint8)
    limit = max_bytes()
    if sum(a.nbytes for a in arrays.values()) > limit:
        return
    entry.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=entry.parent, prefix=".tmp-", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as fh:
            np.savez(fh, **arrays)  # type: ignore[arg-type]
        os.replace(tmp, entry)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    trim(entry.parent, limit, keep=entry)


def trim(folder: Path, limit: int, keep: Path | None = None) -> None:
    """Remove the least recently used entries until the folder's entries fit in `limit` bytes."""
    entries = []
    for p in folder.glob(f"*{SUFFIX}"):
        try:
            st = p.stat()
        except OSError:
            continue
        entries.append((st.st_mtime_ns, st.st_size, p))
    total = sum(size for _, size, _ in entries)
    for _, size, p in sorted(entries, key=lambda e: (e[0], str(e[2]))):
        if total <= limit:
            break
        if p == keep:
            continue
        p.unlink(missing_ok=True)
        total -= size


# --- reading ----------------------------------------------------------------------------------------
class _Bad(Exception):
    """The entry is not one this version wrote for this file."""


def load(entry: Path, ident: dict[str, Any]) -> Timeline | None:
    """The Timeline the entry holds, or None when it is missing, foreign, stale or damaged."""
    if not entry.is_file():
        return None
    try:
        with np.load(entry, allow_pickle=False) as npz:
            tl = _timeline(npz, ident)
        os.utime(entry)  # recently used: last to be trimmed
        return tl
    # a damaged or foreign entry (not a zip, cut short, other arrays or metadata; a Timeline that fails its
    # contract, a ValueError) is never trusted: the trace is read again
    except (_Bad, OSError, EOFError, ValueError, KeyError, TypeError, IndexError, AttributeError, zipfile.BadZipFile):
        return None


def _text(npz: Any, name: str) -> list[str]:
    data = npz[f"{name}.data"]
    ends = npz[f"{name}.ends"]
    if data.dtype != np.uint8 or ends.dtype != np.int64 or (len(ends) and (ends[-1] != len(data))):
        raise _Bad(name)
    raw = data.tobytes()
    starts = np.r_[0, ends[:-1]] if len(ends) else ends
    if (np.diff(ends) < 0).any():
        raise _Bad(name)
    return [raw[int(a):int(b)].decode("utf-8", "surrogatepass") for a, b in zip(starts, ends)]


def _table(npz: Any, prefix: str, columns: dict[str, str], rows: int) -> pd.DataFrame:
    data: dict[str, Any] = {}
    for col, dtype in columns.items():
        if dtype == "category":
            codes = npz[f"{prefix}.{col}.codes"]
            cats = _text(npz, f"{prefix}.{col}")
            if codes.dtype.kind != "i" or len(codes) != rows or (len(codes) and (codes.max() >= len(cats)
                                                                                 or codes.min() < -1)):
                raise _Bad(col)
            data[col] = pd.Categorical.from_codes(codes, categories=pd.Index(cats, dtype=object))
        else:
            values = npz[f"{prefix}.{col}"]
            if str(values.dtype) != dtype or values.ndim != 1 or len(values) != rows:
                raise _Bad(col)
            data[col] = values
    frame = pd.DataFrame(data, columns=list(columns))
    for (table, col), vocabulary in VOCABULARIES.items():
        if table == prefix:
            frame[col] = frame[col].cat.set_categories(vocabulary)
    return frame


def _timeline(npz: Any, ident: dict[str, Any]) -> Timeline:
    meta = orjson.loads(npz["meta"].tobytes())
    if meta.get("identity") != ident:
        raise _Bad("identity")
    rows = meta["rows"]
    tl = Timeline(
        **{name: _table(npz, name, columns, rows[name]) for name, columns in TABLES.items()},
        sources=[Source(**x) for x in meta["sources"]],
        ranks=[RankInfo(**x) for x in meta["ranks"]],
        devices=[DeviceInfo(**x) for x in meta["devices"]],
        host_logs=[HostLogInfo(x["source"], x["cores"], tuple(x["disks"]), tuple(x["interfaces"]))
                   for x in meta["host_logs"]],
        warnings=list(meta["warnings"]),
    )
    return tl.validate()


__all__ = ["CACHE_MIN_BYTES", "cache_dir", "cached_read", "entry_path", "identity", "load", "max_bytes", "store",
           "trim"]
