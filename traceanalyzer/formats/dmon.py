"""Reader for `nvidia-smi dmon` text logs (any `-s` column set, with or without `-o D/T/DT`).

Header lines start with `#`: the first names the columns (`# gpu sm mem ...`, `#Date Time gpu
...`), the second gives units (`# Idx % % ...`). Columns are found by NAME, never by position,
and a header may repeat or change anywhere in the file. Data rows are whitespace-separated;
`-` means no value (NaN). Times:

* `-o DT`/`TD`: local date and time of the logging machine -> CLOCK_WALL;
* `-o T`: local time of day only -> CLOCK_TIME_OF_DAY (the date comes from the trace, or from
  `--dmon-start`), times that go back by more than 12 h are taken as passing midnight;
* none (or `-o D` alone): rows are numbered into samples - a sample ends when a GPU index
  repeats - and spaced by `--dmon-interval` from `--dmon-start` (else CLOCK_SAMPLES from 0).

A last line cut off before its newline (a logger killed mid-write) is dropped with one warning.
"""

from __future__ import annotations

from collections import Counter
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
    counters_timeline,
    datetimes_to_ns,
    device_indices,
    drop_cut_last_row,
    drop_wrong_rows,
    number_samples,
    numbered_times,
    parse_numbers,
    read_segments,
)

FORMAT = "nvidia-smi-dmon"

# dmon column -> metric (see _counters.METRICS).
COLUMNS: dict[str, str] = {
    "sm": "sm_util_pct", "mem": "mem_util_pct", "enc": "enc_util_pct", "dec": "dec_util_pct",
    "jpg": "jpg_util_pct", "ofa": "ofa_util_pct",
    "pwr": "power_w", "temp": "gpu_temp_c", "gtemp": "gpu_temp_c", "mtemp": "mem_temp_c",
    "mclk": "mem_clock_mhz", "pclk": "sm_clock_mhz",
    "fb": "fb_used_mib", "bar1": "bar1_used_mib", "ccpm": "ccpm_used_mib",
    "rxpci": "pcie_rx_mbps", "txpci": "pcie_tx_mbps",
    "pviol": "power_violation_pct", "tviol": "thermal_violation",
    "sbecc": "sbecc_errors", "dbecc": "dbecc_errors", "pci": "pcie_replay_errors",
}
GPU, DATE, TIME = "gpu", "date", "time"
_BOOL_TEXT = {"yes": "1", "true": "1", "no": "0", "false": "0"}
_HALF_DAY_NS = 12 * 3600 * 10**9
_DAY_NS = 2 * _HALF_DAY_NS


KIND = "counters"  # registry.KINDS: what its files are in a job


def sniff(head: bytes) -> bool:
    """A `#` header line naming a `gpu` column among the first lines (dmon, or pmon to reject),
    and no line before it that is neither blank, `#`, nor whitespace-separated numbers."""
    for raw in head.split(b"\n", 20)[:20]:
        line = raw.strip()
        if not line:
            continue
        if line.startswith(b"#"):
            if b"gpu" in line[1:].lower().split():
                return True
            continue
        if not all(tok.replace(b".", b"").replace(b"-", b"").isdigit() for tok in line.split()):
            return False
    return False


@dataclass
class _Segment:
    """Rows under one column header."""

    columns: list[str]
    header_line: int
    rows: list[list[str]] = field(default_factory=list)
    line_nos: list[int] = field(default_factory=list)


def read(path: Path, data: bytes, options: ReadOptions) -> Timeline:
    source, segments = read_segments(path, data, FORMAT, _segments,
                                     "no data rows under the dmon header: expected lines of numbers "
                                     "such as '    0     46     26 ...'")

    time_kinds = {_time_kind(s.columns) for s in segments}
    if len(time_kinds) > 1:
        raise InputError(path, f"line {segments[-1].header_line}: the time columns change mid-file "
                               "(with and without -o T/-o DT); split the log where the header changes")
    time_kind = time_kinds.pop()

    device_parts, date_parts, time_parts = [], [], []
    metric_parts: dict[str, list[tuple[int, np.ndarray]]] = {}
    unknown: list[str] = []
    bad_values = 0
    offset = 0
    for seg in segments:
        table = np.array(seg.rows, dtype=object)
        col = {c: table[:, i] for i, c in enumerate(seg.columns)}
        devices, bad = parse_numbers(col[GPU])
        if bad.any() or np.isnan(devices).any():
            k = int(np.flatnonzero(bad | np.isnan(devices))[0])
            raise InputError(path, f"line {seg.line_nos[k]}: GPU index {col[GPU][k]!r} is not a number; "
                                   "expected the dmon 'gpu' column to hold 0, 1, ...")
        device_parts.append(device_indices(path, devices, seg.line_nos, "GPU index"))
        if DATE in col:
            date_parts.append(col[DATE].astype(str))
        if TIME in col:
            time_parts.append(col[TIME].astype(str))
        names = [c for c in seg.columns if c not in (GPU, DATE, TIME)]
        if names:  # every value column of the segment parsed at once, not one column at a time
            block = table[:, [seg.columns.index(c) for c in names]]
            if "tviol" in names:
                j = names.index("tviol")
                block[:, j] = [_BOOL_TEXT.get(str(v).lower(), v) for v in block[:, j]]
            parsed, bad = parse_numbers(block.T.ravel())
            bad_values += int(bad.sum())
            parsed = parsed.reshape(len(names), len(seg.rows))
        for j, name in enumerate(names):
            metric = COLUMNS.get(name)
            if metric is None:
                metric = f"dmon_{name}"
                if name not in unknown:
                    unknown.append(name)
            metric_parts.setdefault(metric, []).append((offset, parsed[j]))
        offset += len(seg.rows)

    device = np.concatenate(device_parts)
    line_nos = [ln for s in segments for ln in s.line_nos]
    ts_ns, source.clock = _times(path, time_kind, date_parts, time_parts, device, line_nos, options, source)
    if bad_values:
        source.warnings.append(f"{bad_values} values that are neither numbers nor '-' read as missing")
    return counters_timeline(source, ts_ns, device, metric_parts, unknown, "dmon_")


def _segments(path: Path, lines: list[str], cut: bool, source: Source) -> list[_Segment]:
    segments: list[_Segment] = []
    wrong: list[int] = []
    last_data = max((i for i, ln in enumerate(lines) if ln.strip() and not ln.lstrip().startswith("#")),
                    default=-1)
    for i, line in enumerate(lines):
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("#"):
            tokens = [t.lower() for t in stripped[1:].split()]
            if GPU in tokens:
                if "pid" in tokens:
                    raise InputError(path, f"line {i + 1}: this is `nvidia-smi pmon` output (one row "
                                           "per process); record `nvidia-smi dmon` for GPU counters")
                _check_header(path, tokens, i + 1)
                segments.append(_Segment(columns=tokens, header_line=i + 1))
            # anything else after '#' is the units row or a comment: units are fixed per column
            continue
        if not segments:
            raise InputError(path, f"line {i + 1}: data row before any '# gpu ...' header line; "
                                   "dmon output starts with a header naming its columns")
        seg = segments[-1]
        tokens = stripped.split()
        if i == last_data and cut and not _complete_last_row(line, tokens, seg, lines):
            drop_cut_last_row(source, i + 1, sum(len(s.rows) for s in segments))
            continue
        if len(tokens) != len(seg.columns):
            wrong.append(i + 1)
            continue
        seg.rows.append(tokens)
        seg.line_nos.append(i + 1)
    drop_wrong_rows(source, wrong)
    return [s for s in segments if s.rows]


def _check_header(path: Path, tokens: list[str], line_no: int) -> None:
    check_columns(path, len(tokens), line_no)
    dupes = sorted(t for t, k in Counter(tokens).items() if k > 1)
    if dupes:
        raise InputError(path, f"line {line_no}: column {dupes[0]!r} appears twice in the dmon header")


def _complete_last_row(line: str, tokens: list[str], seg: _Segment, lines: list[str]) -> bool:
    """A last row without a newline is kept only if it has every column and is as wide as the
    row before it (dmon right-aligns fixed-width columns, so a cut row is shorter)."""
    if len(tokens) != len(seg.columns):
        return False
    if not seg.line_nos:
        return True
    previous = lines[seg.line_nos[-1] - 1]
    return len(line.rstrip()) >= len(previous.rstrip())


def _time_kind(columns: list[str]) -> str:
    if TIME in columns:
        return T.CLOCK_WALL if DATE in columns else T.CLOCK_TIME_OF_DAY
    return T.CLOCK_SAMPLES


def _times(path: Path, kind: str, date_parts: list[np.ndarray], time_parts: list[np.ndarray],
           device: np.ndarray, line_nos: list[int], options: ReadOptions, source: Source) -> tuple[np.ndarray, str]:
    if kind == T.CLOCK_SAMPLES:
        return numbered_times(number_samples(device), options, source)
    times = pd.Series(np.concatenate(time_parts))
    if kind == T.CLOCK_WALL:
        stamp = pd.Series(np.concatenate(date_parts)) + " " + times
        parsed = pd.to_datetime(stamp, format="%Y%m%d %H:%M:%S", errors="coerce")
        _fail_on_nat(path, parsed.isna().to_numpy(), stamp, line_nos, "YYYYMMDD HH:MM:SS")
        ns = datetimes_to_ns(path, parsed, line_nos, stamp.to_numpy())
        return ns, T.CLOCK_WALL
    tod = pd.to_timedelta(times, errors="coerce")
    ns = tod.to_numpy().astype("timedelta64[ns]").astype(np.int64)
    _fail_on_nat(path, tod.isna().to_numpy() | (ns < 0) | (ns >= _DAY_NS), times, line_nos, "HH:MM:SS")
    # Passing midnight: the time of day drops by more than half a day.
    wrapped = np.r_[False, np.diff(ns) < -_HALF_DAY_NS]
    ns = ns + np.cumsum(wrapped) * np.int64(_DAY_NS)
    if options.dmon_start is not None and options.dmon_start[1] == T.CLOCK_WALL:
        start_ns = options.dmon_start[0]  # its date, as local wall time like the log's
        return ns + np.int64(start_ns - start_ns % _DAY_NS), T.CLOCK_WALL
    return ns, T.CLOCK_TIME_OF_DAY


def _fail_on_nat(path: Path, bad: np.ndarray, text: pd.Series, line_nos: list[int], shape: str) -> None:
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        raise InputError(path, f"line {line_nos[k]}: {text.iloc[k]!r} is not a time; expected {shape}")
