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
    # Counter logs without times (dmon without -o T/-o DT): samples are this far apart ...
    dmon_interval_ns: int = 1_000_000_000
    # ... starting here: (ns, clock) with clock CLOCK_WALL (local time) or CLOCK_EPOCH; see
    # `units.parse_start`. Also gives the date to time-of-day-only logs.
    dmon_start: tuple[int, str] | None = None


def readers() -> tuple[ModuleType, ...]:
    from . import dcgm_csv, dmon, kineto, smi_csv

    return (dmon, smi_csv, dcgm_csv, kineto)


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
            data = read_input(path, options.max_input_bytes)
            return reader.read(path, data, options)
    raise InputError(path, f"not a supported input: expected Chrome-trace JSON (optionally gzip-compressed), "
                           f"nvidia-smi dmon or --query-gpu CSV output, or a DCGM CSV log; "
                           f"file starts with {head[:16]!r}")


def counter_readers() -> tuple[ModuleType, ...]:
    """Readers of sampled-counter logs (nvidia-smi, DCGM): their files are aligned, not ranks."""
    from . import dcgm_csv, dmon, smi_csv

    return (dmon, smi_csv, dcgm_csv)


# Names a counter log found beside a trace (or in a trace directory) may have; content decides.
COUNTER_LOG_SUFFIXES = (".log", ".csv", ".txt")


def is_counter_log(path: Path) -> bool:
    """Whether the file's content is an nvidia-smi / DCGM counter log (by sniffing, not name)."""
    try:
        head = read_head(path, 4096)
    except InputError:
        return False
    return any(r.sniff(head) for r in counter_readers())


def _logs_in(folder: Path) -> list[Path]:
    return sorted(f for f in folder.iterdir()
                  if f.is_file() and f.name.endswith(COUNTER_LOG_SUFFIXES) and is_counter_log(f))


def expand_paths(paths: list[Path]) -> list[Path]:
    """A directory stands for every trace-like file and counter log directly in it, in name order."""
    out: list[Path] = []
    for p in paths:
        if p.is_dir():
            found = sorted(f for f in p.iterdir() if f.is_file() and f.name.endswith(TRACE_SUFFIXES))
            found = sorted(found + _logs_in(p))
            if not found:
                raise InputError(p, "directory holds no trace files (*.json, *.json.gz) or nvidia-smi logs")
            out.extend(found)
        else:
            out.append(p)
    return out


@dataclass
class Inputs:
    """What `load_inputs` read: the traces (ranks) and the counter logs, kept apart for alignment."""

    trace: Timeline | None
    logs: Timeline | None
    found_beside: list[Path]  # counter logs picked up beside the traces, not named by the user


def load_inputs(paths: list[Path], counter_logs: list[Path] | None = None,
                options: ReadOptions | None = None, find_beside: bool = True) -> Inputs:
    """Traces and counter logs from the command line. Without explicit `counter_logs`, logs
    beside each trace file (same folder, *.log/*.csv/*.txt that sniff as counter logs) are used."""
    options = options or ReadOptions()
    files = expand_paths(paths)
    log_files = [f for f in files if f.exists() and is_counter_log(f)]
    trace_files = [f for f in files if f not in log_files]
    explicit = list(counter_logs or [])
    found: list[Path] = []
    if find_beside and not explicit and trace_files:
        for folder in sorted({f.parent for f in trace_files if f.is_file()}):
            found += [f for f in _logs_in(folder) if f not in log_files]
    all_logs = log_files + explicit + found
    trace = load_paths(trace_files, options) if trace_files else None
    logs = Timeline.concat([read_file(f, options) for f in all_logs]) if all_logs else None
    return Inputs(trace, logs, found)


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
