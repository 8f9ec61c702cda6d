"""Perfetto protobuf (.pftrace) reader: the schema table against its .proto, every sample trace (and
every Kineto trace of the corpus, slow) analysed from JSON and from its `.pftrace` conversion with
equal results, a trace laid out as Kineto's own builder writes it with known figures, interning and
incremental state, counters and flows, and damaged input (byte offsets, never a traceback)."""

from __future__ import annotations

import gzip
import re
import zlib
from pathlib import Path
from typing import Any

import msgspec
import pytest
from conftest import CORPUS, ROOT, SAMPLES, corpus_path

import traceanalyzer as ta
from traceanalyzer.errors import InputError
from traceanalyzer.formats import ReadOptions, read_file
from traceanalyzer.formats import pftrace as pf
from traceanalyzer.formats._perfetto_pb import SCHEMA, f_bytes, f_double, f_fixed64, f_string, f_varint
from traceanalyzer.formats.pftrace_write import convert, pftrace_bytes


def test_schema_table_matches_the_proto_file():
    """The decoder's field table and the documented .proto subset declare the same fields."""
    text = (ROOT / "traceanalyzer" / "formats" / "perfetto_trace.proto").read_text()
    declared: dict[str, set[tuple[str, int]]] = {}
    for msg, body in re.findall(r"message (\w+) \{(.*?)\n\}", text, re.DOTALL):
        declared[msg] = {(name, int(num)) for name, num in re.findall(r"(\w+) = (\d+);", body)}
    assert declared == {msg: {(f[0], f[1]) for f in fields} for msg, fields in SCHEMA.items()}


# --- JSON and .pftrace give the same analysis ---------------------------------------------------------


def _comparable(data: Any, drawing: bool = True) -> Any:
    """An Analysis as data, without what names the input (its path and format)."""
    if isinstance(data, dict):
        return {k: _comparable(v, drawing) for k, v in data.items()
                if k not in ("inputs", "input") and (drawing or k != "drawing")}
    if isinstance(data, list):
        return [_comparable(v, drawing) for v in data]
    return data


def _same_analysis(src: Path, tmp_path: Path, drawing: bool = True) -> tuple[dict, dict]:
    dst = tmp_path / (src.name.split(".")[0] + ".pftrace")
    convert(src, dst)
    from_json = _comparable(ta.analyze(src).to_data(), drawing)
    from_pf = _comparable(ta.analyze(dst).to_data(), drawing)
    return from_json, from_pf


SAMPLE_TRACES = sorted(p for p in SAMPLES.glob("*.json*") if not p.name.endswith(".expected.json"))


@pytest.mark.parametrize("src", SAMPLE_TRACES, ids=lambda p: p.name)
def test_sample_trace_same_analysis_from_pftrace(src, tmp_path):
    from_json, from_pf = _same_analysis(src, tmp_path)
    assert from_pf == from_json


def test_two_rank_job_same_analysis_from_pftrace(tmp_path):
    """The ranks' distributedInfo travels in the header instants: the job (clock, collectives matched,
    stragglers) is the same from two .pftrace files as from the two JSON files."""
    ranks = [SAMPLES / "comm_rank0.json", SAMPLES / "comm_rank1.json"]
    converted = []
    for src in ranks:
        converted.append(tmp_path / (src.name.split(".")[0] + ".pftrace"))
        convert(src, converted[-1])
    from_json = _comparable(ta.analyze(ranks).to_data())
    from_pf = _comparable(ta.analyze(converted).to_data())
    assert from_pf == from_json
    assert [r["rank"] for r in from_pf["ranks"]] == [0, 1] and from_pf["job"] is not None


def _kineto2026_cases() -> list[str]:
    return ["graph_replay", "eager_twin", "sync_threads", "counters", "nccl_pair"]


@pytest.mark.parametrize("case", _kineto2026_cases())
def test_2026_layout_same_analysis_from_pftrace(case, tmp_path):
    """The built 2026-layout traces (CUDA-graph replay and its eager twin, stream syncs on virtual
    threads, "GPU N Counters" hardware counters, two ranks matched by NCCL sequence numbers) analyse the
    same from .pftrace: graph ids, sync threads, counter samples and sequence numbers travel as args,
    thread ids and GPU counter events."""
    import kineto2026_builder as k

    built = {"graph_replay": lambda: [k.decode_loop(graphs=True)], "eager_twin": lambda: [k.decode_loop(graphs=False)],
             "sync_threads": lambda: [k.sync_loop()], "counters": lambda: [k.counters_trace()],
             "nccl_pair": lambda: list(k.nccl_pair())}[case]()
    sources = [b.write(tmp_path / f"{case}_{i}.json") for i, b in enumerate(built)]
    converted = []
    for src in sources:
        converted.append(tmp_path / f"{src.stem}.pftrace")
        convert(src, converted[-1])
    from_json = _comparable(ta.analyze(sources).to_data())
    from_pf = _comparable(ta.analyze(converted).to_data())
    assert from_pf == from_json
    if case == "counters":  # the samples arrived: the device has trace counters
        assert any(d.get("trace_counters") for r in from_pf["ranks"] for d in r["devices"])


PFTRACE_CORPUS_MAX_BYTES = 2_000_000


def _corpus_kineto() -> list[str]:
    manifest = CORPUS / "MANIFEST.tsv"
    if not manifest.is_file():
        return []
    rows = [line.split("\t") for line in manifest.read_text().splitlines()[1:]]
    # Traces up to a few MB: the larger ones repeat the same event kinds at ten times the CI time, and the
    # vectorized reader's tests (test_pftrace_vectorized.py) read large packets.
    return sorted(r[1] for r in rows if len(r) > 7 and r[7] == "kineto-json"
                  and (CORPUS / r[1]).is_file() and (CORPUS / r[1]).stat().st_size <= PFTRACE_CORPUS_MAX_BYTES)


@pytest.mark.slow
@pytest.mark.parametrize("rel", _corpus_kineto() or ["(corpus missing)"])
def test_corpus_kineto_trace_same_analysis_from_pftrace(rel, tmp_path):
    """Figures, findings and verdicts equal; the drawing (presentation only) may name a busy block after
    another of two kernels that start together, since a .pftrace keeps no JSON event order."""
    src = corpus_path() / rel
    from_json, from_pf = _same_analysis(src, tmp_path, drawing=False)
    assert from_pf == from_json


def test_corpus_list_is_not_empty():
    if not CORPUS.is_dir():
        corpus_path()  # skips, or fails under CI
    assert len(_corpus_kineto()) >= 30


# --- the committed sample ------------------------------------------------------------------------------


def test_committed_sample_is_what_the_script_makes(tmp_path):
    import subprocess
    import sys

    subprocess.run([sys.executable, str(SAMPLES / "make_pftrace.py"), str(tmp_path)], check=True)
    made = sorted(p.name for p in tmp_path.iterdir())
    assert made == ["basic.pftrace"]
    assert (tmp_path / "basic.pftrace").read_bytes() == (SAMPLES / "basic.pftrace").read_bytes()


def test_committed_sample_figures():
    """basic.pftrace is basic.json: its sidecar's figures (3 steps of 3000 us; GPU busy 1550, 1330 us...)."""
    import json

    expected = json.loads((SAMPLES / "basic.expected.json").read_text())
    a = ta.analyze(SAMPLES / "basic.pftrace")
    assert a.inputs[0].format == "pftrace"
    rank = a.ranks[0]
    assert len(rank.per_step) == expected["step_count"] == 3
    assert [s.duration_us for s in rank.per_step] == [s["duration_us"] for s in expected["steps"]]
    assert [s.gpu_busy_us for s in rank.per_step] == [s["gpu_busy_us"] for s in expected["steps"]]
    assert rank.devices[0].gpu_busy_us == expected["gpu_busy_us"]


# --- a trace laid out as Kineto's PerfettoTraceBuilder writes it -----------------------------------------

T0 = 1_700_000_000_000_000_000  # epoch ns


def _packet(*fields: bytes, ts: int | None = None, seq: int = 7) -> bytes:
    body = (f_varint(8, ts) if ts is not None else b"") + f_varint(10, seq) + b"".join(fields)
    return f_bytes(1, body)


def _descriptor(uuid: int, parent: int = 0, name: str | None = None, process: bytes | None = None,
                thread: bytes | None = None, counter: bool = False) -> bytes:
    out = f_varint(1, uuid) + (f_varint(5, parent) if parent else b"")
    out += f_string(2, name) if name is not None else b""
    out += f_bytes(3, process) if process is not None else b""
    out += f_bytes(4, thread) if thread is not None else b""
    out += f_bytes(8, b"") if counter else b""
    return f_bytes(60, out)


def _ann(name: str, value: Any) -> bytes:
    body = f_string(10, name)
    if isinstance(value, str):
        body += f_string(6, value)
    else:
        body += f_varint(4, value)
    return f_bytes(4, body)


def _slice(track: int, name: str, start: int, dur: int, *anns: bytes) -> list[bytes]:
    begin = f_bytes(11, f_varint(9, 1) + f_varint(11, track) + f_string(23, name) + b"".join(anns))
    end = f_bytes(11, f_varint(9, 2) + f_varint(11, track))
    return [_packet(begin, ts=start), _packet(end, ts=start + dur)]


def _builder_trace() -> bytes:
    """Kineto's builder: a main process, one process per device id, thread tracks (pid = device, tid =
    thread or stream), one child track per activity, no categories, the args as one JSON text in a
    "metadata" annotation plus "correlation_id", the header as "trace_metadata" instants."""
    out = [_packet(_descriptor(1, name="Kineto Trace", process=f_varint(1, 0) + f_string(6, "Kineto Trace")))]
    out.append(_packet(_descriptor(2, name="Device 4242", process=f_varint(1, 4242))))
    out.append(_packet(_descriptor(3, name="NVIDIA H100 [GPU 0]", process=f_varint(1, 0) + f_string(6, "NVIDIA H100"))))
    out.append(_packet(_descriptor(4, parent=2, name="thread 4243", thread=f_varint(1, 4242) + f_varint(2, 4243))))
    out.append(_packet(_descriptor(5, parent=3, name="stream 7", thread=f_varint(1, 0) + f_varint(2, 7))))
    out += _slice(1, "PyTorch Profiler", T0 - 5000, 2_010_000)  # the trace span, on the main process
    meta = f_bytes(11, f_varint(9, 3) + f_varint(11, 1) + f_string(23, "trace_metadata")
                   + _ann("distributedInfo", '{"rank": 3, "world_size": 8}'))
    props = f_bytes(11, f_varint(9, 3) + f_varint(11, 1) + f_string(23, "device_properties")
                    + _ann("properties", '{"id": 0, "name": "NVIDIA H100", "totalGlobalMem": 85000000000}'))
    out += [_packet(meta), _packet(props)]
    uuid = 10
    for step in range(2):
        s0 = T0 + step * 1_000_000  # 1 ms steps
        uuid += 1
        out.append(_packet(_descriptor(uuid, parent=4, name="thread 4243")))
        out += _slice(uuid, f"ProfilerStep#{step}", s0, 1_000_000)
        for k in range(4):  # 4 launches of 10 us, kernels of 100 us each 200 us apart
            corr = step * 10 + k + 1
            uuid += 1
            out.append(_packet(_descriptor(uuid, parent=4, name="thread 4243")))
            out += _slice(uuid, "cudaLaunchKernel", s0 + k * 200_000, 10_000,
                          _ann("metadata", f'"cbid": 211, "correlation": {corr}'), _ann("correlation_id", corr))
            uuid += 1
            out.append(_packet(_descriptor(uuid, parent=5, name="stream 7")))
            out += _slice(uuid, "gemm_kernel", s0 + k * 200_000 + 50_000, 100_000,
                          _ann("metadata", f'"queued": 0, "device": 0, "context": 1, "stream": 7, '
                                           f'"correlation": {corr}, "grid": [4, 1, 1]'),
                          _ann("correlation_id", corr))
    return b"".join(out)


def test_kineto_builder_layout_read_with_known_figures(tmp_path):
    path = tmp_path / "builder.pftrace"
    path.write_bytes(_builder_trace())
    tl = read_file(path, ReadOptions())
    ev = tl.events
    kernels = ev[ev["kind"] == "kernel"]
    assert len(kernels) == 8
    assert set(kernels["device"]) == {0} and set(kernels["stream"]) == {7}
    assert sorted(kernels["correlation"]) == [1, 2, 3, 4, 11, 12, 13, 14]
    assert (kernels["dur_ns"] == 100_000).all()
    runtime = ev[ev["kind"] == "runtime"]
    assert len(runtime) == 8 and set(runtime["pid"]) == {4242} and set(runtime["tid"]) == {4243}
    assert sorted(runtime["correlation"]) == sorted(kernels["correlation"])
    assert (ev["kind"] == "step").sum() == 2
    assert ev[ev["kind"] == "trace_span"]["name"].tolist() == ["PyTorch Profiler"]
    assert int(ev["ts_ns"].min()) == T0 - 5000
    assert tl.ranks[0].rank == 3 and tl.ranks[0].world_size == 8 and tl.ranks[0].clock == "epoch"
    assert tl.devices[0].name == "NVIDIA H100"
    a = ta.analyze(path)
    assert a.ranks[0].window_us == 2000  # two 1 ms steps
    assert a.ranks[0].devices[0].gpu_busy_us == 800  # 8 kernels of 100 us
    assert [s.gpu_busy_us for s in a.ranks[0].per_step] == [400, 400]


# --- a trace laid out as PyTorch's Perfetto encoder writes it -------------------------------------------------


def _pytorch_trace() -> bytes:
    """torch's `.pftrace` export: process and thread tracks (pid, tid, name; no categories), one interned
    name table, then per group of slices all the begins (with typed annotations and flows) followed by
    all the ends in the same order, so a track's events go back in time (Perfetto sorts them)."""
    names = ["ProfilerStep#0", "aten::mm", "aten::relu", "cudaLaunchKernel", "gemm", "Memcpy"]
    iid = {n: i + 1 for i, n in enumerate(names)}
    out = [f_bytes(1, _descriptor(1, process=f_varint(1, 4242) + f_string(6, "python"))),
           f_bytes(1, _descriptor(2, parent=1, thread=f_varint(1, 4242) + f_varint(2, 4243) + f_string(5, "thread"))),
           f_bytes(1, _descriptor(3, process=f_varint(1, 0) + f_string(6, "python"))),
           f_bytes(1, _descriptor(4, parent=3, thread=f_varint(1, 0) + f_varint(2, 7) + f_string(5, "stream 7 ")))]
    out.append(_packet(f_varint(13, 1), f_bytes(12, b"".join(
        f_bytes(2, f_varint(1, i) + f_string(2, n)) for n, i in iid.items())), seq=1))

    def arr(key: str, values: list[int]) -> bytes:
        return f_bytes(4, f_string(10, key) + b"".join(f_bytes(12, f_varint(4, v)) for v in values))

    def group(rows: list[tuple[int, str, int, int, bytes]]) -> None:  # (track, name, start us, end us, anns)
        for track, name, start, _, anns in rows:
            ev = f_varint(9, 1) + f_varint(11, track) + f_varint(10, iid[name]) + anns
            out.append(_packet(f_varint(13, 2), f_bytes(11, ev), ts=T0 + start * 1000, seq=1))
        for track, _, _, end, _ in rows:
            out.append(_packet(f_bytes(11, f_varint(9, 2) + f_varint(11, track)), ts=T0 + end * 1000, seq=1))

    group([(2, "ProfilerStep#0", 0, 1000, _ann("External id", 1)), (2, "aten::mm", 100, 300, _ann("External id", 2)),
           (2, "aten::relu", 300, 500, b""), (2, "aten::relu", 500, 500, b"")])  # back to back, zero length
    group([(2, "cudaLaunchKernel", 110 + 200 * k, 120 + 200 * k,
            _ann("cbid", 211) + _ann("correlation", k + 1) + f_fixed64(47, k + 1)) for k in range(3)])
    group([(4, "gemm", 150 + 100 * k, 250 + 100 * k,
            _ann("device", 0) + _ann("stream", 7) + _ann("correlation", k + 1) + arr("grid", [4, 1, 1])
            + f_fixed64(47, k + 1)) for k in range(3)]  # back to back on stream 7
          + [(4, "Memcpy", 600, 700, _ann("device", 0) + _ann("stream", 7) + _ann("copy kind", "HtoD")
              + _ann("bytes", 1 << 20))])
    group([(4, "ProfilerStep#0", 150, 700, _ann("External id", 1))])  # the step's GPU copy: an annotation
    return b"".join(out)


def test_pytorch_encoder_layout_read_with_known_figures(tmp_path):
    path = _write(tmp_path, _pytorch_trace(), "torch.pftrace")
    ev = read_file(path, ReadOptions()).events
    assert (ev["kind"] == "step").sum() == 1 and (ev["kind"] == "gpu_annotation").sum() == 1
    kernels = ev[ev["kind"] == "kernel"].sort_values("ts_ns")
    assert (kernels["ts_ns"] - T0).tolist() == [150_000, 250_000, 350_000]
    assert (kernels["dur_ns"] == 100_000).all() and kernels["correlation"].tolist() == [1, 2, 3]
    ops = ev[ev["kind"] == "cpu_op"].sort_values(["ts_ns", "dur_ns"])
    assert list(zip(ops["name"], ops["ts_ns"] - T0, ops["dur_ns"])) == [
        ("aten::mm", 100_000, 200_000), ("aten::relu", 300_000, 200_000), ("aten::relu", 500_000, 0)]
    runtime = ev[ev["kind"] == "runtime"]
    assert sorted(runtime["correlation"]) == [1, 2, 3] and (runtime["dur_ns"] == 10_000).all()
    copy = ev[ev["kind"] == "memcpy"]
    assert copy["bytes"].tolist() == [1 << 20] and copy["dur_ns"].tolist() == [100_000]
    a = ta.analyze(path)
    assert a.ranks[0].steps == 1 and a.ranks[0].window_us == 1000
    assert a.ranks[0].devices[0].gpu_busy_us == 400  # three 100 us kernels and a 100 us copy


def test_categories_inferred_for_uncategorised_events():
    infer = pf.infer_category
    gpu = {"device": 0, "stream": 7, "correlation": 5}
    assert infer("gemm", gpu) == "kernel" and infer("k", {"grid": [1, 1, 1]}) == "kernel"
    assert infer("Memcpy", {**gpu, "copy kind": "HtoD"}) == "gpu_memcpy" and infer("Memset", gpu) == "gpu_memset"
    assert infer("Memcpy HtoD (Pinned -> Device)", gpu) == "gpu_memcpy"
    assert infer("Stream Sync", {"cuda_sync_kind": "Stream Sync", "stream": 7, "device": 0}) == "cuda_sync"
    assert infer("EventRecord", gpu) == "graph_event_node"
    assert infer("ProfilerStep#3", {"External id": 1}, on_gpu=True) == "gpu_user_annotation"
    assert infer("ProfilerStep#3", {"External id": 1}) == "user_annotation"
    assert infer("cudaLaunchKernel", {"cbid": 211, "correlation": 5}) == "cuda_runtime"
    assert infer("cuLaunchKernel", {"cbid": 307}) == "cuda_driver"
    assert infer("aten::mm", None) == "cpu_op" and infer("PyTorch Profiler", None, on_process=True) == "Trace"
    assert infer("Activity Buffer Request", None, pid=-1) == "overhead"


def test_slice_pairing_rules():
    def b(ts: int) -> tuple:
        return (True, ts, ts, "b", None, None)

    def e(ts: int) -> tuple:
        return (False, ts, -1, "", None, None)

    spans = lambda pairs: [(x[1], y[1]) for x, y in pairs[0]]  # noqa: E731
    assert spans(pf.pair_slices([b(0), b(10), e(20), e(100)])) == [(10, 20), (0, 100)]  # in time order: nested
    assert spans(pf.pair_slices([b(0), b(10), e(100), e(20)])) == [(0, 100), (10, 20)]  # begins, then ends
    assert spans(pf.pair_slices([b(0), b(10), e(10), e(20)])) == [(10, 10), (0, 20)]  # in time order: latest open
    assert spans(pf.pair_slices([b(0), b(10), b(20), e(10), e(20), e(30)])) == [(0, 10), (10, 20), (20, 30)]
    assert pf.pair_slices([b(5), e(3)])[1:] == (1, 1)  # ends before its begin: sorted by time, neither pairs


# --- interning, incremental state, instants, counters, flows ---------------------------------------------


def _interned(names: dict[int, str] | None = None, cats: dict[int, str] | None = None,
              keys: dict[int, str] | None = None) -> bytes:
    body = b""
    for number, table in ((1, cats), (2, names), (3, keys)):
        for iid, value in (table or {}).items():
            body += f_bytes(number, f_varint(1, iid) + f_string(2, value))
    return f_bytes(12, body)


def _decoded(data: bytes) -> list[dict[str, Any]]:
    dec = pf.decode(data, Path("x.pftrace"), 1 << 30)
    return msgspec.json.decode(pf.kineto_document(dec))["traceEvents"]


def test_interned_names_follow_incremental_state():
    thread = _descriptor(2, parent=1, thread=f_varint(1, 10) + f_varint(2, 11))
    ev = lambda typ, name_iid, cat_iid=None, anns=b"": f_bytes(  # noqa: E731
        11, f_varint(9, typ) + f_varint(11, 2) + f_varint(10, name_iid)
        + (f_varint(3, cat_iid) if cat_iid else b"") + anns)
    ann = f_bytes(4, f_varint(1, 1) + f_varint(4, 42))
    data = b"".join([
        _packet(_descriptor(1, process=f_varint(1, 10))), _packet(thread),
        _packet(_interned({1: "first"}, {1: "cpu_op"}, {1: "correlation"}), f_varint(13, 1), ev(1, 1, 1, ann), ts=1000),
        _packet(f_varint(13, 2), ev(2, 1), ts=2000),
        # state cleared: iid 1 is now another name
        _packet(_interned({1: "second"}, {1: "user_annotation"}), f_varint(13, 3), ev(3, 1, 1), ts=3000),
        # another sequence that needs state it never had: dropped and counted
        _packet(f_varint(13, 2), ev(3, 1), ts=4000, seq=9),
    ])
    events = [e for e in _decoded(data) if e["ph"] != "M"]
    assert [(e["ph"], e["name"], e["cat"]) for e in events] == [("X", "first", "cpu_op"), ("i", "second", "user_annotation")]
    # (the document keeps the args the Kineto reader reads: an interned key it reads, resolved)
    assert events[0]["args"] == {"correlation": 42} and events[0]["dur"] == 1.0
    assert (events[0]["pid"], events[0]["tid"]) == (10, 11)
    dec = pf.decode(data, Path("x.pftrace"), 1 << 30)
    assert dec.not_kept["incremental_state_lost"] == 1


def test_counters_flows_and_string_ids():
    proc = _descriptor(1, name="GPU 0 Counters", process=b"")  # a string pid: no pid, a name
    counter = _descriptor(2, parent=1, name="sm__throughput", counter=True)
    cpu = _descriptor(3, process=f_varint(1, 5))
    named = _descriptor(4, parent=3, name="PyTorch Profiler")  # a string tid
    gpu = _descriptor(5, process=f_varint(1, 0))
    stream = _descriptor(6, parent=5, thread=f_varint(1, 0) + f_varint(2, 7))

    def slice_(track: int, name: str, flow: bytes) -> bytes:
        return f_bytes(11, f_varint(9, 1) + f_varint(11, track) + f_string(23, name) + f_string(22, "kernel") + flow)

    data = b"".join([
        _packet(proc), _packet(counter), _packet(cpu), _packet(named), _packet(gpu), _packet(stream),
        _packet(f_bytes(11, f_varint(9, 4) + f_varint(11, 2) + f_double(44, 61.5)), ts=5000),
        _packet(f_bytes(11, f_varint(9, 4) + f_varint(11, 2) + f_varint(30, 2**40)), ts=6000),
        _packet(slice_(4, "launch", f_fixed64(47, 99)), ts=5000),
        _packet(f_bytes(11, f_varint(9, 2) + f_varint(11, 4)), ts=5500),
        _packet(slice_(6, "k", f_fixed64(48, 99)), ts=5200),
        _packet(f_bytes(11, f_varint(9, 2) + f_varint(11, 6)), ts=5300),
    ])
    events = [e for e in _decoded(data) if e["ph"] != "M"]
    counters = [e for e in events if e["ph"] == "C"]
    assert [(c["pid"], c["name"], c["args"], c["ts"]) for c in counters] == [
        ("GPU 0 Counters", "sm__throughput", {"": 61.5}, 5.0), ("GPU 0 Counters", "sm__throughput", {"": 2**40}, 6.0)]
    launch = next(e for e in events if e.get("name") == "launch")
    assert (launch["pid"], launch["tid"], launch["dur"]) == (5, "PyTorch Profiler", 0.5)
    kernel = next(e for e in events if e.get("name") == "k")
    assert (kernel["pid"], kernel["tid"]) == (0, 7)
    flows = sorted((e["ph"], e["id"], e["pid"]) for e in events if e["ph"] in "sf")
    assert flows == [("f", 99, 0), ("s", 99, 5)]


def test_report_command_reads_pftrace(tmp_path):
    from click.testing import CliRunner

    from traceanalyzer.commands import main

    out = tmp_path / "r.json"
    res = CliRunner().invoke(main, ["report", str(SAMPLES / "basic.pftrace"), "--format", "json", "-o", str(out)])
    assert res.exit_code == 0, res.output
    data = msgspec.json.decode(out.read_bytes())
    assert data["inputs"][0]["format"] == "pftrace" and data["ranks"][0]["steps"] == 3
    bad = _write(tmp_path, _packet(_descriptor(1)) + f_bytes(1, b"\x40\xff"), "bad.pftrace")
    res = CliRunner().invoke(main, ["report", str(bad), "--format", "json", "-o", str(tmp_path / "b.json")])
    assert res.exit_code == 2 and "bad.pftrace: not a valid Perfetto trace: at byte" in res.output
    assert "Traceback" not in res.output


def test_gpu_counters_as_pytorch_writes_them():
    """Kineto 2026's "GPU N Counters" samples become GpuCounterEvents (names in an interned descriptor per
    GPU) and come back as the same counter samples; other counters go to counter tracks."""
    doc = {"traceEvents": [
        {"ph": "C", "name": "SM Active", "pid": "GPU 1 Counters", "ts": 10.0, "args": {"": 87.5}},
        {"ph": "C", "name": "HBM BW", "pid": "GPU 1 Counters", "ts": 10.0, "args": {"": 3}},
        {"ph": "C", "name": "SM Active", "pid": "GPU 1 Counters", "ts": 11.5, "args": {"": 12.0}},
        {"ph": "C", "name": "mem", "pid": 42, "ts": 12.0, "args": {"used": 5, "free": 7}},
    ]}
    data = pftrace_bytes(doc)
    assert data.count(b"\xa2\x03") == 3  # three GpuCounterEvent packets (field 52)
    counters = [(e["pid"], e["name"], e["args"], e["ts"]) for e in _decoded(data) if e["ph"] == "C"]
    assert counters == [("GPU 1 Counters", "SM Active", {"": 87.5}, 10.0), ("GPU 1 Counters", "HBM BW", {"": 3}, 10.0),
                        ("GPU 1 Counters", "SM Active", {"": 12.0}, 11.5), (42, "mem.used", {"": 5}, 12.0),
                        (42, "mem.free", {"": 7}, 12.0)]
    # a descriptor given inline, on the event itself, with the GPU id
    spec = f_bytes(1, f_varint(1, 3) + f_string(2, "Cycles"))  # GpuCounterDescriptor.specs
    inline = _packet(f_bytes(52, f_bytes(1, spec) + f_varint(3, 2) + f_bytes(2, f_varint(1, 3) + f_double(3, 1.5))),
                     ts=2000)
    assert [(e["pid"], e["name"], e["args"]) for e in _decoded(inline) if e["ph"] == "C"] == [
        ("GPU 2 Counters", "Cycles", {"": 1.5})]


def test_chrome_legacy_events_and_reused_flow_ids():
    """Chrome's legacy form (a JSON phase and a duration in us on `legacy_event`), and a flow id that
    starts a new flow after it was terminated (as in Perfetto's own flow tests)."""
    t1 = _descriptor(1, thread=f_varint(1, 1) + f_varint(2, 1) + f_string(5, "t1"))
    t2 = _descriptor(2, thread=f_varint(1, 2) + f_varint(2, 2) + f_string(5, "t2"))

    def legacy(track: int, name: str, flow: bytes, phase: str = "X") -> bytes:
        return f_bytes(11, f_string(23, name) + f_string(22, "test") + f_varint(11, track) + flow
                       + f_bytes(6, f_varint(3, 10) + f_varint(2, ord(phase))))

    data = b"".join([
        _packet(t1, ts=0), _packet(t2, ts=0),
        _packet(legacy(1, "Start", f_fixed64(47, 1)), ts=10_000),
        _packet(legacy(2, "End", f_fixed64(48, 1)), ts=30_000),
        _packet(legacy(1, "Again", f_fixed64(47, 1)), ts=50_000),
        _packet(legacy(2, "Instant", b"", "I"), ts=60_000),
    ])
    events = [e for e in _decoded(data) if e["ph"] != "M"]
    slices = [(e["name"], e["pid"], e["ts"], e["dur"]) for e in events if e["ph"] == "X"]
    assert slices == [("Start", 1, 10.0, 10.0), ("End", 2, 30.0, 10.0), ("Again", 1, 50.0, 10.0)]
    assert [(e["ph"], e["id"]) for e in events if e["ph"] in "stf"] == [("s", 1), ("f", 1), ("s", 1)]
    assert [e["name"] for e in events if e["ph"] == "i"] == ["Instant"]


def test_incremental_counter_sums_deltas_per_sequence():
    """A counter track marked incremental carries deltas: each sequence sums its own (Perfetto's
    incremental_counter_sequences test: 100, 50, +10, +5 on two sequences give 100, 50, 110, 55)."""
    desc = f_bytes(60, f_varint(1, 10) + f_string(2, "MyIncrementalCounter") + f_bytes(8, f_varint(5, 1)))

    def value(v: int) -> bytes:
        return f_bytes(11, f_varint(9, 4) + f_varint(11, 10) + f_varint(30, v))

    data = b"".join([
        _packet(f_varint(41, 1), desc, ts=0, seq=1), _packet(f_varint(41, 1), desc, ts=0, seq=2),
        _packet(value(100), ts=100, seq=1), _packet(value(50), ts=150, seq=2),
        _packet(value(10), ts=200, seq=1), _packet(value(5), ts=250, seq=2),
    ])
    assert [e["args"][""] for e in _decoded(data) if e["ph"] == "C"] == [100, 50, 110, 55]


def test_compressed_packets_read_and_bounded(tmp_path):
    inner = _builder_trace()
    path = tmp_path / "c.pftrace"
    path.write_bytes(_packet(f_bytes(50, zlib.compress(inner))))
    assert len(read_file(path, ReadOptions()).events) == len(read_file(_write(tmp_path, inner), ReadOptions()).events)
    with pytest.raises(InputError, match="inflate to more than the input limit"):
        read_file(path, ReadOptions(max_input_bytes=len(path.read_bytes()) + 1000))
    nested = _write(tmp_path, _packet(f_bytes(50, zlib.compress(_packet(f_bytes(50, zlib.compress(inner)))))))
    with pytest.raises(InputError, match="compressed packets inside compressed packets"):
        read_file(nested, ReadOptions())


def _write(tmp_path: Path, data: bytes, name: str = "t.pftrace") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def test_gzip_pftrace_and_suffix_listing(tmp_path):
    data = _builder_trace()
    (tmp_path / "dir").mkdir()
    gz = _write(tmp_path / "dir", gzip.compress(data), "trace.pftrace.gz")
    _write(tmp_path / "dir", data, "other.perfetto-trace")
    assert len(read_file(gz, ReadOptions()).events) == len(read_file(_write(tmp_path, data), ReadOptions()).events)
    with pytest.raises(InputError, match="decompresses to more than the input limit"):
        read_file(gz, ReadOptions(max_input_bytes=1000))
    from traceanalyzer.formats.registry import TRACE_SUFFIXES
    assert all(name.endswith(TRACE_SUFFIXES) for name in ("a.pftrace", "b.perfetto-trace", "trace.pftrace.gz"))


def test_sniff_tells_perfetto_from_xspace_and_json():
    assert pf.sniff(_builder_trace()[:4096])
    assert pf.sniff(pftrace_bytes({"traceEvents": []}))
    from test_tf_xplane import _space
    assert not pf.sniff(_space()[:4096])
    assert not pf.sniff(b'{"traceEvents": []}')
    assert not pf.sniff(b"\x0a\x05hello")


def test_no_corpus_file_is_taken_for_perfetto(corpus):
    """Other protobufs (XSpace, TF profiler summaries such as op_stats_v2.pb, whose first field 10 is
    length-delimited) and every JSON / log file keep their own reader or their own error."""
    from traceanalyzer.formats._io import read_head

    files = [p for p in corpus.rglob("*") if p.is_file() and p.name != "MANIFEST.tsv"]
    assert len([p for p in files if p.name.endswith(".pb")]) >= 5
    assert [p.name for p in files if pf.sniff(read_head(p))] == []


# --- damaged input: a clear error with the byte offset, never a traceback ----------------------------------


def _error(tmp_path: Path, data: bytes) -> str:
    with pytest.raises(InputError) as err:
        read_file(_write(tmp_path, data), ReadOptions())
    return err.value.message


def test_truncated_varint_inside_a_packet(tmp_path):
    # a packet of 3 bytes whose timestamp varint never ends
    data = _packet(_descriptor(1, process=f_varint(1, 1))) + f_bytes(1, b"\x40\xff\xff")
    at = len(_packet(_descriptor(1, process=f_varint(1, 1)))) + 3  # packet tag and length, the field tag
    message = _error(tmp_path, data)
    assert f"at byte {at}: a varint cut off" in message and "Perfetto" in message


def test_wrong_wire_type(tmp_path):
    first = _packet(_descriptor(1, process=f_varint(1, 1)))
    bad = f_bytes(1, f_varint(10, 1) + f_string(8, "not a time"))  # timestamp as a string
    message = _error(tmp_path, first + bad)
    at = len(first) + 2 + 2
    assert message.endswith(f"at byte {at}: field 8 (timestamp) of TracePacket with wire type length-delimited, "
                            f"expected varint")


def test_length_beyond_its_message(tmp_path):
    first = _packet(_descriptor(1, process=f_varint(1, 1)))
    bad = f_bytes(1, f_varint(10, 1) + b"\x5a\x40" + b"\x00" * 4)  # track_event claims 64 bytes, has 4
    message = _error(tmp_path, first + bad)
    assert f"at byte {len(first) + 4}: field 11 of TracePacket declares 64 bytes but only 4 remain" in message


def test_nesting_is_bounded(tmp_path):
    value = f_varint(4, 1)
    for _ in range(40):
        value = f_bytes(12, value)
    ev = f_bytes(11, f_varint(9, 3) + f_varint(11, 1) + f_string(23, "deep") + f_bytes(4, f_string(10, "a") + value))
    message = _error(tmp_path, _packet(_descriptor(1, process=f_varint(1, 1))) + _packet(ev, ts=1))
    assert "nested deeper than 32 levels" in message


def test_top_level_garbage(tmp_path):
    data = pftrace_bytes({"traceEvents": []}) + b"\x12\x03abc"
    assert "expected field 1 (a length-delimited TracePacket)" in _error(tmp_path, data)


def test_cut_in_the_last_packet_is_read_with_a_warning(tmp_path):
    data = (SAMPLES / "basic.pftrace").read_bytes()
    cut = _write(tmp_path, data[: len(data) - 7])
    tl = read_file(cut, ReadOptions())
    assert tl.sources[0].warnings[0].startswith("TRUNCATED: the trace ends inside the packet starting at byte")
    whole = read_file(SAMPLES / "basic.pftrace", ReadOptions())
    assert 0 < len(tl.events) <= len(whole.events)


hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=150, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(cuts=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=6),
       truncate=st.integers(0, 10**6))
def test_damaged_pftrace_never_crashes(tmp_path, cuts, truncate):
    data = bytearray(_SMALL)
    for pos, byte in cuts:
        data[pos % len(data)] = byte
    data = data[: max(2, truncate % (len(data) + 1))]
    path = _write(tmp_path, bytes(data), "fuzz.pftrace")
    try:
        read_file(path, ReadOptions())
    except InputError as exc:
        assert str(path) in str(exc)


_SMALL = _builder_trace()[:3000]
