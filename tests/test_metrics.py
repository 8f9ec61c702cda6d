"""The run's metrics (traceanalyzer/result/metrics.py): one definition each, read alike by every face.

The job: 3 ranks, 8 steps each; ranks 0 and 1 take 10 ms a step, rank 2 takes 12 ms (20% slower). A job
step lasts as long as its slowest rank, so the job's step time is 12 ms, and every face says so: the
report's JSON summary, `--format bmf`, the `--fail-on step_time_ms` gate, `diff`'s side, the service's
history figures and its run row. (Before the registry, the gate and the service said 10 ms: the median
of every rank's step rows.)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from kineto_builder import KinetoTrace

import traceanalyzer as ta
from traceanalyzer import gates
from traceanalyzer.commands import main
from traceanalyzer.compare import compare
from traceanalyzer.report import bmf as B
from traceanalyzer.result import metrics as M
from traceanalyzer.serve import history

STEPS, WORLD = 8, 3
STEP_US = {0: 10_000, 1: 10_000, 2: 12_000}  # rank 2's steps are 20% slower
BUSY = 0.6  # each step: one kernel over the first 60% of it


def slow_rank_job(tmp: Path) -> list[Path]:
    paths = []
    for rank, step in STEP_US.items():
        t = KinetoTrace(rank=rank, base_ns=1_700_000_000_000_000_000)
        t.header["distributedInfo"]["world_size"] = WORLD
        for i in range(STEPS):
            t0 = 1_000 + i * step
            t.step(i, t0, step)
            t.launched(t0 + 10, 5, t0 + 20, int(step * BUSY))
        paths.append(t.write(tmp / f"rank{rank}.json"))
    return paths


def test_one_step_time_for_a_job_with_a_slow_rank(tmp_path: Path) -> None:
    paths = slow_rank_job(tmp_path)
    report = tmp_path / "report.json"
    res = CliRunner().invoke(main, ["report", *map(str, paths), "-o", str(report), "--format", "json", "-q"])
    assert res.exit_code == 0, res.output
    summary_ms = json.loads(report.read_text())["summary"]["step_time_median_us"] / 1000
    assert summary_ms == pytest.approx(12.0)  # the slowest rank's step, not the median of every rank's rows

    res = CliRunner().invoke(main, ["report", *map(str, paths), "--format", "bmf", "-o", "-", "-q"])
    assert res.exit_code == 0, res.output
    bmf_ms = json.loads(res.output)[B.BENCHMARK]["step-time-ms"]["value"]

    a = ta.load(report)
    (gate,) = gates.evaluate_all(gates.parse_rules(["step_time_ms>11.9"]), a)
    res = CliRunner().invoke(main, ["report", *map(str, paths), "-o", str(tmp_path / "gated.json"), "--format",
                                    "json", "-q", "--fail-on", "step_time_ms>11.9"])
    assert res.exit_code == 1 and "step_time_ms = 12" in res.output + res.stderr  # the CLI's gate trips on it

    c = compare(a, a)
    diff_ms = c.head.run_medians_us[0] / 1000
    assert c.step_time.head_median_us is not None

    service_ms = history.metrics_of(a)["step_time_ms"]
    assert service_ms is not None
    for face, value in {"bmf": bmf_ms, "gate": gate.value, "diff side": diff_ms,
                        "diff step time": c.step_time.head_median_us / 1000, "service history": service_ms,
                        "registry": M.step_time_ms(a)}.items():
        assert value == pytest.approx(summary_ms, rel=0.005), face
    assert not gate.passed


def test_the_service_stores_each_metric_once_and_its_run_row_reads_it(tmp_path: Path) -> None:
    pytest.importorskip("sqlalchemy")
    pytest.importorskip("alembic")
    import sqlalchemy as sa

    from traceanalyzer.serve.store import Store, StoredFile, runs

    a = ta.analyze(slow_rank_job(tmp_path), ta.Options(cache=False, jobs=1))
    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    store.migrate()
    try:
        run_id = store.create_run("p", "main", "c1", [StoredFile("ab" * 32, "t.json", 1, "file")])
        job = store.claim()
        assert job is not None
        store.finish(job[0], run_id, None, {"verdict": M.VERDICT.of(a)}, history.metrics_of(a))
        assert "step_time_ms" not in runs.c and "gpu_idle" not in runs.c  # not a second copy on the run's row
        row = store.run(run_id)
        assert row is not None and row["step_time_ms"] == pytest.approx(12.0)
        assert row["gpu_idle"] == pytest.approx(a.summary.gpu_idle_fraction)
        assert store.history("p", "main", 10)[0]["metrics"] == history.metrics_of(a)
        (listed,), total = store.list_runs("p")
        assert total == 1 and listed["step_time_ms"] == pytest.approx(12.0)
        with store.engine.connect() as c:
            cols = {col["name"] for col in sa.inspect(c).get_columns("runs")}
        assert not cols & {"step_time_ms", "gpu_idle"}
    finally:
        store.close()


def test_an_old_database_keeps_its_runs_figures_through_the_migration(tmp_path: Path) -> None:
    """A database at migration 0002 (figures on the run's row and in run_metrics) upgrades in place: runs,
    files and jobs stay, and a figure only the row held moves to run_metrics."""
    pytest.importorskip("alembic")
    import sqlalchemy as sa
    from alembic import command
    from alembic.config import Config

    from traceanalyzer.serve import store as S

    store = S.Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    cfg = Config()
    cfg.set_main_option("script_location", str(Path(S.__file__).with_name("migrations")))
    try:
        with store.engine.begin() as conn:
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "0002")
        with store.engine.begin() as c:
            c.execute(sa.text("INSERT INTO projects (id, name, created_at) VALUES (1, 'p', 0)"))
            for n, run_id in enumerate(("r1", "r2")):
                c.execute(sa.text("INSERT INTO runs (id, project_id, branch, created_at, size_bytes, files, verdict, "
                                  "step_time_ms, gpu_idle) VALUES (:id, 1, 'main', :t, 1, 1, 'gpu_bound', 10.5, 0.25)"),
                          {"id": run_id, "t": float(n)})
                c.execute(sa.text("INSERT INTO run_files (run_id, position, sha256, name, size_bytes, kind) "
                                  "VALUES (:id, 0, :sha, 't.json', 1, 'file')"), {"id": run_id, "sha": "ab" * 32})
                c.execute(sa.text("INSERT INTO jobs (run_id, status, tries, queued_at) VALUES (:id, 'done', 1, 0)"),
                          {"id": run_id})
            # r1's figures were extracted without the step time; r2's never (the start-up backfill's job)
            c.execute(sa.text("INSERT INTO run_metrics (run_id, metric, value) VALUES ('r1', 'gpu_idle', 0.25)"))
        store.migrate()
        r1, r2 = store.run("r1"), store.run("r2")
        assert r1 is not None and r2 is not None
        assert (r1["step_time_ms"], r1["gpu_idle"], r1["status"]) == (10.5, 0.25, "done")
        assert r2["step_time_ms"] is None and store.runs_without_metrics() == ["r2"]
        assert store.files("r2")[0].sha256 == "ab" * 32
    finally:
        store.close()


def test_every_face_reads_the_registry() -> None:
    assert set(gates.METRICS) == {m.key for m in M.METRICS}
    assert {"gpu_idle", "dataloader_wait", "memcpy_share", "step_time_ms"} <= set(gates.METRICS)
    assert history.METRIC_KEYS == tuple(m.key for m in M.METRICS)
    assert set(B.MEASURES) == {m.bmf for m in M.METRICS}
    for m in M.METRICS:
        assert m.definition and m.label and m.unit in (M.MS, M.FRACTION, M.BYTES, M.PER_S)


def test_a_metric_the_run_lacks_is_none_everywhere(tmp_path: Path) -> None:
    a = ta.analyze(slow_rank_job(tmp_path), ta.Options(cache=False, jobs=1))
    assert M.value(M.BY_KEY["samples_per_s"], a) is None  # no --batch-size
    assert "samples-per-s" not in B.bmf_figures(a) and history.metrics_of(a)["samples_per_s"] is None
    (gate,) = gates.evaluate_all(gates.parse_rules(["samples_per_s<100"]), a)
    assert gate.passed and gate.value is None and "not available" in gate.detail
    assert M.peak_gpu_memory_bytes(a) is None and compare(a, a).head.peak_memory_bytes is None
