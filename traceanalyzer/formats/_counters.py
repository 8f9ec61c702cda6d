"""What counter-log readers (nvidia-smi dmon, --query-gpu CSV, DCGM) share: the metric
vocabulary, number parsing, sample numbering for logs without times, and the long counters table.

Every reader maps its own column names onto `timeline.COUNTER_METRICS`, so analyses and
alignment never look at format-specific names. Columns a reader does not know are kept under a prefixed name
(`dmon_<col>`, `smi_<field>`, `dcgm_<field>`) and reported in a warning.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol, TypeVar

import numpy as np
import pandas as pd

from .. import timeline as T
from ..errors import InputError, UsageError
from ..timeline import Source, Timeline
from ._base import DEFAULT_LOG_INTERVAL_NS, MAX_DEVICE_INDEX, MAX_DEVICES, ReadOptions

# nvidia-smi dmon writes about 30 columns, --query-gpu a few dozen fields: a header with more is
# refused (each column becomes a metric series; 40,000 of them would take minutes).
MAX_LOG_COLUMNS = 256
# Dates a counter log may hold (epoch ns): 1970 to 2200; others are refused, never shifted.
MAX_LOG_TIME_NS = 7_258_118_400 * 10**9


class _Rows(Protocol):
    rows: list[list[str]]


_Seg = TypeVar("_Seg", bound=_Rows)

# Values that mean "no value" in nvidia-smi / dcgmi output.
MISSING_TEXT = ("-", "", "N/A", "[N/A]", "[Not Supported]", "Not Supported", "[Unknown Error]")

# A number, optionally followed by a unit ("92 %", "25073 MiB", "70.50 W", "P0" handled apart).
_NUMBER_UNIT = re.compile(r"^\s*([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)\s*([A-Za-z%/]*)\s*$")


def parse_numbers(values: Sequence[str] | pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Text values -> (float64 with NaN for missing, bool mask of values that were neither
    numbers nor a missing marker). Unit suffixes such as ' %' or ' MiB' are dropped. `inf` / `nan`
    are no readings (a logger's placeholder or a corrupt row): NaN, and counted in the mask."""
    s = pd.Series(values, dtype=object).astype(str).str.strip()
    missing = s.isin(MISSING_TEXT).to_numpy()
    parsed = pd.to_numeric(s, errors="coerce").to_numpy(np.float64, copy=True)
    todo = np.isnan(parsed) & ~missing
    if todo.any():
        found = s[todo].str.extract(_NUMBER_UNIT)[0]
        parsed[todo] = pd.to_numeric(found, errors="coerce").to_numpy(np.float64)
    parsed[np.isinf(parsed)] = np.nan
    bad = np.isnan(parsed) & ~missing
    return parsed, bad


def check_columns(path: Path, n: int, line_no: int) -> None:
    if n > MAX_LOG_COLUMNS:
        raise InputError(path, f"line {line_no}: a header of {n} columns; counter logs have at most "
                               f"{MAX_LOG_COLUMNS} (is this an nvidia-smi / DCGM log?)")


def device_indices(path: Path, values: np.ndarray, line_nos: Sequence[int], what: str) -> np.ndarray:
    """GPU indices (floats as parsed) -> int32, refusing non-integers, negatives, indices beyond
    int32 (which would wrap onto another GPU) and more than MAX_DEVICES distinct GPUs."""
    values = np.asarray(values, dtype=np.float64)
    bad = ~np.isfinite(values) | (values < 0) | (values > MAX_DEVICE_INDEX)
    bad[~bad] = values[~bad] % 1 != 0
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        raise InputError(path, f"line {line_nos[k]}: {what} {values[k]:g} is not a GPU index "
                               f"(expected a whole number from 0 to {MAX_DEVICE_INDEX})")
    devices = values.astype(np.int32)
    check_device_count(path, devices)
    return devices


def check_device_count(path: Path, devices: np.ndarray) -> None:
    distinct = len(np.unique(devices))
    if distinct > MAX_DEVICES:
        raise InputError(path, f"{distinct} distinct GPUs in one file; at most {MAX_DEVICES} are read "
                               f"(no machine has more)")


def datetimes_to_ns(path: Path, parsed: pd.Series, line_nos: Sequence[int], text: Sequence[str]) -> np.ndarray:
    """Parsed dates (no NaT) -> int64 ns, refusing years before 1970 or after 2200 before the
    cast (a cast of year 1600 to ns would wrap, not fail)."""
    year = parsed.dt.year.to_numpy()
    bad = (year < 1970) | (year > 2200)
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        raise InputError(path, f"line {line_nos[k]}: time {str(text[k])[:40]!r} is out of range (before 1970 "
                               f"or after 2200): refused rather than shifted")
    return parsed.to_numpy().astype("datetime64[ns]").astype(np.int64)


def check_log_times(path: Path, ts_ns: np.ndarray, line_nos: Sequence[int], text: Sequence[str] | None = None) -> None:
    """Refuse dates before 1970 or after 2200 (a wrong clock or a corrupt row), naming the line."""
    bad = (ts_ns < 0) | (ts_ns > MAX_LOG_TIME_NS)
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        shown = f" {str(text[k])[:40]!r}" if text is not None else ""
        raise InputError(path, f"line {line_nos[k]}: time{shown} is out of range (before 1970 or after "
                               f"2200): refused rather than shifted")


def number_samples(devices: np.ndarray) -> np.ndarray:
    """Sample number per row for logs without times: a new sample starts when a GPU index that
    the current sample already holds appears again (0 1 2 0 1 2 -> 0 0 0 1 1 1; '-i 3,1' gives
    3 1 3 1 -> 0 0 1 1)."""
    out = np.empty(len(devices), dtype=np.int64)
    sample, seen = -1, set[int]()
    for i, d in enumerate(devices.tolist()):
        if sample < 0 or d in seen:
            sample += 1
            seen = set[int]()
        seen.add(d)
        out[i] = sample
    return out


def numbered_times(sample: np.ndarray, options: ReadOptions, source: Source) -> tuple[np.ndarray, str]:
    """Times for numbered samples: `--dmon-start` + n x `--dmon-interval`, or n x interval on
    the CLOCK_SAMPLES clock when no start was given. Without an interval given, 1 s (nvidia-smi's
    default `-l` / `-d`) is assumed and said in a warning: the log's span is right only if it was."""
    interval = options.dmon_interval_ns
    if interval is None:
        interval = DEFAULT_LOG_INTERVAL_NS
        if len(sample) and int(sample.max()) > 0:
            source.warnings.append(
                f"no timestamps in the log: its {int(sample.max()) + 1} samples are assumed 1 s apart "
                f"(nvidia-smi's default -l / -d); if it was written with another interval, give it with "
                f"--dmon-interval (e.g. 10s), else the log's span is wrong")
    start_ns, clock = options.dmon_start if options.dmon_start is not None else (0, T.CLOCK_SAMPLES)
    last = (int(sample.max()) if len(sample) else 0) * interval + start_ns
    if interval <= 0:
        raise UsageError("--dmon-interval must be longer than 0 (samples would all fall at one time)")
    if not 0 <= start_ns <= MAX_LOG_TIME_NS or last > MAX_LOG_TIME_NS:
        raise UsageError(f"--dmon-interval / --dmon-start put the log's {len(sample)} samples outside the years "
                         f"1970 to 2200")
    return sample.astype(np.int64) * np.int64(interval) + np.int64(start_ns), clock


def counters_timeline(source: Source, ts_ns: np.ndarray, device: np.ndarray,
                      metric_parts: dict[str, list[tuple[int, np.ndarray]]], unknown: list[str],
                      prefix: str) -> Timeline:
    """What the text log readers (dmon, --query-gpu CSV) end with: each metric's parts (row offset,
    values) spread over the log's rows (NaN where a header lacked it), the rows counted, the shared
    warnings, and the Timeline of the counters."""
    n = len(ts_ns)
    metrics: dict[str, np.ndarray] = {}
    for metric, parts in metric_parts.items():
        full = np.full(n, np.nan)
        for start, values in parts:
            full[start:start + len(values)] = values
        metrics[metric] = full
    source.events_kept = n
    source.warnings.extend(unknown_columns_warning(unknown, prefix))
    source.warnings.extend(no_utilisation_warning(list(metrics)))
    return Timeline(counters=counters_frame(ts_ns, device, metrics), sources=[source]).validate()


def counters_frame(ts_ns: np.ndarray, device: np.ndarray, metrics: dict[str, np.ndarray],
                   source: int = 0) -> pd.DataFrame:
    """Wide per-row metric arrays -> the long counters table, sorted by device, metric, time."""
    n = len(ts_ns)
    names = list(metrics)
    if n == 0 or not names:
        return T.empty_counters()
    return long_counters_frame(
        np.tile(np.asarray(ts_ns, dtype=np.int64), len(names)),
        np.tile(np.asarray(device, dtype=np.int32), len(names)),
        pd.Categorical(np.repeat(np.array(names, dtype=object), n), categories=names),
        np.concatenate([np.asarray(metrics[m], dtype=np.float64) for m in names]), source)


def long_counters_frame(ts_ns: np.ndarray, device: np.ndarray, metric: pd.Categorical | np.ndarray,
                        value: np.ndarray, source: int = 0) -> pd.DataFrame:
    """One row per sample and metric -> the counters table, sorted by device, metric, time."""
    frame = pd.DataFrame({
        "ts_ns": np.asarray(ts_ns, dtype=np.int64),
        "device": np.asarray(device, dtype=np.int32),
        "metric": metric if isinstance(metric, pd.Categorical) else pd.Categorical(metric),
        "value": np.asarray(value, dtype=np.float64),
        "source": np.full(len(ts_ns), source, dtype=np.int32),
    })
    frame = frame.sort_values(["device", "metric", "ts_ns"], kind="stable", ignore_index=True)
    return frame[list(T.COUNTER_COLUMNS)]


def unknown_columns_warning(kept: list[str], prefix: str) -> list[str]:
    if not kept:
        return []
    return [f"columns not recognised, kept as {prefix}<name>: {', '.join(kept)}"]


def split_lines(data: bytes, path: object) -> tuple[list[str], bool]:
    """Decode a text log into lines (no line ends) and whether the last line was cut off before
    its newline. Undecodable bytes become U+FFFD rather than failing the whole log."""
    text = data.decode("utf-8", errors="replace")
    complete_end = text.endswith("\n")
    lines = text.split("\n")
    if complete_end:
        lines.pop()
    return [ln.rstrip("\r") for ln in lines], not complete_end


def drop_cut_last_row(source: Source, line_no: int, kept: int) -> None:
    """Record the one warning for a last row cut off before its newline."""
    source.not_kept["truncated_row"] = 1
    source.warnings.append(f"line {line_no}: last line cut off before its end (the logger was "
                           f"stopped mid-write); dropped, {kept} complete rows kept")


def drop_wrong_rows(source: Source, line_nos: list[int]) -> None:
    """Record rows whose number of values differs from their header (one warning)."""
    if not line_nos:
        return
    source.not_kept["wrong_value_count"] = len(line_nos)
    shown = ", ".join(str(n) for n in line_nos[:5]) + (" ..." if len(line_nos) > 5 else "")
    source.warnings.append(f"{len(line_nos)} rows with a different number of values than their "
                           f"header dropped (lines {shown})")


def without_nuls(data: bytes, source: Source) -> bytes:
    """A log's bytes with NUL padding removed, counted in `source` (a log rotated with copytruncate while
    its writer kept writing at its old offset, or a pre-allocated file, reads as NULs)."""
    nuls = data.count(b"\x00")
    if nuls:
        data = data.replace(b"\x00", b"")
        source.not_kept["nul_byte"] = nuls
        source.warnings.append(f"{nuls} NUL bytes removed (padding: a log rotated while its writer kept "
                               f"writing at its old offset, or a pre-allocated file)")
    return data


def read_segments(path: Path, data: bytes, fmt: str,
                  segments: Callable[[Path, list[str], bool, Source], list[_Seg]],
                  no_rows: str) -> tuple[Source, list[_Seg]]:
    """The start every text log reader shares: lines, header segments, rows counted; a log
    without a single data row is an InputError saying what a row looks like (`no_rows`)."""
    source = Source(path=str(path), format=fmt)
    data = without_nuls(data, source)
    lines, cut = split_lines(data, path)
    found = segments(path, lines, cut, source)
    rows = sum(len(seg.rows) for seg in found)
    source.events_read = rows + sum(n for reason, n in source.not_kept.items() if reason != "nul_byte")
    if rows == 0:
        raise InputError(path, no_rows)
    return source, found


UTIL_COLUMNS_ABSENT = ("no utilisation column: whether a GPU is idle is judged from its memory used and power "
                       "draw only")


def no_utilisation_warning(metrics: Sequence[str]) -> list[str]:
    """The warning for a log with memory or power but no SM utilisation: idleness is judged from those."""
    if T.UTIL_METRIC in metrics or not any(m in metrics for m in ("fb_used_mib", "power_w")):
        return []
    return [UTIL_COLUMNS_ABSENT]
