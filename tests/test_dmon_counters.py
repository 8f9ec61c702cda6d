"""Figures from nvidia-smi counters, alone and with a trace, through the library and the CLI."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import SAMPLES
from dmon_builder import S, busy_trace, dmon_text, sample_times, utilisation
from timelines import load_paths, trace_clock, trace_window

from traceanalyzer.align import AlignOptions, align_logs, place_counters
from traceanalyzer.analyses.counters import counter_figures, zero_runs
from traceanalyzer.commands import main
from traceanalyzer.formats import ReadOptions, load_counter_logs, read_file

CRAFTED = SAMPLES / "dmon" / "idle_runs.log"
ZONE, SKEW_NS = "Asia/Kolkata", 3_400_000_000


pytestmark = pytest.mark.usefixtures("machine_in_new_york")


def report_json(args: list[str]) -> dict:
    res = CliRunner().invoke(main, ["report", *args, "--format", "json", "-o", "-", "-q"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_crafted_log_is_what_its_script_writes(tmp_path):
    subprocess.run([sys.executable, str(SAMPLES / "dmon" / "make_dmon_samples.py"), str(tmp_path)], check=True)
    assert (tmp_path / "idle_runs.log").read_bytes() == CRAFTED.read_bytes()


def test_dmon_only_report_names_the_longest_zero_run():
    doc = report_json([str(CRAFTED)])
    assert doc["ranks"] == []
    gpu0, gpu1 = doc["counters"]
    z = gpu0["zero_util_runs"]
    assert (z["runs"], z["total_samples"], z["longest_samples"], z["longest_s"]) == (4, 22, 12, 12.0)
    assert z["longest_first_sample"] == "2024-01-04 13:00:12.000 (local)"
    assert z["longest_last_sample"] == "2024-01-04 13:00:23.000 (local)"
    assert z["longest_start_s"] == 12.0
    z1 = gpu1["zero_util_runs"]  # the '-' sample breaks GPU 1's idle stretch in two
    assert (z1["runs"], z1["longest_samples"], z1["longest_start_s"]) == (2, 29, 11.0)
    assert gpu1["metrics"]["sm_util_pct"]["samples"] == 39
    sm = gpu0["metrics"]["sm_util_pct"]
    assert sm["mean"] == pytest.approx((5 * 80 + 4 * 60 + 6 * 90 + 3 * 70) / 40, abs=1e-3)
    assert sm["window_samples"] == 0 and sm["window_mean"] is None
    assert gpu0["metrics"]["power_w"]["max"] == 250
    assert gpu0["period_s"] == 1.0 and gpu0["samples"] == 40
    assert gpu0["first_sample"] == "2024-01-04 13:00:00.000 (local)"
    assert gpu0["cross_check"] is None and gpu0["offset_s"] is None
    assert len(gpu0["utilisation"]) == 40 and gpu0["utilisation"][12] == {"start_s": 12.0, "sm_util_pct": 0.0}
    assert doc["counter_logs"][0]["clock"] == "wall" and doc["counter_logs"][0]["offset_s"] is None


def test_dmon_only_text_summary_and_markdown():
    res = CliRunner().invoke(main, ["report", str(CRAFTED), "--format", "md", "-o", "-"])
    assert res.exit_code == 0
    assert "longest 12 samples = 12.00 s, from 12.00 s into the log" in " ".join(res.stderr.split())
    assert "| 0 | 34.8% | n/a | 4 | 12.00 s from +12.00 s | n/a |" in res.stdout


def test_zero_runs_break_on_missing_values_and_time_gaps():
    ts = np.array([0, 1, 2, 3, 10, 11, 12], dtype=np.int64) * S
    values = np.array([0, 0, np.nan, 0, 0, 0, 5], dtype=float)
    z = zero_runs(values, ts, S)
    assert (z.runs, z.total_samples, z.longest_samples) == (3, 5, 2)
    assert (z.longest_first_ns, z.longest_last_ns) == (0, S)  # first of the equally long runs
    assert zero_runs(np.array([3.0, 4.0]), ts[:2], S).runs == 0


@pytest.fixture
def aligned(tmp_path):
    trace = busy_trace(tmp_path / "trace.json", seconds=90)
    ends = sample_times(trace, 30, 30, 90)
    util = utilisation(trace, ends)
    return tmp_path, trace, ends, util


def test_figures_inside_and_outside_the_trace_window(aligned):
    tmp_path, trace, ends, util = aligned
    (tmp_path / "gpu.log").write_text(dmon_text(ends, util, ZONE, SKEW_NS))
    logs = load_counter_logs([tmp_path / "gpu.log"], ReadOptions())
    tl = load_paths([trace.path])
    clock = trace_clock(tl)
    assert logs is not None
    (a,) = align_logs(clock, logs, AlignOptions())
    (dev,) = counter_figures(place_counters(logs, (a,)).counters, trace_window(tl), clock.busy)
    sm = next(m for m in dev.metrics if m.metric == "sm_util_pct")
    assert sm.outside_mean == 0 and sm.outside_samples >= 55
    inside = (ends - S >= trace.t0_ns) & (ends <= trace.t0_ns + 90 * S)
    assert sm.window_samples == int(inside.sum())
    assert sm.window_mean == pytest.approx(util[inside].mean(), abs=1.5)
    cc = dev.cross_check
    assert cc is not None and not cc.disagrees and abs(cc.difference_pct) < 2
    power = next(m for m in dev.metrics if m.metric == "power_w")
    assert power.outside_mean == 60 and power.window_mean > 60


def test_another_process_on_the_gpu_fails_the_cross_check(aligned):
    tmp_path, trace, ends, util = aligned
    busier = np.minimum(util + 40, 100)  # something else keeps the GPU busy too
    (tmp_path / "gpu.log").write_text(dmon_text(ends, busier, ZONE, SKEW_NS))
    doc = report_json([str(trace.path), "--dmon", str(tmp_path / "gpu.log"), "--dmon-tz", ZONE,
                       "--dmon-offset=-3.4s"])
    cc = doc["ranks"][0]["devices"][0]["counters"]["cross_check"]
    assert cc["disagrees"] and cc["difference_pct"] > 15
    assert any("another process on the GPU" in w for w in doc["warnings"])


def test_report_puts_counters_on_the_trace_device_with_offset_and_fit(aligned):
    tmp_path, trace, ends, util = aligned
    (tmp_path / "gpu.log").write_text(dmon_text(ends, util, ZONE, SKEW_NS))
    doc = report_json([str(trace.path)])  # the log beside the trace is found
    counters = doc["ranks"][0]["devices"][0]["counters"]
    expected = -(5 * 3600 + 1800) - 3.4
    assert counters["offset_method"] == "searched" and abs(counters["offset_s"] - expected) <= 1.0
    assert counters["fit"]["correlation"] > 0.9 and counters["fit"]["ambiguous"] is False
    assert counters["metrics"]["sm_util_pct"]["window_mean"] > 0
    log = doc["counter_logs"][0]
    assert log["zone"] == "UTC+05:30" and log["offset_s"] == counters["offset_s"]
    assert any("found beside the trace" in w for w in doc["warnings"])
    given = report_json([str(trace.path), "--dmon", str(tmp_path / "gpu.log"), "--dmon-tz", "+05:30",
                         "--dmon-offset", "-3.4s"])
    c = given["ranks"][0]["devices"][0]["counters"]
    assert c["offset_method"] == "given" and c["offset_s"] == pytest.approx(expected)


def test_log_without_times_uses_interval_and_start(tmp_path):
    log = tmp_path / "gpu.log"
    log.write_text("# gpu sm\n# Idx %\n 0 0\n 0 0\n 0 50\n")
    doc = report_json([str(log), "--dmon-interval", "15s", "--dmon-start", "2024-01-04 13:00:00"])
    d = doc["counters"][0]
    assert d["period_s"] == 15 and d["last_sample"] == "2024-01-04 13:00:30.000 (local)"
    assert d["zero_util_runs"]["longest_s"] == 30


def test_bad_dmon_options_are_one_line_usage_errors(tmp_path):
    for args, text in ((["--dmon-gpu", "1:0"], "DMON_INDEX=DEVICE"), (["--dmon-tz", "Mars/Base"], "time zone"),
                       (["--dmon-offset", "2"], "unit"), (["--dmon-start", "soon"], "date and time")):
        res = CliRunner().invoke(main, ["report", str(CRAFTED), *args])
        assert res.exit_code == 2 and text in res.output, args
    res = CliRunner().invoke(main, ["report", str(tmp_path / "none.log"), "-o", "-"])
    assert res.exit_code == 2


def test_corpus_log_report(corpus):
    path = corpus / "smi_csv_h100nvl_truncated" / "nvidia-smi.log"
    doc = report_json([str(path)])
    assert len(doc["inputs"][0]["warnings"]) == 1
    assert doc["counters"][0]["samples"] == 104
    assert read_file(path, ReadOptions()).sources[0].events_kept == 104


def test_documented_thresholds_are_the_code_constants():
    from traceanalyzer import align as A
    from traceanalyzer.analyses import counters as C
    from traceanalyzer.result.definitions import FIGURES

    text = FIGURES["counter_alignment"]
    assert f"r >= {A.MIN_FIT_CORRELATION}" in text and f"by {A.AMBIGUITY_MARGIN}" in text
    assert f"{A.RUNNER_UP_EXCLUSION_NS // S} s away" in text and f"{A.MIN_OVERLAP_SAMPLES} samples" in text
    assert f"{A.FINE_RANGE_NS // S} s of clock skew" in text and f"{A.ZONE_STEP_NS // (60 * S)}-minute" in text
    cc = FIGURES["counter_cross_check"]
    assert f"{C.CROSS_CHECK_MARGIN_PCT:g} percentage points" in cc and f"{C.CROSS_CHECK_MIN_SAMPLES} samples" in cc
    assert "more than two periods" in FIGURES["zero_util_runs"] and C.RUN_BREAK_PERIODS == 2


def test_html_report_shows_the_logs_escaped(tmp_path):
    hostile = tmp_path / "<b>gpu<i>.log"
    hostile.write_bytes(CRAFTED.read_bytes())
    out = tmp_path / "r.html"
    res = CliRunner().invoke(main, ["report", str(hostile), "-o", str(out), "-q"])
    assert res.exit_code == 0, res.output
    html = out.read_text()
    assert "<h2>nvidia-smi logs</h2>" in html and "<b>gpu" not in html and "&lt;b&gt;gpu&lt;i&gt;.log" in html
