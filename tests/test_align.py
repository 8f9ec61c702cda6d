"""Alignment of nvidia-smi logs with a trace: a trace with a known busy pattern, logs derived
from its own kernels and written on another machine's clock (zone + skew). Every test sets TZ."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from dmon_builder import S, busy_trace, dmon_text, sample_times, smi_csv_text, utilisation
from timelines import trace_clock

from traceanalyzer import align as A
from traceanalyzer.formats import ReadOptions, read_file

ZONE = "Asia/Kolkata"  # UTC+05:30, where nvidia-smi ran
SKEW_NS = 3_400_000_000  # that machine's clock runs 3.4 s ahead
# log wall time (read as if UTC) + TOTAL = trace epoch time
TOTAL_NS = -(5 * 3600 + 1800) * S - SKEW_NS


pytestmark = pytest.mark.usefixtures("machine_in_new_york")


@pytest.fixture
def setup(tmp_path):
    trace = busy_trace(tmp_path / "trace.json", seconds=90)
    ends = sample_times(trace, before_s=30, after_s=30, seconds=90)
    return tmp_path, trace, ends, utilisation(trace, ends)


def load(tmp_path: Path, name: str, text: str, **opts: object):
    p = tmp_path / name
    p.write_text(text)
    return read_file(p, ReadOptions(**opts))  # type: ignore[arg-type]


def align(trace_path: Path, logs, **opts: object) -> A.Alignment:
    tr = read_file(trace_path, ReadOptions())
    (result,) = A.align_logs(trace_clock(tr), logs, A.AlignOptions(**opts))  # type: ignore[arg-type]
    return result


@pytest.mark.parametrize("times", ["DT", "T"])
def test_search_recovers_zone_and_skew(setup, times):
    tmp_path, trace, ends, util = setup
    logs = load(tmp_path, "gpu.log", dmon_text(ends, util, ZONE, SKEW_NS, times))
    a = align(trace.path, logs)
    assert a.method == A.SEARCHED
    if times == "DT":
        assert abs(a.offset_ns - TOTAL_NS) <= S  # within one sample period
    else:  # time of day only: the date came from the trace
        midnight_ist_as_utc = (trace.t0_ns + 5 * 3600 * S + 1800 * S) // (86400 * S) * (86400 * S)
        assert abs(a.offset_ns - (midnight_ist_as_utc + TOTAL_NS)) <= S
    assert a.zone == "UTC+05:30"
    assert abs(a.skew_ns + SKEW_NS) <= S
    assert a.fit is not None and a.fit.correlation > 0.9 and not a.fit.ambiguous
    assert a.fit.runner_up_correlation < 0.6
    assert any("disagrees" in w for w in a.warnings)


def test_search_on_query_gpu_csv_with_ms_timestamps(setup):
    tmp_path, trace, ends, util = setup
    logs = load(tmp_path, "smi.csv", smi_csv_text(ends, util, ZONE, SKEW_NS))
    a = align(trace.path, logs)
    assert a.method == A.SEARCHED and abs(a.offset_ns - TOTAL_NS) <= S // 2


def test_log_without_times_is_slid_along_the_trace(setup):
    tmp_path, trace, ends, util = setup
    logs = load(tmp_path, "gpu.log", dmon_text(ends, util, ZONE, SKEW_NS, times=""))
    a = align(trace.path, logs)
    # the log's sample n is at n seconds; its first sample is the real ends[0]
    assert a.method == A.SEARCHED and abs(a.offset_ns - int(ends[0])) <= S


def test_zone_given_and_clock_right_means_clock(setup):
    tmp_path, trace, ends, util = setup
    logs = load(tmp_path, "gpu.log", dmon_text(ends, util, ZONE, 0))
    a = align(trace.path, logs, tz=ZONE)
    assert a.method == A.CLOCK and a.offset_ns == -(5 * 3600 + 1800) * S
    assert a.fit is not None and a.fit.correlation > 0.8 and a.warnings == ()


def test_zone_given_skew_found_within_30s(setup):
    tmp_path, trace, ends, util = setup
    logs = load(tmp_path, "gpu.log", dmon_text(ends, util, ZONE, SKEW_NS))
    a = align(trace.path, logs, tz="+05:30")
    assert a.method == A.SEARCHED and abs(a.offset_ns - TOTAL_NS) <= S


def test_given_offset_is_used_and_fit_reported(setup):
    tmp_path, trace, ends, util = setup
    logs = load(tmp_path, "gpu.log", dmon_text(ends, util, ZONE, SKEW_NS))
    a = align(trace.path, logs, tz=ZONE, offset_ns=-SKEW_NS)
    assert a.method == A.GIVEN and a.offset_ns == TOTAL_NS
    assert a.fit is not None and a.fit.correlation > 0.9


def test_flat_log_is_ambiguous_not_guessed(setup):
    tmp_path, trace, ends, util = setup
    logs = load(tmp_path, "gpu.log", dmon_text(ends, np.full(len(util), 50), ZONE, SKEW_NS))
    a = align(trace.path, logs)
    assert a.method == A.CLOCK and a.fit is not None and a.fit.ambiguous
    assert a.offset_ns == 5 * 3600 * S  # New York's clock offset, kept, not a guess
    assert any("ambiguous" in w for w in a.warnings)


def test_periodic_pattern_is_ambiguous(tmp_path):
    trace = busy_trace(tmp_path / "trace.json", seconds=90)
    ends = sample_times(trace, 30, 30, 90)
    periodic = np.where((np.arange(len(ends)) // 3) % 2 == 0, 90, 10)  # unrelated to the trace
    logs = load(tmp_path, "gpu.log", dmon_text(ends, periodic, ZONE, SKEW_NS))
    a = align(trace.path, logs)
    assert a.method == A.CLOCK and a.fit.ambiguous


def test_short_overlap_warns(setup):
    tmp_path, trace, ends, util = setup
    logs = load(tmp_path, "gpu.log", dmon_text(ends[30:36], util[30:36], ZONE, SKEW_NS))
    a = align(trace.path, logs)
    assert a.method == A.CLOCK
    assert any("overlap too short" in w for w in a.warnings)


def test_gpu_map_pairs_log_gpu_with_trace_device(setup):
    tmp_path, trace, ends, util = setup
    logs = load(tmp_path, "gpu.log", dmon_text(ends, util, ZONE, SKEW_NS, gpus=2, busy_gpu=1))
    a = align(trace.path, logs, gpu_map=((1, 0),))
    assert dict(a.device_map) == {1: 0}
    assert any("log GPU 0 left out" in w for w in a.warnings)
    assert a.method == A.SEARCHED and abs(a.offset_ns - TOTAL_NS) <= S
    placed = A.place_counters(logs, (a,))
    assert set(placed.counters["device"].tolist()) == {0}
    assert placed.sources[0].not_kept == {"gpu_not_mapped": len(ends) * 9}
    assert "gpu_not_mapped" not in logs.sources[0].not_kept  # the input is not changed


def test_place_counters_moves_times():
    from traceanalyzer.formats._counters import counters_frame
    from traceanalyzer.timeline import Source, Timeline

    logs = Timeline(counters=counters_frame(np.array([0, S]), np.array([0, 0]),
                                            {"sm_util_pct": np.array([1.0, 2.0])}),
                    sources=[Source("x", "nvidia-smi-dmon", clock="wall")])
    a = A.Alignment(0, "wall", A.GIVEN, 5 * S, 0, "UTC", 5 * S, None, ((0, 0),))
    placed = A.place_counters(logs, (a,))
    assert placed.counters["ts_ns"].tolist() == [5 * S, 6 * S]
    assert logs.counters["ts_ns"].tolist() == [0, S]  # the input is not changed


def test_option_parsers():
    assert A.parse_gpu_map(["1=0", " 3 = 1 "]) == ((1, 0), (3, 1))
    with pytest.raises(ValueError, match="DMON_INDEX=DEVICE"):
        A.parse_gpu_map(["1:0"])
    with pytest.raises(ValueError, match="same trace device"):
        A.parse_gpu_map(["1=0", "2=0"])
    assert A.parse_zone("+05:30").utcoffset(None).total_seconds() == 19800
    assert A.parse_zone("UTC-8").utcoffset(None).total_seconds() == -8 * 3600
    with pytest.raises(ValueError, match="unknown time zone"):
        A.parse_zone("Mars/Olympus")
    winter = 1_704_067_200 * S  # 2024-01-01 00:00 local wall time
    assert A.zone_offset_ns(winter, None)[0] == -5 * 3600 * S  # TZ=America/New_York
    assert A.zone_offset_ns(winter, "Europe/Berlin") == (3600 * S, "UTC+01:00 (Europe/Berlin)")
