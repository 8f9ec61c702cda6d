"""Verdicts that stay right on messy captures (start-up costs, allocator calls, blocking copies,
jitter), each scenario built in code with a known answer."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from kineto_builder import KinetoTrace

import traceanalyzer as ta

STEP_US = 1000


def _kernels(t: KinetoTrace, start: float, end: float, n: int, name: str = "gemm_kernel") -> None:
    width = (end - start) / n
    for i in range(n):
        ts = start + i * width
        t.launched(ts - 20, 5, ts, width * 0.98, name)


def input_bound_loop(t: KinetoTrace, first_step: int, start: float, steps: int, rng=None,
                     wait_us: float = 500) -> float:
    """Steady input-bound steps: a DataLoader wait, then kernels; returns the end time."""
    s = start
    for i in range(steps):
        jitter = 1 + (0.05 * rng.standard_normal() if rng is not None else 0.0)
        wait = wait_us * jitter
        t.step(first_step + i, s, STEP_US + wait - 500)
        t.dataloader(s, wait)
        _kernels(t, s + wait + 30, s + STEP_US + wait - 500, 4)
        s += STEP_US + wait - 500
    return s


def with_startup(path: Path) -> Path:
    """Two warm-up steps: a 50 ms first cudaLaunchKernel (lazy module loading), a 40 ms first
    convolution (autotuning) and handle creation; then 12 steady input-bound steps."""
    t = KinetoTrace()
    t.step(0, 0, 60_000)
    t.runtime("cudaStreamCreateWithPriority", 10, 300)
    t.runtime("cublasCreate_v2", 400, 2_000)
    t.launched(3_000, 50_000, 53_100, 500, "gemm_kernel")  # the first launch: 50 ms
    t.step(1, 60_000, 45_000)
    t.host("aten::conv2d", 60_010, 40_000)  # first convolution, autotuning: 40 ms
    t.launched(100_050, 5, 100_100, 4_000, "implicit_convolve_sgemm")
    for k in range(6):  # later convolutions: 100 us each
        t.host("aten::conv2d", 105_000 + 100 + k * 1000, 100)
    input_bound_loop(t, 2, 105_000, 12)
    return t.write(path)


def without_startup(path: Path) -> Path:
    t = KinetoTrace()
    input_bound_loop(t, 2, 105_000, 12)
    return t.write(path)


def test_a_capture_dominated_by_start_up_says_so(tmp_path):
    a = ta.analyze(with_startup(tmp_path / "startup.json"))
    d = a.diagnosis
    r = a.ranks[0].diagnosis
    assert d.primary == "startup_dominated"
    assert r.warmup_steps == (0, 1)
    assert r.startup_us > 80_000  # ~50 ms first launch + ~40 ms first convolution, and the rest of warm-up
    assert "cudaLaunchKernel" in d.headline and "profile steady-state steps" in d.headline
    advice = " ".join(a for f in d.findings for a in f.advice)
    assert "torch.profiler.schedule" in advice
    assert r.idle_by_cause_us["startup"] > 80_000


def test_the_same_loop_without_start_up_is_input_bound(tmp_path):
    a = ta.analyze(without_startup(tmp_path / "steady.json"))
    d = a.diagnosis
    assert d.primary == "input_bound" and a.ranks[0].diagnosis.warmup_steps == ()


def test_include_warmup_counts_the_warm_up_steps(tmp_path):
    path = with_startup(tmp_path / "startup.json")
    a = ta.analyze(path, ta.Options(include_warmup=True))
    assert a.ranks[0].diagnosis.warmup_steps == () and a.options.include_warmup
    assert a.diagnosis.primary == "startup_dominated"  # the start-up cause itself still dominates


def test_a_capture_that_is_mostly_start_up_is_not_too_little_work(tmp_path):
    """Busy share is judged after start-up: 3 short steady steps behind a long start-up are a
    start-up capture (profile later), not 'too little GPU work to judge'."""
    t = KinetoTrace()
    t.step(0, 0, 200_000)
    t.runtime("cudaStreamCreateWithPriority", 10, 300)
    t.launched(1_000, 150_000, 151_100, 500, "gemm_kernel")  # a 150 ms first launch
    s = 200_000
    for i in range(1, 4):  # steady steps: the GPU busy 90% of each
        t.step(i, s, 1_000)
        _kernels(t, s + 50, s + 950, 6)
        s += 1_000
    a = ta.analyze(t.write(tmp_path / "t.json"))
    assert a.diagnosis.primary == "startup_dominated"
    assert a.ranks[0].diagnosis.startup_us > 150_000
    assert a.ranks[0].devices[0].gpu_idle_fraction > 0.95  # by the whole window it looked idle


def test_few_gpu_events_stay_undetermined_even_after_start_up(tmp_path):
    t = KinetoTrace()
    t.step(0, 0, 200_000)
    t.launched(1_000, 150_000, 151_100, 500, "gemm_kernel")
    t.step(1, 200_000, 1_000)
    t.launched(200_010, 5, 200_100, 800, "gemm_kernel")
    a = ta.analyze(t.write(tmp_path / "t.json"))
    d = a.diagnosis
    assert d.primary == "undetermined" and "only 2 GPU activities" in a.ranks[0].diagnosis.reason
    assert a.ranks[0].diagnosis.runner_up is None and a.ranks[0].diagnosis.confidence is None


def test_moderate_start_up_leaves_the_steady_verdict(tmp_path):
    t = KinetoTrace()
    t.step(0, 0, 3000)
    t.launched(10, 2_000, 2_100, 500, "gemm_kernel")  # a 2 ms first launch: one-off, small
    input_bound_loop(t, 1, 3000, 30)
    a = ta.analyze(t.write(tmp_path / "t.json"))
    d = a.diagnosis
    assert d.primary == "input_bound"
    assert a.ranks[0].diagnosis.startup_us > 0 and "start-up costs and the first" in d.headline_detail


def test_allocator_calls_in_the_loop(tmp_path):
    t = KinetoTrace()
    s = 0.0
    for i in range(10):
        t.step(i, s, STEP_US)
        t.runtime("cudaFree", s + 5, 200).runtime("cudaMalloc", s + 210, 250)
        _kernels(t, s + 500, s + STEP_US, 4)
        s += STEP_US
    a = ta.analyze(t.write(tmp_path / "alloc.json"))
    d = a.diagnosis
    assert d.primary == "allocator_bound"
    f = d.findings[0]
    assert f.cause == "allocator" and {o.name for o in f.host_ops} >= {"cudaMalloc", "cudaFree"}
    assert any("expandable_segments" in a for a in f.advice)


def test_a_blocking_copy_call_with_a_tiny_gpu_copy_is_a_wait(tmp_path):
    """The host sits 600 us in cudaMemcpyAsync while the GPU copies 4 bytes for 2 us: sync, not memcpy."""
    t = KinetoTrace()
    s = 0.0
    for i in range(10):
        t.step(i, s, STEP_US)
        _kernels(t, s + 20, s + 300, 2)
        t.copy(s + 310, 600, s + 905, 2, "Memcpy HtoD (Pageable -> Device)", nbytes=4)
        _kernels(t, s + 940, s + STEP_US, 1)
        s += STEP_US
    a = ta.analyze(t.write(tmp_path / "copy.json"))
    d = a.diagnosis
    r = a.ranks[0].diagnosis
    assert r.idle_by_cause_us.get("memcpy", 0.0) < 0.05 * r.idle_us
    assert d.primary == "sync_bound"


def test_a_real_transfer_stays_memcpy(tmp_path):
    t = KinetoTrace()
    s = 0.0
    for i in range(10):
        t.step(i, s, STEP_US)
        t.dataloader(s, 20)
        t.host("aten::to", s + 25, 600).copy(s + 30, 590, s + 100, 550, nbytes=50_000_000)
        _kernels(t, s + 680, s + STEP_US, 4)
        s += STEP_US
    assert ta.analyze(t.write(tmp_path / "copy.json")).diagnosis.primary == "memcpy_bound"


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_jittered_captures_of_one_job_get_one_verdict(tmp_path, seed):
    """The same host-bound job captured five times, with jitter and one stray long gap of another cause."""
    rng = np.random.default_rng(seed)
    t = KinetoTrace()
    s = 0.0
    stray = int(rng.integers(2, 18))
    for i in range(20):
        j = 1 + 0.1 * rng.standard_normal()
        t.step(i, s, STEP_US * j)
        _kernels(t, s + 30, s + 500 * j, 4)
        t.host("postprocess", s + 510 * j, 450 * j, cat="user_annotation")
        if i == stray:  # one long synchronisation in one step: must not decide the verdict
            t.runtime("cudaDeviceSynchronize", s + 510 * j, 440 * j)
        s += STEP_US * j
    a = ta.analyze(t.write(tmp_path / f"cap{seed}.json"))
    d = a.diagnosis
    assert d.primary == "host_bound", d.headline
    assert a.ranks[0].diagnosis.confidence == "clear" and a.ranks[0].diagnosis.runner_up is not None


def test_a_busy_gpu_with_untraced_losses_is_healthy(tmp_path):
    t = KinetoTrace()
    s = 0.0
    for i in range(10):
        t.step(i, s, STEP_US)
        _kernels(t, s + 10, s + 820, 8)  # ~80% busy; the rest has no host event at all
        s += STEP_US
    a = ta.analyze(t.write(tmp_path / "busy.json"))
    d = a.diagnosis
    assert d.primary == "gpu_bound" and "no traced host activity" in a.ranks[0].diagnosis.reason


# --- inputs that belong together ------------------------------------------------------------------
def _rank_file(path: Path, rank: int, world: int, gpu: str = "NVIDIA H100", start: float = 0.0) -> Path:
    t = KinetoTrace(rank=rank, base_ns=1_700_000_000_000_000_000)  # epoch clocks: wall time comparable
    t.header["distributedInfo"] = {"rank": rank, "world_size": world, "backend": "nccl"}
    t.header["deviceProperties"] = [{"id": 0, "name": gpu, "totalGlobalMem": 80 * 2**30}]
    input_bound_loop(t, 0, start, 4)
    return t.write(path)


def _report(*args: str) -> tuple[int, str]:
    from click.testing import CliRunner

    from traceanalyzer.commands import main

    res = CliRunner().invoke(main, ["report", *args])
    return res.exit_code, res.output


@pytest.mark.parametrize("case, expected", [
    ("world", "world sizes differ"),
    ("gpu", "different GPU models"),
    ("rank", "are both rank 0"),
    ("time", "do not overlap in time"),
])
def test_unrelated_files_are_refused_naming_the_mismatch(tmp_path, case, expected):
    a = _rank_file(tmp_path / "a.json", 0, 2)
    b = {"world": lambda: _rank_file(tmp_path / "b.json", 1, 4),
         "gpu": lambda: _rank_file(tmp_path / "b.json", 1, 2, gpu="AMD Instinct MI300X"),
         "rank": lambda: _rank_file(tmp_path / "b.json", 0, 2),
         "time": lambda: _rank_file(tmp_path / "b.json", 1, 2, start=3_600e6)}[case]()
    code, output = _report(str(a), str(b), "-o", str(tmp_path / "r.json"))
    line = output.strip().splitlines()[-1]
    assert code == 2 and expected in line and "traceanalyzer diff" in line and "--force-job" in line
    code, output = _report(str(a), str(b), "-o", str(tmp_path / "r.json"), "--force-job", "-q")
    assert code == 0
    import json

    report = json.loads((tmp_path / "r.json").read_text())
    assert any("--force-job" in w for w in report["warnings"])


def test_ranks_of_one_job_are_accepted(tmp_path):
    a = _rank_file(tmp_path / "a.json", 0, 2)
    b = _rank_file(tmp_path / "b.json", 1, 2)
    assert _report(str(a), str(b), "-o", str(tmp_path / "r.json"), "-q")[0] == 0


def test_the_same_file_twice_is_an_error(tmp_path):
    a = _rank_file(tmp_path / "a.json", 0, 2)
    code, output = _report(str(a), str(tmp_path / "." / "a.json"), "-o", str(tmp_path / "r.json"))
    assert code == 2 and "the same file is given twice" in output


# --- logs beside a trace --------------------------------------------------------------------------
def _dmon_log(path: Path) -> Path:
    lines = ["# gpu    sm   mem", "# Idx     %     %"] + [f"    0    {40 + i % 7}    10" for i in range(30)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_an_uploads_folder_uses_only_the_traces_own_log(tmp_path):
    from traceanalyzer.formats import InputSet, classify_inputs

    trace = without_startup(tmp_path / "run3.json")
    own = _dmon_log(tmp_path / "run3.dmon.log")
    for other in ("run1.dmon.log", "run2.dmon.log"):
        _dmon_log(tmp_path / other)
    split = classify_inputs(InputSet("run3.json", [trace], False))
    assert split.counter_logs == [own] and split.found_beside == [own]
    assert sorted(p.name for p in split.ignored_beside) == ["run1.dmon.log", "run2.dmon.log"]


def test_several_unnamed_logs_are_listed_not_used(tmp_path):
    trace = without_startup(tmp_path / "trace.json")
    _dmon_log(tmp_path / "a.log")
    _dmon_log(tmp_path / "b.log")
    a = ta.analyze(trace)
    assert a.counters == () and a.counter_logs == ()
    note = next(w for w in a.warnings if "not used" in w)
    assert "a.log" in note and "b.log" in note and "--dmon" in note


def test_the_only_log_beside_a_trace_is_used(tmp_path):
    trace = without_startup(tmp_path / "trace.json")
    _dmon_log(tmp_path / "gpu.log")
    a = ta.analyze(trace, ta.Options(dmon_start=(1_700_000_000 * 10**9, "wall")))
    assert len(a.counter_logs) == 1 and any("found beside the trace and used" in w for w in a.warnings)


def test_communication_is_drawn_and_in_the_per_step_json():
    from conftest import SAMPLES

    a = ta.analyze([SAMPLES / "comm_rank0.json", SAMPLES / "comm_rank1.json"])
    assert a.diagnosis.primary == "communication_bound"
    r = a.ranks[0]
    dev = r.devices[0]
    per_step_comm = sum(s.comm_us for s in r.per_step)
    assert per_step_comm == pytest.approx(dev.communication_us, rel=1e-6)
    assert sum(s.exposed_comm_us for s in r.per_step) == pytest.approx(dev.exposed_communication_us, rel=1e-6)
    lane = r.drawing.timeline["devices"][0]["comm"]
    assert sum(lane["covered_us"]) == pytest.approx(dev.communication_us, abs=1.0)
    series = {s["key"]: s["values"] for s in r.drawing.charts["per_step"]["series"]}
    assert sum(series["communication"]) == pytest.approx(dev.exposed_communication_us, abs=0.01)
    # the stacked series add up to each step's duration
    for i, s in enumerate(r.per_step):
        assert sum(v[i] for v in series.values()) == pytest.approx(s.duration_us, abs=0.01)


def test_a_two_gpu_log_with_one_idle_gpu_is_called_out(tmp_path):
    from conftest import SAMPLES

    a = ta.analyze(SAMPLES / "dmon" / "idle_runs.log")
    assert a.summary.devices == 2 and a.summary.ranks == 0
    d = a.diagnosis
    assert d.primary == "gpu_underused"
    gpu1 = next(f for f in d.findings if f.title.startswith("GPU 1"))
    # GPU 0's last 6 samples at 0% are idle on both GPUs: after the job, set apart; GPU 1 has a '-' sample
    assert gpu1.figures["zero_util_samples"] == 33 and gpu1.figures["samples"] == 33
    assert "The log's last 6 s is idle on every GPU" in d.headline_detail
    html = a.to_html()
    assert 'id="timeline"' not in html and 'id="kernels"' not in html  # no empty sections
    assert html.count("<polyline") == 2 and "of samples" in html
    md = a.to_markdown()
    assert "GPU underused" in md and "2** GPU(s) in nvidia-smi logs" in md and "Headline figures" not in md


def test_small_things(tmp_path):
    """A single-file trace is named, not `rank ?`; terminal lines wrap instead of being cut."""
    from report_fixtures import single_gpu

    from traceanalyzer.report.text import WIDTH, fit

    a = ta.analyze(single_gpu(tmp_path / "my_run.json"))
    assert "rank ?" not in a.to_html() and "my_run.json" in a.to_text()
    assert "| my\\_run.json |" in a.to_markdown() or "| my_run.json |" in a.to_markdown()
    long = "  cuda:0: busy 31.0%, idle 69.0%, memcpy 3.2% of busy " + "and a long tail of figures 12.5 ms " * 3
    wrapped = fit([long])
    assert len(wrapped) > 1 and all(len(w) <= WIDTH for w in wrapped)
    assert " ".join(w.strip() for w in wrapped) == " ".join(long.split())  # nothing cut
