"""XSpace (*.xplane.pb) reader: schema, mapping on a built XSpace, JAX GPU captures against a
reference computed here from the decoded protobuf, and damaged / unrelated protobufs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import ROOT
from timelines import load_paths

from traceanalyzer.commands import main
from traceanalyzer.errors import InputError
from traceanalyzer.formats import ReadOptions, read_file
from traceanalyzer.formats._xplane_pb import SCHEMA, XSpace

JAX_XPLANES = ["tl_jax_mi300_xplane", "tl_jax_mi300_xplane_legacy", "tl_jax_te_xplane"]


def test_schema_table_matches_the_proto_file():
    """The runtime descriptors and the documented .proto subset declare the same fields."""
    text = (ROOT / "traceanalyzer" / "formats" / "xplane.proto").read_text()
    declared: dict[str, set[tuple[str, int]]] = {}
    for msg, body in re.findall(r"message (\w+) \{(.*?)\n\}", text, re.DOTALL):
        declared[msg] = {(name, int(num)) for name, num in re.findall(r"(\w+) = (\d+);", body)}
    table = {msg: {(f[0], f[1]) for f in fields} for msg, fields in SCHEMA.items()}
    assert declared == table


# --- a small XSpace built here: every mapping rule once --------------------------------------
START_NS = 1_700_000_000_000_000_000


def _space() -> bytes:
    space = XSpace()
    env = space.planes.add(name="Task Environment")
    env.stat_metadata[1].name = "profile_start_time"
    env.stats.add(metadata_id=1, uint64_value=START_NS)

    host = space.planes.add(name="/host:CPU")
    for mid, name in enumerate(["Profiled batch", "IteratorGetNextOp::DoCompute", "Iterator::Root::Map",
                                "MatMul", "cudaLaunchKernel", "$train.py:10 step", "ThreadpoolListener::Record"],
                               start=1):
        host.event_metadata[mid].name = name
        host.event_metadata[mid].id = mid
    host.stat_metadata[1].name = "step_num"
    host.stat_metadata[2].name = "correlation_id"
    py = host.lines.add(id=11, name="python", timestamp_ns=1000)
    for i, (off, dur) in enumerate([(0, 10_000_000), (10_000_000, 10_000_000)]):  # 10 us steps
        ev = py.events.add(metadata_id=1, offset_ps=off, duration_ps=dur)
        ev.stats.add(metadata_id=1, int64_value=i + 7)
    py.events.add(metadata_id=5, offset_ps=2_000_000, duration_ps=1_000_000).stats.add(
        metadata_id=2, uint64_value=42)
    py.events.add(metadata_id=6, offset_ps=3_000_000, duration_ps=500_000)
    get_next = host.lines.add(id=12, name="tf_data_iterator_get_next/12", timestamp_ns=1000)
    get_next.events.add(metadata_id=2, offset_ps=1_000_000, duration_ps=4_000_000)
    get_next.events.add(metadata_id=7, offset_ps=1_000_000, duration_ps=0)
    worker = host.lines.add(id=13, name="tf_data_private_threadpool/13", timestamp_ns=1000)
    worker.events.add(metadata_id=3, offset_ps=0, duration_ps=9_000_000)
    worker.events.add(metadata_id=4, num_occurrences=3, duration_ps=5)  # aggregated: not a time event

    gpu = space.planes.add(id=3, name="/device:GPU:3")
    for mid, name in enumerate(["volta_sgemm", "MemcpyH2D", "Memset", "MatMul op"], start=1):
        gpu.event_metadata[mid].name = name
    gpu.stat_metadata[1].name = "memcpy_details"
    gpu.stat_metadata[2].name = "correlation_id"
    gpu.stat_metadata[3].name = "device_vendor"
    gpu.stats.add(metadata_id=3, str_value="Nvidia")
    k = gpu.lines.add(id=7, name="Stream #7(Kernel)", timestamp_ns=1000)
    k.events.add(metadata_id=1, offset_ps=1_500_000, duration_ps=2_000_000).stats.add(
        metadata_id=2, uint64_value=42)
    c = gpu.lines.add(id=8, name="Stream #8(MemcpyH2D)", timestamp_ns=1000)
    c.events.add(metadata_id=2, offset_ps=6_000_000, duration_ps=1_000_000).stats.add(
        metadata_id=1, str_value="kind:HtoD size:4096 dest:3 async:1")
    s = gpu.lines.add(id=9, name="Stream #9", timestamp_ns=1000)
    s.events.add(metadata_id=3, offset_ps=8_000_000, duration_ps=1_000_000)
    ops = gpu.lines.add(id=100, name="XLA Ops", timestamp_ns=1000)
    ops.events.add(metadata_id=4, offset_ps=1_500_000, duration_ps=2_000_000)
    space.planes.add(id=4, name="/device:GPU:4")  # an idle GPU: plane without lines
    return space.SerializeToString()


def test_built_xspace_maps_every_rule(tmp_path):
    path = tmp_path / "host.xplane.pb"
    path.write_bytes(_space())
    tl = read_file(path, ReadOptions())
    ev = tl.events
    by_name = {n: ev[ev["name"] == n].iloc[0] for n in ev["name"].unique()}
    assert tl.ranks[0].clock == "epoch" and tl.ranks[0].framework == "tensorflow"
    steps = ev[ev["kind"] == "step"].sort_values("ts_ns")
    assert steps["step"].tolist() == [7, 8]
    assert steps["ts_ns"].tolist() == [START_NS + 1000, START_NS + 1000 + 10_000]
    assert steps["dur_ns"].tolist() == [10_000, 10_000]
    assert by_name["IteratorGetNextOp::DoCompute"]["kind"] == "dataloader"
    assert by_name["Iterator::Root::Map"]["kind"] == "cpu_op"  # tf.data's own work: not waiting
    assert by_name["cudaLaunchKernel"]["kind"] == "runtime"
    assert by_name["cudaLaunchKernel"]["correlation"] == 42
    assert by_name["$train.py:10 step"]["kind"] == "python"
    assert by_name["ThreadpoolListener::Record"]["kind"] == "other"
    kernel = by_name["volta_sgemm"]
    assert (kernel["kind"], kernel["device"], kernel["stream"], kernel["correlation"]) == ("kernel", 3, 7, 42)
    copy = by_name["MemcpyH2D"]
    assert (copy["kind"], copy["copy_kind"], copy["bytes"], copy["stream"]) == ("memcpy", "HtoD", 4096, 8)
    assert by_name["Memset"]["kind"] == "memset"
    assert by_name["MatMul op"]["kind"] == "gpu_annotation"  # derived XLA Ops line: not busy time
    assert tl.sources[0].not_kept == {"aggregated": 1}
    assert [(d.index, d.name) for d in tl.devices] == [(3, "Nvidia"), (4, "")]
    assert tl.device_indices(0) == [3]


# --- JAX GPU captures (ROCm): figures against a reference from the decoded protobuf ---------
def _reference(path: Path) -> dict[int, dict]:
    """Per GPU: busy (union of stream-line events), span, and per-kernel count/total, in us,
    computed with plain Python from the protobuf messages."""
    space = XSpace()
    space.ParseFromString(path.read_bytes())
    out: dict[int, dict] = {}
    for plane in space.planes:
        m = re.fullmatch(r"/device:GPU:(\d+)", plane.name)
        if not m:
            continue
        stat_names = {i: s.name for i, s in plane.stat_metadata.items()}
        intervals, kernels = [], {}
        for line in plane.lines:
            if not line.name.startswith("Stream #"):
                continue
            for e in line.events:
                start = line.timestamp_ns * 1000 + e.offset_ps
                intervals.append((start, start + e.duration_ps))
                copy = "Memcpy" in line.name or any(stat_names[s.metadata_id] == "memcpy_details"
                                                    for s in e.stats)
                if not copy:
                    md = plane.event_metadata[e.metadata_id]
                    name = md.display_name or md.name
                    count, total = kernels.get(name, (0, 0))
                    kernels[name] = (count + 1, total + e.duration_ps)
        if not intervals:
            continue
        intervals.sort()
        busy, cur_s, cur_e = 0, *intervals[0]
        for s, e in intervals[1:]:
            if s > cur_e:
                busy += cur_e - cur_s
                cur_s, cur_e = s, e
            else:
                cur_e = max(cur_e, e)
        busy += cur_e - cur_s
        span = max(e for _, e in intervals) - intervals[0][0]
        out[int(m.group(1))] = {"busy_us": busy / 1e6, "window_us": span / 1e6,
                                "kernels": {n: (c, t / 1e6) for n, (c, t) in kernels.items()}}
    return out


@pytest.mark.parametrize("folder", JAX_XPLANES)
def test_jax_gpu_figures_match_reference(corpus, tmp_path, folder):
    path = next((corpus / folder).glob("*.xplane.pb"))
    ref = _reference(path)
    out = tmp_path / "r.json"
    res = CliRunner().invoke(main, ["report", str(path), "--format", "json", "-o", str(out)])
    assert res.exit_code == 0, res.output
    rank = json.loads(out.read_text())["ranks"][0]
    assert rank["framework"] == "jax" and rank["clock"] == "epoch"
    got = {d["index"]: d for d in rank["devices"]}
    assert sorted(got) == sorted(ref)
    for index, r in ref.items():
        d = got[index]
        # Times are rounded to whole ns per event edge in the reader.
        tol = 0.001 * (len(r["kernels"]) + 60)
        assert d["gpu_busy_us"] == pytest.approx(r["busy_us"], abs=tol)
        if (rank.get("step_source") or {}).get("kind") == "detected":  # the detected steps' span, every device's:
            # from the first step's first launch on the host, holding each device's own GPU work
            assert d["window_us"] >= r["window_us"] - 0.002
            assert d["window_us"] == pytest.approx(max(x["window_us"] for x in got.values()), abs=0.002)
        else:
            assert d["window_us"] == pytest.approx(r["window_us"], abs=0.002)
        assert d["gpu_idle_fraction"] == pytest.approx(1 - d["gpu_busy_us"] / d["window_us"], abs=1e-5)
        for row in d["top_kernels"]:
            count, total = r["kernels"][row["name"]]
            assert row["count"] == count
            assert row["total_us"] == pytest.approx(total, abs=0.001 * count + 0.001)
        ref_top = sorted(r["kernels"].items(), key=lambda kv: -kv[1][1])[: len(d["top_kernels"])]
        assert [row["count"] for row in d["top_kernels"]] == [c for _, (c, _) in ref_top]


def test_rocm_kernel_names_and_copies(corpus):
    tl = load_paths([next((corpus / "tl_jax_mi300_xplane_legacy").glob("*.xplane.pb"))])
    ev = tl.events
    copies = ev[ev["kind"] == "memcpy"]
    assert len(copies) and set(copies["device"]) == {0} and set(copies["copy_kind"]) == {"DtoD"}
    assert (copies["bytes"] > 0).all()
    tl = load_paths([next((corpus / "tl_jax_mi300_xplane").glob("*.xplane.pb"))])
    kernels = tl.events[tl.events["kind"] == "kernel"]
    assert kernels["name"].astype(str).str.endswith(".kd").all()
    assert sorted(set(kernels["device"])) == list(range(8))
    # Host-side launches carry the same correlation ids as the kernels they launched.
    runtime = tl.events[tl.events["kind"] == "runtime"]
    assert set(kernels["correlation"]) <= set(runtime["correlation"]) | {-1}


# --- damaged and unrelated protobufs: one line, exit 2 ---------------------------------------
def test_utf8_damaged_xplane_is_one_clear_error(corpus):
    path = corpus / "xprof_tpu_inference_xplane" / "tpu_inference_2.xplane.pb"
    with pytest.raises(InputError) as err:
        load_paths([path])
    assert "UTF-8" in err.value.message and "\n" not in str(err.value)
    res = CliRunner().invoke(main, ["report", str(path), "-o", "-", "--format", "json"])
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert res.stderr.count("\n") == 1 and "tpu_inference_2.xplane.pb" in res.stderr


@pytest.mark.parametrize("name", ["localhost.overview_page.pb", "localhost.input_pipeline.pb"])
def test_tf_summary_protobuf_is_not_a_trace(corpus, name):
    path = corpus / "tfprof_demo_gpu_input_bound" / name
    with pytest.raises(InputError) as err:
        load_paths([path])
    assert "not an XSpace" in err.value.message


def test_truncated_xplane(corpus, tmp_path):
    good = next((corpus / "tl_jax_te_xplane").glob("*.xplane.pb")).read_bytes()
    cut = tmp_path / "cut.xplane.pb"
    cut.write_bytes(good[: len(good) // 2])
    with pytest.raises(InputError) as err:
        load_paths([cut])
    assert "corrupt" in err.value.message


def test_reader_keeps_no_event_unaccounted(corpus):
    for folder in JAX_XPLANES:
        tl = load_paths([next((corpus / folder).glob("*.xplane.pb"))])
        src = tl.sources[0]
        assert src.events_read == src.events_kept + sum(src.not_kept.values())
        assert np.all(tl.events["dur_ns"].to_numpy() >= 0)
