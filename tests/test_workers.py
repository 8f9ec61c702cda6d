"""One file, many workers (issue 33 item 5): a Chrome trace whose processes are named workers and that
holds no GPU kernels is read as one rank per process; a worker computing 2.35x the median per step is
named a straggler, its ideal twin (all equal) gets none; the per-rank table holds compute,
communication and wait per step; the verdict says it rests on host-side events."""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import pytest
from click.testing import CliRunner
from workers_builder import COMPUTE_US, SLOW, STEPS, TWIN, workers_trace, write_workers_trace

import traceanalyzer as ta
from traceanalyzer.commands import main
from traceanalyzer.diagnosis.thresholds import WORKER_STRAGGLER_COMPUTE_FACTOR
from traceanalyzer.formats.workers import metadata_names, worker_numbers


def _analyze(tmp_path: Path, scale: list[float], **kw: object) -> ta.Analysis:
    return ta.analyze(write_workers_trace(tmp_path / "job.json", scale, **kw))  # type: ignore[arg-type]


def test_slow_worker_is_named(tmp_path: Path) -> None:
    a = _analyze(tmp_path, SLOW)
    assert [r.rank for r in a.ranks] == [0, 1, 2, 3]
    assert a.diagnosis is not None and a.job is not None
    assert [s.rank for s in a.diagnosis.stragglers] == [2]
    s = a.diagnosis.stragglers[0]
    assert s.lateness_per_step_us == pytest.approx(1.35 * COMPUTE_US)  # 23.5 ms - 10.0 ms
    # an other worker per step: reduce-scatter 14.65 ms (13.5 ms of it waiting for rank 2) + all-gather 1.0 ms,
    # less 1.5 ms of it beside its own compute (send beside backward, nothing else) = 14.15 ms exposed, 1.9 ms
    # idle; rank 2: 2.0 ms of collectives exposed, 1.0 ms idle
    assert s.caused_wait_per_step_us == pytest.approx(14_150 + 1_900 - 2_000 - 1_000)
    assert a.diagnosis.headline.startswith("Waiting for a straggler: worker rank 2 computes 23.5 ms per step, 2.35x")
    assert "No GPU kernels in this trace" in (a.diagnosis.verdict_note or "")
    assert a.diagnosis.findings[0].id == "straggler"
    assert a.diagnosis.primary not in ("gpu_bound", "communication_bound")


def test_ideal_twin_has_no_straggler(tmp_path: Path) -> None:
    a = _analyze(tmp_path, TWIN)
    assert a.diagnosis is not None and a.job is not None
    assert a.diagnosis.stragglers == ()
    assert a.diagnosis.headline.startswith("No straggler among the 4 workers")
    assert all(f.id != "straggler" for f in a.diagnosis.findings)
    assert "No GPU kernels in this trace" in (a.diagnosis.verdict_note or "")


def test_per_rank_table(tmp_path: Path) -> None:
    job = _analyze(tmp_path, SLOW).job
    assert job is not None and job.worker_straggler_factor == WORKER_STRAGGLER_COMPUTE_FACTOR
    rows = {r.rank: r for r in job.workers}
    assert sorted(rows) == [0, 1, 2, 3]
    assert all(r.steps == STEPS for r in rows.values())  # one optimizer event per step
    assert rows[2].compute_us == 23_500 and rows[0].compute_us == 10_000
    assert rows[2].compute_vs_median == 2.35 and rows[0].compute_vs_median == 1.0
    assert (rows[2].comm_us, rows[2].wait_us) == (2_000, 1_000)
    assert (rows[0].comm_us, rows[0].wait_us) == (14_150, 1_900)
    for r in rows.values():  # compute + comm + wait = the worker's span per step
        assert r.compute_us + r.comm_us + r.wait_us == pytest.approx(r.step_time_us)
    assert len(job.clocks) == 1 and job.clocks[0].method == "same clock"


def test_thread_names_alone_make_workers(tmp_path: Path) -> None:
    a = _analyze(tmp_path, SLOW, process_names=False)
    assert [r.rank for r in a.ranks] == [0, 1, 2, 3]  # small distinct pids are the rank numbers
    assert a.diagnosis is not None and [s.rank for s in a.diagnosis.stragglers] == [2]


def test_listed_gpus_without_kernels(tmp_path: Path) -> None:
    """A header listing GPUs does not make GPU work: the workers are still split and judged."""
    trace = workers_trace(SLOW)
    trace["deviceProperties"] = [{"id": 0, "name": "NVIDIA H100", "totalGlobalMem": 80 << 30}]
    path = tmp_path / "listed.json"
    path.write_text(json.dumps(trace))
    a = ta.analyze(path)
    assert len(a.ranks) == 4 and a.diagnosis is not None
    assert [s.rank for s in a.diagnosis.stragglers] == [2]


def test_unnamed_processes_stay_one_rank(tmp_path: Path) -> None:
    """Without names saying the processes are workers, the file is one rank as before."""
    a = _analyze(tmp_path, SLOW, process_names=False, thread_names=False)
    assert len(a.ranks) == 1 and (a.job is None or not a.job.workers)


def test_gpu_kernels_keep_one_rank(tmp_path: Path) -> None:
    """A trace with GPU kernels is a rank's own trace, whatever its processes are named."""
    trace = workers_trace(SLOW)
    trace["traceEvents"].append({"name": "sm90_gemm", "ph": "X", "cat": "kernel", "pid": 0, "tid": 7, "ts": 2_000,
                                 "dur": 500, "args": {"device": 0, "stream": 7, "correlation": 1}})
    path = tmp_path / "gpu.json"
    path.write_text(json.dumps(trace))
    a = ta.analyze(path)
    assert len(a.ranks) == 1 and (a.job is None or not a.job.workers)


def test_report_and_round_trip(tmp_path: Path) -> None:
    a = _analyze(tmp_path, SLOW)
    md = a.to_markdown()
    assert "| rank | steps | step | compute | comm | wait | compute vs median |" in md
    assert "| 2 | 3 | 26.5 ms | 23.5 ms | 2.0 ms | 1.0 ms | 2.35x |" in md
    html = a.to_html()
    assert '<table class="num fit workers">' in html and "<td>rank 2</td><td>3</td>" in html
    assert "<b>2.35x</b>" in html
    a.save(tmp_path / "r.json")
    back = ta.load(tmp_path / "r.json")
    assert back.job is not None and back.job.workers == a.job.workers  # type: ignore[union-attr]


def test_metadata_names_and_numbers() -> None:
    data = json.dumps(workers_trace([1.0, 1.0])).encode()
    processes, threads = metadata_names(data)
    assert processes == {0: "DP rank 0", 1: "DP rank 1"}
    assert threads[1] == ["PP rank 0, TP rank 0, compute", "PP rank 0, TP rank 0, comm"]
    # args before the name, braces of other events around, a broken one skipped
    odd = (b'[{"args": {"name": "worker 5"}, "name": "process_name", "ph": "M", "pid": 9},'
           b'{"name": "process_name", "ph": "M", "pid": 3, "args": {"name": {"x": 1}}},'
           b'{"name": "thread_name", "ph": "M", "pid": 4, "args": {"name": "stage 1"}')
    assert metadata_names(odd) == ({9: "worker 5"}, {})
    assert worker_numbers([7001, 7002], {7001: "worker 1", 7002: "worker 0"}) == [1, 0]
    assert worker_numbers([5, 9], {}) == [5, 9]
    assert worker_numbers([70_001, 70_002], {}) == [None, None]


def _stepped_trace(first_step: int = 1200) -> dict:
    """The slow-worker job with its events' step args numbered from `first_step`, and a second optimizer event
    per step (`optimizer_zero_grad`, as frameworks record both): counted by optimizer events, 6 steps."""
    trace = workers_trace(SLOW)
    extra = []
    for e in trace["traceEvents"]:
        if e.get("ph") == "X":
            e["args"]["step"] += first_step
            if e["name"] == "optimizer":
                extra.append({**e, "name": "optimizer_zero_grad", "dur": 0, "args": dict(e["args"])})
    trace["traceEvents"] += extra
    return trace


def test_step_args_give_the_workers_steps(tmp_path: Path) -> None:
    """Step args are the steps (one per number), not the optimizer events (two per step here): each worker has
    its 3 steps, numbered as the file numbers them, each from its first event to its last."""
    path = tmp_path / "stepped.json"
    path.write_text(json.dumps(_stepped_trace()))
    a = ta.analyze(path)
    assert [r.rank for r in a.ranks] == [0, 1, 2, 3]
    for r in a.ranks:
        assert r.steps == STEPS and [s.step for s in r.per_step] == [1200, 1201, 1202]
    rows = {r.rank: r for r in a.job.workers}  # type: ignore[union-attr]
    assert all(r.steps == STEPS for r in rows.values())
    assert rows[2].compute_us == 23_500 and rows[0].compute_us == 10_000
    assert [s.rank for s in a.diagnosis.stragglers] == [2]  # type: ignore[union-attr]
    # worker 0's step 1200: from its forward's start to its optimizer's end (the slowest worker's compute, the two
    # collectives, then its own optimizer)
    first = a.ranks[0].per_step[0]
    assert first.duration_us == 2.35 * 9_000 + 1_000 + 1_000 + 1_000
    assert "steps from the events' step args (12 step spans)" in " ".join(a.inputs[0].warnings)


def test_step_args_that_are_no_step_number_are_counted(tmp_path: Path) -> None:
    trace = _stepped_trace()
    odd = [e for e in trace["traceEvents"] if e.get("ph") == "X"][:4]
    for e, value in zip(odd, ["1200", -1, 2**40, True]):
        e["args"]["step"] = value
    path = tmp_path / "odd.json"
    path.write_text(json.dumps(trace))
    a = ta.analyze(path)
    assert all(r.steps == STEPS for r in a.ranks)
    assert "12 step spans), 4 step args that are no step number skipped" in " ".join(a.inputs[0].warnings)


@pytest.mark.parametrize("packed", [False, True])
def test_a_cut_worker_file_keeps_its_optimizer_steps(tmp_path: Path, packed: bool) -> None:
    """A file cut off (plain, or a gzip stream cut) does not decode whole: no step spans from its args; it is
    still split into its workers, the optimizer events counting their steps."""
    data = json.dumps(_stepped_trace()).encode()
    path = tmp_path / ("cut.json.gz" if packed else "cut.json")
    if packed:
        packer = zlib.compressobj(6, zlib.DEFLATED, 31)
        path.write_bytes(packer.compress(data[: len(data) - 40]) + packer.flush(zlib.Z_SYNC_FLUSH))
    else:
        path.write_bytes(data[: len(data) - 40])
    a = ta.analyze(path)
    assert [r.rank for r in a.ranks] == [0, 1, 2, 3]
    assert "step args" not in " ".join(a.inputs[0].warnings)
    # two optimizer events a step; the cut lost the file's last event, worker 3's last optimizer_zero_grad
    assert [r.steps for r in a.job.workers] == [2 * STEPS] * 3 + [2 * STEPS - 1]  # type: ignore[union-attr]


def test_step_args_of_a_file_too_large_to_decode_again_are_said(tmp_path: Path, monkeypatch) -> None:
    from traceanalyzer.formats import workers

    monkeypatch.setattr(workers, "MAX_STEP_ARGS_BYTES", 1000)
    path = tmp_path / "stepped.json"
    path.write_text(json.dumps(_stepped_trace()))
    a = ta.analyze(path, ta.Options(cache=False))
    assert "step args not read (the file is above 0 MB decompressed)" in " ".join(a.inputs[0].warnings)
    assert [r.steps for r in a.job.workers] == [2 * STEPS] * 4  # type: ignore[union-attr]


def test_hostile_events_with_step_args_are_no_internal_error(tmp_path: Path) -> None:
    """Pids and times no reader keeps, beside the job's events: skipped; the workers keep their steps."""
    trace = _stepped_trace()
    trace["traceEvents"] += [
        {"name": "x", "ph": "X", "pid": 2**70, "tid": 1, "ts": 1, "dur": 1, "args": {"step": 1}},
        {"name": "x", "ph": "X", "pid": 0, "tid": 1, "ts": 1e300, "dur": 1, "args": {"step": 1}},
        {"name": "x", "ph": "X", "pid": 0, "tid": 1, "ts": 5, "dur": -3, "args": {"iteration": 1}},
        {"name": "x", "ph": "X", "pid": 0, "tid": 1, "ts": "5", "dur": 1, "args": {"step": 1}},
    ]
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(trace))
    result = CliRunner().invoke(main, ["report", str(path), "-o", str(tmp_path / "r.json"), "--format", "json", "-q"])
    assert result.exit_code == 0, result.output
    a = ta.analyze(path, ta.Options(cache=False))
    assert [r.steps for r in a.job.workers] == [STEPS] * 4  # type: ignore[union-attr]


def test_one_of_two_stages_doing_more_work_is_a_straggler(tmp_path: Path) -> None:
    """Two workers (pipeline stages), one computing 1.6x the other: against the median of both (13 ms) it would
    be 1.23x and missed; against the other worker's it is 1.6x, past WORKER_STRAGGLER_COMPUTE_FACTOR."""
    a = _analyze(tmp_path, [1.0, 1.6])
    assert a.diagnosis is not None
    assert [s.rank for s in a.diagnosis.stragglers] == [1]
    assert a.diagnosis.stragglers[0].lateness_per_step_us == pytest.approx(0.6 * COMPUTE_US)
    assert "1.60x the other workers' median 10.0 ms" in a.diagnosis.headline
