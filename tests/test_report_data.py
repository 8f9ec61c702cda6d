"""The Report's data (not HTML): headline summary, timeline tracks, chart series, diagnosis links.

Traces are built with known answers (tests/report_fixtures.py): steps of 1000 us with a
DataLoader wait over 0-300, one 50 us HtoD copy at 300 and six 80 us kernels from 360.
"""

from __future__ import annotations

import numpy as np
import orjson
import pytest
from report_fixtures import cpu_only, data_for, empty, multi_rank, report_with_counters, single_gpu

from traceanalyzer.analyses import tracks as TR
from traceanalyzer.result.build import MAX_STEP_BARS


@pytest.fixture
def single(tmp_path):
    return data_for([single_gpu(tmp_path / "one.json")])


def test_summary_figures_single_gpu(single):
    s = single["summary"]
    assert (s["ranks"], s["devices"], s["steps"]) == (1, 1, 4)
    assert s["window_us"] == 4000
    assert s["gpu_busy_us"] == 4 * (50 + 6 * 80)
    assert s["gpu_idle_fraction"] == pytest.approx(1 - 2120 / 4000)
    assert s["memcpy_share_of_busy"] == pytest.approx(200 / 2120, abs=1e-6)
    assert s["dataloader_wait_fraction"] == pytest.approx(0.3)
    # gaps >= 100 us: [0,300) and three 360 us stretches between steps; the 60 us tail is shorter
    assert s["gaps"] == 4 and s["gaps_total_us"] == 300 + 3 * 360
    assert s["samples_per_s"] is None


def test_timeline_tracks_single_gpu(single):
    tl = single["ranks"][0]["drawing"]["timeline"]
    assert tl["window_us"] == 4000
    assert tl["steps"] == {"step": [1, 2, 3, 4], "start_us": [0.0, 1000.0, 2000.0, 3000.0],
                           "dur_us": [1000.0] * 4, "total": 4}
    (dev,) = tl["devices"]
    busy = dev["busy"]
    assert dev["device"] == "cuda:0" and not busy["merged"]
    assert len(busy["start_us"]) == busy["intervals"] == 4 * 7  # one copy + six kernels per step
    assert sum(busy["covered_us"]) == 2120 and sum(busy["count"]) == 28
    assert busy["names"] and {busy["names"][i] for i in busy["name"]} <= set(busy["names"])
    assert dev["copies"]["start_us"] == [300.0, 1300.0, 2300.0, 3300.0]
    assert dev["gaps"]["start_us"] == [0.0, 940.0, 1940.0, 2940.0]
    assert dev["gaps"]["dur_us"] == [300.0, 360.0, 360.0, 360.0]
    assert dev["gaps"]["step"] == [1, 1, 2, 3]
    assert dev["gaps"]["cause"] == [None] * 4 and dev["gaps"]["total"] == 4
    lanes = {h["kind"]: h for h in tl["host"]}
    assert set(lanes) == {"dataloader"}
    assert sum(lanes["dataloader"]["covered_us"]) == 1200


def test_per_step_chart_without_and_with_diagnosis(tmp_path):
    trace = single_gpu(tmp_path / "one.json")
    chart = data_for([trace])["ranks"][0]["drawing"]["charts"]["per_step"]
    series = {s["key"]: s["values"] for s in chart["series"]}
    assert chart["step"] == [1, 2, 3, 4] and chart["omitted"] == 0
    assert series == {"compute": [480.0] * 4, "memcpy": [50.0] * 4, "idle": [470.0] * 4}
    assert chart["dataloader_wait_us"] == [300.0] * 4
    diagnosed = data_for([trace], diagnosed="real")["ranks"][0]["drawing"]["charts"]["per_step"]
    series = {s["key"]: s["values"] for s in diagnosed["series"]}
    assert list(series) == ["compute", "memcpy", "idle:dataloader", "idle:unknown"]
    # The gap before each step's copy lies under the DataLoader wait (300 us, plus the 60 us tail of
    # the previous step that belongs to the same gap); the 10 + 5 x 20 us gaps between copy and kernels
    # and the last step's 60 us tail have no host activity.
    assert series["idle:dataloader"] == [360.0, 360.0, 360.0, 300.0]
    assert series["idle:unknown"] == [110.0, 110.0, 110.0, 170.0]


def test_gap_causes_come_from_the_diagnosis_by_index(tmp_path):
    rep = data_for([single_gpu(tmp_path / "one.json")], diagnosed="real")
    (dev,) = rep["ranks"][0]["drawing"]["timeline"]["devices"]
    assert dev["gaps"]["cause"] == ["dataloader"] * 4
    (top_dev,) = rep["ranks"][0]["devices"]
    assert [g["cause"] for g in top_dev["gaps"]["top"]] == ["dataloader"] * 4
    assert rep["diagnosis"]["primary"] == "input_bound"


def test_multi_rank(tmp_path):
    rep = data_for([multi_rank(tmp_path / "job", ranks=2)])
    s = rep["summary"]
    assert (s["ranks"], s["devices"], s["steps"]) == (2, 2, 3)
    assert [r["rank"] for r in rep["ranks"]] == [0, 1]
    assert [d["device"] for r in rep["ranks"] for d in r["devices"]] == ["cuda:0", "cuda:1"]
    # rank 0 waits 200 us per 2000 us step, rank 1 400 us
    assert s["dataloader_wait_fraction"] == pytest.approx((600 + 1200) / 12000)
    lanes = {h["kind"]: h for h in rep["ranks"][0]["drawing"]["timeline"]["host"]}
    assert sum(lanes["sync"]["covered_us"]) == 3 * 300 and sum(lanes["sync"]["count"]) == 3
    assert rep["ranks"][0]["drawing"]["timeline"]["steps"]["step"] == [1, 2, 3]


def test_cpu_only_and_empty(tmp_path):
    cpu = data_for([cpu_only(tmp_path / "cpu.json")])
    assert cpu["summary"]["devices"] == 0 and cpu["summary"]["gpu_idle_fraction"] is None
    tl = cpu["ranks"][0]["drawing"]["timeline"]
    assert tl["devices"] == [] and [h["kind"] for h in tl["host"]] == ["ops"]
    assert sum(tl["host"][0]["covered_us"]) == 3 * 400
    nothing = data_for([empty(tmp_path / "empty.json")])
    assert nothing["summary"]["gpu_idle_fraction"] is None and nothing["summary"]["steps"] == 0
    assert nothing["ranks"][0]["drawing"]["timeline"]["window_us"] == 0
    assert nothing["ranks"][0]["drawing"]["charts"]["per_step"]["step"] == []


def test_coarsen_keeps_the_longest_separations_and_the_busy_total():
    rng = np.random.default_rng(7)
    starts = np.sort(rng.integers(0, 10**9, 50_000))
    ends = starts + rng.integers(1, 20_000, 50_000)
    b = TR.coarsen(starts, ends, None, 0, 2 * 10**9, 500)
    from traceanalyzer import intervals as iv

    u_start, u_end = iv.union(starts, ends)
    assert len(b.start_ns) == 500 and b.intervals == len(u_start)
    assert int(b.covered_ns.sum()) == iv.total((u_start, u_end))
    assert int(b.count.sum()) == len(starts)
    assert np.all(b.start_ns[1:] >= b.end_ns[:-1])
    # The longest separation of the union is one of the drawn separations.
    seps = u_start[1:] - u_end[:-1]
    longest = int(seps.max())
    assert longest in set((b.start_ns[1:] - b.end_ns[:-1]).tolist())


def test_tracks_are_bounded_by_the_shared_budget(tmp_path, monkeypatch):
    monkeypatch.setattr(TR, "MAX_BLOCKS_PER_TRACK", 40)
    monkeypatch.setattr(TR, "MIN_BLOCKS_PER_TRACK", 10)
    rep = data_for([single_gpu(tmp_path / "one.json", steps=30)])
    tl = rep["ranks"][0]["drawing"]["timeline"]
    busy = tl["devices"][0]["busy"]
    assert busy["merged"] and len(busy["start_us"]) == 40 and busy["intervals"] == 30 * 7
    assert sum(busy["covered_us"]) == pytest.approx(rep["ranks"][0]["devices"][0]["gpu_busy_us"])
    assert all(len(h["start_us"]) <= 40 for h in tl["host"])


def test_per_step_chart_is_bounded(tmp_path, monkeypatch):
    import traceanalyzer.result.build as B

    monkeypatch.setattr(B, "MAX_STEP_BARS", 5)
    chart = data_for([single_gpu(tmp_path / "one.json", steps=8)])["ranks"][0]["drawing"]["charts"]["per_step"]
    assert chart["step"] == [1, 2, 3, 4, 5] and chart["omitted"] == 3
    assert MAX_STEP_BARS >= 100


LARGEST = "tl_xdit_sd35/profile_trace_rank_0.json.gz"


def test_largest_corpus_trace_report_is_bounded(corpus):
    rep = data_for([corpus / LARGEST], diagnosed=True)
    blocks = sum(len(t["start_us"]) for r in rep["ranks"] for d in r["drawing"]["timeline"]["devices"]
                 for t in (d["busy"], d["copies"], d["gaps"]))
    blocks += sum(len(h["start_us"]) for r in rep["ranks"] for h in r["drawing"]["timeline"]["host"])
    assert blocks <= TR.TIMELINE_BLOCK_BUDGET
    dev = rep["ranks"][0]["drawing"]["timeline"]["devices"][0]
    assert dev["busy"]["merged"]  # 100k+ kernels were merged into drawable blocks
    assert sum(dev["busy"]["covered_us"]) == pytest.approx(rep["ranks"][0]["devices"][0]["gpu_busy_us"], rel=1e-4)
    assert len(orjson.dumps(rep)) < 3_000_000



def test_counters_in_the_window_become_a_bounded_lane(tmp_path):
    from traceanalyzer.report.html import render_html

    report = report_with_counters(tmp_path / "one.json", samples=3 * TR.MAX_COUNTER_POINTS).to_data()
    (lane,) = report["ranks"][0]["drawing"]["timeline"]["counters"]
    assert lane["device"] == "cuda:0" and lane["metric"] == "sm_util_pct"
    # samples span -1 ms .. 5 ms; those inside the 0-4 ms window are kept, then averaged down
    assert 0.6 * lane["samples"] == pytest.approx(0.4 * 3 * TR.MAX_COUNTER_POINTS, rel=0.01)
    assert len(lane["t_us"]) == TR.MAX_COUNTER_POINTS
    assert 0 <= min(lane["t_us"]) and max(lane["t_us"]) < 4000
    assert min(lane["value"]) >= 0 and max(lane["value"]) <= 100
    assert "sm_util_pct" in render_html(report_with_counters(tmp_path / "two.json", samples=30))


@pytest.mark.parametrize("name", ["tl_h100/google_owlv2-large-patch14-ensemble__1016001.json.gz", "hta_sampled_2rank"])
def test_real_diagnosis_colours_every_drawn_gap(corpus, tmp_path, name):
    """Through the CLI, as users run it: every gap on the timeline carries a diagnosis cause."""
    from click.testing import CliRunner

    from traceanalyzer.commands import main

    out = tmp_path / "r.json"
    res = CliRunner().invoke(main, ["report", str(corpus / name), "-o", str(out), "-q"])
    assert res.exit_code == 0, res.output
    rep = orjson.loads(out.read_bytes())
    causes = set(rep["ranks"][0]["diagnosis"]["idle_by_cause_us"])
    for r in rep["ranks"]:
        for dev in r["drawing"]["timeline"]["devices"]:
            assert dev["gaps"]["cause"] and all(c in causes for c in dev["gaps"]["cause"])
        steps = r["drawing"]["charts"]["per_step"]
        assert any(s["key"].startswith("idle:") for s in steps["series"])
