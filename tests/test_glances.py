"""glances exports: the reader on every real layout produced here, detection by content, the host log
on the trace's clock, wait-weighted means, malformed rows counted."""

from __future__ import annotations

import csv
import json
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from conftest import SAMPLES
from glances_builder import BASE_S, glances3_csv, glances4_csv, input_bound_trace
from timelines import load_paths

import traceanalyzer as ta
from traceanalyzer import timeline as T
from traceanalyzer.align import host_period_ns
from traceanalyzer.commands import main
from traceanalyzer.errors import InputError
from traceanalyzer.formats import ReadOptions, is_counter_log, load_host_logs
from traceanalyzer.formats import glances as G
from traceanalyzer.pipeline import Options

REAL = SAMPLES / "glances"
REAL_CSV = [REAL / "cpu_aug.csv", REAL / "small_files.csv", REAL / "v3" / "cpu_aug.csv", REAL / "v3" / "small_files.csv"]

pytestmark = pytest.mark.usefixtures("machine_in_new_york")


def _read(path):
    """The reader's Timeline seen as one log: its source, sample times, metrics and host facts."""
    tl = G.read(path, path.read_bytes())
    assert len(tl.sources) == 1 and len(tl.host_logs) == 1 and not tl.ranks and not len(tl.events)
    ts, metrics = tl.host_samples(0)
    info = tl.host_logs[0]
    return SimpleNamespace(source=tl.sources[0], ts_ns=ts, metrics=metrics, cores=info.cores, disks=info.disks,
                           interfaces=info.interfaces, period_ns=host_period_ns(ts))


def _plain_rows(path):
    """The reference: the rows Python's csv module reads whole (as many values as the header)."""
    with open(path, newline="") as fh:
        rows = list(csv.reader(fh))
    head = rows[0]
    return head, [dict(zip(head, r)) for r in rows[1:] if len(r) == len(head)], len(rows) - 1


def _col(rows, *names):
    for n in names:
        if n in rows[0]:
            return np.array([float(r[n]) for r in rows])
    raise KeyError(names)


@pytest.mark.parametrize("path", REAL_CSV, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_real_csv_exports_read_like_a_plain_csv_reader(path):
    head, rows, total = _plain_rows(path)
    log = _read(path)
    assert G.sniff(path.read_bytes()[:65536]) and not is_counter_log(path)
    assert log.source.format == G.FORMAT_CSV
    assert log.source.clock == ("epoch" if "now.iso" in head else "wall")
    assert log.source.events_kept == len(rows) and log.source.events_read == total
    assert log.cores == 2 and log.disks == ("vda",)  # zram0 and the loop devices left out
    for metric, names in (("cpu_user_pct", ("cpu.user", "cpu_user")), ("cpu_iowait_pct", ("cpu.iowait", "cpu_iowait")),
                          ("load_1m", ("load.min1", "load_min1")), ("mem_used_pct", ("mem.percent", "mem_percent"))):
        assert log.metrics[metric] == pytest.approx(_col(rows, *names))
    if "now.iso" in head:  # glances 4: its own rate
        assert log.metrics["disk_read_bytes_per_s"] == pytest.approx(_col(rows, "diskio.vda.read_bytes_rate_per_sec"))
    else:  # glances 3: bytes since the last refresh / its length
        ref = _col(rows, "diskio_vda_read_bytes") / _col(rows, "diskio_vda_time_since_update")
        assert log.metrics["disk_read_bytes_per_s"] == pytest.approx(ref)
    assert np.all(np.diff(log.ts_ns) > 0)


def test_glances3_default_plugins_rows_that_do_not_match_the_header_are_dropped_and_counted():
    path = REAL / "v3_default_plugins.csv"
    head, rows, total = _plain_rows(path)
    log = _read(path)
    assert total - len(rows) > 0
    assert log.source.not_kept == {"wrong_value_count": total - len(rows)}
    assert log.source.events_kept == len(rows) and log.source.events_read == total
    assert any("glances 3 writes the CSV header once" in w for w in log.source.warnings)
    assert log.metrics["cpu_user_pct"] == pytest.approx(_col(rows, "cpu_user"))


@pytest.mark.parametrize("path", [REAL / "cpu_aug.json", REAL / "small_files.json"], ids=lambda p: p.name)
def test_real_glances4_json_export_is_its_latest_sample(path):
    doc = json.loads(path.read_text().splitlines()[0])
    log = _read(path)
    assert log.source.format == G.FORMAT_JSON and log.source.clock == "epoch" and len(log.ts_ns) == 1
    assert log.metrics["cpu_user_pct"][0] == doc["cpu"]["user"]
    assert log.metrics["disk_read_bytes_per_s"][0] == doc["diskio"]["vda.read_bytes_rate_per_sec"]
    assert any("one sample only" in w for w in log.source.warnings)


def test_real_glances3_json_export_has_no_time_and_says_so():
    path = REAL / "v3" / "cpu_aug.json"
    assert G.sniff(path.read_bytes()[:65536])
    with pytest.raises(InputError, match="without sample times"):
        _read(path)


def test_sniff_accepts_only_glances():
    others = [SAMPLES / "basic.json", SAMPLES / "dmon" / "idle_runs.log"]
    assert not any(G.sniff(p.read_bytes()[:65536]) for p in others)
    assert not G.sniff(b"timestamp, index, utilization.gpu [%]\n2024/01/01 00:00:00.000, 0, 5 %\n")
    assert G.sniff(b"timestamp,cpu_total,cpu_user\n")
    assert G.sniff(b'{"cpu": {"total": 3.0, "user": 1.0}, "load": {}}\n')


def test_built_glances4_layout_figures(tmp_path):
    t = [BASE_S + k for k in range(1, 6)]
    log = _read(glances4_csv(tmp_path / "g4.csv", t, [10, 20, 30, 40, 50], [5] * 5, [1] * 5, [1e6, 2e6, 3e6, 4e6, 5e6]))
    assert log.source.clock == "epoch"
    assert log.ts_ns.tolist() == [s * 10**9 for s in t]  # now.iso, not the export's timestamp a second later
    assert log.disks == ("sda",) and log.interfaces == ("eth0",)
    assert log.metrics["disk_read_bytes_per_s"].tolist() == [1e6, 2e6, 3e6, 4e6, 5e6]  # sda1, loop0 not added
    assert log.metrics["net_rx_bytes_per_s"].tolist() == [2000.0] * 5  # lo left out
    assert log.metrics["disk_write_bytes_per_s"].tolist() == [1000.0] * 5
    assert log.cores == 8 and log.period_ns == 10**9


def test_built_glances3_layout_rates_from_bytes_since_the_last_refresh(tmp_path):
    t = [BASE_S + 2 * k for k in range(4)]
    log = _read(glances3_csv(tmp_path / "g3.csv", t, [1, 2, 3, 4], [1] * 4, [30] * 4, [8e6, 4e6, 2e6, 0], since_s=2.0))
    assert log.source.clock == "wall" and log.disks == ("nvme0n1",)  # nvme0n1p2 is its partition
    assert log.metrics["disk_read_bytes_per_s"].tolist() == [4e6, 2e6, 1e6, 0.0]
    assert log.metrics["net_rx_bytes_per_s"].tolist() == [1500.0] * 4  # rx / 2 s, not the cumulative counter
    assert log.metrics["swap_used_pct"].tolist() == [1.0] * 4


def test_malformed_rows_counted(tmp_path):
    path = glances3_csv(tmp_path / "g3.csv", [BASE_S + k for k in range(5)], [1] * 5, [1] * 5, [1] * 5)
    lines = path.read_text().splitlines()
    lines[2] = lines[2].rsplit(",", 3)[0]  # a short row
    lines[3] = lines[3].replace(",30.5,", ",lots,")  # a value that is no number
    text = "\n".join(lines) + "\n" + lines[4][:25]  # a last row cut off mid-write
    path.write_text(text)
    log = _read(path)
    assert log.source.not_kept == {"wrong_value_count": 1, "truncated_row": 1}
    assert log.source.events_read == 6 and log.source.events_kept == 4
    assert np.isnan(log.metrics["mem_used_pct"]).sum() == 1
    assert any("not numbers" in w for w in log.source.warnings)


def test_a_glances_file_without_cpu_figures_is_an_input_error(tmp_path):
    path = tmp_path / "g.csv"
    path.write_text("timestamp,load_min1,mem_percent\n2024-01-01 00:00:00,1,2\n")
    with pytest.raises(InputError, match="without CPU figures"):
        _read(path)


def test_wall_clock_log_is_put_on_the_trace_clock_with_the_zone_and_skew(tmp_path):
    trace = input_bound_trace(tmp_path / "t.json")
    t = [BASE_S + k for k in range(1, 11)]
    g3 = glances3_csv(tmp_path / "g3.csv", t, [90] * 10, [5] * 10, [0] * 10, utc_offset_s=5 * 3600 + 1800)
    a = ta.analyze([trace, g3], Options(dmon_tz="Asia/Kolkata"))
    h = a.host_logs[0]
    assert h.offset_s == -(5 * 3600 + 1800) and h.offset_method == "clock" and h.clock == "wall"
    assert h.wait_samples == 10 and h.wait_covered_fraction == 1.0
    skewed = ta.analyze([trace], Options(dmon_tz="Asia/Kolkata", dmon_offset_ns=2 * 10**9, host_logs=(g3,)))
    assert skewed.host_logs[0].offset_s == -(5 * 3600 + 1800) + 2 and skewed.host_logs[0].offset_method == "given"
    # this machine's zone (New York) is wrong for the log: it misses the trace, and the report says so
    missed = ta.analyze([trace, g3])
    assert missed.host_logs[0].wait_samples == 0
    assert any("does not overlap the trace" in w for w in missed.host_logs[0].warnings)


def test_epoch_log_ignores_the_zone_and_wait_means_are_weighted(tmp_path):
    # steps k = 0..9 of 1 s from BASE_S; waits of 800 ms in steps 0-4 only
    trace = input_bound_trace(tmp_path / "t.json", wait_us=[800_000] * 5 + [0] * 5)
    # samples at BASE_S + 0.5 + k describe [k - 0.5, k + 0.5): sample 0 covers 0.5 s of wait 0,
    # samples 1-4 cover 0.3 + 0.5 = 0.8 s, sample 5 covers 0.3 s, the rest none.
    t = [BASE_S + k + 0.5 for k in range(10)]
    user = [10, 20, 30, 40, 50, 60, 70, 80, 90, 99]
    g4 = glances4_csv(tmp_path / "g4.csv", t, user, [1] * 10, [2] * 10)
    a = ta.analyze([trace, g4], Options(dmon_tz="Asia/Tokyo"))
    h = a.host_logs[0]
    assert h.offset_s == 0.0 and h.clock == "epoch"
    w = np.array([0.5, 0.8, 0.8, 0.8, 0.8, 0.3])
    assert h.during_dataloader_wait["cpu_user_pct"] == pytest.approx(float(np.average(user[:6], weights=w)), abs=1e-3)
    assert h.during_dataloader_wait["cpu_iowait_pct"] == 2.0
    assert h.wait_samples == 6 and h.wait_covered_fraction == 1.0
    assert h.metrics["cpu_user_pct"].samples == 10


def test_host_log_given_by_option_or_among_inputs_is_the_same_and_survives_json(tmp_path):
    trace = input_bound_trace(tmp_path / "t.json")
    g4 = glances4_csv(tmp_path / "host.txt", [BASE_S + k for k in range(1, 11)], [95] * 10, [3] * 10, [0] * 10)
    among = ta.analyze([trace, g4])
    given = ta.analyze([trace], Options(host_logs=(g4,)))
    assert among.host_logs == given.host_logs and len(among.inputs) == 1  # not read as a trace
    assert ta.load(among.save(tmp_path / "r.json")).host_logs == among.host_logs
    assert ta.load(among.save(tmp_path / "r.json")).drawing == among.drawing
    series = among.drawing.host_logs[among.host_logs[0].path]
    assert series["t_s"][0] == 1.0 and series["cpu_user_pct"] == [95.0] * 10
    assert series["waits"]["start_s"][:2] == [0.0, 1.0] and series["waits"]["end_s"][0] == 0.8


def test_cli_host_log_option_and_a_missing_file(tmp_path):
    trace = input_bound_trace(tmp_path / "t.json")
    g4 = glances4_csv(tmp_path / "g.csv", [BASE_S + k for k in range(1, 11)], [95] * 10, [3] * 10, [0] * 10)
    res = CliRunner().invoke(main, ["report", str(trace), "--host-log", str(g4), "--format", "json", "-o", "-", "-q"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["host_logs"][0]["samples_kept"] == 10
    res = CliRunner().invoke(main, ["report", str(trace), "--host-log", str(tmp_path / "nope.csv"), "-o", "-", "-q"])
    assert res.exit_code != 0 and "no such file" in res.output
    res = CliRunner().invoke(main, ["report", str(trace), "--host-log", str(trace), "-o", "-", "-q"])
    assert res.exit_code != 0 and "not a glances export" in res.output


# --- the host table in the one model ------------------------------------------------------------------
def test_reader_fills_the_timelines_host_table_exactly(tmp_path):
    t = [BASE_S + 1, BASE_S + 2]
    path = glances4_csv(tmp_path / "g4.csv", t, [10, 20], [5, 6], [1, 2], [1e6, 2e6], cores=8)
    tl = G.read(path, path.read_bytes())
    assert not len(tl.events) and not len(tl.counters) and not len(tl.memory) and not tl.ranks
    src = tl.sources[0]
    assert (src.path, src.format, src.clock, src.events_read, src.events_kept) == (str(path), G.FORMAT_CSV, "epoch", 2, 2)
    assert src.not_kept == {} and src.warnings == []
    assert tl.host_logs == [T.HostLogInfo(source=0, cores=8, disks=("sda",), interfaces=("eth0",))]
    t1, t2 = (s * 10**9 for s in t)
    expected = [(metric, v1, v2) for metric, v1, v2 in [
        ("cpu_user_pct", 10.0, 20.0), ("cpu_system_pct", 5.0, 6.0), ("cpu_iowait_pct", 1.0, 2.0),
        ("cpu_idle_pct", 84.0, 72.0), ("cpu_total_pct", 16.0, 28.0), ("load_1m", 1.5, 1.5),
        ("mem_used_pct", 40.0, 40.0), ("disk_read_bytes_per_s", 1e6, 2e6), ("disk_write_bytes_per_s", 1000.0, 1000.0),
        ("net_rx_bytes_per_s", 2000.0, 2000.0), ("net_tx_bytes_per_s", 100.0, 100.0)]]
    rows = [(m, t1, v1) for m, v1, _ in expected] + [(m, t2, v2) for m, _, v2 in expected]
    hm = tl.host_metrics
    assert list(hm.columns) == list(T.HOST_METRIC_COLUMNS) and str(hm["ts_ns"].dtype) == "int64"
    got = sorted(zip(hm["metric"].astype(str), hm["ts_ns"].tolist(), hm["value"].tolist(), hm["source"].tolist()))
    assert got == sorted((m, ts, v, 0) for m, ts, v in rows)


def test_reader_metrics_are_the_timelines_host_metrics_in_order():
    assert G.METRICS == tuple(T.HOST_METRICS)


def _host_table(**changes):
    cols = {"ts_ns": np.array([1, 2], dtype=np.int64), "metric": ["cpu_user_pct", "cpu_user_pct"],
            "value": [1.0, 2.0], "source": [0, 0]}
    return T.host_metrics_frame({**cols, **changes})


def test_timeline_rejects_a_host_table_that_breaks_its_contract():
    good = _host_table()
    T.Timeline(host_metrics=good, sources=[T.Source("h.csv", G.FORMAT_CSV)], host_logs=[T.HostLogInfo(0)]).validate()
    with pytest.raises(T.TimelineError, match="ts_ns"):
        T.Timeline(host_metrics=good.astype({"ts_ns": "float64"}))  # checked when the Timeline is built
    with pytest.raises(T.TimelineError, match="columns"):
        T.Timeline(host_metrics=good.rename(columns={"value": "value_pct"}))
    with pytest.raises(T.TimelineError, match="HOST_METRICS"):
        T.Timeline(host_metrics=good.assign(metric=pd.Categorical(["cpu_user", "cpu_user"])))
    with pytest.raises(T.TimelineError, match="host_logs does not describe"):
        T.Timeline(host_metrics=good, sources=[T.Source("h.csv", G.FORMAT_CSV)]).validate()
    with pytest.raises(T.TimelineError, match="outside Timeline.sources"):
        T.Timeline(host_metrics=good, host_logs=[T.HostLogInfo(0)]).validate()


def test_host_logs_renumbered_when_timelines_are_joined(tmp_path):
    trace = load_paths([input_bound_trace(tmp_path / "t.json")])
    g4 = glances4_csv(tmp_path / "g4.csv", [BASE_S + 1, BASE_S + 2], [10, 20], [5, 6], [1, 2])
    g3 = glances3_csv(tmp_path / "g3.csv", [BASE_S + 1, BASE_S + 3, BASE_S + 5], [1, 2, 3], [1] * 3, [0] * 3)
    logs = load_host_logs([g4, g3], ReadOptions())
    assert logs is not None and [h.source for h in logs.host_logs] == [0, 1]
    joined = trace.with_host_logs(logs)
    assert joined.events is trace.events  # a big trace is not copied to add a small log
    assert [s.path for s in joined.sources] == [trace.sources[0].path, str(g4), str(g3)]
    assert [(h.source, h.cores) for h in joined.host_logs] == [(1, 8), (2, 4)] and joined.host_log_sources() == {1, 2}
    assert T.Timeline.concat([trace, logs]).host_metrics.equals(joined.host_metrics)
    ts, metrics = joined.host_samples(2)
    assert ts.tolist() == [(BASE_S + k) * 10**9 for k in (1, 3, 5)] and metrics["cpu_user_pct"].tolist() == [1, 2, 3]
    assert host_period_ns(ts) == 2 * 10**9


def test_host_tables_survive_the_cache(tmp_path):
    from traceanalyzer import cache as C

    g3 = glances3_csv(tmp_path / "g3.csv", [BASE_S + 1, BASE_S + 3], [1, 2], [1] * 2, [0] * 2)
    tl = load_host_logs([g3], ReadOptions())
    assert tl is not None
    ident = {"format": C.CACHE_FORMAT, "path": str(g3)}
    C.store(tmp_path / "entry.npz", ident, tl)
    back = C.load(tmp_path / "entry.npz", ident)
    assert back is not None and back.host_logs == tl.host_logs and back.host_metrics.equals(tl.host_metrics)


def test_analyze_gives_the_host_figures_it_gave_before():
    """The real CPU-bound run: the figures the report held when host logs were passed beside the Timeline."""
    a = ta.analyze(REAL / "cpu_aug.trace.json", Options(host_logs=(REAL / "cpu_aug.csv",), cache=False))
    h = a.host_logs[0]
    assert [i.path for i in a.inputs] == [str(REAL / "cpu_aug.trace.json")]
    assert (h.format, h.samples_read, h.samples_kept, h.period_s, h.offset_s, h.offset_method, h.clock, h.zone,
            h.cores) == (G.FORMAT_CSV, 28, 28, 1.0, 0.0, "clock", "epoch", None, 2)
    assert (h.wait_samples, h.wait_covered_fraction, h.not_kept, h.warnings) == (25, 0.990883, {}, ())
    user = h.metrics["cpu_user_pct"]
    assert (user.samples, user.mean, user.min, user.max, user.window_samples, user.window_mean, user.outside_samples,
            user.outside_mean) == (28, 73.821, 46.2, 87.6, 24, 75.85, 3, 55.267)
    assert h.metrics["disk_read_bytes_per_s"].window_mean == 257767.167
    assert {k: h.during_dataloader_wait[k] for k in ("cpu_user_pct", "cpu_system_pct", "cpu_iowait_pct",
                                                     "disk_read_bytes_per_s")} == {
        "cpu_user_pct": 76.437, "cpu_system_pct": 22.131, "cpu_iowait_pct": 0.085, "disk_read_bytes_per_s": 285126.941}
    series = a.drawing.host_logs[h.path]
    assert len(series["t_s"]) == 28 and series["t_s"][:3] == [-2.255, -1.255, -0.255]
    assert len(series["waits"]["start_s"]) == 161
    assert a.diagnosis is not None and a.ranks[0].diagnosis.input_split == "cpu"


def test_a_timeline_holding_a_host_log_on_its_own_clock_is_placed_by_analyze(tmp_path):
    trace = input_bound_trace(tmp_path / "t.json")
    g3 = glances3_csv(tmp_path / "g3.csv", [BASE_S + k for k in range(1, 11)], [90] * 10, [5] * 10, [0] * 10,
                      utc_offset_s=5 * 3600 + 1800)
    options = Options(dmon_tz="Asia/Kolkata", cache=False)
    by_paths = ta.analyze([trace, g3], options)
    logs = load_host_logs([g3], ReadOptions())
    assert logs is not None
    by_timeline = ta.analyze(T.Timeline.concat([load_paths([trace]), logs]), options)
    assert by_timeline.host_logs == by_paths.host_logs and by_timeline.host_logs[0].wait_samples == 10
    assert by_timeline.to_json() == by_paths.to_json()


def test_html_host_table_shows_byte_rates_in_binary_units_per_second(tmp_path):
    from traceanalyzer.report.html import render_html

    trace = input_bound_trace(tmp_path / "t.json")
    g4 = glances4_csv(tmp_path / "g.csv", [BASE_S + k for k in range(1, 11)], [95] * 10, [3] * 10, [0] * 10,
                      [2_097_152.0] * 10)
    html = render_html(ta.analyze([trace, g4]))
    assert "<tr><td>disk_read_bytes_per_s</td>" + "<td>2.0 MiB/s</td>" * 5 + "</tr>" in html
    assert "<tr><td>disk_write_bytes_per_s</td>" + "<td>1000 B/s</td>" * 5 + "</tr>" in html
    assert "<tr><td>cpu_user_pct</td><td>95.0</td><td>95.0</td><td>95.0</td><td>95.0</td><td>95.0</td></tr>" in html
