"""torch 2.15 exports (tests/torch215_builder.py): the envelope flag cudaGraphInlineAnnotated, graphed work
moved onto display lanes (its real stream in args.original_stream) or not (args.annotated_stream), lanes
named from "Process Group Description", and uint64 ids above 2^63 kept exact (int64 bit pattern)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from torch215_builder import (
    COMM_KERNEL,
    COMM_KERNELS,
    COMM_STREAM,
    COMM_US,
    COMPUTE_KERNELS,
    COMPUTE_STREAM,
    COMPUTE_US,
    FIRST_CORRELATION,
    GRAPH_ID,
    STEPS,
    graph_lanes,
)

from traceanalyzer import timeline as T
from traceanalyzer.commands import main
from traceanalyzer.formats import ReadOptions, kineto
from traceanalyzer.formats._columns import as_uint64, to_int_id


def _read(path: Path, typed: bool = True) -> T.Timeline:
    return kineto.read_path(path, ReadOptions(), typed=typed)


@pytest.mark.parametrize("typed", [True, False])
@pytest.mark.parametrize("lanes", ["all", "none"])
def test_graphed_kernels_are_on_the_streams_they_ran_on(tmp_path, lanes, typed):
    path = graph_lanes(lanes).write(tmp_path / "t.json")
    doc = json.loads(path.read_text())
    assert (doc.get("cudaGraphInlineAnnotated") is True) and list(doc).index("cudaGraphInlineAnnotated") < list(
        doc).index("traceEvents")
    moved = [e for e in doc["traceEvents"] if "original_stream" in e.get("args", {})]
    assert len(moved) == (STEPS * (COMPUTE_KERNELS + COMM_KERNELS) if lanes == "all" else 0)
    tl = _read(path, typed)
    src = tl.sources[0]
    assert src.warnings == [] and set(src.not_kept) == {"instant", "metadata"}
    k = tl.events[tl.events["kind"] == T.KERNEL]
    busy = k.groupby("stream")["dur_ns"].sum().to_dict()
    assert busy[COMPUTE_STREAM] == STEPS * COMPUTE_KERNELS * COMPUTE_US * 1000
    assert busy[COMM_STREAM] == STEPS * COMM_KERNELS * COMM_US * 1000
    assert set(busy) == {COMPUTE_STREAM, COMM_STREAM, 7}  # 7: the NCCL kernel's own stream, never a lane


def test_work_marked_with_its_process_group_is_communication(tmp_path):
    tl = _read(graph_lanes("all").write(tmp_path / "t.json"))
    k = tl.events[tl.events["kind"] == T.KERNEL]
    comm = k.groupby(k["name"].astype(str))["comm"].all().to_dict()
    assert comm[COMM_KERNEL] and not any(comm[f"gemm_{i}"] for i in range(COMPUTE_KERNELS))
    assert int(k["comm"].sum()) == STEPS * (COMM_KERNELS + 1)  # + the NCCL all-reduce


@pytest.mark.parametrize("typed", [True, False])
def test_uint64_ids_above_2_to_the_63_are_kept_exact(tmp_path, typed):
    tl = _read(graph_lanes("all").write(tmp_path / "t.json"), typed)
    ev = tl.events
    assert tl.sources[0].events_kept == tl.sources[0].events_read - sum(tl.sources[0].not_kept.values())
    launches = ev[(ev["name"] == "cudaGraphLaunch").to_numpy()]
    corr = as_uint64(launches["correlation"].to_numpy())
    assert corr.tolist() == [FIRST_CORRELATION + n for n in range(STEPS)]
    graphed = ev[(ev["kind"] == T.KERNEL).to_numpy() & (ev["name"] != "ncclDevKernel_AllReduce_Sum_bf16_RING_LL")
                 .to_numpy()]
    assert set(as_uint64(graphed["graph_id"].to_numpy()).tolist()) == {GRAPH_ID}
    # each replay's kernels share their launch's correlation exactly, and the launch gets the graph's id
    per_launch = graphed.groupby(as_uint64(graphed["correlation"].to_numpy())).size().to_dict()
    assert per_launch == {FIRST_CORRELATION + n: COMPUTE_KERNELS + COMM_KERNELS for n in range(STEPS)}
    assert set(as_uint64(launches["graph_id"].to_numpy()).tolist()) == {GRAPH_ID}


def test_unsigned_ids_parse_by_bit_pattern():
    ids = to_int_id([2**63, 2**64 - 2, 2**64 - 1, 5, "18446744073709551614", 2**64, None], unsigned64=True)
    assert as_uint64(ids[:2]).tolist() == [2**63, 2**64 - 2]
    assert ids[2] == -1 and ids[3] == 5 and ids[4] == ids[1] and ids[6] == -1  # all ones: CUPTI's "no id"
    assert ids[5] != ids[0] and (to_int_id([2**64], unsigned64=True) == to_int_id([2**64])).all()  # beyond: refused
    assert (to_int_id([2**63]) != ids[0]).all()  # signed ids (pid, device, ...) beyond int64 stay out of range


def test_report_reads_a_torch_215_export(tmp_path):
    path = graph_lanes("all").write(tmp_path / "t.json")
    out = tmp_path / "o.json"
    res = CliRunner().invoke(main, ["report", str(path), "-o", str(out), "-q"])
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    assert data["inputs"][0]["not_kept"] == {"instant": 1, "metadata": 6}
    assert np.isclose(data["summary"]["steps_per_s"], 1000.0, rtol=0.01)


def test_work_with_ids_above_2_to_the_63_joins_its_launch(tmp_path):
    """Correlations above 2^63 are negative as int64: the analyses join them to their launch call all the same
    (only -1 means "no id"), so a replay's kernels get the graph launch's host time, not their own start."""
    from traceanalyzer.analyses.figures import launch_times

    tl = _read(graph_lanes("all").write(tmp_path / "t.json"), True)
    ev = tl.events
    kernels = ev[(ev["kind"] == T.KERNEL).to_numpy() & (ev["correlation"].to_numpy() < -1)]
    assert len(kernels) == STEPS * (COMPUTE_KERNELS + COMM_KERNELS)
    gpu_start = kernels["ts_ns"].to_numpy()
    at = launch_times(ev, kernels["correlation"].to_numpy(), gpu_start)
    launches = ev[(ev["name"] == "cudaGraphLaunch").to_numpy()]
    by_corr = dict(zip(launches["correlation"].to_numpy().tolist(), launches["ts_ns"].to_numpy().tolist()))
    assert at.tolist() == [by_corr[c] for c in kernels["correlation"].to_numpy().tolist()]
    assert (at < gpu_start).all()
