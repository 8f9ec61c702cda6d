"""nvidia-smi dmon, --query-gpu CSV and DCGM readers: every real log in the corpus, and crafted
variants for what the corpus does not show (column orders, '-', header changes, truncation)."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from traceanalyzer import timeline as T
from traceanalyzer.errors import InputError
from traceanalyzer.formats import ReadOptions, dcgm_csv, dmon, read_file, smi_csv
from traceanalyzer.units import parse_start

S = 1_000_000_000


def series(tl: T.Timeline, metric: str, device: int = 0) -> tuple[np.ndarray, np.ndarray]:
    c = tl.counters
    sel = c[(c["metric"] == metric).to_numpy() & (c["device"].to_numpy() == device)].sort_values("ts_ns")
    return sel["ts_ns"].to_numpy(), sel["value"].to_numpy()


def wall_ns(text: str) -> int:
    return int(pd.Timestamp(text).value)


def read_text(tmp_path: Path, text: str, name: str = "gpu.log", **opts: object) -> T.Timeline:
    p = tmp_path / name
    p.write_bytes(text.encode())
    return read_file(p, ReadOptions(**opts))  # type: ignore[arg-type]


# --- the corpus -----------------------------------------------------------------------------------
def counter_logs(corpus: Path) -> list[Path]:
    with open(corpus / "MANIFEST.tsv", newline="") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    return [corpus / r["file"] for r in rows if r["format"] in ("dmon", "nvidia-smi-csv")]


def test_every_corpus_log_parses(corpus):
    logs = counter_logs(corpus)
    assert len(logs) >= 7
    for path in logs:
        tl = read_file(path, ReadOptions())
        assert len(tl.counters) > 0, path
        assert tl.sources[0].format in (dmon.FORMAT, smi_csv.FORMAT), path
        assert tl.sources[0].clock in T.COUNTER_CLOCKS


def test_only_the_corpus_counter_logs_sniff_as_counter_logs(corpus):
    from traceanalyzer.formats import is_counter_log

    with open(corpus / "MANIFEST.tsv", newline="") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    expected = {r["file"] for r in rows if r["format"] in ("dmon", "nvidia-smi-csv") or "DCGM" in r["description"]}
    found = {str(p.relative_to(corpus)) for p in corpus.rglob("*") if p.is_file() and is_counter_log(p)}
    assert found == expected


def test_dmon_su_without_times(corpus):
    tl = read_file(corpus / "dmon_su_jpgofa" / "nvidia_dmon.log", ReadOptions())
    assert tl.sources[0].clock == T.CLOCK_SAMPLES
    ts, sm = series(tl, "sm_util_pct")
    assert sm.tolist() == [46, 45, 46, 45, 46, 48, 47, 35, 4, 8]
    assert ts.tolist() == [k * S for k in range(10)]
    assert series(tl, "mem_util_pct")[1][-1] == 4
    assert series(tl, "dec_util_pct")[1][:4].tolist() == [1, 1, 1, 0]
    assert set(tl.counters["metric"].astype(str)) == {
        "sm_util_pct", "mem_util_pct", "enc_util_pct", "dec_util_pct", "jpg_util_pct", "ofa_util_pct"}
    (warning,) = tl.sources[0].warnings  # no interval given: 1 s assumed, and said
    assert "its 10 samples are assumed 1 s apart" in warning and "--dmon-interval" in warning
    given = read_file(corpus / "dmon_su_jpgofa" / "nvidia_dmon.log", ReadOptions(dmon_interval_ns=10 * S))
    assert given.sources[0].warnings == []
    assert series(given, "sm_util_pct")[0].tolist() == [k * 10 * S for k in range(10)]  # 90 s: its real span


def test_dmon_mutc_with_date_and_time(corpus):
    tl = read_file(corpus / "dmon_doc_xuesongtap" / "dmon_s_mutc_o_TD.txt", ReadOptions())
    assert tl.sources[0].clock == T.CLOCK_WALL
    ts, sm = series(tl, "sm_util_pct")
    assert ts[0] == wall_ns("2024-01-04 13:54:35") and len(ts) == 6
    assert sm[ts == wall_ns("2024-01-04 13:54:38")].tolist() == [13]
    assert series(tl, "fb_used_mib")[1].tolist() == [239, 74, 7, 478, 67, 7]
    assert series(tl, "pcie_tx_mbps")[1][1] == 677
    assert series(tl, "sm_clock_mhz")[1].tolist() == [1695] * 6
    assert series(tl, "mem_clock_mhz")[1][0] == 6250


def test_dmon_8gpu_samples_from_index_wrap(corpus):
    path = corpus / "dmon_doc_xuesongtap" / "dmon_s_m_8gpu.txt"
    tl = read_file(path, ReadOptions())
    c = tl.counters
    assert sorted(np.unique(c["device"]).tolist()) == list(range(8))
    ts, fb = series(tl, "fb_used_mib", device=7)
    assert ts.tolist() == [0, S] and fb.tolist() == [4, 4]
    start = parse_start("2024-01-04 13:00:00")
    tl = read_file(path, ReadOptions(dmon_interval_ns=2 * S, dmon_start=start))
    ts, _ = series(tl, "bar1_used_mib", device=3)
    assert tl.sources[0].clock == T.CLOCK_WALL
    assert ts.tolist() == [start[0], start[0] + 2 * S]


def test_smi_csv_truncated_keeps_complete_rows_with_one_warning(corpus):
    path = corpus / "smi_csv_h100nvl_truncated" / "nvidia-smi.log"
    assert path.stat().st_size == 8192
    tl = read_file(path, ReadOptions())
    src = tl.sources[0]
    assert len(src.warnings) == 1 and "cut off" in src.warnings[0]
    assert src.events_kept == 104 and src.not_kept == {"truncated_row": 1}
    ts, sm = series(tl, "sm_util_pct")
    assert len(ts) == 104
    assert ts[-1] == wall_ns("2026-02-25 10:06:20.442") and sm[-1] == 99
    assert series(tl, "mem_util_pct")[1][-1] == 62
    assert series(tl, "fb_used_mib")[1][-1] == 90098
    assert series(tl, "fb_total_mib")[1][0] == 95830
    assert series(tl, "pstate")[1][0] == 0
    assert ts[0] == wall_ns("2026-02-25 10:04:37.416")


def test_smi_csv_two_gpus_interleaved(corpus):
    tl = read_file(corpus / "smi_csv_a6000_2gpu" / "gpu_usage.csv", ReadOptions())
    ts0, sm0 = series(tl, "sm_util_pct", 0)
    ts1, sm1 = series(tl, "sm_util_pct", 1)
    assert len(ts0) == len(ts1) == 473
    assert sm0[0] == 92 and series(tl, "mem_util_pct", 0)[1][0] == 73
    assert ts0[0] == wall_ns("2024-11-23 12:23:29.950") and ts1[0] == wall_ns("2024-11-23 12:23:29.951")
    assert series(tl, "fb_used_mib", 1)[1][0] == 15 and series(tl, "fb_free_mib", 0)[1][0] == 23498
    assert sm0.mean() > 80 and sm1.mean() < 0.1


def test_smi_csv_15s_and_ms_logs(corpus):
    tl = read_file(corpus / "smi_csv_1gpu_15s" / "gpu_usage.csv", ReadOptions())
    ts, sm = series(tl, "sm_util_pct")
    assert len(ts) == 1639 and sm[3] == 49 and series(tl, "fb_used_mib")[1][3] == 20394
    assert round(np.median(np.diff(ts)) / S) == 15
    tl = read_file(corpus / "dmon_doc_xuesongtap" / "query_gpu_lms.csv", ReadOptions())
    ts, temp = series(tl, "gpu_temp_c")
    assert temp.tolist() == [25, 24, 23, 26, 25]
    assert ts[1] - ts[0] == 4 * 10**6  # 16.977 -> 16.981
    assert series(tl, "pstate")[1].tolist() == [8] * 5


def test_dcgm_long_csv(corpus):
    tl = read_file(corpus / "dcgm_dmon_csv" / "dmon.csv", ReadOptions())
    src = tl.sources[0]
    assert src.format == dcgm_csv.FORMAT and src.clock == T.CLOCK_EPOCH
    ts, power = series(tl, "power_instant_w", 0)
    assert ts[0] == 1718783836956328 * 1000 and power[0] == pytest.approx(71.20)
    assert sorted(np.unique(tl.counters["device"]).tolist()) == list(range(8))
    assert any("dcgm_throttle_reason_idle" in w or "throttle_reason_idle" in w for w in src.warnings)


# --- crafted variants -----------------------------------------------------------------------------
PCUT_2GPU = """\
# gpu    pwr  gtemp  mtemp   mclk   pclk     sm    mem    enc    dec  rxpci  txpci
# Idx      W      C      C    MHz    MHz      %      %      %      %   MB/s   MB/s
    0     71     45      -   1593   1410     97     40      0      0     12      3
    1     55     38      -   1593    210      0      0      0      0      0      0

    0     72     46      -   1593   1410     98     41      0      0     11      2
    1     56     38      -   1593    210      0      0      0      0      0      0
"""


def test_dmon_column_order_and_missing_values(tmp_path):
    tl = read_text(tmp_path, PCUT_2GPU)
    assert series(tl, "sm_util_pct", 0)[1].tolist() == [97, 98]
    assert series(tl, "sm_clock_mhz", 1)[1].tolist() == [210, 210]
    assert series(tl, "power_w", 1)[1].tolist() == [55, 56]
    assert np.isnan(series(tl, "mem_temp_c", 0)[1]).all()
    assert series(tl, "pcie_rx_mbps", 0)[1].tolist() == [12, 11]
    assert series(tl, "sm_util_pct", 1)[0].tolist() == [0, S]
    assert [w for w in tl.sources[0].warnings if "assumed 1 s apart" not in w] == []


def test_dmon_header_repeated_and_changed_midfile(tmp_path):
    text = """\
# gpu     sm    mem
# Idx      %      %
    0     10      1
    0     20      2
# gpu     sm    mem
# Idx      %      %
    0     30      3
# gpu    pwr     sm
# Idx      W      %
    0     99     40
    0     98      -
"""
    tl = read_text(tmp_path, text)
    ts, sm = series(tl, "sm_util_pct")
    assert sm[:4].tolist() == [10, 20, 30, 40] and np.isnan(sm[4])
    assert ts.tolist() == [k * S for k in range(5)]
    _, mem = series(tl, "mem_util_pct")
    assert mem[:3].tolist() == [1, 2, 3] and np.isnan(mem[3:]).all()
    assert series(tl, "power_w")[1][3:].tolist() == [99, 98]


def test_dmon_gpu_subset_in_any_order_numbers_samples(tmp_path):
    text = "# gpu sm\n# Idx %\n 3 10\n 1 20\n 3 11\n 1 21\n 3 12\n"
    tl = read_text(tmp_path, text)
    assert series(tl, "sm_util_pct", 3)[0].tolist() == [0, S, 2 * S]
    assert series(tl, "sm_util_pct", 1)[0].tolist() == [0, S]


def test_dmon_truncated_last_line_and_complete_last_line(tmp_path):
    rows = "".join(f"    0     {v:2d}     26      0 \n" for v in (46, 45, 47))
    head = "# gpu     sm    mem    enc \n# Idx      %      %      % \n"
    tl = read_text(tmp_path, head + rows + "    0     4")
    src = tl.sources[0]
    assert len(src.warnings) == 2 and "line 6" in src.warnings[0] and "assumed 1 s apart" in src.warnings[1]
    assert series(tl, "sm_util_pct")[1].tolist() == [46, 45, 47]
    # a last line without a newline that is complete is kept
    tl = read_text(tmp_path, head + rows + "    0     48     26      0")
    assert series(tl, "sm_util_pct")[1].tolist() == [46, 45, 47, 48]
    assert len(tl.sources[0].warnings) == 1 and "assumed 1 s apart" in tl.sources[0].warnings[0]


def test_dmon_time_only_passes_midnight_and_takes_date_from_start(tmp_path):
    text = "#Time        gpu     sm\n#HH:MM:SS    Idx      %\n 23:59:58      0      1\n 23:59:59      0      2\n" \
           " 00:00:00      0      3\n 00:00:01      0      4\n"
    tl = read_text(tmp_path, text)
    assert tl.sources[0].clock == T.CLOCK_TIME_OF_DAY
    ts, _ = series(tl, "sm_util_pct")
    day = 86_400 * S
    assert ts.tolist() == [day - 2 * S, day - S, day, day + S]
    tl = read_text(tmp_path, text, dmon_start=parse_start("2024-01-04 23:59:58"))
    ts, _ = series(tl, "sm_util_pct")
    assert tl.sources[0].clock == T.CLOCK_WALL
    assert ts[0] == wall_ns("2024-01-04 23:59:58") and ts[2] == wall_ns("2024-01-05 00:00:00")


def test_dmon_bad_input_is_one_clear_error(tmp_path):
    with pytest.raises(InputError, match=r"line 3: data row before"):
        read_text(tmp_path, "#\n\n 0 1 2\n# gpu sm mem\n")
    with pytest.raises(InputError, match="pmon"):
        read_text(tmp_path, "# gpu        pid  type    sm   mem   enc   dec   command\n# Idx          #   C/G     %     %     %     %   name\n")
    with pytest.raises(InputError, match="line 3: .*not a time"):
        read_text(tmp_path, "#Date Time gpu sm\n#YYYYMMDD HH:MM:SS Idx %\n 20240104 25:61:00 0 5\n")
    with pytest.raises(InputError, match="no data rows"):
        read_text(tmp_path, "# gpu sm\n# Idx %\n")


def test_dmon_rows_with_wrong_width_are_dropped_and_counted(tmp_path):
    tl = read_text(tmp_path, "# gpu sm mem\n# Idx % %\n 0 1 2\n 0 1\n 0 3 4\n")
    src = tl.sources[0]
    assert src.not_kept == {"wrong_value_count": 1} and "lines 4" in src.warnings[0]
    assert series(tl, "sm_util_pct")[1].tolist() == [1, 3]


def test_smi_csv_nounits_na_and_repeated_header(tmp_path):
    text = """\
timestamp, index, utilization.gpu [%], power.draw [W], clocks.sm [MHz], temperature.memory
2024/01/16 14:44:16.977, 0, 7, 70.50, 1410, [N/A]
2024/01/16 14:44:16.977, 1, 0, [Not Supported], 210, [N/A]
timestamp, index, utilization.gpu [%], power.draw [W], clocks.sm [MHz], temperature.memory
2024/01/16 14:44:17.977, 0, 9, 71.25, 1410, [N/A]
"""
    tl = read_text(tmp_path, text, "smi.csv")
    assert series(tl, "sm_util_pct", 0)[1].tolist() == [7, 9]
    assert series(tl, "power_w", 0)[1].tolist() == [70.5, 71.25]
    assert np.isnan(series(tl, "power_w", 1)[1]).all()
    assert np.isnan(series(tl, "mem_temp_c", 0)[1]).all()
    assert series(tl, "sm_clock_mhz", 1)[1].tolist() == [210]
    assert tl.sources[0].warnings == []


def test_smi_csv_without_header_says_what_to_add(tmp_path):
    # headerless rows are read when their units say which column is utilization.gpu (tests/test_logs_as_written.py);
    # when they cannot, the error names the line and the field list to add
    with pytest.raises(InputError, match=r"line 1: '2024/01/16 14:44:16.977, 0, 21' looks like nvidia-smi "
                                         r"--format=csv,noheader output .* no column of percentages .* add the field "
                                         r"list given to --query-gpu as a first line, e\.g\. 'timestamp, index, \.\.\.', "
                                         r"or log with --format=csv"):
        read_text(tmp_path, "2024/01/16 14:44:16.977, 0, 21\n", "smi.csv")
    # without a timestamp too (recognised by the units in its values), whatever the file is called
    with pytest.raises(InputError, match=r"line 1: '2 %, 5 %' looks like nvidia-smi --format=csv,noheader .* columns "
                                         r"1, 2 are all percentages and none is the largest"):
        read_text(tmp_path, "2 %, 5 %\n7 %, 1 %\n")


def test_sniffers_do_not_take_each_others_files():
    dmon_head = b"# gpu     sm    mem\n# Idx      %      %\n"
    csv_head = b"timestamp, utilization.gpu [%]\n2024/01/16 14:44:16.977, 0 %\n"
    dcgm_head = b"GPUId,TimeStampUs,Field,Values\n0,1,power_usage,1\n"
    json_head = b'{"traceEvents": []}'
    assert dmon.sniff(dmon_head) and not dmon.sniff(csv_head) and not dmon.sniff(json_head)
    assert smi_csv.sniff(csv_head) and not smi_csv.sniff(dmon_head) and not smi_csv.sniff(dcgm_head)
    assert dcgm_csv.sniff(dcgm_head) and not dcgm_csv.sniff(csv_head) and not dcgm_csv.sniff(json_head)
