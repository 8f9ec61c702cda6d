"""Input-bound, split: CPU-bound vs storage-bound input pipelines from host logs during DataLoader
waits, on scenarios built in code with known answers and on the real runs in sample_traces/glances/."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from conftest import SAMPLES
from glances_builder import BASE_S, glances4_csv, input_bound_trace

import traceanalyzer as ta
from traceanalyzer.analyses.host_logs import WaitFigures
from traceanalyzer.commands import main
from traceanalyzer.diagnosis import input_split as S
from traceanalyzer.diagnosis.thresholds import (
    INPUT_CPU_SATURATED_PCT,
    INPUT_DISK_READ_BYTES_PER_S,
    INPUT_IOWAIT_PCT,
)

TIMES = [BASE_S + k for k in range(1, 11)]  # one sample per 1 s step, each covering 0.8 s of wait


def _run(tmp_path, user, system, iowait, read=None, wait_us=800_000, times=TIMES):
    trace = input_bound_trace(tmp_path / "t.json", wait_us=wait_us)
    n = len(times)
    log = glances4_csv(tmp_path / "g.csv", times, [user] * n, [system] * n, [iowait] * n,
                       None if read is None else [read] * n)
    return ta.analyze([trace, log])


def _rank(a):
    return a.ranks[0].diagnosis


def _input_finding(a):
    return next(f for f in _rank(a).findings if f.cause == "dataloader")


def test_saturated_cpu_during_the_waits_is_cpu_bound(tmp_path):
    a = _run(tmp_path, 80.0, 10.0, 0.5)
    assert _rank(a).primary == "input_bound" and _rank(a).input_split == "cpu"
    f = _input_finding(a)
    assert any("CPU user+system 90% of all cores" in e and "CPU-bound" in e for e in f.evidence)
    assert f.advice[: len(S.ADVICE["cpu"])] == S.ADVICE["cpu"]
    assert a.diagnosis.findings == _rank(a).findings  # the job's findings are the rank's, split included


def test_idle_cpu_waiting_on_io_is_storage_bound(tmp_path):
    a = _run(tmp_path, 4.0, 6.0, 22.0, read=30e6)
    assert _rank(a).input_split == "storage"
    f = _input_finding(a)
    assert any("iowait 22.0%" in e and "disk reads 30.0 MB/s" in e and "storage-bound" in e for e in f.evidence)
    assert f.advice[0] == S.ADVICE["storage"][0]


def test_fast_disk_reads_with_cpu_headroom_are_storage_bound(tmp_path):
    assert _rank(_run(tmp_path, 30.0, 10.0, 0.0, read=INPUT_DISK_READ_BYTES_PER_S + 1)).input_split == "storage"


def test_neither_is_unknown(tmp_path):
    a = _run(tmp_path, 40.0, 10.0, 1.0, read=1e6)
    assert _rank(a).input_split == "unknown"
    assert any("neither a saturated CPU nor storage waits" in e for e in _input_finding(a).evidence)


def test_without_host_logs_the_finding_names_the_log_to_take(tmp_path):
    a = ta.analyze(input_bound_trace(tmp_path / "t.json"))
    assert _rank(a).input_split == "unknown"
    assert S.NO_LOG in _input_finding(a).evidence


def test_a_log_that_misses_most_waits_cannot_split(tmp_path):
    a = _run(tmp_path, 95.0, 4.0, 0.0, times=TIMES[:3])  # covers 3 of 10 waits
    assert _rank(a).input_split == "unknown"
    assert any("covers 30% of the DataLoader wait time" in e for e in _input_finding(a).evidence)


def test_a_rank_that_is_not_input_bound_gets_no_split(tmp_path):
    a = _run(tmp_path, 95.0, 4.0, 0.0, wait_us=0)
    assert _rank(a).primary != "input_bound" and _rank(a).input_split is None


@pytest.mark.parametrize(("means", "split"), [
    ({"cpu_user_pct": INPUT_CPU_SATURATED_PCT, "cpu_iowait_pct": 0.0}, "cpu"),
    ({"cpu_user_pct": INPUT_CPU_SATURATED_PCT - 0.1, "cpu_iowait_pct": INPUT_IOWAIT_PCT}, "storage"),
    ({"cpu_user_pct": 50.0, "cpu_iowait_pct": INPUT_IOWAIT_PCT - 0.1}, "unknown"),
    ({"cpu_total_pct": 99.0}, "cpu"),  # no user/system columns: the total stands in
    ({}, "unknown"),
])
def test_classify_at_the_thresholds(means, split):
    assert S.classify(WaitFigures(5, 4 * 10**9, 5 * 10**9, means))[0] == split


def test_classify_needs_samples_and_coverage():
    saturated = {"cpu_user_pct": 99.0}
    assert S.classify(WaitFigures(2, 5 * 10**9, 5 * 10**9, saturated))[0] == "unknown"
    assert S.classify(WaitFigures(5, 2 * 10**9, 5 * 10**9, saturated))[0] == "unknown"
    assert S.classify(WaitFigures(0, 0, 0, {}))[0] == "unknown"


REAL = SAMPLES / "glances"


@pytest.mark.parametrize(("folder", "name"), [(REAL, "cpu_aug"), (REAL, "small_files"), (REAL / "v3", "cpu_aug"),
                                              (REAL / "v3", "small_files")],
                         ids=lambda x: getattr(x, "name", x))
def test_real_runs_split_as_their_loops_were_built(folder, name):
    expected = json.loads((folder / f"{name}.expected.json").read_text())
    res = CliRunner().invoke(main, ["report", str(folder / f"{name}.trace.json"), str(folder / f"{name}.csv"),
                                    "--format", "json", "-o", "-", "-q"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    r = doc["ranks"][0]["diagnosis"]
    assert r["primary"] == "input_bound"
    assert r["input_split"] == expected["expected_split"]
    assert doc["host_logs"][0]["wait_covered_fraction"] > 0.5
    assert doc["ranks"][0]["dataloader_wait_fraction"] == pytest.approx(expected["wait_fraction"], abs=0.02)
