"""Reading input bytes safely: gzip is detected by content and decompression is bounded."""

from __future__ import annotations

import zlib
from pathlib import Path

from ..errors import InputError

GZIP_MAGIC = b"\x1f\x8b"
# Decompressed inputs larger than this are refused (a "zip bomb" guard); override per call.
DEFAULT_MAX_INPUT_BYTES = 16 * 1024**3
_READ_BLOCK = 8 * 1024 * 1024


def read_input(path: Path, max_bytes: int = DEFAULT_MAX_INPUT_BYTES) -> bytes:
    """Whole content of `path`, gunzipped when it starts with the gzip magic bytes."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(2)
            fh.seek(0)
            if head != GZIP_MAGIC:
                data = fh.read(max_bytes + 1)
                if len(data) > max_bytes:
                    raise InputError(path, f"larger than the input limit of {max_bytes} bytes")
                return data
            return _gunzip(fh, path, max_bytes)
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None


def read_head(path: Path, size: int = 65536) -> bytes:
    """The first `size` bytes of the content (decompressed when gzip), for format sniffing."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(size)
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror or exc}") from None
    if raw[:2] != GZIP_MAGIC:
        return raw
    d = zlib.decompressobj(wbits=31)
    try:
        return d.decompress(raw, size)
    except zlib.error:
        return b""


def _gunzip(fh, path: Path, max_bytes: int) -> bytes:  # type: ignore[no-untyped-def]
    parts: list[bytes] = []
    total = 0
    consumed = 0
    d = zlib.decompressobj(wbits=31)
    member_started = False

    def take(out: bytes) -> None:
        nonlocal total
        total += len(out)
        if total > max_bytes:
            raise InputError(path, f"decompresses to more than the input limit of {max_bytes} bytes")
        parts.append(out)

    while True:
        block = fh.read(_READ_BLOCK)
        if not block:
            break
        consumed += len(block)
        data = block
        while data:
            member_started = True
            try:
                take(d.decompress(data, _READ_BLOCK))
            except zlib.error as exc:
                raise InputError(path, f"corrupt gzip data near compressed byte {consumed}: {exc}") from None
            if d.eof:  # concatenated gzip members are legal: continue with a fresh decompressor
                data = d.unused_data
                d = zlib.decompressobj(wbits=31)
                member_started = False
            else:
                data = d.unconsumed_tail
    if member_started:
        try:
            take(d.flush())
        except zlib.error as exc:
            raise InputError(path, f"corrupt gzip data at the end: {exc}") from None
        if not d.eof:
            raise InputError(path, f"truncated gzip stream: the compressed data ends at byte {consumed} "
                                   f"after {total} decompressed bytes")
    return b"".join(parts)
