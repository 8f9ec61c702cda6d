"""The streaming, chunked decoder gives exactly what the whole-content decoder gives.

Every path is compared on the same bytes: streamed in tiny pieces (a split at nearly every event
boundary), streamed in one piece, typed structs and loose structs, and the whole content in
memory (`kineto.read`). Layouts that could fool a splitter are built here: `}, {` inside
strings, nested arrays of objects in args, minified and pretty-printed JSON, traceEvents before
other keys, concatenated gzip members. On a replica of a real corpus trace the figures also
match a slow reference computed from `json.load`.
"""

from __future__ import annotations

import gzip
import json
import re
from itertools import pairwise
from pathlib import Path

import orjson
import pandas as pd
import pytest
from conftest import corpus_path
from kineto_builder import KinetoTrace
from test_corpus_kineto import reference
from timelines import load_paths

from traceanalyzer.errors import InputError
from traceanalyzer.formats import ReadOptions, kineto, read_file
from traceanalyzer.pipeline import Options, analyze

CHUNK_SIZES = (1, 7, 300, 1 << 26)


def read_all_ways(path: Path) -> list[tuple[str, object]]:
    """The Timeline of `path` by every decoding path."""
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    out: list[tuple[str, object]] = [("whole", kineto.read(path, data, ReadOptions()))]
    for size in CHUNK_SIZES:
        out.append((f"stream {size}", kineto.read_path(path, ReadOptions(), chunk_bytes=size)))
    out.append(("stream loose 7", kineto.read_path(path, ReadOptions(), chunk_bytes=7, typed=False)))
    return out


def assert_same_timelines(path: Path) -> None:
    (_, first), *rest = read_all_ways(path)
    for label, tl in rest:
        pd.testing.assert_frame_equal(tl.events, first.events, obj=label)
        assert tl.sources[0].events_read == first.sources[0].events_read, label
        assert tl.sources[0].not_kept == first.sources[0].not_kept, label
        assert tl.sources[0].warnings == first.sources[0].warnings, label
        assert tl.ranks == first.ranks, label
        assert tl.devices == first.devices, label


def tricky_trace() -> KinetoTrace:
    t = KinetoTrace(rank=1, base_ns=1_700_000_000_000_000_000)
    for i in range(6):
        s = i * 1000
        t.step(i, s, 900)
        t.host('evil}, {"ph": "X"}, {name', s + 1, 5)
        t.host("close]}, {", s + 2, 5)
        t.host("brace } , { spaced \\ backslash \u00e9\u4e2d", s + 3, 5)
        t.kernel(s + 10, 100, name=f"gemm_{i}")
        t.memcpy(s + 200, 50)
        t.kernel(s + 300, 20, name="ncclKernel_AllReduce", Collective_name="allreduce")
        t.events.append({"ph": "X", "cat": "cpu_op", "name": "nested", "pid": 4242, "tid": 4243,
                         "ts": s + 400, "dur": 3,
                         "args": {"list": [{"a": 1}, {"b": [{"c": "}, {"}]}], "obj": {"x": {"y": {}}}}})
        t.events.append({"ph": "s", "cat": "ac2g", "name": "launch", "id": i, "pid": 4242, "tid": 4243,
                         "ts": s + 9})
        t.events.append({"ph": "f", "cat": "ac2g", "name": "launch", "id": i, "pid": 0, "tid": 7,
                         "ts": s + 10, "bp": "e"})
    t.events.append({"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "GPU 0"}})
    t.events.append({"ph": "i", "name": "Record Window End", "s": "g", "pid": "", "tid": "", "ts": 9999})
    t.events.append({"ph": "X", "cat": "Trace", "name": "PyTorch Profiler", "pid": "Spans",
                     "tid": "PyTorch Profiler", "ts": 0, "dur": 9000})
    return t


def layouts(doc: dict) -> dict[str, bytes]:
    events = doc["traceEvents"]
    header = {k: v for k, v in doc.items() if k != "traceEvents"}
    first, *others = list(header.items())
    return {
        "default": json.dumps(doc).encode(),
        "minified": json.dumps(doc, separators=(",", ":")).encode(),
        "pretty": json.dumps(doc, indent=2).encode(),
        "pretty_crlf": json.dumps(doc, indent="\t").replace("\n", "\r\n").encode(),
        "events_first": json.dumps({"traceEvents": events, **header}).encode(),
        # Kineto 2.x: INFO, traceName, baseTimeNanoseconds after the events
        "events_middle": json.dumps({first[0]: first[1], "traceEvents": events, **dict(others),
                                     "INFO": ["a ] b", "}, {"], "traceName": "x]"}).encode(),
        "leading_newline": b"\n" + json.dumps(doc).encode() + b"\n\n",
        "non_ascii_escaped": json.dumps(doc, ensure_ascii=True).encode(),
        "non_ascii_raw": json.dumps(doc, ensure_ascii=False).encode(),
        "decoy_key": json.dumps({"metadata": {"traceEvents": [1, 2]}, "note": '"traceEvents": [',
                                 **doc}).encode(),
    }


@pytest.mark.parametrize("layout", list(layouts(tricky_trace().document())))
def test_layouts_decode_identically(tmp_path, layout):
    data = layouts(tricky_trace().document())[layout]
    plain = tmp_path / "t.json"
    plain.write_bytes(data)
    assert_same_timelines(plain)
    tl = kineto.read_path(plain, ReadOptions(), chunk_bytes=1)
    assert tl.ranks[0].rank == 1 and tl.ranks[0].clock == "epoch"  # keys before and after the events
    names = set(tl.events["name"].astype(str))
    assert {'evil}, {"ph": "X"}, {name', "close]}, {", "nested", "ncclKernel_AllReduce"} <= names
    assert int(tl.events["comm"].sum()) == 6
    assert tl.sources[0].events_read == len(tricky_trace().events)


def test_concatenated_gzip_members(tmp_path):
    data = json.dumps(tricky_trace().document()).encode()
    cuts = [0, 17, len(data) // 3, len(data) // 2 + 5, len(data)]
    path = tmp_path / "t.json.gz"
    path.write_bytes(b"".join(gzip.compress(data[a:b], mtime=0) for a, b in pairwise(cuts)))
    assert_same_timelines(path)
    one = tmp_path / "one.json"
    one.write_bytes(data)
    pd.testing.assert_frame_equal(kineto.read_path(path, ReadOptions(), chunk_bytes=7).events,
                                  kineto.read_path(one, ReadOptions()).events)


def test_types_the_typed_structs_refuse_fall_back_per_chunk(tmp_path):
    """A null ts, a string device, a float pid: those pieces decode loosely, same result."""
    t = tricky_trace()
    t.events.append({"ph": "X", "cat": "kernel", "name": "k", "pid": 0.0, "tid": "stream 7", "ts": None,
                     "dur": 5, "args": {"device": "0", "stream": 7.0, "bytes": "12"}})
    t.events.append({"ph": "X", "cat": "kernel", "name": None, "pid": 0, "tid": 7, "ts": "123.5", "dur": 5,
                     "args": None})
    path = t.write(tmp_path / "t.json")
    assert_same_timelines(path)


@pytest.mark.parametrize("size", [1, 300, 1 << 26])
def test_errors_match_the_whole_content_path(tmp_path, size):
    good = json.dumps(tricky_trace().document(), indent=1).encode()
    cases = {
        "malformed": good.replace(b'"ph": "X"', b'"ph" "X"', 3),
        "bad_tail": good[:-2] + b', "x": }',
    }
    for label, data in cases.items():
        path = tmp_path / f"{label}.json"
        path.write_bytes(data)
        with pytest.raises(InputError) as whole:
            kineto.read(path, data, ReadOptions())
        with pytest.raises(InputError) as streamed:
            kineto.read_path(path, ReadOptions(), chunk_bytes=size)
        where = re.compile(r"(truncated JSON|line \d+, column \d+)")
        assert where.search(str(streamed.value)).group(1) == where.search(str(whole.value)).group(1), label


@pytest.mark.parametrize("size", [1, 300, 1 << 26])
def test_truncated_trace_is_salvaged(tmp_path, size):
    """A trace cut off mid-stream: every complete event before the cut is read, with a warning."""
    doc = tricky_trace().document()
    good = json.dumps(doc, indent=1).encode()
    cut = good[: len(good) * 2 // 3]
    complete = orjson.loads(cut[: cut.rindex(b"},") + 1] + b"]}")["traceEvents"]
    path = tmp_path / "cut.json"
    path.write_bytes(cut)
    tl = kineto.read_path(path, ReadOptions(), chunk_bytes=size)
    assert tl.sources[0].events_read == len(complete)
    assert "TRUNCATED" in tl.warnings[0] and f"byte {len(cut)}" in tl.warnings[0]
    full = tmp_path / "full.json"
    full.write_text(json.dumps({**doc, "traceEvents": complete}))
    pd.testing.assert_frame_equal(tl.events, kineto.read_path(full, ReadOptions()).events)


def test_not_a_trace_messages_unchanged(tmp_path):
    for body, expected in ((b"[1, 2]", "is a list"), (b'{"a": 1}', "without a 'traceEvents' list"),
                           (b'{"traceEvents": {"a": 1}}', "'traceEvents' is not a list")):
        path = tmp_path / "x.json"
        path.write_bytes(body)
        with pytest.raises(InputError, match=expected):
            read_file(path, ReadOptions())


def replicate(src: Path, copies: int) -> dict:
    """`copies` shifted copies of a trace's events, as a document (the slow, obvious way)."""
    opener = gzip.open if src.read_bytes()[:2] == b"\x1f\x8b" else open
    with opener(src, "rb") as fh:
        doc = json.load(fh)
    events = doc["traceEvents"]
    ends = [e["ts"] + e.get("dur", 0) for e in events if isinstance(e.get("ts"), (int, float))
            and isinstance(e.get("dur", 0), (int, float))]
    starts = [e["ts"] for e in events if isinstance(e.get("ts"), (int, float))]
    shift = int(max(ends) - min(starts)) + 1000
    out = []
    for k in range(copies):
        for e in events:
            e = dict(e)
            if isinstance(e.get("ts"), (int, float)):
                e["ts"] = e["ts"] + k * shift
            if isinstance(e.get("name"), str) and e["name"].startswith("ProfilerStep#"):
                e["name"] = f"ProfilerStep#{int(e['name'][13:]) + 1000 * k}"
            out.append(e)
    return {**doc, "traceEvents": out}


@pytest.mark.slow
def test_replica_of_a_corpus_trace(tmp_path):
    src = corpus_path() / "hta_nccl" / "nccl_data.json.gz"
    doc = replicate(src, 3)
    path = tmp_path / "replica.json.gz"
    path.write_bytes(gzip.compress(json.dumps(doc).encode(), compresslevel=1))
    data = gzip.decompress(path.read_bytes())
    whole = kineto.read(path, data, ReadOptions())
    for size in (4096, 64 * 1024, 1 << 26):
        streamed = kineto.read_path(path, ReadOptions(), chunk_bytes=size)
        pd.testing.assert_frame_equal(streamed.events, whole.events)
    tl = load_paths([path], ReadOptions())
    pd.testing.assert_frame_equal(tl.events, whole.events)
    (rank,) = analyze(tl, Options(min_gap_ns=0, diagnose=False)).to_data()["ranks"]
    ref_devices, ref_dl = reference(doc)
    ours = {d["index"]: d for d in rank["devices"]}
    assert set(ours) == set(ref_devices)
    for dev, (window_us, busy_frac) in ref_devices.items():
        assert ours[dev]["window_us"] == pytest.approx(window_us, rel=1e-6, abs=0.01)
        assert 1 - ours[dev]["gpu_idle_fraction"] == pytest.approx(busy_frac, abs=0.001)
    if ref_dl is not None:
        assert rank["dataloader_wait_fraction"] == pytest.approx(ref_dl, abs=0.001)


def test_fast_duplicate_removal_matches_pandas():
    import numpy as np

    from traceanalyzer import timeline as T

    rng = np.random.default_rng(7)
    n = 5000
    frame = T.events_frame({
        "ts_ns": rng.integers(0, 50, n), "dur_ns": rng.integers(0, 3, n),
        "kind": pd.Categorical(rng.choice(["kernel", "cpu_op"], n), categories=T.EVENT_KINDS),
        "name": pd.Categorical(rng.choice(["a", "b", "c"], n)),
        "category": pd.Categorical(rng.choice(["x", ""], n)),
        "pid": rng.integers(-1, 2, n), "tid": rng.integers(-1, 2, n),
        "device": rng.integers(-1, 1, n), "stream": rng.integers(-1, 1, n),
        "correlation": rng.integers(0, 10**9, n),  # not part of the key
    })
    expected = frame.drop_duplicates(subset=kineto._DUPLICATE_KEY, ignore_index=True)
    assert len(expected) < n
    pd.testing.assert_frame_equal(kineto._drop_duplicates(frame), expected)
    pd.testing.assert_frame_equal(kineto._drop_duplicates(expected), expected)
