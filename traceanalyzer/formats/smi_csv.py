"""Reader for `nvidia-smi --query-gpu=... --format=csv[,nounits] [-l N | -lms N]` logs.

The header row names the queried fields, with units in brackets (`utilization.gpu [%]`); values
carry units (`92 %`, `25073 MiB`) unless `nounits` was given; `[N/A]` / `[Not Supported]` mean
no value. Fields are found by name in any order; a header may repeat or change mid-file (logs
appended to). `timestamp` (`YYYY/MM/DD HH:MM:SS.mmm`, local time of the logging machine) gives
CLOCK_WALL; without it rows are numbered into samples like dmon's. Multi-GPU logs hold one row
per GPU per sample; `index` (else `pci.bus_id` / `uuid` in order of appearance) is the GPU.

`noheader` logs cannot be read by name: the error says to add the field list as a first line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from .. import timeline as T
from ..errors import InputError
from ..timeline import Source, Timeline
from ._base import ReadOptions
from ._counters import (
    check_columns,
    check_device_count,
    counters_frame,
    datetimes_to_ns,
    device_indices,
    drop_cut_last_row,
    drop_wrong_rows,
    no_utilisation_warning,
    number_samples,
    numbered_times,
    parse_numbers,
    read_segments,
    unknown_columns_warning,
)

FORMAT = "nvidia-smi-csv"

# --query-gpu field -> metric (see _counters.METRICS); several spellings are accepted by nvidia-smi.
FIELDS: dict[str, str] = {
    "utilization.gpu": "sm_util_pct", "utilization.memory": "mem_util_pct",
    "utilization.encoder": "enc_util_pct", "utilization.decoder": "dec_util_pct",
    "utilization.jpeg": "jpg_util_pct", "utilization.ofa": "ofa_util_pct",
    "power.draw": "power_w", "power.draw.average": "power_w",
    "power.draw.instant": "power_instant_w",
    "power.limit": "power_limit_w", "enforced.power.limit": "power_limit_w",
    "temperature.gpu": "gpu_temp_c", "temperature.memory": "mem_temp_c",
    "clocks.sm": "sm_clock_mhz", "clocks.current.sm": "sm_clock_mhz",
    "clocks.gr": "graphics_clock_mhz", "clocks.current.graphics": "graphics_clock_mhz",
    "clocks.mem": "mem_clock_mhz", "clocks.current.memory": "mem_clock_mhz",
    "memory.used": "fb_used_mib", "memory.free": "fb_free_mib", "memory.total": "fb_total_mib",
    "pstate": "pstate", "fan.speed": "fan_pct",
}
TIMESTAMP = "timestamp"
INDEX = "index"
# Text fields that identify the GPU or the host; never counters.
TEXT_FIELDS = {"timestamp", "index", "name", "gpu_name", "uuid", "gpu_uuid", "pci.bus_id",
               "gpu_bus_id", "serial", "driver_version", "vbios_version", "compute_mode",
               "persistence_mode", "display_mode", "display_active", "pci.domain", "pci.bus",
               "pci.device", "pci.device_id", "pci.sub_device_id", "mig.mode.current"}
GPU_IDS = ("index", "pci.bus_id", "gpu_bus_id", "uuid", "gpu_uuid")

_FIELD_NAME = re.compile(r"^([a-z][a-z0-9_.]*)(?:\s*\[[^\]]*\])?$")
_PSTATE = re.compile(r"^\s*P(\d+)\s*$")
_SHAPE = re.compile(r"[0-9]")
_STAMP_ROW = re.compile(r"^\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2}(\.\d+)?\s*,")
# nvidia-smi's default table: its date line ("Mon Jan 15 09:12:03 2024"), rules ("+----+", "|====|")
# and boxed rows ("| 0  NVIDIA A100 ... |"). A log may hold it before its CSV rows, or between them.
_TABLE_START = re.compile(r"^(?:[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d{2}:\d{2}:\d{2} \d{4}|\+[-=+]+\+)$")
_TABLE_LINE = re.compile(r"^(?:[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d{2}:\d{2}:\d{2} \d{4}|[+|][-=+| ]*[+|]|\|.*\|)$")


KIND = "counters"  # registry.KINDS: what its files are in a job


def sniff(head: bytes) -> bool:
    """First non-blank line (NUL padding ignored) is a CSV header of --query-gpu field names, with
    `timestamp` or a known counter among them, or begins nvidia-smi's default table (printed before the
    CSV rows by a script that logs both: read() then finds the header after it)."""
    for raw in head.replace(b"\x00", b"").split(b"\n", 20)[:20]:
        line = raw.strip()
        if line:
            text = line.decode("utf-8", errors="replace")
            # a header, or a headerless log's first row (read() then says what to add)
            return (_header_names(text) is not None or bool(_STAMP_ROW.match(text))
                    or (bool(_TABLE_START.match(text)) and b"NVIDIA-SMI" in head))
    return False


def _header_names(line: str) -> list[str] | None:
    """Field names of a header row (units dropped), or None when the row is not a header."""
    names = []
    for part in line.split(","):
        m = _FIELD_NAME.match(part.strip())
        if not m:
            return None
        names.append(m.group(1))
    if not any(n in FIELDS or n == TIMESTAMP for n in names):  # "name, index" alone is any CSV
        return None
    return names


@dataclass
class _Segment:
    names: list[str]
    rows: list[list[str]] = field(default_factory=list)
    line_nos: list[int] = field(default_factory=list)


def read(path: Path, data: bytes, options: ReadOptions) -> Timeline:
    source, segments = read_segments(path, data, FORMAT, _segments,
                                     "no data rows under the CSV header: expected rows such as "
                                     "'2024/01/16 14:44:16.977, 0 %, 21 MiB'")
    n = sum(len(seg.rows) for seg in segments)
    has_time = {TIMESTAMP in s.names for s in segments}
    if len(has_time) > 1:
        raise InputError(path, "the timestamp field comes and goes between headers; "
                               "split the log where the header changes")

    metric_parts: dict[str, list[tuple[int, np.ndarray]]] = {}
    stamps: list[pd.Series] = []
    gpu_ids: list[np.ndarray] = []
    unknown: list[str] = []
    text_skipped: set[str] = set()
    bad_values = 0
    offset = 0
    for seg in segments:
        table = np.array(seg.rows, dtype=object)
        col = {name: table[:, i] for i, name in enumerate(seg.names)}
        if TIMESTAMP in col:
            stamps.append(pd.Series(col[TIMESTAMP], dtype=object))
        gpu_ids.append(_gpu_ids(col, len(seg.rows)))
        used: set[str] = set()
        for name in seg.names:
            if name in TEXT_FIELDS:
                continue
            values = col[name]
            if name == "pstate":
                values = pd.Series(values, dtype=object).str.extract(_PSTATE)[0].fillna("-").to_numpy()
            parsed, bad = parse_numbers(values)
            metric = FIELDS.get(name)
            if metric is None or metric in used:
                if bad.all():  # a text field we do not know: not a counter
                    text_skipped.add(name)
                    continue
                metric = "smi_" + name.replace(".", "_")
                if name not in unknown and name not in FIELDS:
                    unknown.append(name)
            used.add(metric)
            bad_values += int(bad.sum())
            metric_parts.setdefault(metric, []).append((offset, parsed))
        offset += len(seg.rows)

    metrics: dict[str, np.ndarray] = {}
    for metric, parts in metric_parts.items():
        full = np.full(n, np.nan)
        for start, values in parts:
            full[start:start + len(values)] = values
        metrics[metric] = full
    line_nos = [ln for s in segments for ln in s.line_nos]
    device = _device_numbers(path, np.concatenate(gpu_ids), line_nos)
    if stamps:
        ts_ns, source.clock = _parse_stamps(path, pd.concat(stamps, ignore_index=True), line_nos)
    else:
        ts_ns, source.clock = numbered_times(number_samples(device), options)

    source.events_kept = n
    if bad_values:
        source.warnings.append(f"{bad_values} values that are not numbers read as missing")
    if text_skipped:
        source.not_kept["text_field_values"] = n * len(text_skipped)
    source.warnings.extend(unknown_columns_warning(unknown, "smi_"))
    source.warnings.extend(no_utilisation_warning(list(metrics)))
    return Timeline(counters=counters_frame(ts_ns, device, metrics), sources=[source]).validate()


def _segments(path: Path, lines: list[str], cut: bool, source: Source) -> list[_Segment]:
    segments: list[_Segment] = []
    wrong: list[int] = []
    table = 0
    last = max((i for i, ln in enumerate(lines) if ln.strip()), default=-1)
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        if _TABLE_LINE.match(line.strip()):  # nvidia-smi's default table, printed before or between samples
            table += 1
            continue
        names = _header_names(line.strip())
        if names is not None:
            check_columns(path, len(names), i + 1)
            segments.append(_Segment(names=names))
            continue
        if not segments:
            raise InputError(path, f"line {i + 1}: no header row naming the fields; expected a first "
                                   "line such as 'timestamp, index, utilization.gpu [%]' (logs written "
                                   "with --format=csv,noheader need that line added)")
        seg = segments[-1]
        fields = [f.strip() for f in line.split(",")]
        if i == last and cut and not _complete_last_row(fields, seg):
            drop_cut_last_row(source, i + 1, sum(len(s.rows) for s in segments))
            continue
        if len(fields) != len(seg.names):
            wrong.append(i + 1)
            continue
        seg.rows.append(fields)
        seg.line_nos.append(i + 1)
    if table:
        source.not_kept["table_line"] = table
        source.warnings.append(f"{table} lines of the nvidia-smi table (printed with the log) skipped; "
                               f"the CSV rows are read")
    if not segments and table:
        raise InputError(path, "an nvidia-smi table without --query-gpu CSV rows: expected a header such as "
                               "'timestamp, index, utilization.gpu [%]' and rows under it "
                               "(nvidia-smi --query-gpu=... --format=csv -l 1)")
    drop_wrong_rows(source, wrong)
    return [s for s in segments if s.rows]


def _complete_last_row(fields: list[str], seg: _Segment) -> bool:
    """A last row without a newline is kept only if each field has the shape of the row
    before it (digits aside): a cut row loses fields, units or timestamp parts."""
    if len(fields) != len(seg.names):
        return False
    if not seg.rows:
        return all(fields)
    shape = [_SHAPE.sub("", f) for f in fields]
    previous = [_SHAPE.sub("", f) for f in seg.rows[-1]]
    return shape == previous and all(fields)


def _gpu_ids(col: dict[str, np.ndarray], n: int) -> np.ndarray:
    for name in GPU_IDS:
        if name in col:
            return np.asarray(col[name], dtype=object)
    return np.full(n, "0", dtype=object)


def _device_numbers(path: Path, ids: np.ndarray, line_nos: list[int]) -> np.ndarray:
    """`index` values as they are; bus ids / uuids numbered in order of first appearance."""
    parsed, bad = parse_numbers(ids)
    if not bad.any() and not np.isnan(parsed).any():
        return device_indices(path, parsed, line_nos, "GPU index")
    codes, _ = pd.factorize(pd.Series(ids, dtype=object))
    check_device_count(path, codes)
    return codes.astype(np.int32)


def _parse_stamps(path: Path, stamps: pd.Series, line_nos: list[int]) -> tuple[np.ndarray, str]:
    text = stamps.astype(str).str.strip()
    parsed = pd.to_datetime(text, format="%Y/%m/%d %H:%M:%S.%f", errors="coerce")
    if parsed.isna().any():  # other nvidia-smi builds / locales: accept any unambiguous form
        retry = pd.to_datetime(text[parsed.isna()], format="ISO8601", errors="coerce")
        if getattr(retry.dt, "tz", None) is not None:  # a zone suffix: keep the wall time like the rest
            retry = retry.dt.tz_localize(None)
        if retry.dtype != parsed.dtype:
            retry = retry.astype(parsed.dtype)
        parsed = parsed.fillna(retry) if not retry.isna().all() else parsed
    if parsed.isna().any():
        k = int(np.flatnonzero(parsed.isna().to_numpy())[0])
        raise InputError(path, f"line {line_nos[k]}: timestamp {text.iloc[k]!r} is not a date and time; "
                               "expected YYYY/MM/DD HH:MM:SS.mmm")
    ns = datetimes_to_ns(path, parsed, line_nos, text.to_numpy())
    return ns, T.CLOCK_WALL
