"""glances exports: the reader on every real layout produced here, detection by content, the host log
on the trace's clock, wait-weighted means, malformed rows counted."""

from __future__ import annotations

import csv
import json
from types import SimpleNamespace

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import SAMPLES
from glances_builder import BASE_S, glances3_csv, glances4_csv, input_bound_trace

import traceanalyzer as ta
from traceanalyzer.analyses.host_logs import host_period_ns
from traceanalyzer.commands import main
from traceanalyzer.errors import InputError
from traceanalyzer.formats import glances as G
from traceanalyzer.formats import is_counter_log
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
    series = among.host_logs[0].series
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
