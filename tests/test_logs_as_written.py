"""GPU logs as people write them (issue 43, item 6): a multi-GPU `--query-gpu` style CSV written by a script with
its own header, sub-second ISO-8601 timestamps with a zone, and power beside utilisation. Every log is built here
from known readings, so sample counts, per-GPU means, power figures and times are exact; the metamorphic tests
write one log several ways (columns reordered, another vocabulary, another zone) and ask for identical figures."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from test_reconcile import reconcile

import traceanalyzer as ta
from traceanalyzer import timeline as T
from traceanalyzer.errors import InputError
from traceanalyzer.formats import ReadOptions, read_file
from traceanalyzer.formats._log_columns import meaning
from traceanalyzer.formats.smi_csv import sniff

pytestmark = pytest.mark.usefixtures("machine_in_new_york")

T0 = datetime(2025, 3, 1, 12, 0, 0, 123000, tzinfo=timezone.utc)
T0_NS = int(T0.timestamp()) * 10**9 + 123 * 10**6
STEP_MS = 333
SAMPLES, GPUS = 195, 4
BUSY = range(40, 160)  # samples at 99%: the job
HARD = range(40, 80)  # GPUs 0 and 1 draw 400 W here, then 220 W at the same 99% (the rest of the job)


def readings(sample: int, gpu: int) -> dict[str, float]:
    """What GPU `gpu` reads at `sample`: 0% / 60 W outside the job, 99% inside; GPUs 2-3 at 400 W throughout the
    job, GPUs 0-1 at 400 W for its first 40 samples and 220 W after (busy in time, not in work)."""
    busy = sample in BUSY
    power = (400.0 if sample in HARD or gpu >= 2 else 220.0) if busy else 60.0
    return {"util": 99.0 if busy else 0.0, "mem": 30000.0 + gpu if busy else 500.0, "total": 81559.0,
            "power": power, "temp": 40.0 + gpu, "clock": 1980.0 if busy else 345.0}


# one header per vocabulary, and how each writes a value of each reading
VOCABULARIES: dict[str, dict[str, tuple[str, Callable[[float], str]]]] = {
    "script": {"time": ("timestamp", str), "gpu": ("gpu_index", str),
               "util": ("utilization_gpu_percent", lambda v: f"{v:g}"),
               "mem": ("memory_used_mib", lambda v: f"{v:g}"), "total": ("memory_total_mib", lambda v: f"{v:g}"),
               "power": ("power_draw_w", lambda v: f"{v:.1f}"), "temp": ("temperature_gpu_c", lambda v: f"{v:g}"),
               "clock": ("sm_clock_mhz", lambda v: f"{v:g}")},
    "nvidia-smi": {"time": ("timestamp", str), "gpu": ("index", str),
                   "util": ("utilization.gpu [%]", lambda v: f"{v:g} %"),
                   "mem": ("memory.used [MiB]", lambda v: f"{v:g} MiB"),
                   "total": ("memory.total [MiB]", lambda v: f"{v:g} MiB"),
                   "power": ("power.draw [W]", lambda v: f"{v:.2f} W"), "temp": ("temperature.gpu", lambda v: f"{v:g}"),
                   "clock": ("clocks.sm [MHz]", lambda v: f"{v:g} MHz")},
    "camel": {"time": ("time", str), "gpu": ("gpuId", str), "util": ("gpuUtil", lambda v: f"{v:g}"),
              "mem": ("memUsedGB", lambda v: f"{v / 1024:.10g}"), "total": ("memTotalMB", lambda v: f"{v:g}"),
              "power": ("powerW", lambda v: f"{v:g}"), "temp": ("gpuTempC", lambda v: f"{v:g}"),
              "clock": ("smClockMHz", lambda v: f"{v:g}")},
    "short": {"time": ("ts", str), "gpu": ("gpu", str), "util": ("gpu_util", lambda v: f"{v:g}%"),
              "mem": ("mem_used_mb", lambda v: f"{v:g}"), "total": ("mem_total [MiB]", lambda v: f"{v:g}"),
              "power": ("power (W)", lambda v: f"{v:g}"), "temp": ("temp_c", lambda v: f"{v:g}"),
              "clock": ("sm_clk_mhz", lambda v: f"{v / 1000:g} GHz")},
}
ORDER = ("time", "gpu", "util", "mem", "total", "power", "temp", "clock")


def stamp(ns: int, zone: str) -> str:
    """A sample's time as a script writes it: ISO-8601 with milliseconds in `zone` ("Z", "+02:00", "" for local
    wall time written without a zone, "smi" for nvidia-smi's own form, "epoch" for epoch seconds)."""
    if zone == "epoch":
        return f"{ns // 10**9}.{ns % 10**9 // 10**6:03d}"
    utc = datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(microseconds=ns // 1000)
    if zone == "smi":
        return utc.strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]
    if zone in ("Z", ""):
        return utc.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + zone
    sign = 1 if zone[0] == "+" else -1
    local = utc + sign * timedelta(hours=int(zone[1:3]), minutes=int(zone[4:6]))
    return local.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + zone


def sample_ns(sample: int) -> int:
    return T0_NS + sample * STEP_MS * 10**6


def script_log(path: Path, vocabulary: str = "script", zone: str = "Z", order: tuple[str, ...] = ORDER,
               extra: dict[str, Callable[[int, int], str]] | None = None) -> Path:
    """The 4-GPU log, one row per GPU per sample, `STEP_MS` apart, in a vocabulary, zone and column order."""
    vocab = VOCABULARIES[vocabulary]
    extra = extra or {}
    lines = [",".join([vocab[c][0] for c in order] + list(extra))]
    for k in range(SAMPLES):
        for g in range(GPUS):
            r = readings(k, g)
            cells = {"time": stamp(sample_ns(k), zone), "gpu": str(g),
                     **{c: vocab[c][1](r[c]) for c in ORDER[2:]}}
            lines.append(",".join([cells[c] for c in order] + [f(k, g) for f in extra.values()]))
    path.write_text("\n".join(lines) + "\n")
    return path


def _read(path: Path) -> T.Timeline:
    return read_file(path, ReadOptions(cache=False))


def _canonical(counters: pd.DataFrame) -> pd.DataFrame:
    """The counters table in an order that does not depend on the log's column order."""
    out = counters.assign(metric=counters["metric"].astype(str))
    return out.sort_values(["device", "metric", "ts_ns"], ignore_index=True)


def _series(tl: T.Timeline, metric: str, device: int) -> tuple[np.ndarray, np.ndarray]:
    c = tl.counters
    c = c[(c["metric"].astype(str) == metric) & (c["device"] == device)]
    return c["ts_ns"].to_numpy(), c["value"].to_numpy()


# --- reading -----------------------------------------------------------------------------------------------
def test_script_log_keeps_every_sample_of_every_gpu_with_its_millisecond_time_in_utc(tmp_path):
    tl = _read(script_log(tmp_path / "gpu.csv"))
    src = tl.sources[0]
    assert (src.events_read, src.events_kept, src.clock) == (780, 780, T.CLOCK_EPOCH)
    assert not any("not recognised" in w for w in src.warnings)
    for g in range(GPUS):
        ts, util = _series(tl, "sm_util_pct", g)
        assert len(ts) == SAMPLES == len(np.unique(ts))  # no sample merged with another
        assert ts[0] == T0_NS and ts[1] - ts[0] == STEP_MS * 10**6 and ts[-1] == sample_ns(SAMPLES - 1)
        assert util.mean() == pytest.approx(99.0 * len(BUSY) / SAMPLES)
        assert _series(tl, "power_w", g)[1].sum() == pytest.approx(sum(readings(k, g)["power"] for k in range(SAMPLES)))
        assert _series(tl, "fb_used_mib", g)[1].max() == 30000 + g
        assert _series(tl, "sm_clock_mhz", g)[1].max() == 1980
        assert _series(tl, "gpu_temp_c", g)[1][0] == 40 + g


def test_a_zone_is_converted_once_to_utc_and_local_times_stay_as_written(tmp_path):
    utc = _read(script_log(tmp_path / "z.csv", zone="Z"))
    east = _read(script_log(tmp_path / "e.csv", zone="+02:00"))
    west = _read(script_log(tmp_path / "w.csv", zone="-05:30"))
    epoch = _read(script_log(tmp_path / "s.csv", zone="epoch"))
    for tl in (east, west, epoch):
        assert tl.sources[0].clock == T.CLOCK_EPOCH
        pd.testing.assert_frame_equal(_canonical(tl.counters), _canonical(utc.counters))
    assert stamp(T0_NS, "+02:00") == "2025-03-01T14:00:00.123+02:00"  # the builder writes what it says
    # without a zone: the logging machine's wall time as written (CLOCK_WALL), still to the millisecond
    for zone in ("", "smi"):
        local = _read(script_log(tmp_path / f"l{zone}.csv", zone=zone))
        assert local.sources[0].clock == T.CLOCK_WALL
        ts, _ = _series(local, "sm_util_pct", 3)
        assert ts[0] == T0_NS and len(ts) == SAMPLES and ts[1] - ts[0] == STEP_MS * 10**6


@pytest.mark.parametrize("vocabulary", ["nvidia-smi", "camel", "short"])
def test_another_vocabulary_or_column_order_reads_the_same_counters(tmp_path, vocabulary):
    base = _read(script_log(tmp_path / "base.csv"))
    other = _read(script_log(tmp_path / "other.csv", vocabulary, order=tuple(reversed(ORDER))))
    pd.testing.assert_frame_equal(_canonical(other.counters), _canonical(base.counters))


def test_unmapped_columns_are_kept_and_text_columns_skipped(tmp_path):
    tl = _read(script_log(tmp_path / "gpu.csv", extra={"gpu_name": lambda k, g: "NVIDIA H100 80GB HBM3",
                                                       "train_step": lambda k, g: str(k)}))
    assert "columns not recognised, kept as smi_<name>: train_step" in tl.sources[0].warnings
    assert set(tl.counters["metric"].astype(str)) == {"sm_util_pct", "fb_used_mib", "fb_total_mib", "power_w",
                                                      "gpu_temp_c", "sm_clock_mhz", "smi_train_step"}


def test_mixed_zones_are_refused(tmp_path):
    path = tmp_path / "gpu.csv"
    path.write_text("timestamp,gpu_index,utilization_gpu_percent\n2025-03-01T12:00:00.123Z,0,5\n"
                    "2025-03-01T12:00:01.123,0,6\n")
    with pytest.raises(InputError, match="some timestamps give a time zone and some do not"):
        _read(path)


@pytest.mark.parametrize(("header", "metric"), [
    # nvidia-smi's own fields
    ("utilization.gpu [%]", "sm_util_pct"), ("utilization.memory [%]", "mem_util_pct"),
    ("utilization.encoder [%]", "enc_util_pct"), ("power.draw [W]", "power_w"),
    ("power.draw.average [W]", "power_w"), ("power.draw.instant [W]", "power_instant_w"),
    ("power.limit [W]", "power_limit_w"), ("enforced.power.limit [W]", "power_limit_w"),
    ("clocks.sm [MHz]", "sm_clock_mhz"), ("clocks.current.graphics [MHz]", "graphics_clock_mhz"),
    ("clocks.mem [MHz]", "mem_clock_mhz"), ("memory.used [MiB]", "fb_used_mib"), ("memory.free [MiB]", "fb_free_mib"),
    ("memory.total [MiB]", "fb_total_mib"), ("temperature.gpu", "gpu_temp_c"), ("temperature.memory", "mem_temp_c"),
    ("fan.speed [%]", "fan_pct"), ("pstate", "pstate"),
    # what scripts write
    ("utilization_gpu_percent", "sm_util_pct"), ("gpu_util", "sm_util_pct"), ("gpu_utilization", "sm_util_pct"),
    ("util_gpu", "sm_util_pct"), ("GPU Util %", "sm_util_pct"), ("gpuUtil", "sm_util_pct"),
    ("memory_used_mib", "fb_used_mib"), ("mem_used_mb", "fb_used_mib"), ("memUsedGB", "fb_used_mib"),
    ("vram_used_mb", "fb_used_mib"), ("power_draw_w", "power_w"), ("power_w", "power_w"),
    ("gpu_power (W)", "power_w"), ("power_limit_w", "power_limit_w"), ("sm_clock_mhz", "sm_clock_mhz"),
    ("mem_clock_mhz", "mem_clock_mhz"), ("gpu_temp_c", "gpu_temp_c"), ("mem_util", "mem_util_pct"),
    # other quantities, other devices, ids and times: no counter metric
    ("power.max_limit [W]", None), ("power.default_limit [W]", None), ("clocks.max.sm [MHz]", None),
    ("clocks.applications.graphics [MHz]", None), ("clocks_event_reasons.active", None),
    ("memory_used_percent", None), ("cpu_percent", None), ("ram_used_mb", None), ("gpu_index", None),
    ("gpu_id", None), ("timestamp", None), ("name", None), ("epoch", None), ("loss", None),
])
def test_a_header_means_its_metric_by_its_words(header, metric):
    assert meaning(header).metric == metric


@pytest.mark.parametrize(("header", "is_id", "is_time"), [
    ("index", True, False), ("gpu_index", True, False), ("gpu_id", True, False), ("gpuId", True, False),
    ("pci.bus_id", True, False), ("device", True, False), ("timestamp", False, True), ("time", False, True),
    ("ts", False, True), ("gpu_name", False, False), ("epoch", False, False)])
def test_a_header_that_names_the_gpu_or_the_time(header, is_id, is_time):
    m = meaning(header)
    assert (m.is_gpu_id, m.is_time) == (is_id, is_time)


def test_a_training_metrics_csv_with_one_gpu_column_is_no_gpu_log():
    assert not sniff(b"epoch,loss,lr,gpu_mem_mb\n1,0.5,0.001,2048\n")
    assert sniff(b"timestamp,gpu_index,utilization_gpu_percent,power_draw_w\n")
    assert sniff(b"gpu,gpu_util,mem_used_mb\n0,5,2048\n")  # two readings: a GPU log without times


# --- power beside utilisation --------------------------------------------------------------------------------
def _diagnosis(path: Path) -> dict:
    data = ta.analyze(path, ta.Options(find_logs_beside=False)).to_data()
    assert reconcile(data) > 0  # every quoted percentage is its figures' share
    return data["diagnosis"]


def test_a_lower_power_phase_without_a_limit_is_said_but_not_taken_for_light_work(tmp_path):
    # no power limit logged: the 400 W phase is only another phase of the log (other kernels draw other power while
    # each keeps the SMs busy), so the 220 W phase is said, and the GPUs busy in time are gpu_bound
    d = _diagnosis(script_log(tmp_path / "gpu.csv"))
    assert d["primary"] == "gpu_bound"
    assert d["headline"] == "4 GPU(s) busy: SM utilisation 99% on average over the job; no sample at 0%."
    util, power = d["findings"]
    assert util["id"] == "gpu_utilisation" and util["title"] == "SM utilisation of 4 GPUs over the job"
    assert util["evidence"][0] == d["headline"]
    assert util["evidence"][1] == "GPU 0: SM utilisation 99.0% on average over the job (120 samples), never at 0%"
    assert power["id"] == "gpu_power" and power["severity"] == "low"
    assert power["title"] == ("2 of 4 GPUs (the lightest, GPU 0) at lower power in part of their busy time: "
                              "utilisation 99% drawing 55% of the power of its hardest-working phase")
    # over the job (the idle head and tail set apart): GPU 0's 120 samples, 40 at 400 W then 80 at 220 W, all at
    # 99%: median 220 W; the 95th percentile of its busy power 400 W
    assert power["evidence"][0] == (
        "GPU 0: 120 of 120 samples at 90% utilisation or more, at 99% on average and a median 220 W: 55% of the 400 W "
        "it draws in its hardest-working phase (the 95th percentile of its busy power; no power limit logged); 80 of them "
        "at under 70% of that; SM clock 1980 MHz while busy (highest logged 1980 MHz)")
    assert power["evidence"][2].startswith("GPU 2: 120 of 120 samples at 90% utilisation or more, at 99% on average "
                                           "and a median 400 W: 100% of the 400 W")
    assert "SM occupancy was not measured" in power["evidence"][4]
    assert "no power limit is logged to say how hard either worked" in power["evidence"][5]
    assert power["figures"]["gpu0_busy_power_w"] == 220 and power["figures"]["gpu0_hard_power_w"] == 400
    assert "saturated" not in " ".join([power["title"], *power["evidence"]])
    # the idle head and tail (40 and 35 samples at 0%) are set apart: the figures are of the job
    assert "set apart" in d["headline_detail"]


def test_power_is_compared_with_the_logged_limit(tmp_path):
    limit = {"power_limit_w": lambda k, g: "700.00"}
    d = _diagnosis(script_log(tmp_path / "gpu.csv", extra=limit))
    assert d["primary"] == "undetermined"
    assert d["headline"] == ("4 GPU(s) busy in time but not saturated: utilisation 99% on average over the job, with "
                             "4 of them drawing under 70% of their power limit while busy; no sample at 0%.")
    f, util = d["findings"]
    assert f["id"] == "gpu_power" and f["severity"] == "medium" and util["id"] == "gpu_utilisation"
    # every GPU busy at 400 W or less of 700 W (57%): all four busy in time, not saturated
    assert f["title"] == ("4 of 4 GPUs (the lightest, GPU 0) busy in time but not saturated: utilisation 99% drawing "
                          "31% of its power limit")
    assert "a median 220 W: 31% of its 700 W limit" in f["evidence"][0]
    assert "a median 400 W: 57% of its 700 W limit" in f["evidence"][3]
    assert "SM occupancy was not measured" in d["headline_detail"]


def test_a_gpu_that_works_hard_while_busy_is_gpu_bound_and_said_so(tmp_path):
    path = tmp_path / "gpu.csv"
    rows = [f"{stamp(sample_ns(k), 'Z')},0,{95 + k % 5},{650 + k % 3}.0,700" for k in range(60)]
    path.write_text("timestamp,gpu_id,gpu_util,power_w,power_limit_w\n" + "\n".join(rows) + "\n")
    d = _diagnosis(path)
    assert d["primary"] == "gpu_bound"
    # 60 samples at 95-99% (12 of each): 97% on average, never 0%
    assert d["headline"] == "1 GPU(s) busy: SM utilisation 97% on average over the log; no sample at 0%."
    util, f = d["findings"]
    assert util["title"] == "SM utilisation of 1 GPU over the log" and util["evidence"] == [d["headline"]]
    assert f["title"] == "How hard the GPU worked: power beside utilisation" and f["severity"] == "low"
    assert "60 of 60 samples at 90% utilisation or more, at 97% on average and a median 651 W: 93% of its 700 W " \
           "limit" in f["evidence"][0]
    assert "SM occupancy was not measured" in f["evidence"][1]


def test_the_same_log_in_another_zone_vocabulary_and_order_gives_the_same_verdict_and_figures(tmp_path):
    base = _diagnosis(script_log(tmp_path / "a.csv"))
    for i, (vocab, zone, order) in enumerate([("nvidia-smi", "+02:00", tuple(reversed(ORDER))),
                                              ("camel", "epoch", ORDER), ("short", "-05:30", ORDER[::-1])]):
        other = _diagnosis(script_log(tmp_path / f"b{i}.csv", vocab, zone, order))
        assert (other["primary"], other["headline"], other["headline_figures"]) == \
               (base["primary"], base["headline"], base["headline_figures"])
        assert [(f["title"], f["evidence"], f["figures"]) for f in other["findings"]] == \
               [(f["title"], f["evidence"], f["figures"]) for f in base["findings"]]


def test_the_hardest_phase_of_a_mostly_idle_gpu_is_its_busy_power_not_its_idle_draw(tmp_path):
    # 100 samples: 2 busy ones at 95% drawing 48 and 52 W, the rest idle at 11.5 W: the hardest phase is that of the
    # busy samples (95th percentile of 48 and 52: 51.8 W), never the idle draw, so the share stays within 100%
    path = tmp_path / "gpu.csv"
    rows = [f"{stamp(sample_ns(k), 'Z')},0,{95 if k in (50, 51) else 0},{(48 if k == 50 else 52) if k in (50, 51) else 11.5}"
            for k in range(100)]
    path.write_text("timestamp,gpu_id,gpu_util,power_w\n" + "\n".join(rows) + "\n")
    d = _diagnosis(path)
    (f,) = [f for f in d["findings"] if f["id"] == "gpu_power"]
    assert f["figures"]["gpu0_busy_power_w"] == 50 and f["figures"]["gpu0_hard_power_w"] == 51.8
    assert "a median 50 W: 97% of the 51.8 W it draws in its hardest-working phase" in f["evidence"][0]
