"""glances exports (`--export csv`, `--export json`) -> a `Timeline` holding the host's CPU, load,
memory, disk and network figures over time (`host_metrics`, described by one `HostLogInfo`), for
telling a CPU-bound input pipeline from a storage-bound one.

Detected by content, never by name: a CSV whose header starts with `timestamp` and names glances
plugin fields (`cpu.user` in glances 4, `cpu_user` in glances 3), or JSON objects keyed by glances
plugins (`"cpu": {"user": ...}`, one object per line). Columns are mapped by pattern
(`<plugin>[._]<field>`, `<plugin>[._]<item>[._]<field>` for disks and network interfaces), so plugins
glances adds or leaves out do not matter; a missing figure is simply absent.

* **time**: `now.iso` (glances 4: the sample's time with its UTC offset -> epoch clock) when present,
  else `timestamp` (the logging machine's local time -> wall clock, put on the trace's clock like
  nvidia-smi logs by `align.host_log_offset`). A sample describes the refresh period before it.
* **disk** read/write bytes/s: summed over whole disks; partitions of a listed disk, loop, ram, zram,
  optical and floppy devices, and device-mapper / md devices beside physical disks are left out (they
  would count the same bytes twice). glances 4 gives rates; glances 3 gives bytes since the last refresh,
  divided here by the item's `time_since_update` (else the sample period).
* **network** rx/tx bytes/s: summed over interfaces except loopback, likewise.

glances 3 writes the CSV header once although the number of columns varies from row to row (plugins
such as `irq` or `connections` list varying items): rows whose values do not match the header cannot
be mapped and are dropped and counted (`wrong_value_count`), with a warning saying how to avoid it.
glances' JSON export rewrites its file at every refresh, so it holds the latest sample only.
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

import numpy as np
import orjson
import pandas as pd

from .. import timeline as T
from ..errors import InputError
from ..timeline import HostLogInfo, Source, Timeline
from ._base import ReadOptions
from ._counters import drop_cut_last_row, drop_wrong_rows, parse_numbers

FORMAT_CSV = "glances csv"
FORMAT_JSON = "glances json"

# (plugin, field) -> metric; glances 3 and 4 share these names.
SCALARS = {
    ("cpu", "user"): "cpu_user_pct", ("cpu", "system"): "cpu_system_pct", ("cpu", "iowait"): "cpu_iowait_pct",
    ("cpu", "idle"): "cpu_idle_pct", ("cpu", "total"): "cpu_total_pct",
    ("load", "min1"): "load_1m", ("load", "min5"): "load_5m", ("load", "min15"): "load_15m",
    ("mem", "percent"): "mem_used_pct", ("memswap", "percent"): "swap_used_pct",
}
CORES = (("load", "cpucore"), ("cpu", "cpucore"), ("core", "log"))
RATES = ("disk_read_bytes_per_s", "disk_write_bytes_per_s", "net_rx_bytes_per_s", "net_tx_bytes_per_s")
METRICS = tuple(SCALARS.values()) + RATES  # every metric a log may hold, in display order

_ITEM = {
    "diskio": re.compile(r"^(?P<item>.+?)[._](?P<field>read_bytes_rate_per_sec|write_bytes_rate_per_sec"
                         r"|read_bytes|write_bytes|time_since_update)$"),
    "network": re.compile(r"^(?P<item>.+?)[._](?P<field>bytes_recv_rate_per_sec|bytes_sent_rate_per_sec"
                          r"|bytes_recv|bytes_sent|rx|tx|time_since_update)$"),
}
# field -> (metric, is a rate already)
_ITEM_FIELDS = {
    "read_bytes_rate_per_sec": ("disk_read_bytes_per_s", True), "read_bytes": ("disk_read_bytes_per_s", False),
    "write_bytes_rate_per_sec": ("disk_write_bytes_per_s", True), "write_bytes": ("disk_write_bytes_per_s", False),
    "bytes_recv_rate_per_sec": ("net_rx_bytes_per_s", True), "bytes_recv": ("net_rx_bytes_per_s", False),
    "rx": ("net_rx_bytes_per_s", False),
    "bytes_sent_rate_per_sec": ("net_tx_bytes_per_s", True), "bytes_sent": ("net_tx_bytes_per_s", False),
    "tx": ("net_tx_bytes_per_s", False),
}
_SKIP_DISK = re.compile(r"^(?:loop|ram|zram|sr|fd)\d*$")
_VIRTUAL_DISK = re.compile(r"^(?:dm-|md)\d+$")
_SKIP_NET = re.compile(r"^lo\d*$")
_TIME_ISO = ("now.iso", "now_iso")
_TIME_LOCAL = ("timestamp",)
_PLUGIN = re.compile(r"^([A-Za-z0-9]+)[._](.+)$")
_CSV_HEADER = re.compile(rb"^\s*\"?timestamp\"?,")
_CSV_FIELD = re.compile(rb"(?:^|,)\"?(?:cpu[._](?:user|system|iowait|total)|load[._]min1|mem[._]percent)\"?(?:,|\r?$)",
                        re.MULTILINE)
_JSON_CPU = re.compile(rb"\"cpu\"\s*:\s*\{[^{}]*\"(?:user|iowait|total)\"")


KIND = "host"  # registry.KINDS: what its files are in a job


def sniff(head: bytes) -> bool:
    """A glances CSV header or a glances JSON object at the start of `head`."""
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if _CSV_HEADER.match(text):
        first = text.split(b"\n", 1)[0]
        return bool(_CSV_FIELD.search(first))
    return text.startswith(b"{") and b"traceEvents" not in text[:4096] and bool(_JSON_CPU.search(text[:65536]))


def read(path: Path, data: bytes, options: ReadOptions | None = None) -> Timeline:
    """A glances CSV or JSON export -> a Timeline of its host metrics (one source, on the log's own
    clock); InputError when nothing in it can be used."""
    text = data.decode("utf-8", errors="replace").lstrip("\ufeff")
    if text.lstrip().startswith("{"):
        source = Source(path=str(path), format=FORMAT_JSON)
        names, rows = _json_rows(path, text, source)
    else:
        source = Source(path=str(path), format=FORMAT_CSV)
        try:
            names, rows = _csv_rows(path, text, source)
        except csv.Error as exc:  # e.g. a bare carriage return inside a row
            raise InputError(path, f"not a glances CSV export: {exc}") from None
    return _host_log(path, source, names, rows)


# --- the two layouts -> (column names, rows of values) ----------------------------------------------
def _csv_rows(path: Path, text: str, source: Source) -> tuple[list[str], list[list[str]]]:
    lines = text.split("\n")
    cut = not text.endswith("\n")
    if not cut:
        lines.pop()
    reader = csv.reader(io.StringIO("\n".join(lines[:1])))
    names = [n.strip() for n in next(reader, [])]
    rows: list[list[str]] = []
    wrong: list[int] = []
    last = len(lines) - 1
    for i, row in enumerate(csv.reader(lines[1:]), start=2):
        if not row:
            continue
        if len(row) != len(names):
            if i - 1 == last and cut:
                drop_cut_last_row(source, i, len(rows))
            else:
                wrong.append(i)
            continue
        rows.append(row)
    drop_wrong_rows(source, wrong)
    if wrong:
        source.warnings.append(
            "glances 3 writes the CSV header once while its columns vary from row to row (plugins such as "
            "irq or connections, disks or interfaces that come and go, a plugin missing a refresh), so rows "
            "that do not match the header cannot be read; export with glances 4, or disable the varying "
            "plugins (--disable-plugin irq,connections,sensors,fs,percpu) and hide loop devices")
    source.events_read = len(rows) + sum(source.not_kept.values())
    return names, rows


def _json_rows(path: Path, text: str, source: Source) -> tuple[list[str], list[list[str]]]:
    flat: list[dict[str, object]] = []
    bad = 0
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError:
            bad += 1
            continue
        if not isinstance(obj, dict):
            bad += 1
            continue
        row: dict[str, object] = {}
        for plugin, stats in obj.items():
            if isinstance(stats, dict):
                for k, v in stats.items():
                    if not isinstance(v, (dict, list)):
                        row[f"{plugin}.{k}"] = v
        flat.append(row)
    if bad:
        source.not_kept["malformed_line"] = bad
        source.warnings.append(f"{bad} lines that are not one JSON object each dropped")
    if len(flat) == 1:
        source.warnings.append("one sample only: glances' JSON export rewrites its file at every refresh "
                               "(it keeps the latest sample); use --export csv for a time series")
    names = sorted({k for r in flat for k in r})
    source.events_read = len(flat) + bad
    return names, [["" if r.get(n) is None else str(r.get(n)) for n in names] for r in flat]


# --- rows -> metrics ---------------------------------------------------------------------------------
def _host_log(path: Path, source: Source, names: list[str], rows: list[list[str]]) -> Timeline:
    if not rows:
        raise InputError(path, "a glances export with no usable sample (no row matches its header)")
    table = np.array(rows, dtype=object)
    col = {n: i for i, n in enumerate(names)}
    ts_ns, source.clock = _times(path, table, col)
    order = np.argsort(ts_ns, kind="stable")
    table, ts_ns = table[order], ts_ns[order]
    n = len(ts_ns)
    period_s = float(np.median(np.diff(ts_ns))) / 1e9 if n > 1 else None

    metrics: dict[str, np.ndarray] = {}
    bad_values = 0
    for name, i in col.items():
        m = _PLUGIN.match(name)
        if m and (m.group(1), m.group(2)) in SCALARS:
            values, bad = parse_numbers(table[:, i])
            metrics[SCALARS[(m.group(1), m.group(2))]] = values
            bad_values += int(bad.sum())
    cores = None
    for plugin, fld in CORES:
        k = col.get(f"{plugin}.{fld}", col.get(f"{plugin}_{fld}"))
        if k is not None:
            values, _ = parse_numbers(table[:, k])
            if np.isfinite(values).any():
                cores = int(np.nanmax(values))
                break

    items: dict[tuple[str, str], dict[str, int]] = {}  # (plugin, item) -> field -> column
    for name, i in col.items():
        m = _PLUGIN.match(name)
        if not m or m.group(1) not in _ITEM:
            continue
        f = _ITEM[m.group(1)].match(m.group(2))
        if f and not f.group("item").endswith("cumulative"):
            items.setdefault((m.group(1), f.group("item")), {})[f.group("field")] = i
    disks = _kept_disks(sorted(item for plugin, item in items if plugin == "diskio"))
    nets = sorted(item for plugin, item in items if plugin == "network" and not _SKIP_NET.match(item))
    sums: dict[str, np.ndarray] = {}
    for (plugin, item), fields in items.items():
        if item not in (disks if plugin == "diskio" else nets):
            continue
        since = parse_numbers(table[:, fields["time_since_update"]])[0] if "time_since_update" in fields else None
        for fld, i in fields.items():
            if fld == "time_since_update":
                continue
            metric, is_rate = _ITEM_FIELDS[fld]
            rate_field = next((k for k, (mm, r) in _ITEM_FIELDS.items() if mm == metric and r), "")
            if not is_rate and rate_field in fields:
                continue  # glances 4 writes both: take its rate
            values, bad = parse_numbers(table[:, i])
            bad_values += int(bad.sum())
            if not is_rate:
                per = since if since is not None else np.full(n, period_s or np.nan)
                values = np.where(per > 0, values / np.where(per > 0, per, 1.0), np.nan)
            if metric in sums:
                both = np.isnan(sums[metric]) & np.isnan(values)
                sums[metric] = np.where(both, np.nan, np.nan_to_num(sums[metric]) + np.nan_to_num(values))
            else:
                sums[metric] = values
    metrics.update(sums)
    if not any(m in metrics for m in ("cpu_user_pct", "cpu_iowait_pct", "cpu_total_pct")):
        raise InputError(path, "a glances export without CPU figures (cpu.user / cpu.iowait): was the cpu "
                               "plugin disabled?")
    if bad_values:
        source.warnings.append(f"{bad_values} values that are not numbers read as missing")
    source.events_kept = n
    present = [m for m in METRICS if m in metrics]
    frame = T.host_metrics_frame({
        "ts_ns": np.tile(ts_ns, len(present)),
        "metric": np.repeat(np.array(present, dtype=object), n),
        "value": np.concatenate([metrics[m] for m in present]).astype(np.float64),
        "source": np.zeros(n * len(present), dtype=np.int32),
    })
    return Timeline(host_metrics=frame, sources=[source],
                    host_logs=[HostLogInfo(0, cores, tuple(disks), tuple(nets))]).validate()


def _kept_disks(disks: list[str]) -> list[str]:
    real = [d for d in disks if not _SKIP_DISK.match(d)]
    physical = [d for d in real if not _VIRTUAL_DISK.match(d)]
    if physical:
        real = physical
    return [d for d in real if not any(d != p and re.fullmatch(re.escape(p) + r"p?\d+", d) for p in real)]


def _times(path: Path, table: np.ndarray, col: dict[str, int]) -> tuple[np.ndarray, str]:
    """Sample times: `now.iso` (with its UTC offset: epoch) else `timestamp` (local wall time)."""
    for name in _TIME_ISO:
        if name in col:
            text = pd.Series(table[:, col[name]], dtype=object).astype(str).str.strip()
            parsed = pd.to_datetime(text, format="ISO8601", utc=True, errors="coerce")
            has_zone = text.str.contains(r"(?:[+-]\d{2}:?\d{2}|Z)$", regex=True)
            if len(text) and not parsed.isna().any() and bool(has_zone.all()):
                utc = parsed.dt.tz_convert("UTC").dt.tz_localize(None)
                return utc.to_numpy().astype("datetime64[ns]").astype(np.int64), T.CLOCK_EPOCH
    for name in _TIME_LOCAL:
        if name in col:
            text = pd.Series(table[:, col[name]], dtype=object).astype(str).str.strip()
            parsed = pd.to_datetime(text, format="ISO8601", errors="coerce")
            if parsed.isna().any():
                k = int(np.flatnonzero(parsed.isna().to_numpy())[0])
                raise InputError(path, f"sample {k + 1}: timestamp {text.iloc[k]!r} is not a date and time; "
                                       "expected YYYY-MM-DD HH:MM:SS")
            return parsed.to_numpy().astype("datetime64[ns]").astype(np.int64), T.CLOCK_WALL
    raise InputError(path, "a glances export without sample times (no timestamp or now field); glances 3's "
                           "JSON export has none: use --export csv")


__all__ = ["FORMAT_CSV", "FORMAT_JSON", "METRICS", "read", "sniff"]
