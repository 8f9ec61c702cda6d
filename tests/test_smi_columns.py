"""nvidia-smi --query-gpu CSV logs read by what their columns mean: the GPU id column decided by its values
(round-robin per sample), times found under another name, custom headers, and the sampling interval of a
log without times (given, or assumed and said). Every log is built here, so every figure is exact."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from traceanalyzer import timeline as T
from traceanalyzer.formats import ReadOptions, read_file

S = 1_000_000_000
GPUS = 8


def _read(tmp_path: Path, text: str, **opts: object) -> T.Timeline:
    path = tmp_path / "gpu.csv"
    path.write_text(text)
    return read_file(path, ReadOptions(**opts))  # type: ignore[arg-type]


def _stamp(second: int, ms: int = 0) -> str:
    t = datetime(2024, 1, 16, 14, 44) + timedelta(seconds=second, milliseconds=ms)
    return t.strftime("%Y/%m/%d %H:%M:%S.") + f"{ms:03d}"


def _util(sample: int, gpu: int) -> int:
    return (7 * sample + 11 * gpu) % 100


def _series(tl: T.Timeline, metric: str, device: int) -> tuple[np.ndarray, np.ndarray]:
    c = tl.counters
    c = c[(c["metric"] == metric) & (c["device"] == device)]
    return c["ts_ns"].to_numpy(), c["value"].to_numpy()


def _eight_gpu_log(samples: int, index: str, every_s: int = 1, time_name: str = "timestamp") -> str:
    """`samples` samples of 8 GPUs, one row per GPU (timestamps a few ms apart, as nvidia-smi writes them);
    `index` is what the script put in its column named index: "row" (a row number), "sample" (a sample
    number) or "gpu" (the GPU index, as nvidia-smi's own field)."""
    lines = [f"{time_name}, index, gpu, utilization.gpu [%], memory.used [MiB]"]
    row = 0
    for k in range(samples):
        for g in range(GPUS):
            idx = {"row": row, "sample": k, "gpu": g}[index]
            lines.append(f"{_stamp(k * every_s, 2 * g)}, {idx}, {g}, {_util(k, g)} %, {1000 + g} MiB")
            row += 1
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("index", ["row", "sample"])
def test_custom_header_index_that_is_no_gpu_index_gives_the_eight_gpus_of_the_gpu_column(tmp_path, index):
    tl = _read(tmp_path, _eight_gpu_log(12, index))
    assert sorted(tl.counters["device"].unique().tolist()) == list(range(GPUS))
    for g in range(GPUS):
        ts, util = _series(tl, "sm_util_pct", g)
        assert util.tolist() == [_util(k, g) for k in range(12)]
        assert ts[-1] - ts[0] == 11 * S  # 12 samples 1 s apart, from the timestamps
        assert _series(tl, "fb_used_mib", g)[1].tolist() == [1000 + g] * 12
    assert any("column 'index' is not the GPU index here" in w and "GPUs from column 'gpu'" in w
               for w in tl.sources[0].warnings)
    assert not any("smi_index" in w or "smi_gpu" in w for w in tl.sources[0].warnings)  # ids, not counters


def test_nvidia_smi_index_is_kept_when_it_is_the_gpu_index(tmp_path):
    tl = _read(tmp_path, _eight_gpu_log(3, "gpu"))
    assert sorted(tl.counters["device"].unique().tolist()) == list(range(GPUS))
    assert not any("index" in w for w in tl.sources[0].warnings)


def test_index_of_gpus_listed_out_of_order_are_kept_as_numbers(tmp_path):
    """`-i 3,1`: index values are the GPUs' own numbers, not positions."""
    text = "timestamp, index, utilization.gpu [%]\n" + "".join(
        f"{_stamp(k, g)}, {g}, {10 * k + g} %\n" for k in range(3) for g in (3, 1))
    tl = _read(tmp_path, text)
    assert sorted(tl.counters["device"].unique().tolist()) == [1, 3]
    assert _series(tl, "sm_util_pct", 3)[1].tolist() == [3, 13, 23]


def test_bus_ids_number_the_gpus_in_order_of_appearance(tmp_path):
    text = "timestamp, pci.bus_id, utilization.gpu [%]\n" + "".join(
        f"{_stamp(k, g)}, 00000000:{0x1A + g:02X}:00.0, {10 * k + g} %\n" for k in range(4) for g in range(3))
    tl = _read(tmp_path, text)
    assert sorted(tl.counters["device"].unique().tolist()) == [0, 1, 2]
    assert _series(tl, "sm_util_pct", 2)[1].tolist() == [2, 12, 22, 32]


def test_one_gpu_log_with_a_row_number_named_index_is_one_gpu(tmp_path):
    text = "timestamp, index, utilization.gpu [%]\n" + "".join(
        f"{_stamp(k)}, {k}, {k % 100} %\n" for k in range(105))
    tl = _read(tmp_path, text)
    assert tl.counters["device"].unique().tolist() == [0]
    assert _series(tl, "sm_util_pct", 0)[1].tolist() == [k % 100 for k in range(105)]
    assert any("column 'index' is not the GPU index here" in w and "read as one GPU" in w
               for w in tl.sources[0].warnings)


def test_one_sample_of_four_gpus_takes_the_index(tmp_path):
    text = "timestamp, index, utilization.gpu [%]\n" + "".join(f"{_stamp(0, g)}, {g}, {g} %\n" for g in range(4))
    tl = _read(tmp_path, text)
    assert sorted(tl.counters["device"].unique().tolist()) == [0, 1, 2, 3]


def test_times_under_another_name_give_the_real_span_of_a_10s_log(tmp_path):
    """A script's header: `time` for the timestamp, `gpu` for the GPU, short names with units. 105 samples
    taken every 10 s span 1040 s, not 104 s; `util [%]` and `mem [MiB]` are read by their meaning."""
    text = "time, gpu, util [%], mem [MiB]\n" + "".join(
        f"{_stamp(10 * k, g)}, {g}, {_util(k, g)} %, {500 + k} MiB\n" for k in range(105) for g in range(2))
    tl = _read(tmp_path, text)
    assert tl.sources[0].clock == T.CLOCK_WALL
    assert sorted(tl.counters["device"].unique().tolist()) == [0, 1]
    ts, util = _series(tl, "sm_util_pct", 1)
    assert (ts[-1] - ts[0]) == 1040 * S
    assert util.tolist() == [_util(k, 1) for k in range(105)]
    assert _series(tl, "fb_used_mib", 1)[1].tolist() == [500 + k for k in range(105)]
    assert not any("assumed" in w for w in tl.sources[0].warnings)


def test_log_without_times_is_spaced_by_the_interval_given_else_1s_with_a_warning(tmp_path):
    text = "index, utilization.gpu [%]\n" + "".join(f"{g}, {_util(k, g)} %\n" for k in range(105) for g in range(2))
    tl = _read(tmp_path, text)
    ts, _ = _series(tl, "sm_util_pct", 1)
    assert ts[-1] - ts[0] == 104 * S
    (warning,) = [w for w in tl.sources[0].warnings if "assumed" in w]
    assert "its 105 samples are assumed 1 s apart" in warning and "--dmon-interval" in warning
    tl = _read(tmp_path, text, dmon_interval_ns=10 * S)  # written with -l 10
    ts, util = _series(tl, "sm_util_pct", 1)
    assert ts[-1] - ts[0] == 1040 * S and util.tolist() == [_util(k, 1) for k in range(105)]
    assert not any("assumed" in w for w in tl.sources[0].warnings)


def test_non_finite_readings_are_missing_and_counted(tmp_path):
    text = "timestamp, index, utilization.gpu [%], power.draw [W]\n" \
           f"{_stamp(0)}, 0, 5 %, inf W\n{_stamp(1)}, 0, nan, 70 W\n{_stamp(2)}, 0, 7 %, -inf\n"
    tl = _read(tmp_path, text)
    assert np.isnan(_series(tl, "power_w", 0)[1]).tolist() == [True, False, True]
    assert np.isnan(_series(tl, "sm_util_pct", 0)[1]).tolist() == [False, True, False]
    assert "3 values that are not numbers read as missing" in tl.sources[0].warnings
