"""The body of an upload request, read as it arrives: the file itself (`application/octet-stream`,
its name in `X-Filename`) or a multipart/form-data body whose parts named `file` are files and whose
other parts are small text fields. Each file goes through a `Sink` (uploads.py); any refusal is an
`UploadError` and removes what this request had written.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import os
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

import anyio
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.requests import Request

from ..units import format_bytes
from .settings import Settings
from .uploads import MAX_FILES, Budget, Received, Sink, UploadError, check_archive, display_name

MAX_FIELD_BYTES = 1000  # a text field of a multipart upload
IDLE_S = 60.0  # longest wait for the next bytes of an upload
RAW_ALLOWANCE = 1 << 20  # a multipart body's bytes beyond its files' (boundaries, headers, fields)
UPLOAD_THREADS = 2  # threads every upload writes with: hashing and writing release Python's lock, so two keep
# the disk busy, and few contenders for that lock keep the pages' threads quick (benchmarks/serve_load.py)
UPLOAD_NICE = 10  # their priority below the pages' (Linux nice), so a flood slows uploads before pages
T = TypeVar("T")
OCTET_TYPES = ("application/octet-stream", "application/gzip", "application/zip", "application/x-tar")


_POOL: concurrent.futures.ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _lower_priority() -> None:
    """An upload thread yields the CPU to the event loop and the pages' threads (Linux: per-thread nice)."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), UPLOAD_NICE)
    except (OSError, AttributeError):  # not allowed, or not Linux: the same priority as the rest
        pass


async def _in_thread(fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)` in the uploads' own small thread pool (`UPLOAD_THREADS`, at a lower priority): an upload
    flood neither takes the threads the pages are rendered in (Starlette's default pool) nor outnumbers
    them for Python's lock or the CPU."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = concurrent.futures.ThreadPoolExecutor(UPLOAD_THREADS, "traceanalyzer-upload",
                                                          initializer=_lower_priority)
    done = asyncio.get_running_loop().run_in_executor(_POOL, functools.partial(fn, *args))
    with anyio.CancelScope(shield=True):  # a client gone mid-write: the write ends before its file is removed
        result = await done
    return result


async def receive(request: Request, settings: Settings) -> tuple[list[Received], dict[str, str]]:
    """The request's files, each on disk in DATA/tmp (removed again on any refusal)."""
    ctype, opts = parse_options_header(request.headers.get("content-type", ""))
    ctype_s = ctype.decode("latin-1").lower()
    length = request.headers.get("content-length")
    if length is not None:
        if not length.isdigit():
            raise UploadError(400, "bad Content-Length")
        if int(length) > settings.max_upload_bytes:
            raise UploadError(413, f"upload larger than the limit of {format_bytes(settings.max_upload_bytes)} "
                                   f"(--max-upload)")
        if int(length) == 0:
            raise UploadError(400, "empty upload (0 bytes)")
    budget = Budget(settings.max_upload_bytes)
    done: list[Received] = []
    fields: dict[str, str] = {}
    sinks: list[Sink] = []
    try:
        if ctype_s in OCTET_TYPES:
            sink = Sink(settings.tmp, budget, display_name(request.headers.get("x-filename"), 0),
                        settings.max_unpacked_bytes)
            sinks.append(sink)
            async for block in _blocks(request):
                await _in_thread(sink.write, block)
            done.append(sink.finish())
            sinks.remove(sink)
        elif ctype_s == "multipart/form-data":
            boundary = opts.get(b"boundary")
            if not boundary or len(boundary) > 200:
                raise UploadError(400, "multipart upload without a boundary")
            parts = Multipart(boundary, settings, budget, fields, done, sinks)
            async for block in _blocks(request):
                await _in_thread(parts.feed, block)
            parts.close()
        else:
            raise UploadError(415, "send the file as the body (Content-Type: application/octet-stream, name in "
                              "X-Filename) or as multipart/form-data field 'file'")
        if not done:
            raise UploadError(400, "no file in the upload (multipart field 'file')")
        for r in done:
            if r.kind in ("zip", "tar", "tar.gz"):
                await _in_thread(check_archive, r.tmp, r.kind, settings.max_members, settings.max_unpacked_bytes)
        return done, fields
    except BaseException:
        for s in sinks:
            s.abort()
        for r in done:
            r.tmp.unlink(missing_ok=True)
        raise


async def _blocks(request: Request, size: int = 1 << 20) -> AsyncIterator[bytes]:
    """The body in blocks of about `size` (one hop to a worker thread per block, not per socket read);
    a client that sends nothing for IDLE_S seconds is cut off (408), so a stalled upload frees its slot."""
    pending: list[bytes] = []
    n = 0
    chunks = request.stream().__aiter__()
    while True:
        try:
            with anyio.fail_after(IDLE_S):
                chunk = await chunks.__anext__()
        except StopAsyncIteration:
            break
        except TimeoutError:
            raise UploadError(408, f"the upload stalled: no data for {IDLE_S:g} s") from None
        pending.append(chunk)
        n += len(chunk)
        if n >= size:
            yield b"".join(pending)
            pending, n = [], 0
    if pending:
        yield b"".join(pending)


class Multipart:
    """A multipart/form-data body parsed as it arrives: each part named 'file' into a Sink, small text
    fields kept, anything else refused."""

    def __init__(self, boundary: bytes, settings: Settings, budget: Budget, fields: dict[str, str],
                 done: list[Received], sinks: list[Sink]) -> None:
        self.settings, self.budget, self.fields, self.done, self.sinks = settings, budget, fields, done, sinks
        self._header_field = b""
        self._header_value = b""
        self._headers: dict[bytes, bytes] = {}
        self._sink: Sink | None = None
        self._field: str | None = None
        self._value = b""
        self._ended = False
        self.raw = 0
        self._parser = MultipartParser(boundary, {
            "on_part_begin": self._begin, "on_part_data": self._data, "on_part_end": self._end,
            "on_header_field": self._hfield, "on_header_value": self._hvalue, "on_header_end": self._hend,
            "on_headers_finished": self._headers_done, "on_end": self._finish,
        })

    def feed(self, chunk: bytes) -> None:
        self.raw += len(chunk)  # boundaries and part headers count too (files are counted by their Sink)
        if self.raw > self.budget.limit + RAW_ALLOWANCE:
            raise UploadError(413, f"upload larger than the limit of {format_bytes(self.budget.limit)} "
                                   f"(--max-upload)")
        try:
            self._parser.write(chunk)
        except (UploadError, OSError):  # a refusal, or the disk (full: 507, not a malformed body)
            raise
        except Exception as exc:  # the parser's own errors: a malformed body
            raise UploadError(400, f"malformed multipart body: {type(exc).__name__}") from None

    def close(self) -> None:
        if not self._ended:
            raise UploadError(400, "malformed multipart body: it ends before its closing boundary")

    def _begin(self) -> None:
        self._headers = {}
        self._header_field = self._header_value = b""

    def _hfield(self, data: bytes, start: int, end: int) -> None:
        self._header_field += data[start:end]
        if len(self._header_field) > 200:
            raise UploadError(400, "malformed multipart body: header too long")

    def _hvalue(self, data: bytes, start: int, end: int) -> None:
        self._header_value += data[start:end]
        if len(self._header_value) > 2000:
            raise UploadError(400, "malformed multipart body: header too long")

    def _hend(self) -> None:
        if len(self._headers) >= 16:
            raise UploadError(400, "malformed multipart body: too many part headers")
        self._headers[self._header_field.lower()] = self._header_value
        self._header_field = self._header_value = b""

    def _headers_done(self) -> None:
        _, opts = parse_options_header(self._headers.get(b"content-disposition", b""))
        name = opts.get(b"name", b"").decode("utf-8", "replace")
        filename = opts.get(b"filename")
        if name == "file" or filename is not None:
            if name != "file":
                raise UploadError(400, f"unexpected file field {name[:40]!r}: files go in field 'file'")
            if len(self.done) + len(self.sinks) >= MAX_FILES:
                raise UploadError(400, f"more than {MAX_FILES} files in one upload")
            index = len(self.done)
            self._sink = Sink(self.settings.tmp, self.budget,
                              display_name(filename.decode("utf-8", "replace") if filename else None, index),
                              self.settings.max_unpacked_bytes)
            self.sinks.append(self._sink)
        else:
            self._field, self._value = name, b""

    def _data(self, data: bytes, start: int, end: int) -> None:
        if self._sink is not None:
            self._sink.write(data[start:end])
            return
        self.budget.take(end - start)
        self._value += data[start:end]
        if len(self._value) > MAX_FIELD_BYTES:
            raise UploadError(400, f"field {str(self._field)[:40]!r} too long")

    def _end(self) -> None:
        if self._sink is not None:
            sink, self._sink = self._sink, None
            self.done.append(sink.finish())
            self.sinks.remove(sink)
        elif self._field is not None:
            if len(self.fields) >= 20:
                raise UploadError(400, "too many fields")
            self.fields[self._field] = self._value.decode("utf-8", "replace")
            self._field = None

    def _finish(self) -> None:
        self._ended = True
