"""TF / xprof trace-viewer JSON reader: format detection, mapping, and the same figures as the
XSpace it was converted from."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest
from conftest import kineto_corpus_files
from timelines import load_paths

from traceanalyzer.analyses import figures as F
from traceanalyzer.formats import ReadOptions, read_file, tf_json
from traceanalyzer.formats._io import read_head

SCENARIOS = ["local_tf_input_bound", "local_tf_well_fed"]


def _gpu_trace() -> dict:
    """A TF-style GPU trace: pids named by M events that come after the X events."""
    x = [
        {"ph": "X", "pid": 1, "tid": 5, "ts": 10.0, "dur": 100.0, "name": "Profiled batch",
         "args": {"step_num": "3"}},
        {"ph": "X", "pid": 1, "tid": 6, "ts": 12.0, "dur": 40.0, "name": "IteratorGetNextOp::DoCompute"},
        {"ph": "X", "pid": 1, "tid": 7, "ts": 12.0, "dur": 40.0, "name": "Iterator::Root::Prefetch"},
        {"ph": "X", "pid": 1, "tid": 5, "ts": 55.0, "dur": 2.0, "name": "cudaLaunchKernel",
         "args": {"correlation_id": "9"}},
        {"ph": "X", "pid": 2, "tid": 17, "ts": 60.0, "dur": 20.5, "name": "volta_sgemm",
         "args": {"correlation_id": "9"}},
        {"ph": "X", "pid": 2, "tid": 8, "ts": 52.0, "dur": 4.0, "name": "MemcpyH2D",
         "args": {"memcpy_details": "kind:HtoD size:1024 dest:0 async:1"}},
        {"ph": "X", "pid": 2, "tid": 99, "ts": 60.0, "dur": 20.5, "name": "dense/MatMul"},
        {"ph": "i", "pid": 1, "tid": 5, "ts": 11.0, "name": "ThreadpoolListener::Record", "s": "t"},
    ]
    m = [
        {"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "/host:CPU"}},
        {"ph": "M", "pid": 2, "name": "process_name", "args": {"name": "/device:GPU:0"}},
        {"ph": "M", "pid": 1, "tid": 5, "name": "thread_name", "args": {"name": "python"}},
        {"ph": "M", "pid": 2, "tid": 17, "name": "thread_name", "args": {"name": "Stream #17(Kernel)"}},
        {"ph": "M", "pid": 2, "tid": 8, "name": "thread_name", "args": {"name": "Stream #8(MemcpyH2D)"}},
        {"ph": "M", "pid": 2, "tid": 99, "name": "thread_name", "args": {"name": "TensorFlow Ops"}},
    ]
    return {"displayTimeUnit": "ns", "traceEvents": m[:2] + x + m[2:] + [{}]}


def test_sniff_accepts_tf_traces_and_rejects_kineto(corpus):
    for scenario in SCENARIOS:
        conv = corpus / scenario / "xprof_converted"
        assert tf_json.sniff(read_head(conv / "trace_viewer.json"))
        assert tf_json.sniff(read_head(next(conv.glob("plugins/profile/*/*.trace.json.gz"))))
    stolen = [p.name for p in kineto_corpus_files() if "xprof_converted" not in str(p)
              and tf_json.sniff(read_head(p))]
    assert stolen == []


def test_mapping_of_a_gpu_trace(tmp_path):
    path = tmp_path / "host.trace.json.gz"
    path.write_bytes(gzip.compress(json.dumps(_gpu_trace()).encode()))
    tl = read_file(path, ReadOptions())
    ev = tl.events.set_index("name")
    assert tl.sources[0].format == "tf-trace-json"
    assert (ev.loc["Profiled batch", "kind"], ev.loc["Profiled batch", "step"]) == ("step", 3)
    assert ev.loc["IteratorGetNextOp::DoCompute", "kind"] == "dataloader"
    assert ev.loc["Iterator::Root::Prefetch", "kind"] == "cpu_op"
    k = ev.loc["volta_sgemm"]
    assert (k["kind"], k["device"], k["stream"], k["dur_ns"], k["correlation"]) == ("kernel", 0, 17, 20_500, 9)
    c = ev.loc["MemcpyH2D"]
    assert (c["kind"], c["copy_kind"], c["bytes"], c["stream"]) == ("memcpy", "HtoD", 1024, 8)
    assert ev.loc["dense/MatMul", "kind"] == "gpu_annotation"
    assert ev.loc["cudaLaunchKernel", "kind"] == "runtime"
    assert tl.sources[0].not_kept == {"metadata": 6, "instant": 1, "empty": 1}
    assert tl.ranks[0].clock == "relative"


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_converted_json_equals_xplane(corpus, scenario):
    """The xprof conversions (trace_viewer.json, the old-layout .trace.json.gz) give the same steps,
    input waits and figures as the XSpace they came from, up to the clock origin."""
    xplane = load_paths([next((corpus / scenario / "logs").rglob("*.xplane.pb"))])
    conv = corpus / scenario / "xprof_converted"
    for path in (conv / "trace_viewer.json", next(conv.glob("plugins/profile/*/*.trace.json.gz"))):
        tl = load_paths([path])
        for kind in ("step", "dataloader"):
            a = xplane.events[xplane.events["kind"] == kind].sort_values("ts_ns")
            b = tl.events[tl.events["kind"] == kind].sort_values("ts_ns")
            assert a["dur_ns"].tolist() == b["dur_ns"].tolist(), kind
            assert a["step"].tolist() == b["step"].tolist()
        wa, wb = F.rank_window(xplane, 0), F.rank_window(tl, 0)
        assert wa.dur_ns == wb.dur_ns
        assert F.dataloader_wait_ns(xplane, 0, wa) == F.dataloader_wait_ns(tl, 0, wb)
        shift = wa.start_ns - wb.start_ns
        assert np.array_equal(F.steps(xplane, 0).start_ns, F.steps(tl, 0).start_ns + shift)
