"""Builds a trace with a known GPU busy pattern and nvidia-smi logs derived from it, written on
another machine's clock (zone + skew), for alignment and counter tests."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import numpy as np
from kineto_builder import KinetoTrace

S = 1_000_000_000
# 2024-03-05 10:00:00 UTC: away from any DST change in the zones the tests use.
T0_NS = 1_709_632_800 * S


@dataclass
class BusyTrace:
    path: Path
    t0_ns: int  # epoch ns of the trace's time zero
    starts_ns: np.ndarray  # kernel intervals, epoch ns
    ends_ns: np.ndarray

    def busy_fraction(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Busy fraction of each [lo, hi) (kernels never overlap here)."""
        cov = np.clip(np.minimum(self.ends_ns[None, :], hi[:, None])
                      - np.maximum(self.starts_ns[None, :], lo[:, None]), 0, None).sum(axis=1)
        return cov / (hi - lo)


def busy_trace(path: Path, seconds: int = 90, seed: int = 7, t0_ns: int = T0_NS) -> BusyTrace:
    """A trace whose GPU is busy a different, random-ish fraction of each 1-s slot: blocks of
    2-8 s at one level, levels 0-100%, several kernels per slot."""
    rng = np.random.default_rng(seed)
    levels = []
    while len(levels) < seconds:
        levels += [float(rng.choice([0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0]))] * int(rng.integers(2, 9))
    trace = KinetoTrace(base_ns=t0_ns)
    starts, ends = [], []
    for k, level in enumerate(levels[:seconds]):
        n = 4
        for i in range(n):  # n kernels, each level x 1/n of its quarter-second
            slot_us = k * 1_000_000 + i * 250_000
            dur_us = int(level * 250_000)
            if dur_us:
                trace.kernel(slot_us, dur_us)
                starts.append(t0_ns + slot_us * 1000)
                ends.append(t0_ns + (slot_us + dur_us) * 1000)
    trace.host("ProfilerStep#1", 0, seconds * 1_000_000, cat="user_annotation")
    trace.write(path)
    return BusyTrace(path, t0_ns, np.array(starts, dtype=np.int64), np.array(ends, dtype=np.int64))


def sample_times(trace: BusyTrace, before_s: int, after_s: int, seconds: int,
                 phase_ns: int = 370_000_000) -> np.ndarray:
    """Epoch sample times at 1 Hz, from before_s before the trace to after_s after its end."""
    return trace.t0_ns + phase_ns + np.arange(-before_s, seconds + after_s, dtype=np.int64) * S


def utilisation(trace: BusyTrace, ends_ns: np.ndarray, period_ns: int = S) -> np.ndarray:
    """What nvidia-smi would print: busy percent over the past period, as an integer."""
    return np.rint(100 * trace.busy_fraction(ends_ns - period_ns, ends_ns)).astype(int)


def local_wall(epoch_ns: int, zone: str, skew_ns: int) -> datetime:
    """The logging machine's wall clock at an epoch time: its zone, and a clock skew_ns ahead."""
    instant = datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(microseconds=(epoch_ns + skew_ns) // 1000)
    return instant.astimezone(ZoneInfo(zone)).replace(tzinfo=None)


def dmon_text(ends_ns: np.ndarray, util: np.ndarray, zone: str, skew_ns: int, times: str = "DT",
              gpus: int = 1, busy_gpu: int = 0) -> str:
    """`nvidia-smi dmon -s pu -o <times>` output (times "DT", "T" or "" for none); GPU
    `busy_gpu` shows `util`, the others 0."""
    cols = ["gpu", "pwr", "gtemp", "mtemp", "sm", "mem", "enc", "dec", "mclk", "pclk"]
    units = ["Idx", "W", "C", "C", "%", "%", "%", "%", "MHz", "MHz"]
    head_t = {"DT": (["#Date", "Time"], ["#YYYYMMDD", "HH:MM:SS"]), "T": (["#Time"], ["#HH:MM:SS"]),
              "": ([], [])}[times]
    first = ("" if times else "# ")
    lines = [" ".join(head_t[0]) + (" " if times else first) + " ".join(f"{c:>6}" for c in cols),
             " ".join(head_t[1]) + (" " if times else first) + " ".join(f"{u:>6}" for u in units)]
    for t, u in zip(ends_ns.tolist(), util.tolist()):
        wall = local_wall(t, zone, skew_ns)
        stamp = {"DT": wall.strftime(" %Y%m%d %H:%M:%S"), "T": wall.strftime(" %H:%M:%S"), "": ""}[times]
        for g in range(gpus):
            sm = u if g == busy_gpu else 0
            vals = [g, 60 + sm, 40, "-", sm, sm // 2, 0, 0, 1593, 1410 if sm else 210]
            lines.append(stamp + " " + " ".join(f"{v:>6}" for v in vals) + " ")
    return "\n".join(lines) + "\n"


def smi_csv_text(ends_ns: np.ndarray, util: np.ndarray, zone: str, skew_ns: int) -> str:
    lines = ["timestamp, index, name, utilization.gpu [%], utilization.memory [%], power.draw [W]"]
    for t, u in zip(ends_ns.tolist(), util.tolist()):
        wall = local_wall(t, zone, skew_ns)
        stamp = wall.strftime("%Y/%m/%d %H:%M:%S.") + f"{wall.microsecond // 1000:03d}"
        lines.append(f"{stamp}, 0, NVIDIA Test GPU, {u} %, {u // 2} %, {60 + u:.2f} W")
    return "\n".join(lines) + "\n"


def trace_with_dated_log(tmp: Path) -> tuple[Path, Path]:
    """A 5-step epoch-clock trace and an 8-sample dated dmon log beside it (for option-bound tests)."""
    trace = KinetoTrace(base_ns=1_700_000_000_000_000_000)
    for i in range(5):
        trace.step(i, i * 1_000_000, 900_000).launched(i * 1_000_000 + 10, 5, i * 1_000_000 + 20, 500_000)
    trace_path = trace.write(tmp / "t.json")
    log = tmp / "g.log"
    log.write_text("#Date Time gpu sm\n#YYYYMMDD HH:MM:SS Idx %\n"
                   + "".join(f"20231114 22:13:{20 + i:02d} 0 {50 + i}\n" for i in range(8)))
    return trace_path, log
