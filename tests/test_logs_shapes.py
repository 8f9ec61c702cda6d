"""GPU logs in the shapes people leave them (issue 43, item 6): nvidia-smi `--format=csv,noheader` rows without a
header, a log saved as UTF-16 by a PowerShell redirect, dates written month or day first, times counted in seconds
from the logger's start, one column per GPU. Every log is built here from known readings, so the figures read back
are exact; and every figure of a log verdict's headline is found again in a finding (tests/invariants.py)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import invariants as I
import numpy as np
import pytest
from test_reconcile import reconcile

import traceanalyzer as ta
from traceanalyzer import timeline as T
from traceanalyzer.errors import InputError
from traceanalyzer.formats import ReadOptions, read_file
from traceanalyzer.formats.registry import COUNTERS, file_kind

pytestmark = pytest.mark.usefixtures("machine_in_new_york")

T0 = datetime(2026, 4, 25, 16, 6, 6, 780000)  # as the logging machine's clock read it (no zone)
T0_NS = int(T0.replace(tzinfo=timezone.utc).timestamp()) * 10**9 + 780 * 10**6
EPOCH = datetime(1970, 1, 1)


def _read(path: Path) -> T.Timeline:
    return read_file(path, ReadOptions(cache=False))


def _series(tl: T.Timeline, metric: str, device: int = 0) -> tuple[np.ndarray, np.ndarray]:
    c = tl.counters
    c = c[(c["metric"].astype(str) == metric) & (c["device"] == device)]
    return c["ts_ns"].to_numpy(), c["value"].to_numpy()


def _diagnosis(path: Path) -> dict:
    data = ta.analyze(path, ta.Options(find_logs_beside=False)).to_data()
    assert reconcile(data) > 0  # every quoted percentage is its figures' share
    assert I.headline_in_findings(data) == []  # every figure of the headline is a finding's
    return data


# --- headerless: nvidia-smi --format=csv,noheader ------------------------------------------------------------
# 40 samples 5 s apart: utilisation 0% for 10, 60% for 20 (memory 20%), 0% for 10; memory 2 MiB, then 18000 MiB
# while busy, of 20146; temperature bare; power 11.50 W idle, 120.25 W busy
def _plato_row(k: int) -> str:
    busy = 10 <= k < 30
    t = (T0 + timedelta(seconds=5 * k)).strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]
    return (f"{t}, {60 if busy else 0} %, {20 if busy else 0} %, {18000 if busy else 2} MiB, 20146 MiB, "
            f"{40 if busy else 27}, {120.25 if busy else 11.5:.2f} W")


def test_a_headerless_log_is_read_by_its_values_units(tmp_path):
    path = tmp_path / "gpu_log.csv"
    path.write_text("\n".join(_plato_row(k) for k in range(40)) + "\n")
    assert file_kind(path) == COUNTERS
    tl = _read(path)
    ts, util = _series(tl, "sm_util_pct")
    assert util.tolist() == [0.0] * 10 + [60.0] * 20 + [0.0] * 10
    assert ts.tolist() == [T0_NS + 5 * k * 10**9 for k in range(40)]  # the logging machine's clock, ms kept
    assert tl.sources[0].clock == T.CLOCK_WALL
    assert _series(tl, "mem_util_pct")[1].tolist() == [0.0] * 10 + [20.0] * 20 + [0.0] * 10
    assert _series(tl, "power_w")[1].sum() == pytest.approx(20 * 11.5 + 20 * 120.25)
    # memory (used, free or total?), temperature: kept unnamed, never guessed
    assert _series(tl, "smi_field4")[1].max() == 18000 and _series(tl, "smi_field5")[1].min() == 20146
    assert not {"fb_used_mib", "gpu_temp_c"} & set(tl.counters["metric"].astype(str))
    note = next(w for w in tl.sources[0].warnings if w.startswith("no header line"))
    assert "column 2 as utilization.gpu (of the 2 % columns, the largest in 90% or more" in note
    assert "column 3 as utilization.memory" in note and "column 7 (the W column that varies) as power.draw" in note
    assert "columns 4, 5, 6 kept unnamed" in note
    # 20 of 40 samples at 0%; the idle head and tail are set apart, the job's 20 samples all at 60%
    d = _diagnosis(path)["diagnosis"]
    assert d["primary"] == "undetermined"
    assert d["headline"].startswith("1 GPU(s) at 60% SM utilisation on average over the job, no sample at 0%")


def test_headerless_gpus_are_told_by_a_bare_index_that_comes_round_robin(tmp_path):
    rows = []
    for k in range(6):
        t = (T0 + timedelta(seconds=k)).strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]
        rows += [f"{t}, 0, 97 %, 300.00 W", f"{t}, 1, 0 %, 60.00 W"]
    path = tmp_path / "smi.csv"
    path.write_text("\n".join(rows) + "\n")
    tl = _read(path)
    assert _series(tl, "sm_util_pct", 0)[1].tolist() == [97.0] * 6
    assert _series(tl, "sm_util_pct", 1)[1].tolist() == [0.0] * 6
    assert _series(tl, "power_w", 1)[1].tolist() == [60.0] * 6
    assert "column 2 (whole numbers, each once per sample) as the GPU index" in tl.sources[0].warnings[0]


@pytest.mark.parametrize("rows, why", [
    # two % columns that cross: which is utilization.gpu cannot be told
    (["2026/04/25 16:06:06.780, 5 %, 40 %, 2 MiB", "2026/04/25 16:06:11.780, 70 %, 10 %, 2 MiB"],
     "columns 2, 3 are all percentages and none is the largest in nearly every sample"),
    # nounits: nothing says which column is utilisation
    (["2026/04/25 16:06:06.780, 5, 40, 2", "2026/04/25 16:06:11.780, 70, 10, 2"], "no column of percentages"),
])
def test_a_headerless_log_whose_utilisation_cannot_be_told_is_refused_in_one_line(tmp_path, rows, why):
    path = tmp_path / "gpu_log.csv"
    path.write_text("\n".join(rows) + "\n")
    with pytest.raises(InputError) as e:
        _read(path)
    message = str(e.value)
    assert "\n" not in message and str(path) in message
    assert f"line 1: {rows[0][:60]!r} looks like nvidia-smi --format=csv,noheader output" in message
    assert why in message
    assert "add the field list given to --query-gpu as a first line, e.g. 'timestamp, " in message
    assert message.endswith("or log with --format=csv")


# --- UTF-16 with a byte-order mark (PowerShell's `>`) --------------------------------------------------------
LANDCT = ("timestamp, memory.used [MiB], memory.total [MiB], utilization.gpu [%]\r\n"
          + "".join(f"2026/08/01 03:59:{40 + k:02d}.{361 + k:03d}, {10549 - k} MiB, 11264 MiB, {[100, 63, 0][k % 3]} %\r\n"
                    for k in range(12)))


@pytest.mark.parametrize("bom, codec", [(b"\xff\xfe", "utf-16-le"), (b"\xfe\xff", "utf-16-be")])
def test_a_utf16_log_reads_as_the_same_log_in_utf8(tmp_path, bom, codec):
    plain, wide = tmp_path / "a.csv", tmp_path / "b.csv"
    plain.write_bytes(LANDCT.encode())
    wide.write_bytes(bom + LANDCT.encode(codec))
    assert file_kind(wide) == COUNTERS
    a, b = _read(plain), _read(wide)
    assert b.counters.equals(a.counters)
    assert _series(b, "sm_util_pct")[1].tolist() == [100.0, 63.0, 0.0] * 4
    assert _series(b, "fb_used_mib")[1].tolist() == [10549.0 - k for k in range(12)]
    assert b.sources[0].warnings == a.sources[0].warnings == []


def test_binary_bytes_after_a_utf16_mark_stay_binary(tmp_path):
    path = tmp_path / "x.bin"
    path.write_bytes(b"\xff\xfe" + bytes([1, 0, 2, 0, 3, 0, 0x1f, 0]) * 8)
    with pytest.raises(InputError, match="binary data"):
        _read(path)


# --- dates written month or day first -------------------------------------------------------------------------
def _orin(stamps: list[str]) -> str:
    return ("timestamp, name, utilization.gpu [%], utilization.memory [%], memory.used [MiB], temperature.gpu\n"
            + "".join(f"{s}, Orin, 99, 0, {26133 + k}, 45.218\n" for k, s in enumerate(stamps)))


def _ns(*args: int) -> int:
    return int((datetime(*args) - EPOCH).total_seconds()) * 10**9


def test_month_first_dates_are_told_by_consecutive_samples_when_no_day_is_above_12(tmp_path):
    # 03-11-2026 23:58:16 to 03-12-2026 00:01:16, a minute apart: read day first the date would jump a month
    start = datetime(2026, 3, 11, 23, 58, 16)
    stamps = [(start + timedelta(minutes=k)).strftime("%m-%d-%Y %H:%M:%S") for k in range(4)]
    assert stamps[-1] == "03-12-2026 00:01:16"
    path = tmp_path / "gpu_stats.csv"
    path.write_text(_orin(stamps))
    tl = _read(path)
    assert _series(tl, "sm_util_pct")[0].tolist() == [_ns(2026, 3, 11, 23, 58, 16) + k * 60 * 10**9 for k in range(4)]
    assert tl.sources[0].clock == T.CLOCK_WALL
    assert tl.sources[0].warnings == ["dates read as month-day-year (no day above 12; read day first, two consecutive "
                                      "samples would lie 29 days apart)"]
    assert _diagnosis(path)["diagnosis"]["primary"] == "gpu_bound"


@pytest.mark.parametrize("stamps, first_ns, order", [
    (["25-03-2026 10:00:00", "25-03-2026 10:01:00", "01-04-2026 10:02:00"], _ns(2026, 3, 25, 10), "day-month-year"),
    (["03/11/2026 3:13:16 PM", "03/13/2026 3:14:16 PM"], _ns(2026, 3, 11, 15, 13, 16), "month-day-year"),
    (["11.03.2026 00:13:16.250", "14.03.2026 12:14:16.250 AM"], _ns(2026, 3, 11, 0, 13, 16) + 250 * 10**6,
     "day-month-year"),
])
def test_a_day_above_12_decides_the_order_for_the_whole_log(tmp_path, stamps, first_ns, order):
    path = tmp_path / "gpu_stats.csv"
    path.write_text(_orin(stamps))
    tl = _read(path)
    assert int(_series(tl, "sm_util_pct")[0][0]) == first_ns
    assert tl.sources[0].warnings[0].startswith(f"dates read as {order} (")
    assert "has a day above 12" in tl.sources[0].warnings[0]


def test_one_date_that_reads_both_ways_keeps_times_relative(tmp_path):
    path = tmp_path / "gpu_stats.csv"
    path.write_text(_orin(["03-04-2026 10:00:00.500", "03-04-2026 10:00:01.750", "03-04-2026 10:00:03.000"]))
    tl = _read(path)
    assert _series(tl, "sm_util_pct")[0].tolist() == [0, 1_250_000_000, 2_500_000_000]
    assert tl.sources[0].clock == T.CLOCK_SAMPLES
    assert "read month first or day first give different days" in tl.sources[0].warnings[0]


def test_rows_that_show_both_orders_are_refused(tmp_path):
    path = tmp_path / "gpu_stats.csv"
    path.write_text(_orin(["13-01-2026 10:00:00", "01-13-2026 10:01:00"]))
    # the row that contradicts the rows before it is named
    with pytest.raises(InputError, match=r"line 3: timestamp '01-13-2026 10:01:00' is not a date and time"):
        _read(path)


# --- times counted from the logger's start ----------------------------------------------------------------------
@pytest.mark.parametrize("header, values, ns", [
    ("elapsed_sec", ["0.08", "0.28", "0.48", "10.5"], [80_000_000, 280_000_000, 480_000_000, 10_500_000_000]),
    ("time_ms", ["0", "250", "500", "1250.5"], [0, 250_000_000, 500_000_000, 1_250_500_000]),
    ("time [s]", ["0", "0.5", "2", "3"], [0, 500_000_000, 2 * 10**9, 3 * 10**9]),
])
def test_seconds_since_the_start_are_a_relative_clock(tmp_path, header, values, ns):
    path = tmp_path / "gpu_usage.csv"
    path.write_text(f"{header},gpu_util_pct,mem_used_mb,mem_total_mb,temp_c,power_w\n"
                    + "".join(f"{v},{40 + k},{2676 - k},49140,29,74.{k}\n" for k, v in enumerate(values)))
    tl = _read(path)
    ts, util = _series(tl, "sm_util_pct")
    assert ts.tolist() == ns and util.tolist() == [40.0, 41.0, 42.0, 43.0]
    assert tl.sources[0].clock == T.CLOCK_SAMPLES
    assert any("since the logger started (no date): the log is on its own clock, not placed on a trace's clock "
               "by wall time" in w for w in tl.sources[0].warnings)


def test_epoch_numbers_under_a_time_header_stay_epoch(tmp_path):
    path = tmp_path / "gpu.csv"
    path.write_text("Time,GPU_ID,Utilization\n1736203508.750246,0,10\n1736203508.8521,0,20\n")
    tl = _read(path)
    assert _series(tl, "sm_util_pct")[0].tolist() == [1736203508_750246000, 1736203508_852100000]
    assert tl.sources[0].clock == T.CLOCK_EPOCH


# --- one column per GPU -----------------------------------------------------------------------------------------
def test_one_column_per_gpu_is_one_row_per_gpu(tmp_path):
    path = tmp_path / "gpus.csv"
    path.write_text("time_s,gpu0_util,gpu1_util,gpu0_mem_mb,gpu1_mem_mb\n"
                    + "".join(f"{k},{90 + k % 10},0,{30000 + k},3\n" for k in range(40)))
    tl = _read(path)
    ts0, u0 = _series(tl, "sm_util_pct", 0)
    assert u0.tolist() == [90.0 + k % 10 for k in range(40)] and ts0.tolist() == [k * 10**9 for k in range(40)]
    assert _series(tl, "sm_util_pct", 1)[1].tolist() == [0.0] * 40
    assert _series(tl, "fb_used_mib", 1)[1].tolist() == [3.0] * 40
    assert any(w.startswith("one column per GPU (gpu0_util, gpu1_util, gpu0_mem_mb, gpu1_mem_mb): read as 2 GPUs")
               for w in tl.sources[0].warnings)
    d = _diagnosis(path)["diagnosis"]
    assert d["primary"] == "gpu_underused"
    assert d["headline"].startswith("1 of 2 GPU(s) underused: GPU 1: 40 of 40 samples at 0% SM utilisation")


# --- a log verdict's headline figures are its findings' -------------------------------------------------------
@pytest.mark.parametrize("utils, primary", [([95, 99, 97, 96] * 10, "gpu_bound"), ([40, 5, 35, 55] * 10, "undetermined")])
def test_every_figure_of_a_log_headline_is_a_findings(tmp_path, utils, primary):
    path = tmp_path / "gpu.csv"
    path.write_text("timestamp,index,utilization.gpu [%]\n" + "".join(
        f"{(T0 + timedelta(seconds=k)).isoformat(timespec='milliseconds')}Z,{g},{u if g == 0 else min(u + 2, 100)}\n"
        for k, u in enumerate(utils) for g in (0, 1)))
    data = _diagnosis(path)  # headline_in_findings == []
    d = data["diagnosis"]
    assert d["primary"] == primary
    (util,) = [f for f in d["findings"] if f["id"] == "gpu_utilisation"]
    assert util["evidence"][0] == d["headline"]
    assert set(d["headline_figures"]) <= set(util["figures"])
    mean0 = sum(utils) / len(utils)
    assert util["figures"]["gpu0_sm_util_mean_pct"] == pytest.approx(mean0)
    assert util["evidence"][1].startswith(f"GPU 0: SM utilisation {mean0:.1f}% on average over the log (40 samples)")
