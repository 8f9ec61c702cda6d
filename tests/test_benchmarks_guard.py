"""benchmarks/guard.py's comparison, on fabricated measurements (nothing is timed here): a ratio worse than
the recorded one beyond the tolerance fails, a better one or one within the tolerance passes, a case with
nothing recorded is said and does not fail, a failed report fails, and --record keeps the other cases and the
targets. The recorded file itself holds the cases of a full run with their release, date, cores and ratios."""

from __future__ import annotations

import json
import sys

import pytest
from conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import guard  # noqa: E402

RECORDED = {
    "targets": {"json_1gb": {"time / orjson.loads": 0.10, "peak RSS / file size": 1.0}},
    "cases": {"json_1gb": {"release": "0.2.0 (main 9eaec00)", "commit": "9eaec00", "date": "2026-12-01",
                           "cores": 2, "file_mb": 1061,
                           "ratios": {"time / orjson.loads": {"ratio": 0.30, "value": 9.9, "baseline": 32.7},
                                      "peak RSS / file size": {"ratio": 1.12}}}},
}


def json_1gb(time_ratio: float, rss_ratio: float = 1.12, failed: bool = False) -> list[guard.Figure]:
    return [guard.Figure("json_1gb", "time / orjson.loads", 30.0 * time_ratio, 30.0, "s", 1061, failed),
            guard.Figure("json_1gb", "peak RSS / file size", 1.061 * rss_ratio, 1.061, "GB", 1061, failed)]


def judge(figures: list[guard.Figure], tolerance: float = 0.15, cores: int = 2) -> tuple[int, str]:
    rows = guard.compare(figures, RECORDED, tolerance)
    status, lines = guard.verdict(rows, RECORDED, tolerance, cores)
    return status, guard.table(rows) + "\n" + "\n".join(lines)


def test_twenty_percent_worse_fails_at_fifteen_percent_tolerance():
    status, text = judge(json_1gb(0.30 * 1.20))
    assert status == 1
    assert "| json_1gb | time / orjson.loads | 10.8 s | 30.0 s | 0.36x | 0.30x (0.2.0 (main 9eaec00)) | +20% WORSE" in text
    assert "REGRESSION: json_1gb time / orjson.loads = 0.36x against 0.30x recorded (+20%; tolerance 15%)" in text
    assert text.endswith("guard: FAIL (tolerance 15%)")


def test_worse_within_tolerance_or_better_passes():
    for ratio in (0.30 * 1.10, 0.30, 0.20):
        status, text = judge(json_1gb(ratio))
        assert status == 0, text
        assert "WORSE" not in text and "REGRESSION" not in text
    assert judge(json_1gb(0.30 * 1.20), tolerance=0.25)[0] == 0
    _, text = judge(json_1gb(0.15))
    assert "| -50% |" in text
    _, text = judge(json_1gb(0.2999))
    assert "| +0% |" in text and "-0%" not in text


def test_memory_regression_fails_too():
    status, text = judge(json_1gb(0.30, rss_ratio=1.12 * 1.3))
    assert status == 1
    assert "REGRESSION: json_1gb peak RSS / file size" in text


def test_targets_are_said_not_enforced():
    status, text = judge(json_1gb(0.30))
    assert status == 0
    assert "| <= 0.10x | no |" in text
    assert "| <= 1.00x | no |" in text
    status, text = judge(json_1gb(0.08, rss_ratio=0.9))
    assert "| <= 0.10x | yes |" in text and "| <= 1.00x | yes |" in text


def test_missing_recorded_case_is_said_and_passes():
    quick = [guard.Figure("json_100mb", "time / orjson.loads", 3.0, 3.3, "s", 105)]
    status, text = judge(quick)
    assert status == 0
    assert "| none recorded | - | - | - |" in text
    assert "nothing recorded for json_100mb (time / orjson.loads): not compared (a --quick run" in text


def test_failed_report_fails():
    status, text = judge(json_1gb(0.20, failed=True))
    assert status == 1
    assert "| FAILED |" in text
    assert "FAILED: a report of json_1gb exited with an error" in text


def test_other_core_count_is_said():
    _, text = judge(json_1gb(0.30), cores=16)
    assert "json_1gb was recorded on 2 cores, this machine has 16" in text


def test_record_replaces_measured_cases_and_keeps_the_rest():
    quick = [guard.Figure("json_100mb", "time / orjson.loads", 3.0, 4.0, "s", 105.2)]
    updated = guard.record(RECORDED, quick, "0.3.0 (main abc1234)", "abc1234", "2027-01-02", 2, "2 cores, quiet")
    assert updated["targets"] == RECORDED["targets"]
    assert updated["cases"]["json_1gb"] == RECORDED["cases"]["json_1gb"]
    entry = updated["cases"]["json_100mb"]
    assert entry["release"] == "0.3.0 (main abc1234)" and entry["date"] == "2027-01-02" and entry["file_mb"] == 105
    assert entry["ratios"]["time / orjson.loads"] == {"ratio": 0.75, "value": 3.0, "baseline": 4.0, "unit": "s"}
    rows = guard.compare(quick, updated, 0.15)
    assert rows[0].recorded == 0.75 and not rows[0].regressed
    again = guard.record(updated, json_1gb(0.25), "0.3.0 (main abc1234)", "abc1234", "2027-01-02", 2, "")
    assert again["cases"]["json_1gb"]["ratios"]["time / orjson.loads"]["ratio"] == 0.25


@pytest.mark.parametrize("mb, name", [(1024, "1gb"), (2048, "2gb"), (100, "100mb"), (10, "10mb")])
def test_size_names(mb, name):
    assert guard.size_name(mb) == name


def test_recorded_file_holds_the_full_cases():
    recorded = json.loads((ROOT / "benchmarks" / "recorded.json").read_text())
    full = guard.FULL_SIZES
    names = {f"json_{guard.size_name(full['json_mb'])}", f"gzip_{guard.size_name(full['json_mb'])}",
             f"pftrace_{guard.size_name(full['pftrace_mb'])}"}
    assert names <= set(recorded["cases"])
    for entry in recorded["cases"].values():
        assert {"release", "commit", "date", "cores", "file_mb", "ratios"} <= set(entry)
        assert all(r["ratio"] > 0 for r in entry["ratios"].values())
    assert recorded["targets"]["json_1gb"] == {"time / orjson.loads": 0.1, "peak RSS / file size": 1.0}
    assert recorded["targets"]["gzip_1gb"] == {"time / plain report": 1.3}
    for entry in recorded["cases"].values():  # each ratio is its value over its same-run baseline
        for r in entry["ratios"].values():
            if "value" in r and "baseline" in r:
                assert r["ratio"] == pytest.approx(r["value"] / r["baseline"], rel=0.02)
    assert recorded["cases"]["many_ranks_16x100mb"]["ratios"]["peak RSS / a rank file"]["ratio"] > 1


def test_recorded_file_is_written_as_record_writes_it():
    """So that `--record` changes only the lines of the cases it measured."""
    text = (ROOT / "benchmarks" / "recorded.json").read_text()
    assert guard.dump_recorded(json.loads(text)) == text
    assert '"json_1gb": {"time / orjson.loads": 0.1, "peak RSS / file size": 1.0},' in text


def _runs(wall: float, cpu: float, rss_gb: float, rc: int = 0) -> list[tuple[float, int, int, float]]:
    return [(wall, int(rss_gb * 1e9), rc, cpu)]


def test_paired_rows_fail_beyond_the_tolerance_and_are_not_recorded():
    """--baseline: this report against the previous release's in the same run; 20% slower fails at 15%,
    10% slower passes, and the paired rows never enter the recorded file."""
    slower = guard.paired("json_1gb", 1061, _runs(12.0, 11.0, 1.0), _runs(10.0, 10.0, 1.0))
    assert [f.measure for f in slower] == ["time / previous release", "CPU / previous release",
                                           "peak RSS / previous release"]
    status, text = judge(json_1gb(0.30) + slower)
    assert status == 1
    assert "| json_1gb | time / previous release | 12.0 s | 10.0 s | 1.20x | paired | +20% WORSE |" in text
    assert "REGRESSION: json_1gb time / previous release = 1.20x (tolerance 15%)" in text
    assert "CPU / previous release | 11.0 CPU s | 10.0 CPU s | 1.10x | paired | +10% |" in text
    assert "nothing recorded" not in text
    status, _ = judge(json_1gb(0.30) + guard.paired("json_1gb", 1061, _runs(11.0, 10.5, 1.0), _runs(10.0, 10.0, 1.0)))
    assert status == 0
    assert guard.paired("json_1gb", 1061, _runs(1, 1, 1), []) == []  # no --baseline: no paired rows
    written = guard.record(RECORDED, json_1gb(0.28) + slower, "next", "abc", "2026-12-02", 2, "quiet")
    assert set(written["cases"]["json_1gb"]["ratios"]) == {"time / orjson.loads", "peak RSS / file size"}
