"""Real-world messy GPU logs, made here: each read with its row count and means asserted.

- the default `nvidia-smi` table printed before the `--query-gpu ... --format=csv` rows;
- NUL-byte padding (a log rotated with copytruncate reads as NULs up to where the writer was);
- the CSV header repeated before every sample (a loop calling nvidia-smi once per sample);
- memory and power columns but no utilisation: idle GPUs judged from memory and power, and said so.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import traceanalyzer as ta
from traceanalyzer.formats import ReadOptions
from traceanalyzer.formats.registry import file_kind, read_file

HEADER = "timestamp, index, name, utilization.gpu [%], memory.used [MiB], power.draw [W]"

DEFAULT_TABLE = """Mon Jan 15 09:12:03 2024
+---------------------------------------------------------------------------------------+
| NVIDIA-SMI 535.104.05             Driver Version: 535.104.05   CUDA Version: 12.2     |
|-----------------------------------------+----------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id        Disp.A | Volatile Uncorr. ECC |
| Fan  Temp   Perf          Pwr:Usage/Cap |         Memory-Usage | GPU-Util  Compute M. |
|                                         |                      |               MIG M. |
|=========================================+======================+======================|
|   0  NVIDIA A100-SXM4-80GB          On  | 00000000:07:00.0 Off |                    0 |
| N/A   33C    P0              61W / 400W |      4MiB / 81920MiB |      0%      Default |
|                                         |                      |             Disabled |
+-----------------------------------------+----------------------+----------------------+
|   1  NVIDIA A100-SXM4-80GB          On  | 00000000:0F:00.0 Off |                    0 |
| N/A   31C    P0              60W / 400W |      4MiB / 81920MiB |      0%      Default |
|                                         |                      |             Disabled |
+-----------------------------------------+----------------------+----------------------+

+---------------------------------------------------------------------------------------+
| Processes:                                                                            |
|  GPU   GI   CI        PID   Type   Process name                            GPU Memory |
|        ID   ID                                                             Usage      |
|=======================================================================================|
|  No running processes found                                                           |
+---------------------------------------------------------------------------------------+
"""


def _rows(samples: int, gpus: int = 2) -> tuple[list[str], np.ndarray]:
    """One row per GPU per second; GPU 0 busy (util 50..99), GPU 1 idle (0). Returns rows and util."""
    rows, util = [], np.zeros((samples, gpus))
    for s in range(samples):
        for g in range(gpus):
            u = 50 + (s * 7) % 50 if g == 0 else 0
            util[s, g] = u
            rows.append(f"2024/01/15 09:12:{4 + s:02d}.{100 + g:03d}, {g}, NVIDIA A100-SXM4-80GB, {u} %, "
                        f"{30000 if g == 0 else 4} MiB, {300.5 if g == 0 else 61.25} W")
    return rows, util


def _read(path: Path):
    assert file_kind(path) == "counters"
    return read_file(path, ReadOptions(cache=False))


def _mean(tl, device: int, metric: str) -> float:
    c = tl.counters
    sel = (c["device"].to_numpy() == device) & (c["metric"].astype(str).to_numpy() == metric)
    return float(np.nanmean(c["value"].to_numpy()[sel]))


def _rows_of(tl, metric: str = "sm_util_pct") -> int:
    return int((tl.counters["metric"].astype(str) == metric).sum())


def test_csv_after_the_default_table(tmp_path):
    rows, util = _rows(20)
    path = tmp_path / "gpu.log"
    path.write_text(DEFAULT_TABLE + HEADER + "\n" + "\n".join(rows) + "\n")
    tl = _read(path)
    assert _rows_of(tl) == 40
    assert _mean(tl, 0, "sm_util_pct") == pytest.approx(util[:, 0].mean())
    assert _mean(tl, 1, "sm_util_pct") == 0.0
    assert _mean(tl, 0, "power_w") == pytest.approx(300.5)
    src = tl.sources[0]
    assert src.not_kept["table_line"] == DEFAULT_TABLE.count("\n") - 1  # the blank line is no table line
    assert any("nvidia-smi table" in w for w in src.warnings)


def test_table_printed_again_between_samples(tmp_path):
    rows, util = _rows(10)
    path = tmp_path / "gpu.log"
    path.write_text(DEFAULT_TABLE + HEADER + "\n" + "\n".join(rows[:10]) + "\n" + DEFAULT_TABLE + HEADER + "\n"
                    + "\n".join(rows[10:]) + "\n")
    tl = _read(path)
    assert _rows_of(tl) == 20
    assert _mean(tl, 0, "sm_util_pct") == pytest.approx(util[:, 0].mean())
    assert "wrong_value_count" not in tl.sources[0].not_kept


@pytest.mark.parametrize("where", ["start", "end", "middle"])
def test_nul_padding(tmp_path, where):
    rows, util = _rows(15)
    text = (HEADER + "\n" + "\n".join(rows) + "\n").encode()
    pad = b"\x00" * 4096
    if where == "start":
        data = pad + text
    elif where == "end":
        data = text + pad
    else:  # rotated with copytruncate while the writer kept its offset: NULs, then the rows that followed
        half = text.index(rows[10].encode())
        data = text[:half] + pad + text[half:]
    path = tmp_path / "gpu.csv"
    path.write_bytes(data)
    tl = _read(path)
    assert _rows_of(tl) == 30
    assert _mean(tl, 0, "sm_util_pct") == pytest.approx(util[:, 0].mean())
    assert _mean(tl, 0, "fb_used_mib") == 30000.0
    src = tl.sources[0]
    assert src.not_kept["nul_byte"] == 4096
    assert any("4096 NUL bytes" in w for w in src.warnings)


def test_header_before_every_sample(tmp_path):
    rows, util = _rows(12)
    lines = []
    for s in range(12):
        lines += [HEADER, rows[2 * s], rows[2 * s + 1]]
    path = tmp_path / "gpu.csv"
    path.write_text("\n".join(lines) + "\n")
    tl = _read(path)
    assert _rows_of(tl) == 24
    assert _mean(tl, 0, "sm_util_pct") == pytest.approx(util[:, 0].mean())
    assert _mean(tl, 1, "power_w") == pytest.approx(61.25)
    assert not tl.sources[0].not_kept
    ts = np.unique(tl.counters["ts_ns"].to_numpy()[tl.counters["device"].to_numpy() == 0])
    assert len(ts) == 12 and np.all(np.diff(ts) == 1_000_000_000)


def _no_util_log(path: Path, samples: int = 30) -> Path:
    lines = ["timestamp, index, memory.used [MiB], memory.total [MiB], power.draw [W], power.limit [W]"]
    for s in range(samples):
        lines.append(f"2024/01/15 09:12:{s:02d}.000, 0, {41000 + s} MiB, 81920 MiB, {350 + s % 3} W, 400.00 W")
        lines.append(f"2024/01/15 09:12:{s:02d}.001, 1, 4 MiB, 81920 MiB, {60 + s % 2} W, 400.00 W")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_log_without_utilisation_judges_idle_from_memory_and_power(tmp_path):
    path = _no_util_log(tmp_path / "gpu.csv")
    tl = _read(path)
    assert _rows_of(tl, "fb_used_mib") == 60 and _rows_of(tl, "sm_util_pct") == 0
    assert _mean(tl, 0, "fb_used_mib") == pytest.approx(41000 + 14.5)
    assert _mean(tl, 1, "power_w") == pytest.approx(60.5)
    assert any("no utilisation column" in w for w in tl.sources[0].warnings)
    a = ta.analyze(path, ta.Options(cache=False))
    assert a.diagnosis.primary == "gpu_underused"
    (f,) = a.diagnosis.findings
    assert f.title == "GPU 1 is not used at all"
    assert f.figures["memory_used_max_mib"] == 4.0 and f.figures["power_max_w"] == 61.0
    assert "judged from memory and power" in f.evidence[0]
    assert "no utilisation column" in a.to_text() or "judged from memory and power" in a.to_text()


def test_log_without_utilisation_and_busy_gpus_is_not_called_idle(tmp_path):
    lines = ["timestamp, index, memory.used [MiB], power.draw [W]"]
    for s in range(10):
        lines.append(f"2024/01/15 09:12:{s:02d}.000, 0, 41000 MiB, 350 W")
    path = tmp_path / "gpu.csv"
    path.write_text("\n".join(lines) + "\n")
    a = ta.analyze(path, ta.Options(cache=False))
    assert a.diagnosis.primary != "gpu_underused"
    assert not a.diagnosis.findings


# --- ROCm traces: their GPUs named rocm:N (PyTorch calls them "cuda" devices; the trace says HIP) --------
def _rocm_trace(how: str):
    from tests.kineto_builder import KinetoTrace

    t = KinetoTrace()
    if how == "header":
        t.header.update({"roctracer_version": 4.1, "hip_runtime_version": 60443483})
    for i in range(3):
        t.step(i + 1, 1000 + i * 1000, 1000)
        t.kernel(1000 + i * 1000 + 20, 500)
        t.runtime("hipLaunchKernel" if how == "names" else "cudaLaunchKernel", 1000 + i * 1000 + 10, 5, t._corr)
    return t


@pytest.mark.parametrize("how, label", [("header", "rocm:0"), ("names", "rocm:0"), ("cuda", "cuda:0")])
def test_rocm_devices_are_named_rocm(tmp_path, how, label):
    a = ta.analyze(_rocm_trace(how).write(tmp_path / "t.json"), ta.Options(cache=False, find_logs_beside=False))
    (d,) = a.ranks[0].devices
    assert d.device == label and d.index == 0
    data = a.to_data()
    rank = data["ranks"][0]
    assert [x["device"] for x in rank["diagnosis"]["devices"]] == [label]
    assert {g["device"] for g in rank["diagnosis"]["gaps"]} <= {label}
    assert set(rank["devices"][0]) == set(ta.analyze(_rocm_trace("cuda").write(tmp_path / "c.json"),
                                                     ta.Options(cache=False)).to_data()["ranks"][0]["devices"][0])
    assert f"{label}: busy" in a.to_text()


def test_dmon_memory_only_log_says_it_has_no_utilisation(tmp_path):
    path = tmp_path / "dmon.log"
    path.write_text("# gpu     fb   bar1   ccpm \n# Idx     MB     MB     MB \n"
                    + "".join(f"    {g}      {4 if g else 30000}      1      0 \n" for _ in range(3) for g in range(2)))
    tl = _read(path)
    assert _rows_of(tl, "fb_used_mib") == 6 and _mean(tl, 0, "fb_used_mib") == 30000.0
    assert any("no utilisation column" in w for w in tl.sources[0].warnings)
    a = ta.analyze(path, ta.Options(cache=False))
    assert [f.title for f in a.diagnosis.findings] == ["GPU 1 is not used at all"]


def test_a_dcgm_csv_with_nul_padding_is_read_and_the_padding_counted(tmp_path):
    """NUL padding before a DCGM long CSV's header (found by the fuzz test): removed, counted, rows read."""
    rows = "".join(f"{g},{1718783836956328 + 500000 * i},gpu_utilization,{10 * i}\n" for i in range(4) for g in (0, 1))
    path = tmp_path / "gpu.csv"
    path.write_bytes(b"\x00" * 3 + b"GPUId,TimeStampUs,Field,Values\n" + rows.encode())
    tl = read_file(path, ReadOptions(cache=False))
    (source,) = tl.sources
    assert source.not_kept["nul_byte"] == 3 and source.events_read == 8
    util = tl.counters[tl.counters["metric"] == "sm_util_pct"]
    assert len(util) == 8 and util["value"].mean() == 15.0
