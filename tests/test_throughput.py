"""Throughput: steps/s, step time median / p10 / p90 over steady steps, samples/s with --batch-size,
exact on traces built in code; the same step time in `diff`."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from kineto_builder import KinetoTrace

import traceanalyzer as ta
from traceanalyzer.analyses.throughput import job_step_durations, step_time_stats, throughput
from traceanalyzer.commands import main
from traceanalyzer.compare import compare
from traceanalyzer.pipeline import Options
from traceanalyzer.report.diff import render_diff_markdown, render_diff_text
from traceanalyzer.report.markdown import render_markdown
from traceanalyzer.report.text import render_text

BASE_US = 1_700_000_000_000_000


def trace(path, durations_ms, rank=None):
    """Back-to-back steps of the given lengths, each 90% covered by one launched kernel."""
    t = KinetoTrace(rank=rank)
    ts = BASE_US
    for n, ms in enumerate(durations_ms):
        dur = int(ms * 1000)
        t.step(n, ts, dur)
        t.launched(ts + 10, 5, ts + 20, int(dur * 0.9))
        ts += dur
    t.write(path)
    return path


def test_steady_steps_exclude_the_warmup_step(tmp_path):
    a = ta.analyze(trace(tmp_path / "t.json", [50, 10, 12, 14, 16]), Options(batch_size=32))
    assert a.ranks[0].diagnosis.warmup_steps == (0,)
    s = a.summary
    assert s.step_time_median_us == 13_000.0
    assert s.step_time_p10_us == 10_600.0  # 10 + 0.3 x (12 - 10) ms
    assert s.step_time_p90_us == 15_400.0  # 14 + 0.7 x (16 - 14) ms
    assert s.steps_per_s == pytest.approx(4 / 0.052, abs=1e-6)
    assert s.samples_per_s == pytest.approx(32 * 4 / 0.052, abs=1e-3)
    assert s.batch_size == 32 and a.options.batch_size == 32
    assert [r.samples_per_s for r in a.ranks[0].per_step] == [640.0, 3200.0, pytest.approx(2666.667),
                                                              pytest.approx(2285.714), 2000.0]


def test_include_warmup_keeps_every_step(tmp_path):
    a = ta.analyze(trace(tmp_path / "t.json", [50, 10, 12, 14, 16]), Options(batch_size=32, include_warmup=True))
    s = a.summary
    assert (s.step_time_median_us, s.step_time_p10_us, s.step_time_p90_us) == (14_000.0, 10_800.0, 36_400.0)
    assert s.steps_per_s == pytest.approx(5 / 0.102, abs=1e-6)
    assert s.samples_per_s == pytest.approx(32 * 5 / 0.102, abs=1e-3)


def test_without_batch_size_no_samples_per_s_but_step_time_always(tmp_path):
    a = ta.analyze(trace(tmp_path / "t.json", [10, 12, 14, 16]))
    assert a.summary.samples_per_s is None and a.summary.batch_size is None
    assert all(r.samples_per_s is None for r in a.ranks[0].per_step)
    assert a.summary.step_time_median_us == 13_000.0 and a.summary.steps_per_s == pytest.approx(4 / 0.052, abs=1e-6)


def test_job_step_is_the_slowest_rank_and_samples_count_every_rank(tmp_path):
    r0 = trace(tmp_path / "r0.json", [10, 12, 14, 16], rank=0)
    r1 = trace(tmp_path / "r1.json", [11, 11, 15, 15], rank=1)
    a = ta.analyze([r0, r1], Options(batch_size=8))
    s = a.summary
    assert s.step_time_median_us == 13_500.0  # job steps 11, 12, 15, 16 ms
    assert s.steps_per_s == pytest.approx(4 / 0.054, abs=1e-6)
    assert s.samples_per_s == pytest.approx(8 * 2 * 4 / 0.054, abs=1e-3)


def test_functions_on_plain_numbers():
    steps, dur = job_step_durations([{0: 5.0, 1: 10.0, 2: 20.0}, {1: 12.0, 2: 18.0}, {}], exclude=[2])
    assert steps == [1] and dur.tolist() == [12.0]
    assert step_time_stats(np.zeros(0)) == (None, None, None)
    t = throughput([{0: 1e6, 1: 3e6}], batch_size=10)
    assert (t.steps, t.steps_per_s, t.samples_per_s, t.step_time_median_us) == (2, 0.5, 5.0, 2e6)
    assert throughput([]).steps_per_s is None


def test_every_format_shows_throughput(tmp_path):
    a = ta.analyze(trace(tmp_path / "t.json", [50, 10, 12, 14, 16]), Options(batch_size=32))
    md = render_markdown(a)
    assert "**2461.5** samples/s" in md and "median step **13.0 ms**" in md and "**76.92** steps/s" in md
    text = render_text(a)
    assert "median step 13.0 ms" in text and "2,461.5 samples/s (batch 32)" in text
    html = a.to_html()
    assert "2461.5" in html and "batch 32 per rank per step" in html and "<th>samples/s</th>" in html
    res = CliRunner().invoke(main, ["report", str(tmp_path / "t.json"), "--batch-size", "32", "--format", "json",
                                    "-o", "-", "-q"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["summary"]["samples_per_s"] == pytest.approx(2461.538, abs=1e-3) and doc["options"]["batch_size"] == 32
    bad = CliRunner().invoke(main, ["report", str(tmp_path / "t.json"), "--batch-size", "0", "-o", "-", "-q"])
    assert bad.exit_code != 0


def test_diff_measures_step_time_like_the_report_and_compares_samples_per_s(tmp_path):
    base = ta.analyze(trace(tmp_path / "b.json", [50, 10, 12, 14, 16]), Options(batch_size=32))
    head = ta.analyze(trace(tmp_path / "h.json", [100, 20, 24, 28, 32]), Options(batch_size=64))
    c = compare(base, head)
    assert c.step_time.base_median_us == base.summary.step_time_median_us == 13_000.0
    assert (c.step_time.base_p10_us, c.step_time.base_p90_us) == (base.summary.step_time_p10_us,
                                                                  base.summary.step_time_p90_us)
    assert c.step_time.base_steps == 4  # the warm-up step is left out on both sides
    assert c.base.samples_per_s == base.summary.samples_per_s and c.head.samples_per_s == head.summary.samples_per_s
    assert c.head.samples_per_s == pytest.approx(c.base.samples_per_s)  # twice the batch, twice the step
    assert "| samples/s (batch 32 / 64) | 2,461.5 | 2,461.5 | +0.0% |" in render_diff_markdown(c)
    assert "samples/s 2,461.5 -> 2,461.5 (+0.0%)" in render_diff_text(c)
