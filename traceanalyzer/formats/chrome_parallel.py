"""One big uncompressed Chrome-trace file decoded by several processes at once.

The events array is cut into byte ranges of `RANGE_BYTES`. A range's events start at the
first `}` `,` `{` at or after its first byte and end at the first such boundary at or after its
last byte that closes a piece which decodes, so neighbouring ranges meet at the same boundary
without talking to each other. Each range is decoded and reduced to a reader's compact columns
(a *collector*: `add(chunk)`, `merge(later)`) where it was decoded — in a spawned worker, or here
while the workers run — and the collectors are merged here in file order.

Trust, not hope: the first range starts at the array's `[` (found by the streaming header scan), and
a piece that decodes from a true event start ends at a true event end (a cut inside a string or a
nested value leaves it unclosed). So the ranges are accepted one after the other only while each
starts exactly where the accepted one before it ended; at the first range that does not (a
boundary inside a string, a decode error, the array ending early, a worker lost), everything from
the last accepted boundary on is streamed here as `chrome_json.EventStream` streams a whole file,
with its error messages, line numbers and truncation salvage. The tail of the file (the last
events, the `]`, the keys after it) always goes that way. Gzip files are never split (a gzip stream
is read from its start); they are streamed as before.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import pickle
import re
import shutil
import tempfile
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Protocol, TypeVar

import msgspec

from ..errors import InputError
from ..processes import pid_alive, processes_allowed
from ._io import iter_input_blocks, plain_file_layout
from .chrome_json import (
    DECODE_NOTES,
    EVENT_BOUNDARY,
    EventStream,
    NestingError,
    StreamReader,
    count_newlines,
    decode_span,
    error_at_end,
    holds_space_run,
    next_skip,
)

# Smaller files are not worth starting processes for (about a second each).
PARALLEL_MIN_BYTES = 128 * 1024 * 1024
# Ranges this long: small enough that the last ones, which the other processes wait for, are short;
# decoding is no slower per byte than in longer ones (a range costs one extra read of _SLACK_BYTES).
RANGE_BYTES = 8 * 1024 * 1024
# The end of the file is streamed here, never split: the array's end and the keys after it.
TAIL_BYTES = 4 * 1024 * 1024
# A range is read with this much of what follows it, and more in steps of it while its end boundary
# is looked for; no boundary within `MAX_OVERRUN_BYTES` past its end: the range gives up (the
# streamed path then says what is there).
_SLACK_BYTES = 1024 * 1024
MAX_OVERRUN_BYTES = 64 * 1024 * 1024
# Ranges handed to each worker ahead (this process tops them up between ranges of its own).
_QUEUED_PER_WORKER = 3


class Collector(Protocol):
    def add(self, chunk: list[Any]) -> None: ...

    def merge(self, later: Any) -> None: ...


C = TypeVar("C", bound=Collector)


@dataclass(frozen=True)
class RangeTask:
    """A stretch of the file to decode: file offsets [lo, hi); `first`: lo is the array's '['."""

    path: str
    lo: int
    hi: int
    first: bool
    chunk_bytes: int


@dataclass
class RangeResult:
    """What a range held. `start`/`end`: file offsets of the byte before its first event (the '['
    for the first range) and before the event after its last one; -1 when no start was found.
    `complete`: it decoded up to a boundary at or past its last byte (else it stopped early, at
    `end`). `newlines`/`last_newline`: for line numbers in messages about what follows."""

    start: int
    end: int
    complete: bool
    part: Any
    newlines: int = 0
    last_newline: int = -1
    notes: dict[str, int] = field(default_factory=dict)


def decode_range(task: RangeTask, decoder: msgspec.json.Decoder | None,
                 factory: Callable[[], Collector]) -> RangeResult:
    """Decode one range into a fresh collector (in a worker, or here). Never raises for what the
    file holds: a range it cannot follow comes back incomplete."""
    saved = DECODE_NOTES.copy()
    DECODE_NOTES.clear()
    was_enabled = gc.isenabled()
    gc.disable()  # decoding makes millions of short-lived acyclic objects
    try:
        with open(task.path, "rb", buffering=0) as fh:
            result = _decode_range(_Window(fh, task), task, decoder, factory())
        result.notes = dict(DECODE_NOTES)
        return result
    finally:
        DECODE_NOTES.clear()
        DECODE_NOTES.update(saved)
        if was_enabled:
            gc.enable()


class _Window:
    """The bytes of a range and what follows it, read with pread and grown on demand."""

    def __init__(self, fh: BinaryIO, task: RangeTask) -> None:
        self.fd = fh.fileno()
        self.lo = task.lo
        self.limit = task.hi - task.lo + MAX_OVERRUN_BYTES
        want = task.hi - task.lo + _SLACK_BYTES
        self.buf = bytearray(want)  # read straight into it: no second copy of the range
        fh.seek(task.lo)
        got = 0
        with memoryview(self.buf) as view:
            while got < want and (n := fh.readinto(view[got:])):  # type: ignore[attr-defined]
                got += n
        del self.buf[got:]
        self.eof = got < want

    def more(self) -> bool:
        if self.eof or len(self.buf) >= self.limit:
            return False
        block = os.pread(self.fd, _SLACK_BYTES, self.lo + len(self.buf))
        self.eof = len(block) < _SLACK_BYTES
        self.buf += block
        return bool(block)


def _next_boundary(w: _Window, start: int) -> re.Match[bytes] | None:
    """The first event boundary at or after `start`, reading on as needed; None at the end of the
    file or the window's limit. Linear however far it is: after more is read, the search resumes at
    the last '}' already read (a boundary crossing the old end can only start there)."""
    while True:
        m = EVENT_BOUNDARY.search(w.buf, start)
        if m is not None:
            return m
        old = len(w.buf)
        if not w.more():
            return None
        brace = w.buf.rfind(b"}", start, old)
        start = brace if brace >= 0 else old


def _decode_range(w: _Window, task: RangeTask, decoder: msgspec.json.Decoder | None,
                  part: Collector) -> RangeResult:
    if task.first:
        pos = 1  # buf[0] is the array's '['
    else:
        if (m := _next_boundary(w, 0)) is None:
            return RangeResult(-1, -1, False, part)
        pos = m.end() - 1  # at the '{' of the range's first event
    first = pos - 1
    target = task.hi - task.lo

    def result(complete: bool) -> RangeResult:
        end = pos - 1
        nl = w.buf.rfind(b"\n", first, end)
        return RangeResult(w.lo + first, w.lo + end, complete, part, count_newlines(w.buf, first, nl + 1),
                           w.lo + nl if nl >= 0 else -1)

    while True:
        search_from = pos + task.chunk_bytes if pos + task.chunk_bytes < target else max(target, pos)
        skip = 0
        while True:
            m = _next_boundary(w, search_from)
            if m is None:
                return result(False)  # the array ends here, or no boundary near: streamed instead
            try:
                # transient: the events are let go of (below) before the window is read further
                events = decode_span(w.buf, pos - 1, m.start() + 1, decoder, transient=True)
            except msgspec.DecodeError as exc:
                if "truncated" in str(exc) or error_at_end(exc, m.start() + 2 - (pos - 1)):
                    search_from = m.end() + skip  # inside a string or nested value: one further on
                    skip = next_skip(skip)
                    continue
                return result(False)
            except NestingError:
                return result(False)
            break
        part.add(events)
        del events
        pos = m.end() - 1
        if m.start() >= target:
            return result(True)


def collect_events(stream: EventStream, factory: Callable[[], C],
                   range_fn: Callable[[RangeTask], RangeResult], workers: int) -> C:
    """Every event of `stream`'s file into one collector made by `factory`: in ranges decoded by
    `workers` processes (this one included) when the file is big and uncompressed, else streamed.
    `range_fn` is a module-level function (workers import it by name) that calls `decode_range`."""
    collector = factory()
    layout = plain_file_layout(stream.path) if workers > 1 else None
    if layout is None and workers > 1:  # gzip: its content spooled to a plain file, when that is safe
        spooled = spool_gzip(stream)
        if spooled is not None:
            return _collect_spooled(stream, spooled, factory, range_fn, workers)
    if layout is None or not PARALLEL_MIN_BYTES <= layout[0] <= stream.max_bytes:
        return _add_all(collector, stream.chunks())
    size, bom = layout
    r = StreamReader(iter_input_blocks(stream.path, stream.max_bytes))
    if not stream._find_events_start(r):  # a layout the scanner does not follow: the whole-content path
        r.close()
        return _add_all(collector, stream._whole_content())
    stream.streamed = True
    at = bom + r.offset(0)  # file offset of the array's '['
    lines, last_newline = r.lines_before, (r.last_newline + bom if r.last_newline >= 0 else -1)
    r.close()
    if stream.progress:
        stream.progress(at)
    end = size - TAIL_BYTES
    chunk = min(stream.chunk_bytes, RANGE_BYTES)
    if end - at >= 2 * chunk and processes_allowed(workers) > 1:
        tasks = [RangeTask(str(stream.path), lo, min(lo + chunk, end), lo == at, chunk) for lo in range(at, end, chunk)]
        at, lines, last_newline = _run_ranges(tasks, range_fn, workers, collector, stream.progress, lines, last_newline)
    # The rest, streamed here: the last events, the array's end and the keys after it (or a cut).
    t = StreamReader(iter_input_blocks(stream.path, stream.max_bytes, stream.progress, start=at))
    t.base = at - bom
    t.lines_before = lines
    t.last_newline = last_newline - bom if last_newline >= 0 else -1
    t.more()
    return _add_all(collector, stream.events_from(t))


# Gzip files from this compressed size on have their content spooled to a temporary plain file, which the
# ranges then decode in parallel (a gzip stream can only be inflated from its start, in one process).
SPOOL_MIN_COMPRESSED_BYTES = 4 * 1024 * 1024
_SPOOL_DISK_MARGIN = 1024**3  # free disk kept beside the spooled content
_MEMORY_FILESYSTEMS = ("tmpfs", "ramfs")


@dataclass
class Spooled:
    """A gzip file's content in a temporary plain file, opened by `path` here and in the workers. Where the
    system lets a process reopen its own descriptors (Linux: /proc/<pid>/fd/<n>), the file loses its name
    as soon as it is made, so a process killed mid-read (out of memory, SIGKILL) leaves nothing on disk;
    elsewhere it keeps its name until `close`. `close` gives the space back either way."""

    path: Path
    fd: int
    name: Path | None  # the file's name while it has one
    closed: bool = False

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        os.close(self.fd)
        if self.name is not None:
            self.name.unlink(missing_ok=True)


def _unnamed(fd: int, name: Path) -> Spooled:
    """The temporary file `name` (open as `fd`) reached through its descriptor and unlinked, where that
    works; else kept by its name."""
    by_fd = Path(f"/proc/{os.getpid()}/fd/{fd}")
    try:
        if os.path.samestat(os.stat(by_fd), os.fstat(fd)):
            os.unlink(name)
            return Spooled(by_fd, fd, None)
    except OSError:
        pass
    return Spooled(name, fd, name)


def spool_gzip(stream: EventStream, min_compressed: int | None = None) -> Spooled | None:
    """The content of `stream`'s gzip file in a temporary plain file, or None where streaming is the
    safer way: a small file, a temporary folder in memory (tmpfs) or short of disk, content holding the
    long whitespace runs the stream reader squeezes, or anything going wrong (a cut or corrupt stream,
    the input limit): the caller then streams the file as before, and meets the same errors. The
    caller closes it."""
    floor = SPOOL_MIN_COMPRESSED_BYTES if min_compressed is None else min_compressed
    try:
        if os.path.getsize(stream.path) < floor:
            return None
    except OSError:
        return None
    folder = tempfile.gettempdir()
    if _in_memory(folder):
        return None
    sweep_left_behind(folder)
    fd, name = tempfile.mkstemp(prefix=f"{_TEMP_PREFIX}{os.getpid()}-", suffix=".json", dir=folder)
    spooled = _unnamed(fd, Path(name))
    try:
        with os.fdopen(fd, "wb", closefd=False) as out:
            for block in iter_input_blocks(stream.path, stream.max_bytes):
                if holds_space_run(block) or shutil.disk_usage(folder).free < len(block) + _SPOOL_DISK_MARGIN:
                    raise _NotSpooled
                out.write(block)
        return spooled
    except (_NotSpooled, InputError, OSError, ValueError):
        spooled.close()
        return None
    except BaseException:
        spooled.close()
        raise


# Temporary files and folders of a read start with this and the process id: what a killed process left
# behind is removed by the next read (`sweep_left_behind`).
_TEMP_PREFIX = "traceanalyzer-"


def sweep_left_behind(folder: str | None = None) -> int:
    """Remove the spooled files and range folders (`_TEMP_PREFIX`<pid>-...) that processes of this user no
    longer running left in the temporary folder (killed mid-read); the number removed."""
    folder = folder or tempfile.gettempdir()
    removed = 0
    uid = getattr(os, "getuid", None)
    if uid is None:  # no owners to compare (Windows): nothing is removed
        return 0
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return 0
    for entry in entries:
        pid = _owner_pid(entry.name)
        if pid is None or pid_alive(pid):
            continue
        try:
            if entry.stat(follow_symlinks=False).st_uid != uid():
                continue
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)
            removed += 1
        except OSError:
            continue
    return removed


_LEFT_BEHIND = re.compile(rf"{_TEMP_PREFIX}(?:ranges-)?(\d+)-[a-z0-9_]{{8}}(?:\.json)?")


def _owner_pid(name: str) -> int | None:
    m = _LEFT_BEHIND.fullmatch(name)
    return int(m.group(1)) if m else None


class _NotSpooled(Exception):
    """The content is better streamed than spooled (see `spool_gzip`)."""


def _in_memory(folder: str) -> bool:
    """Whether `folder` lies on a filesystem held in memory (Linux: its mount's type in /proc/self/mounts)."""
    try:
        with open("/proc/self/mounts") as fh:
            mounts = [line.split() for line in fh]
    except OSError:
        return False
    real = os.path.realpath(folder)
    best, kind = "", ""
    for fields in mounts:
        if len(fields) >= 3 and (real == fields[1] or real.startswith(fields[1].rstrip("/") + "/")) \
                and len(fields[1]) > len(best):
            best, kind = fields[1], fields[2]
    return kind in _MEMORY_FILESYSTEMS


def _collect_spooled(stream: EventStream, spooled: Spooled, factory: Callable[[], C],
                     range_fn: Callable[[RangeTask], RangeResult], workers: int) -> C:
    """`collect_events` of the spooled content, its errors and state told of the gzip file itself; progress
    (of the gzip file's bytes) in proportion to the spooled content read."""
    progress = None
    if stream.progress is not None:
        progress = _Scaled(stream.progress, os.path.getsize(stream.path), os.fstat(spooled.fd).st_size)
    inner = EventStream(spooled.path, max_bytes=stream.max_bytes, chunk_bytes=stream.chunk_bytes, progress=progress,
                        decoder=stream.decoder)
    try:
        collected = collect_events(inner, factory, range_fn, workers)
    except InputError as exc:
        raise InputError(stream.path, exc.message) from None
    finally:
        spooled.close()
    stream.header, stream.streamed = inner.header, inner.streamed
    stream.truncated, stream.array_format = inner.truncated, inner.array_format
    return collected


class _Scaled:
    """A progress callback of one file's bytes fed with another's, in proportion."""

    def __init__(self, progress: Callable[[int], None], total: int, of: int) -> None:
        self.progress, self.total, self.of, self.seen, self.told = progress, total, max(1, of), 0, 0

    def __call__(self, n: int) -> None:
        self.seen += n
        now = min(self.total, self.seen * self.total // self.of)
        if now > self.told:
            self.progress(now - self.told)
            self.told = now


def _add_all(collector: C, chunks: Iterable[list[Any]]) -> C:
    for chunk in chunks:
        collector.add(chunk)
        del chunk  # the chunk's structs may point into the reader's buffer: let go before it moves on
    return collector


def _run_ranges(tasks: list[RangeTask], range_fn: Callable[[RangeTask], RangeResult], workers: int,
                collector: Collector, progress: Callable[[int], None] | None, lines: int,
                last_newline: int) -> tuple[int, int, int]:
    """Decode the ranges (workers - 1 spawned processes from the front, this one from the back) and
    merge them in order while each starts where the last accepted one ended. Returns the offset the
    accepted ranges reach, with the newlines before it and the last one's offset."""
    # "spawn": safe although this process may run threads (the progress ticker), which fork is not.
    pool = ProcessPoolExecutor(max_workers=workers - 1, mp_context=multiprocessing.get_context("spawn"))
    sweep_left_behind()
    spill = tempfile.mkdtemp(prefix=f"{_TEMP_PREFIX}ranges-{os.getpid()}-")
    try:
        return _accept_ranges(tasks, range_fn, workers, collector, progress, lines, last_newline, pool, spill)
    finally:
        shutil.rmtree(spill, ignore_errors=True)


def _spilled(range_fn: Callable[[RangeTask], RangeResult], task: RangeTask, folder: str) -> str:
    """`range_fn(task)` in a worker, its result written to a file in `folder` (private to this run):
    only the file name goes back through the pool's pipe. A result of ~15 MB sent through the pipe
    itself arrives in 64 KB pieces, each waiting for the parent's interpreter lock while the parent
    decodes a range of its own, and the worker idles meanwhile."""
    result = range_fn(task)
    path = os.path.join(folder, f"{task.lo}.pickle")
    with open(path, "wb") as fh:
        pickle.dump(result, fh, protocol=pickle.HIGHEST_PROTOCOL)
    return path


def _unspill(path: str) -> RangeResult:
    with open(path, "rb") as fh:
        data = fh.read()
    os.unlink(path)
    result: RangeResult = pickle.loads(data)  # written by our own worker, just now, in a private folder
    return result


def _accept_ranges(tasks: list[RangeTask], range_fn: Callable[[RangeTask], RangeResult], workers: int,
                   collector: Collector, progress: Callable[[int], None] | None, lines: int, last_newline: int,
                   pool: ProcessPoolExecutor, spill: str) -> tuple[int, int, int]:
    queue = deque(range(len(tasks)))
    running: dict[int, Future[str]] = {}
    here: dict[int, RangeResult] = {}
    expected = tasks[0].lo
    nxt = 0
    stopped = False
    broken = False  # the pool lost a worker: nothing more is handed to it
    try:
        while nxt < len(tasks) and not stopped:
            # Keep every worker fed: ranges done but not merged yet (they wait for their turn) do not
            # count, or a worker would idle while this process decodes a range of its own.
            while not broken and queue and \
                    sum(not f.done() for f in running.values()) < _QUEUED_PER_WORKER * (workers - 1):
                i = queue.popleft()
                try:
                    running[i] = pool.submit(_spilled, range_fn, tasks[i], spill)
                except BrokenProcessPool:  # a worker lost before this range was handed out
                    queue.appendleft(i)
                    broken = True
            front_busy = nxt in running and not running[nxt].done()
            if front_busy and not queue:
                # Nothing left to hand out: take back the last range a worker has not started (the
                # pool cancels only those), rather than idle while the workers finish their queues.
                for i in sorted(running, reverse=True):
                    if i > nxt and running[i].cancel():
                        del running[i]
                        queue.append(i)
                        break
            if front_busy and queue:
                i = queue.pop()  # this process decodes too, from the back, while the front is worked on
                here[i] = range_fn(tasks[i])
                continue
            res: RangeResult | None = None  # none: a worker lost (killed, out of memory): streamed from here
            if nxt in here:
                res = here.pop(nxt)
            elif nxt in running:
                try:
                    res = _unspill(running.pop(nxt).result())
                except Exception:  # a worker process lost (killed, out of memory) or failed: decoded here instead
                    res = None
            if res is None or res.start != expected:
                break
            collector.merge(res.part)
            DECODE_NOTES.update(res.notes)
            lines += res.newlines
            if res.last_newline >= 0:
                last_newline = res.last_newline
            if progress:
                progress(res.end - res.start)
            expected = res.end
            nxt += 1
            stopped = not res.complete
    finally:
        pool.shutdown(wait=True, cancel_futures=True)  # before the spill folder goes: no file left behind
    return expected, lines, last_newline
