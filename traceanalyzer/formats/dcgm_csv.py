"""Reader for DCGM field logs in long CSV form: `GPUId,TimeStampUs,Field,Values`, one row per
GPU, time and field (what DCGM's Python bindings and exporters write).

`TimeStampUs` is microseconds since the Unix epoch (UTC), so these logs need no time zone
(CLOCK_EPOCH). Field names are DCGM field tags (`gpu_utilization`, `power_usage`, ...) or
`DCGM_FI_DEV_*` / `DCGM_FI_PROF_*` identifiers; known ones map onto the shared metric names,
the rest are kept as `dcgm_<field>`. (`dcgmi dmon`'s own fixed-width text has no timestamps and
is not read.)
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pandas as pd

from .. import timeline as T
from ..errors import InputError
from ..timeline import Source, Timeline
from ._base import ReadOptions
from ._counters import (
    MAX_LOG_COLUMNS,
    check_log_times,
    device_indices,
    drop_wrong_rows,
    long_counters_frame,
    no_utilisation_warning,
    parse_numbers,
    unknown_columns_warning,
    without_nuls,
)

FORMAT = "dcgm-csv"
HEADER = ("gpuid", "timestampus", "field", "values")

FIELDS: dict[str, str] = {
    "gpu_utilization": "sm_util_pct", "gpu_util": "sm_util_pct",
    "mem_copy_utilization": "mem_util_pct", "mem_copy_util": "mem_util_pct",
    "enc_utilization": "enc_util_pct", "enc_util": "enc_util_pct",
    "dec_utilization": "dec_util_pct", "dec_util": "dec_util_pct",
    "power_usage": "power_w", "power_usage_instant": "power_instant_w",
    "gpu_temp": "gpu_temp_c", "memory_temp": "mem_temp_c",
    "sm_clock": "sm_clock_mhz", "memory_clock": "mem_clock_mhz",
    "fb_used": "fb_used_mib", "fb_free": "fb_free_mib", "fb_total": "fb_total_mib",
}


KIND = "counters"  # registry.KINDS: what its files are in a job


def sniff(head: bytes) -> bool:
    first = head.lstrip().split(b"\n", 1)[0].strip().decode("utf-8", errors="replace")
    return tuple(p.strip().lower() for p in first.split(",")) == HEADER


def read(path: Path, data: bytes, options: ReadOptions) -> Timeline:
    source = Source(path=str(path), format=FORMAT, clock=T.CLOCK_EPOCH)
    text = without_nuls(data, source).decode("utf-8", errors="replace")
    cut = not text.endswith("\n")
    if cut and "\n" in text:  # a last row cut off mid-write
        text = text[: text.rindex("\n") + 1]
        source.not_kept["truncated_row"] = 1
        source.warnings.append("last line cut off before its end; dropped")
    lines = pd.Series(text.split("\n"))
    filled = (lines.str.strip() != "").to_numpy()
    header_at = int(np.flatnonzero(filled)[0]) if filled.any() else 0
    wrong = (lines.str.count(",").to_numpy() != len(HEADER) - 1) & filled
    wrong[: header_at + 1] = False
    data_lines = np.flatnonzero(filled & ~wrong)
    line_nos = (data_lines[data_lines > header_at] + 1).tolist()  # file line of each row read
    if wrong.any():  # rows with more or fewer fields than the header: dropped and counted (docs/inputs.md)
        drop_wrong_rows(source, (np.flatnonzero(wrong) + 1).tolist())
        text = "\n".join(lines[~wrong].tolist())
    try:
        frame = pd.read_csv(io.StringIO(text), dtype=str, skipinitialspace=True, on_bad_lines="error")
    except (pd.errors.ParserError, ValueError) as exc:
        raise InputError(path, f"not a DCGM long CSV (GPUId,TimeStampUs,Field,Values): {exc}") from None
    frame.columns = [c.strip().lower() for c in frame.columns]
    if frame.empty:
        raise InputError(path, "no data rows under the GPUId,TimeStampUs,Field,Values header")
    gpu = pd.to_numeric(frame["gpuid"].str.strip(), errors="coerce")
    stamp_us = pd.to_numeric(frame["timestampus"].str.strip(), errors="coerce")
    broken = (gpu.isna() | stamp_us.isna() | (gpu % 1 != 0) | (stamp_us % 1 != 0)).to_numpy()
    if broken.any():
        k = int(np.flatnonzero(broken)[0])
        raise InputError(path, f"line {line_nos[k]}: GPUId {frame['gpuid'].iloc[k]!r} / TimeStampUs "
                               f"{frame['timestampus'].iloc[k]!r}: expected integers")
    device = device_indices(path, gpu.to_numpy(np.float64), line_nos, "GPUId")
    if (stamp_us.abs() > 9e15).any():
        k = int(np.flatnonzero((stamp_us.abs() > 9e15).to_numpy())[0])
        raise InputError(path, f"line {line_nos[k]}: TimeStampUs {frame['timestampus'].iloc[k]!r} is out of range")
    ts_ns = stamp_us.to_numpy().astype(np.int64) * 1000
    check_log_times(path, ts_ns, line_nos, frame["timestampus"].to_numpy())
    values, bad = parse_numbers(frame["values"])
    names = frame["field"].fillna("").astype(str).str.strip().str.lower().str.slice(0, 128)
    names = names.str.replace(r"^dcgm_fi_(dev|prof)_", "", regex=True)
    if names.nunique() > MAX_LOG_COLUMNS:
        raise InputError(path, f"{names.nunique()} distinct fields; DCGM logs have at most {MAX_LOG_COLUMNS}")
    source.events_read = len(frame) + sum(n for reason, n in source.not_kept.items() if reason != "nul_byte")
    source.events_kept = len(frame)
    if bad.any():
        source.warnings.append(f"{int(bad.sum())} values that are not numbers read as missing")

    unknown = sorted({n for n in names.unique() if n not in FIELDS})
    metric = names.map(lambda n: FIELDS.get(n, f"dcgm_{n}")).to_numpy(dtype=object)
    source.warnings.extend(unknown_columns_warning(unknown, "dcgm_"))
    source.warnings.extend(no_utilisation_warning([str(m) for m in pd.unique(metric)]))
    counters = long_counters_frame(ts_ns, device, pd.Categorical(metric), values)
    return Timeline(counters=counters, sources=[source]).validate()
