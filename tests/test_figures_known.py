"""Exact figures on traces built here with hand-computed answers (all times in us)."""

from __future__ import annotations

from pathlib import Path

import pytest
from kineto_builder import KinetoTrace
from timelines import load_paths

from traceanalyzer.analyses import figures as F
from traceanalyzer.formats import ReadOptions
from traceanalyzer.pipeline import Options, analyze


def report_of(paths: list[Path], min_gap_us: float = 100) -> dict:
    tl = load_paths(paths, ReadOptions())
    return analyze(tl, Options(min_gap_ns=int(min_gap_us * 1000), diagnose=False)).to_data()


def basic_trace() -> KinetoTrace:
    t = KinetoTrace()
    t.step(1, 1000, 1000).step(2, 2000, 1000)
    t.kernel(1100, 200, "k_a").kernel(1200, 200, "k_b", stream=8)
    t.kernel(1100, 200, "k_a")  # exact duplicate of the first kernel (same correlation is not needed)
    t.events[-1] = dict(t.events[-3])
    t.kernel(1500, 0, "k_zero")
    t.memcpy(1600, 50, nbytes=5_000_000)
    t.memcpy(2100, 10, "Memcpy DtoH (Device -> Pinned)", nbytes=1000)
    t.kernel(2500, 400, "k_c")
    t.gpu("Memset (Device)", 2950, 10, cat="gpu_memset", bytes=64)
    t.kernel(3100, 100, "k_out")  # after the window
    t.dataloader(1000, 90).dataloader(2000, 80)
    t.host("torch/utils/data/dataloader.py(478): __next__", 1000, 500, cat="python_function")
    t.host("MyDataLoaderHelper", 2200, 300, cat="cpu_op")
    return t


def test_basic_figures(tmp_path):
    r = report_of([basic_trace().write(tmp_path / "basic.json")])
    rank = r["ranks"][0]
    assert rank["window_us"] == 2000 and rank["window_basis"] == "steps" and rank["steps"] == 2
    assert rank["dataloader_wait_us"] == 170 and rank["dataloader_wait_fraction"] == pytest.approx(0.085)
    (d,) = rank["devices"]
    assert d["gpu_busy_us"] == 770
    assert d["gpu_idle_fraction"] == pytest.approx(1 - 770 / 2000)
    g = d["gaps"]
    assert (g["count"], g["total_us"], g["largest_us"]) == (4, 1140, 450)
    assert g["top"][0] == {"start_us": 650, "duration_us": 450, "step": 1, "cause": None}  # no diagnosis asked
    assert g["top"][1] == {"start_us": 1110, "duration_us": 390, "step": 2, "cause": None}
    assert [h["count"] for h in g["histogram"]] == [0, 0, 4, 0, 0, 0, 0]
    assert d["memcpy_us"] == 60 and d["memcpy_share_of_busy"] == pytest.approx(60 / 770, abs=1e-6)
    assert d["memcpy_share_of_window"] == pytest.approx(0.03)
    htod, dtoh = d["memcpy"]["by_direction"]
    assert (htod["direction"], htod["count"], htod["union_us"], htod["bytes"], htod["bandwidth_gbps"],
            htod["pageable"], htod["pinned"]) == ("HtoD", 1, 50, 5_000_000, 100.0, 1, 0)
    assert (dtoh["direction"], dtoh["bytes"], dtoh["bandwidth_gbps"], dtoh["pinned"]) == ("DtoH", 1000, 0.1, 1)
    assert d["memcpy"]["memset_us"] == 10 and d["memcpy"]["memset_bytes"] == 64
    assert [(k["name"], k["count"], k["total_us"]) for k in d["top_kernels"]] == [
        ("k_c", 1, 400), ("k_a", 1, 200), ("k_b", 1, 200), ("k_zero", 1, 0)]
    assert rank["per_step"] == [
        {"step": 1, "start_us": 0, "duration_us": 1000, "gpu_busy_us": 350, "memcpy_us": 50,
         "dataloader_wait_us": 90, "idle_us": 650, "comm_us": 0, "exposed_comm_us": 0, "samples_per_s": None},
        {"step": 2, "start_us": 1000, "duration_us": 1000, "gpu_busy_us": 420, "memcpy_us": 10,
         "dataloader_wait_us": 80, "idle_us": 580, "comm_us": 0, "exposed_comm_us": 0, "samples_per_s": None},
    ]
    src = r["inputs"][0]
    assert src["not_kept"]["duplicate"] == 1


def test_min_gap_zero_gap_total_is_window_minus_busy(tmp_path):
    r = report_of([basic_trace().write(tmp_path / "basic.json.gz")], min_gap_us=0)
    d = r["ranks"][0]["devices"][0]
    assert d["gaps"]["count"] == 6
    assert d["gaps"]["total_us"] == pytest.approx(d["window_us"] - d["gpu_busy_us"])


def test_custom_window_is_honoured(tmp_path):
    tl = load_paths([basic_trace().write(tmp_path / "b.json")])
    start = tl.events["ts_ns"].min()
    w = F.Window(int(start), int(start) + 600_000, "custom")  # 1000..1600 us: k_a/k_b only
    busy = F.device_busy(tl, 0, 0, w)
    assert busy.busy_ns == 300_000 and busy.idle_fraction == pytest.approx(0.5)


def test_without_steps_each_device_has_its_own_window(tmp_path):
    t = KinetoTrace()
    t.kernel(100, 100).kernel(300, 100).kernel(150, 300, device=1)
    rank = report_of([t.write(tmp_path / "nosteps.json")])["ranks"][0]
    assert rank["window_basis"] == "gpu_activity" and rank["window_us"] == 350
    d0, d1 = rank["devices"]
    assert (d0["window_us"], d0["gpu_busy_us"], d0["gpu_idle_fraction"]) == (300, 200, pytest.approx(1 / 3, abs=1e-6))
    assert (d1["device"], d1["window_us"], d1["gpu_idle_fraction"]) == ("cuda:1", 300, 0.0)


def test_communication_and_exposed_communication(tmp_path):
    t = KinetoTrace()
    t.kernel(0, 100, "gemm").kernel(50, 150, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", stream=9)
    t.kernel(300, 50, "custom_allreduce", **{"Collective name": "allreduce"})
    (d,) = report_of([t.write(tmp_path / "comm.json")])["ranks"][0]["devices"]
    assert d["communication_us"] == 200 and d["exposed_communication_us"] == 150
    assert d["gpu_busy_us"] == 250
    assert {k["name"]: k["communication"] for k in d["top_kernels"]} == {
        "gemm": False, "ncclDevKernel_AllReduce_Sum_f32_RING_LL": True, "custom_allreduce": True}


def test_cpu_only_trace_says_no_gpu_activity(tmp_path):
    t = KinetoTrace()
    t.header["deviceProperties"] = []
    t.step(1, 0, 500, gpu_copy=False).dataloader(0, 200).host("aten::mm", 250, 100)
    rank = report_of([t.write(tmp_path / "cpu.json")])["ranks"][0]
    assert rank["devices"] == [] and rank["gpu_activity"] is False
    assert rank["dataloader_wait_fraction"] == pytest.approx(0.4)


def test_float_times_with_base_time(tmp_path):
    base = 1_751_410_836_000_000_000
    t = KinetoTrace(base_ns=base)
    t.step(5, 1419247333000.25, 10.5).kernel(1419247333001.125, 2.25).kernel(1419247333005.0, 0.5)
    rank = report_of([t.write(tmp_path / "f.json")], min_gap_us=0)["ranks"][0]
    assert rank["window_start_ns"] == base + 1419247333000250 and rank["clock"] == "epoch"
    d = rank["devices"][0]
    assert d["gpu_busy_us"] == 2.75 and d["window_us"] == 10.5
    assert rank["per_step"][0]["step"] == 5


def test_2021_generation(tmp_path):
    """Capitalised categories, string tids ("stream 7", "25738"), no deviceProperties."""
    events = [
        {"ph": "X", "cat": "Operator", "name": "ProfilerStep#0", "pid": 100, "tid": "25738", "ts": 0, "dur": 1000},
        {"ph": "X", "cat": "Operator", "name": "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__",
         "pid": 100, "tid": "25738", "ts": 0, "dur": 250},
        {"ph": "X", "cat": "Runtime", "name": "cudaLaunchKernel", "pid": 100, "tid": "25738", "ts": 300, "dur": 5},
        {"ph": "X", "cat": "Kernel", "name": "k", "pid": 0, "tid": "stream 7", "ts": 310, "dur": 400,
         "args": {"device": 0, "stream": 7, "correlation": 1, "external id": 3}},
        {"ph": "X", "cat": "Memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0, "tid": "stream 7",
         "ts": 720, "dur": 80, "args": {"device": 0, "bytes": 800}},
        {"ph": "i", "s": "g", "name": "Iteration Start: PyTorch Profiler", "pid": "", "tid": "", "ts": 0},
        {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Traces", "tid": "PyTorch Profiler",
         "ts": -100, "dur": 5000},
        {"ph": "M", "name": "thread_name", "pid": 0, "tid": "stream 7", "args": {"name": "stream 7 "}},
    ]
    p = tmp_path / "old.json"
    p.write_text('\n{"schemaVersion": 1, "traceEvents": ' + __import__("json").dumps(events) + "}")
    rank = report_of([p])["ranks"][0]
    d = rank["devices"][0]
    assert (rank["window_us"], d["gpu_busy_us"], d["memcpy_us"], rank["dataloader_wait_fraction"]) == (
        1000, 480, 80, 0.25)
    assert rank["clock"] == "relative"


def test_directory_is_one_rank_per_file(tmp_path):
    KinetoTrace(rank=1).step(1, 0, 100).kernel(10, 50).write(tmp_path / "a.json")
    KinetoTrace(rank=0).step(1, 0, 100).kernel(10, 20).write(tmp_path / "b.json")
    r = report_of([tmp_path])
    assert [x["rank"] for x in r["ranks"]] == [1, 0]
    assert [x["devices"][0]["gpu_busy_us"] for x in r["ranks"]] == [50, 20]

    nodist = tmp_path / "nodist"
    nodist.mkdir()
    KinetoTrace().step(1, 0, 100).kernel(0, 10).write(nodist / "w1.json")
    KinetoTrace().step(1, 0, 100).kernel(0, 10).write(nodist / "w0.json")
    r = report_of([nodist])
    assert [x["rank"] for x in r["ranks"]] == [0, 1]
    assert r["ranks"][0]["input"].endswith("w0.json")
