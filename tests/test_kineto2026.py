"""The 2026 Kineto layout (libkineto output_json.cpp, 2026): stream-sync events on the virtual thread
stream + 1000000, hardware counters on the string pid "GPU N Counters", NCCL sequence numbers on
kernels, the hostname in the metadata; old and new layouts in one reader (typed and loose decoding),
and the real torch 2.14 CPU samples. Built traces with known answers (tests/kineto2026_builder.py)."""

from __future__ import annotations

import json

import kineto2026_builder as B
import numpy as np
import pytest
from conftest import SAMPLES

from traceanalyzer import timeline as T
from traceanalyzer.formats import ReadOptions, read_file
from traceanalyzer.formats.kineto import read_path
from traceanalyzer.pipeline import Options, analyze
from traceanalyzer.result.types import to_data


def _analyze(paths):
    return analyze([str(p) for p in paths], Options())


# --- stream-sync events on their virtual thread ------------------------------------------------------------
@pytest.mark.parametrize("stream_arg", [True, False], ids=["stream-arg", "tid-only"])
def test_stream_sync_on_virtual_thread_is_synchronisation_on_its_real_stream(tmp_path, stream_arg):
    t = B.sync_loop()
    if not stream_arg:  # a writer that leaves the stream to the thread id: the offset is taken off
        for e in t.events:
            if e.get("name") == "Stream Sync":
                del e["args"]["stream"]
    path = t.write(tmp_path / "sync.json")
    ev = read_file(path, ReadOptions()).events
    syncs = ev[(ev["name"] == "Stream Sync").to_numpy()]
    assert len(syncs) == 8 and set(syncs["kind"]) == {T.GPU_ANNOTATION}
    assert set(syncs["stream"]) == {B.STREAM} and set(syncs["device"]) == {0}
    assert set(ev["stream"][ev["device"] >= 0]) == {B.STREAM}  # no stream 1000007
    a = _analyze([path])
    (rank,) = a.ranks
    (dev,) = rank.devices
    assert dev.gpu_busy_us == 8 * 10 * 100.0  # the syncs (1600 us each) are not GPU work
    idle = rank.diagnosis.idle_by_cause_us
    assert idle["sync"] == pytest.approx(7940.0) and sum(idle.values()) == pytest.approx(8000.0)
    assert a.diagnosis.primary == "sync_bound"


# --- hardware counters ---------------------------------------------------------------------------------------
def test_counter_process_is_the_devices_trace_counters_never_a_rank_or_device(tmp_path):
    t = B.counters_trace()
    t.counter(500.0, "gpu__time_active.avg.pct", 50.0, device=1)  # a GPU with counters and no work
    path = t.write(tmp_path / "counters.json")
    tl = read_file(path, ReadOptions())
    assert len(tl.ranks) == 1 and [d.index for d in tl.devices] == [0]
    assert set(tl.events["pid"].unique()) <= {B.PID, -1} and set(tl.events["device"].unique()) == {-1, 0}
    assert len(tl.counters) == 21 and set(tl.counters["source"]) == {0}
    assert "counter" not in tl.sources[0].not_kept
    a = _analyze([path])
    assert len(a.ranks) == 1 and [d.device for d in a.ranks[0].devices] == ["cuda:0"]
    got = {c.metric: c for c in a.ranks[0].devices[0].trace_counters}
    assert set(got) == set(B.COUNTER_METRICS)
    sm = got[B.COUNTER_METRICS[0]]
    assert (sm.samples, sm.mean, sm.min, sm.max) == (10, 55.0, 10.0, 100.0)
    dram = got[B.COUNTER_METRICS[1]]
    assert (dram.samples, dram.mean, dram.min, dram.max) == (10, 5.5e9, 1e9, 1e10)
    assert a.counters == () and a.counter_logs == ()  # not counter logs
    back = json.loads(json.dumps(a.to_data()))
    assert back["ranks"][0]["devices"][0]["trace_counters"][0]["metric"] == sorted(B.COUNTER_METRICS)[0]


def test_other_counter_events_stay_not_kept(tmp_path):
    t = B.counters_trace()
    t.events.append({"ph": "C", "cat": "mtia_counters", "name": "queue", "pid": 0, "tid": 0, "ts": 10.0,
                     "args": {"depth": 3}})
    tl = read_file(t.write(tmp_path / "c.json"), ReadOptions())
    assert tl.sources[0].not_kept["counter"] == 1 and len(tl.counters) == 20


# --- NCCL sequence numbers -----------------------------------------------------------------------------------
def _pair(tmp_path, **kw):
    r0, r1 = B.nccl_pair(**kw)
    return [r0.write(tmp_path / "rank0.json"), r1.write(tmp_path / "rank1.json")]


def test_nccl_seq_matches_every_collective_and_names_the_late_rank(tmp_path):
    paths = _pair(tmp_path)
    assert set(read_file(paths[0], ReadOptions()).events["comm_seq"]) == {-1, *range(100, 112)}
    a = _analyze(paths)
    assert a.job.collectives_matched == 12  # 6 steps x 2, though the steps are numbered 10.. and 20..
    rows = {r["rank"]: r for r in to_data(a.job.ranks)}  # as saved (us)
    assert rows[1]["last_arrivals"] == 12 and rows[0]["last_arrivals"] == 0
    assert rows[1]["caused_wait_us"] == pytest.approx(2 * B.NCCL_LATE_US)  # two collectives per step
    assert rows[0]["wait_in_collectives_us"] == pytest.approx(2 * B.NCCL_LATE_US)
    (straggler,) = a.diagnosis.stragglers
    assert straggler.rank == 1 and straggler.collectives == 12


def test_without_seq_the_old_matching_is_used(tmp_path):
    # steps numbered differently and no sequence numbers: nothing can be matched (as before)
    assert _analyze(_pair(tmp_path, with_seq=False)).job.collectives_matched == 0
    # steps numbered alike: (name, step, order) matches them all
    a = _analyze(_pair(tmp_path, with_seq=False, first_steps=(10, 10)))
    assert a.job.collectives_matched == 12
    assert {r.rank: r.last_arrivals for r in a.job.ranks} == {0: 0, 1: 12}


# --- hostname metadata ---------------------------------------------------------------------------------------
def test_host_name_metadata_is_the_ranks_host_for_the_job_clock(tmp_path):
    paths = _pair(tmp_path)
    assert read_file(paths[1], ReadOptions()).ranks[0].host == "node-1"
    a = _analyze(paths)
    assert [r.host for r in a.ranks] == ["node-0", "node-1"]
    clocks = {c.host: c for c in a.job.clocks}
    assert set(clocks) == {"node-0", "node-1"}
    # rank 1's base time is 37 us later: its offset onto rank 0's clock is found from the collectives
    assert clocks["node-1"].offset_us == pytest.approx(-37.0) and clocks["node-1"].method == "collectives"


# --- one reader, old and new, typed and loose ---------------------------------------------------------------
def _columns(tl):
    ev = tl.events.sort_values(["ts_ns", "kind", "name"], kind="stable")
    return {c: ev[c].to_numpy() for c in ("ts_ns", "stream", "graph_id", "comm_seq", "correlation")}


@pytest.mark.parametrize("trace", ["decode", "sync", "counters", "nccl"])
def test_typed_and_loose_decoding_read_the_2026_layout_alike(tmp_path, trace):
    t = {"decode": lambda: B.decode_loop(True, steps=3), "sync": B.sync_loop, "counters": B.counters_trace,
         "nccl": lambda: B.nccl_pair()[1]}[trace]()
    path = t.write(tmp_path / "t.json")
    typed, loose = read_path(path, ReadOptions()), read_path(path, ReadOptions(), typed=False)
    for key, value in _columns(typed).items():
        np.testing.assert_array_equal(value, _columns(loose)[key], err_msg=key)
    assert len(typed.counters) == len(loose.counters)
    assert typed.ranks[0].host == loose.ranks[0].host == ("node-1" if trace == "nccl" else "node-a")


def test_2026_trace_without_new_fields_reads_as_before(tmp_path):
    """The same loop with the 2026 keys removed (graph ids, Seq, host_name, the sync thread): every
    figure but the graph ones equals the 2026 file's."""
    t = B.sync_loop()
    new = _analyze([t.write(tmp_path / "new.json")])
    del t.header["host_name"]
    # before 2026-07 Kineto wrote its WARNING / ERROR log lines as top-level arrays
    t.header["WARNING"] = ["Memory events are disabled", "CUPTI range profiler not enabled"]
    t.header["ERROR"] = []
    for e in t.events:
        e.get("args", {}).pop("graph id", None)
        e.get("args", {}).pop("graph node id", None)
        if e.get("name") == "Stream Sync":
            e["tid"] = B.STREAM
    t.events = [e for e in t.events if "(sync)" not in str(e.get("args", {}).get("name", ""))
                and e.get("name") != "thread_sort_index"]
    old = _analyze([t.write(tmp_path / "old.json")])
    assert old.ranks[0].host is None and new.ranks[0].host == "node-a"
    assert old.ranks[0].devices[0].gpu_busy_us == new.ranks[0].devices[0].gpu_busy_us
    assert old.ranks[0].diagnosis.idle_by_cause_us == new.ranks[0].diagnosis.idle_by_cause_us
    assert old.diagnosis.primary == new.diagnosis.primary


# --- the real torch 2.14 CPU captures -----------------------------------------------------------------------
TORCH214 = sorted(SAMPLES.glob("torch214_cpu_*.expected.json"))


def test_torch214_samples_exist():
    assert [p.name for p in TORCH214] == ["torch214_cpu_input_bound.expected.json",
                                          "torch214_cpu_well_fed.expected.json"]


@pytest.mark.parametrize("expected_path", TORCH214, ids=lambda p: p.name.split(".")[0])
def test_torch214_cpu_sample_dataloader_wait_and_host(expected_path):
    exp = json.loads(expected_path.read_text())
    assert exp["torch_version"].startswith("2.14.") and exp["made_by"] == "sample_traces/make_torch_2026.py"
    a = _analyze([SAMPLES / exp["file"]])
    (rank,) = a.ranks
    assert rank.devices == () and rank.steps == exp["measured"]["active_steps"]
    assert rank.dataloader_wait_fraction == pytest.approx(exp["measured"]["dataloader_wait_fraction"], abs=0.01)
    assert rank.host == "vm"  # torch 2.14 writes "host_name" into the metadata
    # a CPU-only capture is judged by its host loop's own verdicts
    want = "cpu_input_bound" if "input_bound" in exp["file"] else "cpu_compute_bound"
    assert a.diagnosis.primary == want
    assert a.diagnosis.host_primary == want and rank.diagnosis.host_primary == want


def test_trace_counters_stay_with_their_rank_when_a_timeline_is_analysed(tmp_path):
    """The notebook path (a Timeline handed in): the trace's own counters are its device's trace
    counters, not a counter log to align."""
    tl = read_file(B.counters_trace().write(tmp_path / "c.json"), ReadOptions())
    a = analyze(tl, Options())
    assert a.counters == () and a.counter_logs == ()
    got = {c.metric: c.mean for c in a.ranks[0].devices[0].trace_counters}
    assert got == {B.COUNTER_METRICS[0]: 55.0, B.COUNTER_METRICS[1]: 5.5e9}


@pytest.mark.slow
def test_2026_layout_read_in_parallel_ranges_like_the_stream(tmp_path, monkeypatch):
    """A big uncompressed file is decoded in byte ranges by worker processes: graph ids, Seq, sync
    streams and the counters merge to what one stream gives."""
    import pandas as pd

    from traceanalyzer.formats import chrome_parallel

    monkeypatch.setattr(chrome_parallel, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(chrome_parallel, "TAIL_BYTES", 1024)
    t = B.decode_loop(True, steps=4)
    for i in range(50):
        t.counter(100.0 + i * 300, B.COUNTER_METRICS[0], float(i))
    path = t.write(tmp_path / "big.json")
    one = read_path(path, ReadOptions(), chunk_bytes=4096)
    two = read_path(path, ReadOptions(decode_workers=2), chunk_bytes=4096)
    pd.testing.assert_frame_equal(two.events, one.events)
    pd.testing.assert_frame_equal(two.counters.sort_values("ts_ns", kind="stable").reset_index(drop=True),
                                  one.counters.sort_values("ts_ns", kind="stable").reset_index(drop=True))
    assert len(one.counters) == 50 and (one.events["graph_id"] == B.GRAPH_ID).sum() == 3 * 200 + 3


def test_counter_samples_are_bounded_and_counted(tmp_path, monkeypatch):
    from traceanalyzer.formats import kineto

    monkeypatch.setattr(kineto, "MAX_COUNTER_SAMPLES", 15)
    monkeypatch.setattr(kineto, "MAX_COUNTER_METRICS", 1)
    t = B.counters_trace()
    t.counter(50.0, "x" * 5000, 1.0)  # a third metric: beyond the bound on names
    tl = read_file(t.write(tmp_path / "c.json"), ReadOptions())
    assert len(tl.counters) == 10 and set(tl.counters["metric"]) == {B.COUNTER_METRICS[0]}
    assert tl.sources[0].not_kept["counter_unusable"] == 11
    assert any("hardware counter samples dropped" in w for w in tl.sources[0].warnings)
