"""Readers: one module per input kind, each with `sniff(head) -> bool` and
`read(path, data, options) -> Timeline`. `load_paths` picks a reader by content, never by name.

To add a format: write a module with those two functions and put it in `readers()`, before any
reader whose sniff would also accept its files.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from ..errors import InputError
from ..timeline import Timeline
from ._io import DEFAULT_MAX_INPUT_BYTES, read_head, read_input


@dataclass
class ReadOptions:
    max_input_bytes: int = DEFAULT_MAX_INPUT_BYTES
    # Called with a number of bytes just processed (for progress display); may be None.
    progress: Callable[[int], None] | None = None


def readers() -> tuple[ModuleType, ...]:
    from . import kineto

    return (kineto,)


TRACE_SUFFIXES = (".json", ".json.gz", ".gz")


def read_file(path: Path, options: ReadOptions) -> Timeline:
    """Read one file with the first reader whose sniff accepts its content."""
    if not path.exists():
        raise InputError(path, "no such file or directory")
    if path.stat().st_size == 0:
        raise InputError(path, "empty file: expected a profiler trace")
    head = read_head(path)
    if not head.strip():
        read_input(path, options.max_input_bytes)  # raises the precise gzip error, if any
        raise InputError(path, "no content: expected a profiler trace")
    for reader in readers():
        if reader.sniff(head):
            read_path = getattr(reader, "read_path", None)
            if read_path is not None:  # a reader that streams the file itself
                return read_path(path, options)  # type: ignore[no-any-return]
            data = read_input(path, options.max_input_bytes)
            return reader.read(path, data, options)
    raise InputError(path, f"not a supported trace: expected Chrome-trace JSON (optionally gzip-compressed), "
                           f"file starts with {head[:16]!r}")


def expand_paths(paths: list[Path]) -> list[Path]:
    """A directory stands for every trace-like file directly in it, in name order."""
    out: list[Path] = []
    for p in paths:
        if p.is_dir():
            found = sorted(f for f in p.iterdir() if f.is_file() and f.name.endswith(TRACE_SUFFIXES))
            if not found:
                raise InputError(p, "directory holds no trace files (*.json, *.json.gz)")
            out.extend(found)
        else:
            out.append(p)
    return out


def load_paths(paths: list[Path], options: ReadOptions | None = None) -> Timeline:
    """Read every input into one Timeline, one rank per trace file."""
    options = options or ReadOptions()
    files = expand_paths(paths)
    from_dir = len(files) > len(paths)
    parts: list[Timeline] = []
    skipped: list[str] = []
    for f in files:
        try:
            parts.append(read_file(f, options))
        except InputError as exc:
            if from_dir and len(files) > 1:
                skipped.append(str(exc))
                continue
            raise
    if not parts:
        raise InputError(paths[0], "no readable trace: " + "; ".join(skipped))
    tl = Timeline.concat(parts) if len(parts) > 1 else parts[0]
    tl.warnings.extend(f"skipped {s}" for s in skipped)
    assign_ranks(tl)
    return tl


def assign_ranks(tl: Timeline) -> None:
    """Ranks from the traces' own distributedInfo; the rest numbered in name order, never twice."""
    if len(tl.ranks) < 2:
        return
    seen: set[int] = set()
    for r in tl.ranks:
        if r.rank is not None:
            if r.rank in seen:
                tl.warnings.append(f"rank {r.rank} appears in more than one trace; renumbered in name order")
                r.rank = None
            else:
                seen.add(r.rank)
    free = (i for i in range(10**9) if i not in seen)
    for r in tl.ranks:
        if r.rank is None:
            r.rank = next(free)
