"""Reading input bytes safely: gzip is detected by content and decompression is bounded.

Two ways in: `read_input` returns the whole (decompressed) content; `iter_input_blocks` yields
it block by block, so that a multi-GB trace can be decoded without ever being held whole.
Both raise the same `InputError`s (limit exceeded, corrupt or truncated gzip, unreadable file).

Gzip is inflated by ISA-L (`isal`, about twice zlib's speed on traces) when it is installed, else by
zlib, with the same bounds and errors; while the caller parses one block, a reader thread inflates the
next (both libraries release the GIL while inflating), so a gzip trace costs little more than a plain one
on two or more cores.
"""

from __future__ import annotations

import codecs
import errno
import os
import queue
import re
import threading
import types
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from ..errors import InputError

_inflate: types.ModuleType
try:  # ISA-L's inflate: the same API as zlib's, about twice as fast
    from isal import isal_zlib

    _inflate = isal_zlib
    _INFLATE_ERRORS: tuple[type[Exception], ...] = (zlib.error, isal_zlib.error)  # type: ignore[assignment]
except ImportError:  # pragma: no cover - a platform without isal wheels
    _inflate = zlib
    _INFLATE_ERRORS = (zlib.error,)

GZIP_MAGIC = b"\x1f\x8b"
UTF8_BOM = b"\xef\xbb\xbf"
# Text saved as UTF-16 with a byte-order mark (Windows PowerShell's `>` redirect, Notepad's "Unicode"): read as
# the UTF-8 it holds, whole (read_input) and for sniffing (read_head). Only by its mark, and only when it
# decodes to text: binary formats that happen to start with these bytes are left as they are.
UTF16_BOMS = ((b"\xff\xfe", "utf-16-le"), (b"\xfe\xff", "utf-16-be"))


class TruncatedInput(InputError):
    """The compressed stream ends early; everything decompressed before the cut was yielded."""
# Decompressed inputs larger than this are refused (a "zip bomb" guard); override per call.
DEFAULT_MAX_INPUT_BYTES = 16 * 1024**3
_READ_BLOCK = 8 * 1024 * 1024


def too_large(max_bytes: int, size: int) -> str:
    """The error of a file over the input limit (`size`: its size when known, else 0)."""
    held = f" (it holds {size} bytes)" if size > max_bytes else ""
    return (f"larger than the input limit of {max_bytes} bytes{held}: a larger limit is set with "
            f"--max-input-size (the events of the whole trace are held in memory)")


def read_input(path: Path, max_bytes: int = DEFAULT_MAX_INPUT_BYTES,
               progress: Callable[[int], None] | None = None) -> bytes:
    """Whole content of `path`, gunzipped when it starts with the gzip magic bytes; UTF-16 text (by its
    byte-order mark) as UTF-8.

    `progress`, when given, is called with the number of on-disk bytes read since its last call.
    """
    try:
        with open(path, "rb") as fh:
            head = fh.read(2)
            fh.seek(0)
            if head != GZIP_MAGIC and progress is None:
                # Never ask for more than the file holds: a read of the whole limit reserves it.
                size = os.fstat(fh.fileno()).st_size
                data = fh.read(min(max_bytes, size) + 1)
                if len(data) > max_bytes:
                    raise InputError(path, too_large(max_bytes, size))
                data = data.removeprefix(UTF8_BOM)
            else:
                data = _strip_bom(b"".join(_blocks(fh, path, max_bytes, head == GZIP_MAGIC, progress)))
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None
    text = _as_utf8(data)
    if len(text) > max_bytes:  # UTF-16 text is up to 1.5 times as long in UTF-8: the limit holds for both
        raise InputError(path, too_large(max_bytes, len(text)))
    return text


def iter_input_blocks(path: Path, max_bytes: int = DEFAULT_MAX_INPUT_BYTES,
                      progress: Callable[[int], None] | None = None,
                      block_size: int = _READ_BLOCK, start: int = 0) -> Iterator[bytes]:
    """The content of `path` (gunzipped when gzip) in blocks of about `block_size` bytes.

    `progress` is called with the on-disk bytes consumed since its last call. `start` (a file offset,
    uncompressed files only) reads from there on, as is (no byte-order mark removed).
    """
    try:
        with open(path, "rb") as fh:
            head = fh.read(2)
            if start and head == GZIP_MAGIC:
                raise ValueError("a compressed file is read from its start")
            fh.seek(start)
            first = not start
            for block in _blocks(fh, path, max_bytes, head == GZIP_MAGIC, progress, block_size):
                if first:
                    block = _strip_bom(block)
                    first = False
                yield block
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None


def plain_file_layout(path: Path) -> tuple[int, int] | None:
    """(file size, length of a leading UTF-8 byte-order mark) of an uncompressed file, whose
    content offsets are then file offsets less that length; None for a gzip file."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(3)
            size = os.fstat(fh.fileno()).st_size
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None
    if head[:2] == GZIP_MAGIC:
        return None
    return size, len(UTF8_BOM) if head == UTF8_BOM else 0


# NUL bytes at the start of a file (a log rotated with copytruncate while its writer kept its offset) are
# skipped for sniffing, up to this many: the reader then removes them all and counts them.
_MAX_NUL_SKIP = 256 * 1024 * 1024


def resolved(path: Path) -> Path:
    """`path.resolve()`, with a symbolic link that loops (a -> b -> a) said as an input error, not a crash."""
    try:
        return path.resolve()
    except (RuntimeError, OSError):
        raise InputError(path, "a symbolic link that loops (it leads back to itself through other links): "
                               "expected a trace file, a log or a folder") from None


def is_link_loop(path: Path) -> bool:
    """Whether `path` is a symbolic link that never reaches a file (it loops)."""
    try:
        os.stat(path)
    except OSError as exc:
        return exc.errno == errno.ELOOP
    return False


def read_head(path: Path, size: int = 65536) -> bytes:
    """The first `size` bytes of the content (decompressed when gzip; NUL padding at the start of a
    plain file skipped), for format sniffing."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(size)
            skipped = 0
            while raw[:1] == b"\x00" and skipped < _MAX_NUL_SKIP:  # NUL padding first (a rotated log)
                kept = raw.lstrip(b"\x00")
                skipped += len(raw) - len(kept)
                more = fh.read(size - len(kept))
                if not more and not kept:
                    break
                raw = kept + more
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None
    if raw[:2] != GZIP_MAGIC:
        return _as_utf8(_strip_bom(raw), head=True)
    d = _inflate.decompressobj(wbits=31)
    try:
        return _as_utf8(_strip_bom(d.decompress(raw, size)), head=True)
    except _INFLATE_ERRORS:
        return b""


def first_content(path: Path, max_bytes: int = DEFAULT_MAX_INPUT_BYTES, size: int = 65536) -> bytes:
    """Up to `size` bytes from the first non-whitespace byte of the content (b"" when it is all
    whitespace), read block by block: leading blanks, however many, are never held."""
    out = b""
    for block in iter_input_blocks(path, max_bytes):
        if not out:
            block = block.lstrip(b" \t\r\n")
        out += block[: size - len(out)]
        if len(out) >= size:
            break
    return out


def _strip_bom(data: bytes) -> bytes:
    """A UTF-8 byte-order mark some editors and Windows tools write: not part of the content."""
    return data[len(UTF8_BOM):] if data[:3] == UTF8_BOM else data


def _as_utf8(data: bytes, head: bool = False) -> bytes:
    """UTF-16 text with a byte-order mark (UTF16_BOMS) as UTF-8 without the mark; anything else as it is.
    `head`: the first bytes only (a character cut at their end is left out). Not text (a code unit that is no
    character, a control character other than tab and line ends, NUL padding aside): as it is, for the binary
    readers."""
    enc = next((e for bom, e in UTF16_BOMS if data[:2] == bom), None)
    if enc is None:
        return data
    try:
        text = codecs.getincrementaldecoder(enc)("strict").decode(data[2:], final=not head)
    except UnicodeDecodeError:
        return data
    if _CONTROL.search(text[:4096]):
        return data
    return text.encode("utf-8")


_CONTROL = re.compile(r"[\x01-\x08\x0b\x0c\x0e-\x1f]")


def _blocks(fh: BinaryIO, path: Path, max_bytes: int, gzipped: bool,
            progress: Callable[[int], None] | None, block_size: int = _READ_BLOCK) -> Iterator[bytes]:
    if not gzipped:
        size = os.fstat(fh.fileno()).st_size  # 0 for a pipe: then counted as it is read
        if size > max_bytes:  # said before reading gigabytes of it
            raise InputError(path, too_large(max_bytes, size))
        total = 0
        while True:
            block = fh.read(block_size)
            if not block:
                return
            total += len(block)
            if total > max_bytes:
                raise InputError(path, too_large(max_bytes, 0))
            if progress:
                progress(len(block))
            yield block
    yield from _read_ahead(_gunzip(fh, path, max_bytes, progress, block_size))


_READ_AHEAD_BLOCKS = 2  # inflated blocks waiting for the parser: memory is bounded by this many blocks


def _read_ahead(blocks: Iterator[bytes]) -> Iterator[bytes]:
    """`blocks`, produced by a thread while the caller works on the previous one; the producer's
    exception is raised here, at the point of the stream it was met, and the thread stops when the
    caller stops early."""
    q: queue.Queue[tuple[bytes | None, BaseException | None]] = queue.Queue(_READ_AHEAD_BLOCKS)
    stop = threading.Event()

    def put(item: tuple[bytes | None, BaseException | None]) -> bool:
        while not stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for block in blocks:
                if not put((block, None)):
                    return
        except BaseException as exc:  # handed to the caller, raised there
            put((None, exc))
            return
        put((None, None))

    thread = threading.Thread(target=produce, name="traceanalyzer-inflate", daemon=True)
    thread.start()
    try:
        while True:
            block, exc = q.get()
            if exc is not None:
                raise exc
            if block is None:
                return
            yield block
    finally:
        stop.set()
        thread.join()


def _gunzip(fh: BinaryIO, path: Path, max_bytes: int, progress: Callable[[int], None] | None,
            block_size: int) -> Iterator[bytes]:
    total = 0
    consumed = 0
    d = _inflate.decompressobj(wbits=31)
    member_started = False

    def check(out: bytes) -> bytes:
        nonlocal total
        total += len(out)
        if total > max_bytes:
            raise InputError(path, f"decompresses to more than the input limit of {max_bytes} bytes")
        return out

    # Compressed reads are smaller than the output blocks: a ratio of 10-20 is usual for traces.
    read_size = max(block_size // 8, 64 * 1024)
    while True:
        block = fh.read(read_size)
        if not block:
            break
        consumed += len(block)
        if progress:
            progress(len(block))
        data = block
        while data:
            member_started = True
            try:
                out = d.decompress(data, block_size)
            except _INFLATE_ERRORS as exc:
                raise InputError(path, f"corrupt gzip data near compressed byte {consumed}: {exc}") from None
            if out:
                yield check(out)
            if d.eof:  # concatenated gzip members are legal: continue with a fresh decompressor
                data = d.unused_data
                d = _inflate.decompressobj(wbits=31)
                member_started = False
            else:
                data = d.unconsumed_tail
    if member_started:
        try:
            out = d.flush()
        except _INFLATE_ERRORS as exc:
            raise InputError(path, f"corrupt gzip data at the end: {exc}") from None
        if out:
            yield check(out)
        if not d.eof:
            raise TruncatedInput(path, f"truncated gzip stream: the compressed data ends at byte {consumed} "
                                       f"after {total} decompressed bytes")
