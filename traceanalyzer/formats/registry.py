"""The readers' registry: one module per input format, each with `KIND` (what its files are in a job:
a trace of ranks, a GPU counter log, a host monitor log), `sniff(head) -> bool` and
`read(path, data, options) -> Timeline` (or `read_path(path, options)` for a reader that streams).
A file's reader is picked by content, never by name; a folder given as input is searched the same way
(`sniffed_kind`, used by `inputs.folder_files`).

To add a format: write a module with those three names and put it in `reader_modules()`'s order, before
any reader whose sniff would also accept its files.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from ..errors import InputError
from ..timeline import Timeline
from . import otel_json as _otel
from ._base import ReadOptions
from ._io import first_content, read_head, read_input

TRACE, COUNTERS, HOST, REQUESTS = "trace", "counters", "host", "requests"
KINDS = (TRACE, COUNTERS, HOST, REQUESTS)

TRACE_SUFFIXES = (".json", ".json.gz", ".gz", ".xplane.pb", ".pftrace", ".perfetto-trace")
# What an OpenTelemetry span export read as a trace says: it holds request times, no GPU work.
ALONE = ("an OpenTelemetry span export holds a serving engine's request spans, no GPU work, so no GPU verdict "
         "comes from it: give it together with the profiler trace of the same run (traceanalyzer report "
         "trace.json spans.json)")
# Names a counter log found beside a trace (or in a trace directory) may have; content decides.
COUNTER_LOG_SUFFIXES = (".log", ".csv", ".txt")
_COUNTER_HEAD_BYTES = 4096  # what a counter log's sniff needs
# Files of a folder given as input read for sniffing (their first 64 KiB each) beyond those named like a trace:
# a folder of many unrelated files costs at most this many heads (the rest are skipped, and said so).
MAX_FOLDER_SNIFFS = 1000


def reader_modules() -> tuple[ModuleType, ...]:
    """Every reader, in sniffing order."""
    from . import dcgm_csv, dmon, glances, kineto, otel_json, pftrace, smi_csv, tf_json, xplane

    # otel_json before tf_json and kineto (an OTLP export is a JSON object whose first key is resourceSpans);
    # glances first (its CSV header would pass for a --query-gpu log); text logs before JSON and protobuf
    # (their sniffs never accept those); xplane before pftrace (both start with field 1; pftrace's sniff
    # wants a TracePacket field); tf_json before kineto: kineto's sniff accepts any JSON object.
    return (glances, dmon, smi_csv, dcgm_csv, xplane, pftrace, otel_json, tf_json, kineto)


def readers(*kinds: str) -> tuple[ModuleType, ...]:
    """The readers of these kinds (all without any), in sniffing order."""
    return tuple(r for r in reader_modules() if not kinds or r.KIND in kinds)


def file_kind(path: Path) -> str:
    """What a file is in a job, by its content: HOST, COUNTERS, REQUESTS or TRACE (also what an unreadable or
    unknown file is taken for: reading it as a trace then says what is wrong)."""
    if not path.is_file():
        return TRACE
    try:
        head = read_head(path)
    except InputError:
        return TRACE
    for reader in reader_modules():
        if reader.KIND == TRACE:
            continue
        if reader.sniff(head[:_COUNTER_HEAD_BYTES] if reader.KIND == COUNTERS else head):
            return str(reader.KIND)
    return TRACE


def sniffed_kind(path: Path) -> str | None:
    """What a file's content is by the first reader whose sniff accepts its head (TRACE, COUNTERS or HOST,
    in sniffing order), or None when no reader accepts it or it cannot be read. How a folder given as
    input is searched: a trace or log is found by content, whatever its name."""
    if not path.is_file():
        return None
    try:
        head = read_head(path)
    except InputError:
        return None
    for reader in reader_modules():
        if reader.sniff(head[:_COUNTER_HEAD_BYTES] if reader.KIND == COUNTERS else head):
            return str(reader.KIND)
    return None


def read_file(path: Path, options: ReadOptions) -> Timeline:
    """Read one trace or counter log with the first reader whose sniff accepts its content."""
    if not path.exists():
        raise InputError(path, "no such file or directory")
    if path.stat().st_size == 0:
        raise InputError(path, "empty file: expected a profiler trace")
    if options.cache:
        from ..cache import cached_read

        return cached_read(path, options.max_input_bytes, lambda: _read_file(path, options), options.progress)
    return _read_file(path, options)


def _read_file(path: Path, options: ReadOptions) -> Timeline:
    head = read_head(path)
    if _otel.sniff(head):
        raise InputError(path, ALONE)
    if not head.strip():  # blank start: find the content, holding none of the blanks
        head = first_content(path, options.max_input_bytes)  # raises the precise gzip error, if any
        if not head:
            raise InputError(path, "no content: expected a profiler trace")
    for reader in readers(TRACE, COUNTERS):
        if reader.sniff(head):
            read_path = getattr(reader, "read_path", None)
            if read_path is not None:  # a reader that streams the file itself
                tl: Timeline = read_path(path, options)
            else:
                tl = reader.read(path, read_input(path, options.max_input_bytes), options)
            if reader.__name__.endswith(".kineto"):  # a Chrome trace of many worker processes: one rank each
                from .workers import split_workers

                tl = split_workers(tl, path, options)
            return tl
    raise InputError(path, _unsupported(head))


def read_request_log(path: Path, options: ReadOptions) -> Timeline:
    """One export of a serving engine's request spans (a REQUESTS reader's file; epoch clock)."""
    if not path.exists():
        raise InputError(path, "no such file or directory")
    head = read_head(path)
    for reader in readers(REQUESTS):
        if reader.sniff(head):
            return reader.read(path, read_input(path, options.max_input_bytes), options)  # type: ignore[no-any-return]
    raise InputError(path, "not an OpenTelemetry span export: expected OTLP/JSON whose first key is resourceSpans")


def read_host_log(path: Path, options: ReadOptions) -> Timeline:
    """One host monitor log (a HOST reader's file; its samples on its own clock)."""
    if not path.exists():
        raise InputError(path, "no such file or directory")
    head = read_head(path)
    for reader in readers(HOST):
        if reader.sniff(head):
            return reader.read(path, read_input(path, options.max_input_bytes), options)  # type: ignore[no-any-return]
    raise InputError(path, "not a glances export: expected the CSV of `glances --export csv` (a header "
                           "starting with timestamp and naming cpu.user / cpu_user) or its JSON export")


def _unsupported(head: bytes) -> str:
    expected = ("expected Chrome-trace JSON (optionally gzip-compressed), an XSpace protobuf "
                "(<host>.xplane.pb), a Perfetto trace (.pftrace), or an nvidia-smi dmon / --query-gpu CSV / "
                "DCGM CSV log")
    if _looks_binary(head[:64]):
        return (f"not a supported trace: binary data that is not an XSpace profile (TF profiler tool "
                f"outputs such as overview_page.pb or input_pipeline.pb are summaries, not traces); "
                f"{expected}; file starts with {head[:16]!r}")
    return f"not a supported trace: {expected}; file starts with {head[:16]!r}"


def _looks_binary(sample: bytes) -> bool:
    if any(b < 0x20 and b not in (0x09, 0x0A, 0x0D) for b in sample):
        return True
    try:
        sample.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start < len(sample) - 4  # not just a character cut at the sample's end
    return False


__all__ = ["ALONE", "COUNTERS", "COUNTER_LOG_SUFFIXES", "HOST", "KINDS", "MAX_FOLDER_SNIFFS", "REQUESTS", "TRACE",
           "TRACE_SUFFIXES", "file_kind", "read_file", "read_host_log", "read_request_log", "reader_modules",
           "readers", "sniffed_kind"]
