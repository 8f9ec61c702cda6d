"""Diagnosis on traces built here, one per bottleneck of seed 002's case study (plus sync-heavy loops,
communication and a healthy run): the primary verdict AND the dominant gap cause."""

from __future__ import annotations

from pathlib import Path

import pytest
from kineto_builder import KinetoTrace
from timelines import load_paths

from traceanalyzer.diagnosis import CAUSES, VERDICTS
from traceanalyzer.formats import ReadOptions
from traceanalyzer.pipeline import analyze

STEPS = 12
STEP_US = 1000


def diag_of(paths: list[Path]) -> dict:
    tl = load_paths(paths, ReadOptions())
    data = analyze(tl).to_data()
    # the job's verdict, and each rank's diagnosis (with its rank number) as `ranks`
    return dict(data["diagnosis"], ranks=[dict(r["diagnosis"], rank=r["rank"]) for r in data["ranks"]])


def dominant(rank: dict) -> str:
    causes = rank["idle_by_cause_us"]
    return max(causes, key=causes.get)


def kernels(t: KinetoTrace, start: float, end: float, n: int, name: str = "gemm_kernel") -> None:
    """n launched kernels evenly filling [start, end), each launched 20 us before it runs."""
    width = (end - start) / n
    for i in range(n):
        ts = start + i * width
        t.launched(ts - 20, 5, ts, width * 0.98, name)


def scenario(kind: str) -> KinetoTrace:
    t = KinetoTrace()
    s = 10_000 - STEP_US
    dur = STEP_US
    for i in range(STEPS):
        s += dur
        dur = STEP_US + (4000 if kind == "periodic_stall" and i % 4 == 3 else 0)
        t.step(i, s, dur)
        if kind == "input_bound":  # slow pipeline: the loop waits in DataLoader.__next__
            t.dataloader(s, 700)
            kernels(t, s + 730, s + STEP_US, 4)
        elif kind == "preprocessing":  # heavy preprocessing inside the loader (ops nested in __next__)
            t.dataloader(s, 650)
            t.host("aten::conv2d", s + 10, 500).host("aten::resize_", s + 520, 100)
            kernels(t, s + 680, s + STEP_US, 4)
        elif kind == "memcpy_bound":  # large host-to-device copies, pageable
            t.dataloader(s, 20)
            t.host("aten::to", s + 25, 600).copy(s + 30, 590, s + 100, 550, nbytes=50_000_000)
            kernels(t, s + 680, s + STEP_US, 4)
        elif kind == "launch_bound":  # small batch: tiny kernels, each launch slower than the kernel
            for j in range(40):
                ls = s + j * 24
                t.launched(ls + 2, 15, ls + 18, 4, "vectorized_elementwise_kernel", op="aten::add")
        elif kind == "host_bound":  # heavy post-processing on the host after the step's kernels
            kernels(t, s + 30, s + 400, 4)
            t.host("postprocess_masks", s + 410, 580, cat="user_annotation")
            t.host("aten::sigmoid", s + 420, 200).host("aten::numpy_T", s + 630, 300)
        elif kind == "periodic_stall":  # every 4th step saves a checkpoint
            kernels(t, s + 30, s + STEP_US, 8)
            if i % 4 == 3:
                t.host("save_checkpoint", s + STEP_US + 20, 3900, cat="user_annotation")
                t.host("aten::copy_", s + STEP_US + 30, 200)
                t.host("torch/serialization.py(628): save", s + STEP_US + 300, 3500, cat="python_function")
        elif kind == "sync_bound":  # .item() every iteration: the host waits, then launches late
            for j in range(8):
                ks = s + 20 + j * 120
                t.launched(ks - 15, 5, ks, 60, "gemm_kernel")
                t.host("aten::item", ks - 5, 75).host("aten::_local_scalar_dense", ks - 4, 73)
                t.copy(ks - 3, 4, ks + 61, 2, "Memcpy DtoH (Device -> Pageable)", nbytes=4)
                t.runtime("cudaStreamSynchronize", ks, 68)
                t.host("aten::add", ks + 75, 25)
        elif kind == "gpu_bound":
            kernels(t, s + 25, s + STEP_US, 10, "ampere_sgemm_128x64_nn")
        else:
            raise ValueError(kind)
    return t


CASES = [
    ("input_bound", "input_bound", "dataloader"),
    ("preprocessing", "input_bound", "dataloader"),
    ("memcpy_bound", "memcpy_bound", "memcpy"),
    ("launch_bound", "launch_bound", "launch"),
    ("host_bound", "host_bound", "host_compute"),
    ("periodic_stall", "periodic_stall", "checkpoint"),
    ("sync_bound", "sync_bound", "sync"),
]


@pytest.mark.parametrize(("kind", "verdict", "cause"), CASES, ids=[c[0] for c in CASES])
def test_scenario_verdict_and_dominant_cause(tmp_path, kind, verdict, cause):
    d = diag_of([scenario(kind).write(tmp_path / f"{kind}.json")])
    (rank,) = d["ranks"]
    assert d["primary"] == verdict and rank["primary"] == verdict, d["headline"]
    assert dominant(rank) == cause
    assert rank["gaps"] and rank["gaps"][0]["cause"] == cause
    top = d["findings"][0]
    assert top["id"] == verdict and top["cause"] == cause and top["advice"] and top["evidence"]
    assert top["explains_us"] > 0 and 0 < top["share_of_idle"] <= 1
    # the causes present only (a saved report names no cause it has no time for), each a known one
    assert set(rank["idle_by_cause_us"]) <= set(CAUSES) and all(rank["idle_by_cause_us"].values())
    # all idle time is attributed: the causes add up to window - busy
    assert sum(rank["idle_by_cause_us"].values()) == pytest.approx(rank["idle_us"], abs=0.01)
    # per step, too
    assert len(rank["per_step"]) == STEPS
    assert sum(sum(s["idle_by_cause_us"].values()) for s in rank["per_step"]) == pytest.approx(rank["idle_us"], abs=0.01)


def test_gpu_bound_names_kernels_and_precision(tmp_path):
    d = diag_of([scenario("gpu_bound").write(tmp_path / "g.json")])
    assert d["primary"] == "gpu_bound"
    f = d["findings"][0]
    assert f["id"] == "gpu_bound" and f["cause"] is None
    text = " ".join(f["evidence"])
    assert "ampere_sgemm_128x64_nn" in text and "FP32" in text and "memory-bound" in text
    assert any("autocast" in a for a in f["advice"])


def test_evidence_names_the_host_events(tmp_path):
    d = diag_of([scenario("input_bound").write(tmp_path / "i.json")])
    gap = d["ranks"][0]["gaps"][0]
    assert gap["evidence"][0]["name"].startswith("enumerate(DataLoader)#")
    assert gap["evidence"][0]["share"] > 0.9
    assert gap["device"] == "cuda:0" and gap["step"] is not None
    assert "num_workers" in " ".join(d["findings"][0]["advice"])
    assert d["headline"].startswith("The GPU loses") and "DataLoader" in d["headline"]


def test_sync_gap_names_the_blocking_call(tmp_path):
    d = diag_of([scenario("sync_bound").write(tmp_path / "s.json")])
    names = {e["name"] for g in d["ranks"][0]["gaps"] for e in g["evidence"]}
    assert names & {"cudaStreamSynchronize", "aten::item", "aten::_local_scalar_dense", "cudaMemcpyAsync"}


def test_periodic_stall_names_the_steps(tmp_path):
    d = diag_of([scenario("periodic_stall").write(tmp_path / "p.json")])
    rank = d["ranks"][0]
    assert rank["periodic"] == {"steps": [3, 7, 11], "every": 4}
    stalled = {s["step"] for s in rank["per_step"] if s["idle_by_cause_us"].get("checkpoint", 0) > 1000}
    assert stalled == {3, 7, 11}


def test_python_frames_alone_do_not_make_input_bound(tmp_path):
    """The trap: DataLoader python frames (with_stack) without the DataLoader wait op."""
    t = scenario("host_bound")
    for i in range(STEPS):
        s = 10_000 + i * STEP_US
        t.host("torch/utils/data/dataloader.py(631): __next__", s + 420, 500, cat="python_function")
        t.host("MyDataLoaderHelper", s + 425, 400)
    d = diag_of([t.write(tmp_path / "trap.json")])
    assert d["primary"] != "input_bound"
    assert "dataloader" not in d["ranks"][0]["idle_by_cause_us"]  # no time for it: not named


def test_communication_bound_job_verdict_is_the_rank_losing_most(tmp_path):
    paths = []
    for rank, compute_us in ((0, 300), (1, 850)):
        t = KinetoTrace(rank=rank)
        for i in range(STEPS):
            s = 10_000 + i * STEP_US
            t.step(i, s, STEP_US)
            kernels(t, s + 30, s + 30 + compute_us, 4)
            t.host("record_param_comms", s + 35 + compute_us, 10).host("nccl:all_reduce", s + 36 + compute_us, 8)
            t.gpu("ncclDevKernel_AllReduce_Sum_f32_RING_LL", s + 40 + compute_us, 940 - compute_us,
                  Collective_name="allreduce")
        paths.append(t.write(tmp_path / f"rank{rank}.json"))
    d = diag_of(paths)
    r0, r1 = d["ranks"]
    assert r0["primary"] == "communication_bound"
    assert d["primary"] == "communication_bound" and d["headline"].startswith("Rank 0")
    assert r0["lost_us"] > r1["lost_us"]
    assert r0["exposed_communication_us"] > 0.5 * r0["window_us"]
    assert d["findings"][0]["id"] == "communication_bound"


def test_gpu_listed_but_silent_is_undetermined_with_host_verdict(tmp_path):
    """A GPU listed (the builder's deviceProperties) and no GPU event: the GPU verdict is undetermined; the
    host loop's verdict has its own name (never a GPU verdict's)."""
    t = KinetoTrace()
    for i in range(STEPS):
        s = 10_000 + i * STEP_US
        t.step(i, s, STEP_US, gpu_copy=False)
        t.dataloader(s, 600).host("aten::linear", s + 620, 300)
    d = diag_of([t.write(tmp_path / "cpu.json")])
    assert d["primary"] == "undetermined" and d["host_primary"] == "cpu_input_bound"
    assert d["headline"].startswith("Host loop waits for data") and "no GPU activity" in d["headline"]
    assert d["findings"][0]["id"] == "cpu_input_bound" and d["findings"][0]["advice"]
    t2 = KinetoTrace()
    for i in range(STEPS):
        s = 10_000 + i * STEP_US
        t2.step(i, s, STEP_US, gpu_copy=False)
        t2.dataloader(s, 50).host("aten::linear", s + 60, 900)
    assert diag_of([t2.write(tmp_path / "cpu2.json")])["host_primary"] == "cpu_compute_bound"


def test_too_little_gpu_work_is_undetermined(tmp_path):
    t = KinetoTrace().step(1, 1000, 1000).kernel(1100, 10).kernel(1500, 10)
    d = diag_of([t.write(tmp_path / "tiny.json")])
    assert d["primary"] == "undetermined"
    assert all(v in VERDICTS for v in (d["primary"],))


# --- bundled sample traces (sample_traces/, with their sidecars' answers) ----------------------------
SAMPLES = Path(__file__).resolve().parent.parent / "sample_traces"
SAMPLE_VERDICTS = [  # (files, primary, dominant gap cause or None when the loss is not idle time)
    (["input_bound.json"], "input_bound", "dataloader"),
    (["memcpy_bound.json"], "memcpy_bound", "memcpy"),
    (["launch_bound.json.gz"], "launch_bound", "launch"),
    (["sync_bound.json"], "sync_bound", "sync"),
    (["host_bound.json"], "host_bound", "host_compute"),
    (["periodic_stall.json"], "periodic_stall", "checkpoint"),
    (["comm_rank0.json", "comm_rank1.json"], "communication_bound", None),
    (["gpu_bound.json"], "gpu_bound", None),
]


@pytest.mark.parametrize(("files", "verdict", "cause"), SAMPLE_VERDICTS, ids=[v[1] for v in SAMPLE_VERDICTS])
def test_sample_trace_verdicts(files, verdict, cause):
    d = diag_of([SAMPLES / f for f in files])
    assert d["primary"] == verdict, d["headline"]
    for rank in d["ranks"]:
        assert rank["primary"] == verdict
        assert sum(rank["idle_by_cause_us"].values()) == pytest.approx(rank["idle_us"], abs=0.01)
        if cause:
            assert dominant(rank) == cause


CPU_SAMPLES = [
    ("torch_cpu_input_bound.json.gz", "cpu_input_bound"),
    ("torch_cpu_multiworker.json.gz", "cpu_input_bound"),
    ("torch_cpu_well_fed.json.gz", "cpu_compute_bound"),
    ("torch_cpu_host_bound.json.gz", "cpu_compute_bound"),
    ("cpu_only.json", "cpu_input_bound"),  # 25% of each step in the DataLoader: >= 20%
]


@pytest.mark.parametrize(("name", "host_verdict"), CPU_SAMPLES, ids=[c[0] for c in CPU_SAMPLES])
def test_cpu_trace_host_verdict(name, host_verdict):
    d = diag_of([SAMPLES / name])  # CPU-only captures (no GPU listed): the host loop's verdict is the verdict
    assert d["primary"] == d["host_primary"] == host_verdict
    words = "waits for data" if host_verdict == "cpu_input_bound" else "busy in its own work"
    assert d["headline"].startswith(f"Host loop {words}") and "a CPU-only capture" in d["headline"]


def test_cli_summary_shows_verdict_and_advice(tmp_path):
    from click.testing import CliRunner

    from traceanalyzer.commands import main

    res = CliRunner().invoke(main, ["report", str(SAMPLES / "input_bound.json"), "-o", str(tmp_path / "r.json")])
    assert res.exit_code == 0, res.output
    assert "Primary bottleneck: input_bound" in res.output and "num_workers" in res.output
    assert all(len(line) <= 80 for line in res.output.splitlines() if not line.startswith("Report ("))
    import json

    report = json.loads((tmp_path / "r.json").read_text())
    assert report["diagnosis"]["primary"] == "input_bound"
    assert report["diagnosis"]["findings"][0]["advice"]
