"""Gzip input: the same content, bounds and errors whichever inflater runs (ISA-L or zlib), and the
read-ahead thread stops with the caller and hands its errors over at the point of the stream."""

from __future__ import annotations

import gzip
import threading
import zlib

import pytest

from traceanalyzer.errors import InputError
from traceanalyzer.formats import _io


@pytest.fixture(params=["default", "zlib"])
def inflater(request, monkeypatch):
    if request.param == "zlib":
        monkeypatch.setattr(_io, "_inflate", zlib)
        monkeypatch.setattr(_io, "_INFLATE_ERRORS", (zlib.error,))
    return request.param


def _content() -> bytes:
    return b"".join(b'{"ph":"X","name":"k%d","ts":%d,"dur":3},' % (i, i * 7) for i in range(200_000))


def test_same_content_in_blocks(tmp_path, inflater):
    raw = _content()
    p = tmp_path / "t.json.gz"
    p.write_bytes(gzip.compress(raw[:1000]) + gzip.compress(raw[1000:]))  # two members
    blocks = list(_io.iter_input_blocks(p, block_size=1 << 16))
    assert b"".join(blocks) == raw
    assert max(len(b) for b in blocks) <= 1 << 16
    assert _io.read_input(p) == raw


def test_truncated_stream_yields_what_survived_then_says_so(tmp_path, inflater):
    raw = _content()
    gz = gzip.compress(raw)
    p = tmp_path / "cut.json.gz"
    p.write_bytes(gz[: len(gz) * 6 // 10])
    got = bytearray()
    with pytest.raises(_io.TruncatedInput, match="truncated gzip stream"):
        for block in _io.iter_input_blocks(p, block_size=1 << 16):
            got += block
    assert 0 < len(got) < len(raw) and raw.startswith(bytes(got))


def test_corrupt_stream_and_limit(tmp_path, inflater):
    gz = bytearray(gzip.compress(_content()))
    gz[len(gz) // 2: len(gz) // 2 + 64] = b"\xff" * 64
    p = tmp_path / "bad.json.gz"
    p.write_bytes(bytes(gz))
    with pytest.raises(InputError, match="corrupt gzip data"):
        _io.read_input(p)
    ok = tmp_path / "ok.json.gz"
    ok.write_bytes(gzip.compress(_content()))
    with pytest.raises(InputError, match="decompresses to more than the input limit of 1000 bytes"):
        _io.read_input(ok, max_bytes=1000)


def test_read_ahead_thread_stops_when_the_caller_stops(tmp_path):
    p = tmp_path / "t.json.gz"
    p.write_bytes(gzip.compress(_content()))
    it = _io.iter_input_blocks(p, block_size=1 << 12)
    next(it)
    it.close()
    assert not [t for t in threading.enumerate() if t.name == "traceanalyzer-inflate"]
