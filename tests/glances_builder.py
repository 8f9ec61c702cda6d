"""Builds glances exports (glances 3 and 4 CSV layouts) and input-bound traces with known answers."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path

from kineto_builder import KinetoTrace

BASE_S = 1_700_000_000  # the trace's first step, epoch seconds (2023-11-14 22:13:20 UTC)
STEP_US = 1_000_000


def input_bound_trace(path: Path, steps: int = 10, wait_us: Sequence[int] | int = 800_000,
                      base_s: int = BASE_S) -> Path:
    """`steps` steps of 1 s from `base_s`: a DataLoader wait of `wait_us[k]` us at each step's start, then
    one launched kernel filling the rest of the step (less 40 us)."""
    waits = [wait_us] * steps if isinstance(wait_us, int) else list(wait_us)
    t = KinetoTrace()
    for k in range(steps):
        ts = base_s * 1_000_000 + k * STEP_US
        t.step(k, ts, STEP_US)
        if waits[k]:
            t.dataloader(ts, waits[k])
        t.launched(ts + waits[k] + 10, 5, ts + waits[k] + 20, STEP_US - waits[k] - 40, op="aten::mm")
    t.write(path)
    return path


def _iso(epoch_s: float) -> str:
    """glances writes whole seconds; a fraction is kept when a test needs one."""
    spec = "seconds" if float(epoch_s).is_integer() else "milliseconds"
    return datetime.fromtimestamp(epoch_s, timezone.utc).isoformat(timespec=spec)


def _local(epoch_s: float, utc_offset_s: int) -> str:
    return (datetime(1970, 1, 1) + timedelta(seconds=epoch_s + utc_offset_s)).strftime("%Y-%m-%d %H:%M:%S")


def glances4_csv(path: Path, times_s: Sequence[float], user: Sequence[float], system: Sequence[float],
                 iowait: Sequence[float], read_bps: Sequence[float] | None = None, cores: int = 8) -> Path:
    """glances 4 layout: `timestamp` (local, here UTC), `now.iso` with its offset, dotted plugin fields,
    rates per disk (sda and its partition sda1, which must not be added) and interface."""
    read_bps = read_bps or [0.0] * len(times_s)
    head = ("timestamp,now.iso,now.custom,load.min1,load.cpucore,mem.percent,cpu.total,cpu.user,cpu.system,"
            "cpu.idle,cpu.iowait,cpu.cpucore,diskio.sda.read_bytes,diskio.sda.read_bytes_rate_per_sec,"
            "diskio.sda.write_bytes_rate_per_sec,diskio.sda.disk_name,diskio.sda1.read_bytes_rate_per_sec,"
            "diskio.loop0.read_bytes_rate_per_sec,network.lo.bytes_recv_rate_per_sec,"
            "network.eth0.bytes_recv_rate_per_sec,network.eth0.bytes_sent_rate_per_sec,fs./.percent")
    rows = [head]
    for t, u, s, w, r in zip(times_s, user, system, iowait, read_bps):
        idle = max(100.0 - u - s - w, 0.0)
        rows.append(f"{_local(t + 1, 0)},{_iso(t)},{_iso(t)} UTC,1.5,{cores},40.0,{100 - idle:.1f},{u},{s},"
                    f"{idle:.1f},{w},{cores},{int(r)},{r},1000.0,sda,{r},5000.0,9999.0,2000.0,100.0,50.0")
    path.write_text("\n".join(rows) + "\n")
    return path


def glances3_csv(path: Path, times_s: Sequence[float], user: Sequence[float], system: Sequence[float],
                 iowait: Sequence[float], read_bytes: Sequence[float] | None = None, since_s: float = 2.0,
                 utc_offset_s: int = 0, cores: int = 4) -> Path:
    """glances 3 layout: local `timestamp` only, underscored fields, bytes since the last refresh with
    each item's time_since_update, network rx/tx and their cumulative counters."""
    read_bytes = read_bytes or [0.0] * len(times_s)
    head = ("timestamp,cpu_total,cpu_user,cpu_system,cpu_idle,cpu_iowait,cpu_time_since_update,cpu_cpucore,"
            "load_min1,load_cpucore,mem_percent,memswap_percent,diskio_nvme0n1_time_since_update,"
            "diskio_nvme0n1_read_bytes,diskio_nvme0n1_write_bytes,diskio_nvme0n1p2_read_bytes,"
            "network_eth0_time_since_update,network_eth0_cumulative_rx,network_eth0_rx,network_eth0_tx")
    rows = [head]
    for t, u, s, w, r in zip(times_s, user, system, iowait, read_bytes):
        idle = max(100.0 - u - s - w, 0.0)
        rows.append(f"{_local(t, utc_offset_s)},{100 - idle:.1f},{u},{s},{idle:.1f},{w},{since_s},{cores},"
                    f"0.7,{cores},30.5,1.0,{since_s},{int(r)},4096,{int(r)},{since_s},123456789,3000,1000")
    path.write_text("\n".join(rows) + "\n")
    return path
