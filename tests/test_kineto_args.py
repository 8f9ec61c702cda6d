"""Kineto args are decoded only for the events whose args the reader uses.

Operators, python frames and annotations carry ids of their own and input shapes, never a key the
reader reads; their args stay undecoded JSON. Runtime calls, GPU work, "[memory]" instants and any
category not known are decoded (in one call per chunk, one by one only when that fails). Checked:
which ids are read, that typed and loose paths agree, how args of the wrong shape are counted, and
that the undecoded args never pin a buffer the streaming decoder resizes.
"""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest
from kineto_builder import KinetoTrace

from traceanalyzer.formats import ReadOptions, chrome_json, kineto


def _events(t: KinetoTrace, path: Path, *, typed: bool = True, chunk_bytes: int = 1 << 26):
    tl = kineto.read_path(t.write(path), ReadOptions(), chunk_bytes=chunk_bytes, typed=typed)
    return tl, tl.events


def _trace_with_correlations() -> KinetoTrace:
    t = KinetoTrace()
    t.step(0, 0, 900)
    for i, cat in enumerate(("cpu_op", "python_function", "user_annotation", "cuda_runtime", "some_new_category")):
        t.events.append({"ph": "X", "cat": cat, "name": f"ev_{cat}", "pid": 1, "tid": 2, "ts": 10 + i, "dur": 1,
                         "args": {"correlation": 100 + i, "External id": 7}})
    t.kernel(50, 5, correlation=105)
    return t


@pytest.mark.parametrize("typed", [True, False], ids=["typed", "loose"])
def test_correlation_read_for_runtime_gpu_and_unknown_categories_only(tmp_path, typed):
    _, ev = _events(_trace_with_correlations(), tmp_path / "t.json", typed=typed)
    by_name = dict(zip(ev["name"].astype(str), ev["correlation"]))
    assert by_name["ev_cpu_op"] == -1
    assert by_name["ev_python_function"] == -1
    assert by_name["ev_user_annotation"] == -1
    assert by_name["ev_cuda_runtime"] == 103
    assert by_name["ev_some_new_category"] == 104
    assert by_name["gemm_kernel"] == 105


def test_typed_and_loose_paths_give_the_same_table(tmp_path):
    t = _trace_with_correlations()
    _, typed = _events(t, tmp_path / "a.json", chunk_bytes=300)
    _, loose = _events(t, tmp_path / "b.json", typed=False, chunk_bytes=300)
    assert typed.equals(loose)


def test_decode_args_one_call_then_one_by_one():
    chrome_json.DECODE_NOTES.clear()
    good = [msgspec.Raw(b'{"device": 1, "correlation": 5}'), msgspec.Raw(b'{}')]
    out, bad = kineto._decode_args(good)
    assert bad == [] and [a.device for a in out] == [1, -1] and [a.correlation for a in out] == [5, -1]
    mixed = [msgspec.Raw(b'{"device": [0]}'), msgspec.Raw(b"null"), msgspec.Raw(b'"oops"'),
             msgspec.Raw(b'{"kind": "\xff", "correlation": 9}'), msgspec.Raw(b'{"stream": 3}')]
    out, bad = kineto._decode_args(mixed)
    assert bad == [2]  # a string is no args object: that event is malformed
    assert out[0].device == [0]  # a value of another type, loosely typed (the columns then coerce it)
    assert out[1].device == -1 and out[1].correlation == -1  # null: no args
    assert out[3].correlation == 9 and out[3].kind == "\ufffd"  # invalid UTF-8 replaced, counted
    assert chrome_json.DECODE_NOTES["invalid_utf8"] == 1
    assert out[4].stream == 3
    chrome_json.DECODE_NOTES.clear()


def test_args_of_the_wrong_shape_count_only_where_they_are_read(tmp_path):
    t = KinetoTrace()
    t.step(0, 0, 900).launched(10, 5, 20, 500)
    t.events.append({"ph": "X", "cat": "python_function", "name": "frame", "pid": 1, "tid": 2, "ts": 30, "dur": 1,
                     "args": "not read"})
    t.events.append({"ph": "X", "cat": "kernel", "name": "k2", "pid": 0, "tid": 7, "ts": 600, "dur": 5,
                     "args": ["no", "object"]})
    t.events.append({"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 2, "ts": 40,
                     "args": 5})
    t.events.append({"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 2, "ts": 41,
                     "args": {"Device Type": 1, "Device Id": 0, "Total Allocated": 1024, "Total Reserved": 2048,
                              "Bytes": 1024}})
    for typed in (True, False):
        tl, ev = _events(t, tmp_path / f"t{typed}.json", typed=typed, chunk_bytes=1 << 26)
        src = tl.sources[0]
        names = set(ev["name"].astype(str))
        if typed:  # the python frame's args are never looked at: it is kept
            assert "frame" in names
        assert "k2" not in names  # a kernel's args are read: no object, the event is malformed
        assert src.not_kept["malformed_event"] == (2 if typed else 3)
        assert len(tl.memory) == 1 and tl.memory["allocated_bytes"].iloc[0] == 1024
        assert src.events_read == len(t.events) == src.events_kept + sum(src.not_kept.values())


def test_undecoded_args_do_not_pin_the_buffer_they_came_from():
    buf = bytearray(json.dumps([{"ph": "X", "cat": "kernel", "name": "k", "args": {"device": 3}}]).encode())
    with memoryview(buf) as view:
        events = chrome_json._decode(view[0:len(buf)], kineto.TYPED_DECODER)
    buf[:] = b" " * len(buf)  # overwritten, then resized: the streaming reader does both
    buf += b"x" * 100
    out, bad = kineto._decode_args([events[0].args])
    assert bad == [] and out[0].device == 3
