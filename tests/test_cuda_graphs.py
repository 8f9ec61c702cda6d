"""CUDA graphs: a decode loop replaying a 200-kernel graph each step is not launch-bound, its eager twin
is (with the CUDA-graph advice); replays are tied to their cudaGraphLaunch (correlation and graph ids,
and correlation alone in traces before 2026); the capture is a one-off, apart from the replays; idle
time inside a replay is never launch overhead. Built traces with known answers (kineto2026_builder)."""

from __future__ import annotations

import kineto2026_builder as B
import numpy as np
import pytest

from traceanalyzer import timeline as T
from traceanalyzer.formats import ReadOptions, read_file
from traceanalyzer.pipeline import Options, analyze

STEPS = 12
REPLAY_US = B.DECODE_KERNELS * B.DECODE_KERNEL_US + (B.DECODE_KERNELS - 1) * B.GRAPH_GAP_US  # 4099.5


def _analyze(path):
    return analyze([str(path)], Options())


def test_graph_decode_loop_is_not_launch_bound(tmp_path):
    a = _analyze(B.decode_loop(True, STEPS).write(tmp_path / "graph.json"))
    (rank,) = a.ranks
    (dev,) = rank.devices
    assert a.diagnosis.primary == "gpu_bound"
    steady = [s for s in rank.per_step if s.step >= 1]
    assert len(steady) == STEPS - 1
    for s in steady:  # built so: 200 x 20 us of work in every 4300 us step
        assert s.gpu_busy_us == 4000.0 and s.gpu_busy_us / s.duration_us >= 0.9
    idle = rank.diagnosis.idle_by_cause_us
    assert "launch" not in idle  # no time lost to launches (a cause without time is not listed)
    # the capture step (3000 us, no GPU work) is one-off start-up, apart from the replays
    assert idle["startup"] == pytest.approx(3000.0 + 100.0)  # + the lead-in to the first replay
    g = dev.graphs
    assert (g.replays, g.gpu_us, g.share_of_busy) == (STEPS - 1, 44000.0, 1.0)
    (row,) = g.graphs
    assert (row.graph_id, row.replays, row.kernels_per_replay, row.replay_us, row.gpu_us) == (
        B.GRAPH_ID, STEPS - 1, 200.0, REPLAY_US, 44000.0)
    # begin capture .. end capture (2060 us) + instantiate (800 us)
    assert (g.captures, g.capture_us) == (1, 2860.0)


def test_eager_twin_is_launch_bound_with_the_cuda_graph_advice(tmp_path):
    a = _analyze(B.decode_loop(False, STEPS).write(tmp_path / "eager.json"))
    (rank,) = a.ranks
    assert a.diagnosis.primary == "launch_bound"
    assert rank.devices[0].graphs is None
    busy = [s.gpu_busy_us / s.duration_us for s in rank.per_step]
    assert max(busy) < 0.5
    (launch,) = [f for f in a.diagnosis.findings if f.id == "launch_bound"]
    graph_lines = [x for x in launch.advice if "CUDA graphs" in x and "torch.compile(mode='reduce-overhead')" in x]
    assert len(graph_lines) == 1 and not any("already replays" in x for x in launch.advice)


def test_launch_bound_rank_that_already_replays_graphs_is_told_to_widen_them(tmp_path):
    """Graph replays in some steps, eager launches in the others: the launch gaps are outside the graphs."""
    t = B.decode_loop(True, 4, capture=False)
    eager = B.decode_loop(False, 8)
    shift = 4 * B.GRAPH_STEP_US
    for e in eager.events:
        if e.get("ph") == "X":
            e = dict(e, ts=e["ts"] + shift)
            if e["name"].startswith("ProfilerStep#"):
                e["name"] = f"ProfilerStep#{int(e['name'].split('#')[1]) + 4}"
            if "correlation" in e.get("args", {}):
                e["args"] = dict(e["args"], correlation=e["args"]["correlation"] + 100_000)
            t.events.append(e)
    a = _analyze(t.write(tmp_path / "mixed.json"))
    assert a.diagnosis.primary == "launch_bound"
    (launch,) = [f for f in a.diagnosis.findings if f.id == "launch_bound"]
    assert "already replays CUDA graphs" in launch.advice[0]
    share = launch.figures["graph_gpu_us"] / launch.figures["graph_devices_busy_us"]  # quoted with its figures
    assert share == pytest.approx(16000.0 / (16000.0 + 8 * 4000.0))
    assert any("CUDA graph replays; these gaps are outside them" in x for x in launch.evidence)


def test_graph_launch_carries_the_graph_id_of_its_replay(tmp_path):
    ev = read_file(B.decode_loop(True, STEPS).write(tmp_path / "g.json"), ReadOptions()).events
    launches = ev[(ev["name"] == "cudaGraphLaunch").to_numpy()]
    assert len(launches) == STEPS - 1 and set(launches["graph_id"]) == {B.GRAPH_ID}
    kernels = ev[(ev["kind"] == T.KERNEL).to_numpy()]
    assert (kernels["graph_id"] == B.GRAPH_ID).all() and len(kernels) == (STEPS - 1) * 200
    # launches made while capturing enqueue nothing: no graph id
    captured = ev[(ev["name"] == "cudaLaunchKernel").to_numpy()]
    assert len(captured) == 200 and (captured["graph_id"] == -1).all()
    # node ids are not graph ids; "graph id": 0 (outside graphs) is none
    eager = read_file(B.decode_loop(False, 3).write(tmp_path / "e.json"), ReadOptions()).events
    assert (eager["graph_id"] == -1).all()


def test_pre_2026_graph_replays_are_found_by_correlation(tmp_path):
    t = B.decode_loop(True, STEPS)
    for e in t.events:  # a 2024 trace: no graph ids at all
        e.get("args", {}).pop("graph id", None)
        e.get("args", {}).pop("graph node id", None)
    path = t.write(tmp_path / "old.json")
    ev = read_file(path, ReadOptions()).events
    assert set(ev["graph_id"][(ev["kind"] == T.KERNEL).to_numpy()]) == {0}  # 0: a graph, id not recorded
    a = _analyze(path)
    (row,) = a.ranks[0].devices[0].graphs.graphs
    assert (row.graph_id, row.replays, row.kernels_per_replay) == (0, STEPS - 1, 200.0)
    assert a.diagnosis.primary == "gpu_bound"


def test_idle_inside_a_replay_is_never_launch_overhead(tmp_path):
    """The host busy in its own work all through each replay (preparing the next step): the 0.5 us
    gaps between graph nodes have host activity and are short, which for eager kernels reads as
    launch overhead; inside a replay they are the GPU's own scheduling."""
    t = B.decode_loop(True, STEPS, capture=False)
    ts = 100.0
    for _ in range(STEPS):
        t.host("prepare_next_inputs", ts + 90, 4150)
        ts += B.GRAPH_STEP_US
    path = t.write(tmp_path / "busy_host.json")
    a = _analyze(path)
    idle = a.ranks[0].diagnosis.idle_by_cause_us
    assert "launch" not in idle  # no time lost to launches (a cause without time is not listed)
    assert idle["device_dependency"] == pytest.approx(STEPS * 199 * B.GRAPH_GAP_US)  # the GPU's own bubbles
    # the same trace without graph ids or graph launches, and no launch call linked to the kernels (as if
    # launched eagerly, each when it started): the same gaps are the host's, launch overhead
    for e in t.events:
        e.get("args", {}).pop("graph id", None)
        if e.get("name") == "cudaGraphLaunch":
            e["name"] = "cudaLaunchKernel"
            e.get("args", {}).pop("correlation", None)
    eager = _analyze(t.write(tmp_path / "as_eager.json")).ranks[0].diagnosis.idle_by_cause_us
    assert eager["launch"] == pytest.approx(STEPS * 199 * B.GRAPH_GAP_US)


def test_graph_figures_survive_save_and_load(tmp_path):
    from traceanalyzer.pipeline import load

    a = _analyze(B.decode_loop(True, 4).write(tmp_path / "g.json"))
    a.save(tmp_path / "r.json")
    back = load(tmp_path / "r.json")
    assert back.ranks[0].devices[0].graphs == a.ranks[0].devices[0].graphs
    assert np.isclose(back.ranks[0].devices[0].graphs.gpu_us, 3 * 4000.0)


def test_replays_are_drawn_as_one_block_each(tmp_path):
    a = _analyze(B.decode_loop(True, STEPS).write(tmp_path / "g.json"))
    (dev,) = a.ranks[0].drawing.timeline["devices"]
    lane = dev["graphs"]
    assert len(lane["start_us"]) == STEPS - 1  # one block per replay, not 200 kernels
    assert lane["dur_us"] == [REPLAY_US] * (STEPS - 1)
    eager = _analyze(B.decode_loop(False, 3).write(tmp_path / "e.json"))
    assert "graphs" not in eager.ranks[0].drawing.timeline["devices"][0]  # no lane (and no key) without graphs
