"""The columns of a `nvidia-smi --query-gpu=... --format=csv,noheader` log (no header line) named by their values.

nvidia-smi writes each value with its unit (`45 %`, `2048 MiB`, `120.50 W`, `1410 MHz`; temperatures and indices
bare), so a column's unit says which quantity it is; which field of that quantity it is, the values say only in
these cases (`name_columns`), and every other column is kept unnamed (`field<N>`), never guessed:

* a column of dates is the sample time;
* one `%` column is utilization.gpu. Of two or more, the one at least as large as every other in
  UTIL_OVER_MEMORY_SHARE of the samples where they differ is utilization.gpu (memory is read or written only while
  kernels run, so utilization.memory, like the encoder's and decoder's, stays at or below it); a second column
  that it dominates so is utilization.memory when there are just two. Several `%` columns none of which is the
  largest: refused (which one is utilization.gpu cannot be told);
* one `W` column whose values vary is power.draw; beside it, a constant `W` column at or above its every value is
  power.limit;
* a bare whole-number column whose values come round-robin (each GPU once per sample) is the GPU index;
* `P0`-`P12` is the performance state.

Memory columns (`MiB`: used, free or total), clocks, temperatures and text are kept unnamed: nothing in their
values alone says which field they are. A log without a `%` column is refused: nothing in it says how busy a GPU
was. The reader says what was read as what in a warning.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ._counters import MISSING_TEXT, parse_numbers
from ._log_columns import DATE_VALUE, value_units

# Of two utilisation columns, utilization.gpu is at least the other in this share of the samples where they differ
# (memory is busy only while kernels run; copies without a kernel, and rounding, let it exceed at times).
UTIL_OVER_MEMORY_SHARE = 0.9
_DMY_VALUE = re.compile(r"^\d{1,2}[-/.]\d{1,2}[-/.]\d{4}[T ]\s*\d{1,2}:\d{2}")
_PSTATE = re.compile(r"^P\d{1,2}$")


@dataclass(frozen=True)
class Named:
    """Headers for a headerless log's columns (nvidia-smi's field names with their units, `field<N>` when the
    values do not say), and the sentence saying how they were read."""

    headers: list[str]
    note: str


def name_columns(rows: list[list[str]]) -> Named | str:
    """The headers of a headerless log's columns (module docstring), or why they cannot be told."""
    table = np.array(rows, dtype=object)
    kinds = [_kind(pd.Series(table[:, j], dtype=object).astype(str).str.strip()) for j in range(table.shape[1])]
    headers = [f"field{j + 1}" + (f" [{k}]" if k in ("%", "MiB", "W", "MHz") else "") for j, k in enumerate(kinds)]
    said: list[str] = []
    dates = [j for j, k in enumerate(kinds) if k == "date"]
    if dates:
        headers[dates[0]] = "timestamp"
    pct = [j for j, k in enumerate(kinds) if k == "%"]
    if not pct:
        return "no column of percentages (utilization.gpu is written '45 %'): nothing says how busy the GPU was"
    values = {j: parse_numbers(table[:, j])[0] for j in pct}
    util = next((j for j in pct if all(_dominates(values[j], values[o]) for o in pct if o != j)), None)
    if util is None:
        cols = ", ".join(str(j + 1) for j in pct)
        return (f"columns {cols} are all percentages and none is the largest in nearly every sample: which one is "
                f"utilization.gpu cannot be told")
    headers[util] = "utilization.gpu [%]"
    if len(pct) == 1:
        said.append(f"column {util + 1} (the only % column) as utilization.gpu")
    else:
        said.append(f"column {util + 1} as utilization.gpu (of the {len(pct)} % columns, the largest in "
                    f"{UTIL_OVER_MEMORY_SHARE:.0%} or more of the samples where they differ)")
        if len(pct) == 2:
            other = pct[1] if util == pct[0] else pct[0]
            headers[other] = "utilization.memory [%]"
            said.append(f"column {other + 1} as utilization.memory (memory is busy only while kernels run)")
    _power(table, kinds, headers, said)
    for j, k in enumerate(kinds):
        if k == "number" and _round_robin_ids(table[:, j]):
            headers[j] = "index"
            said.append(f"column {j + 1} (whole numbers, each once per sample) as the GPU index")
            break
    for j, k in enumerate(kinds):
        if k == "pstate":
            headers[j] = "pstate"
    unnamed = [str(j + 1) for j, h in enumerate(headers) if h.startswith("field")]
    note = ("no header line (nvidia-smi --format=csv,noheader): columns named by their values' units: "
            + ", ".join(said)
            + (f"; column{'s' if len(unnamed) > 1 else ''} {', '.join(unnamed)} kept unnamed (field<N>: their values "
               f"do not say which field they are)" if unnamed else "")
            + "; add the field list given to --query-gpu as a first line to name every column")
    return Named(headers, note)


def _kind(values: pd.Series) -> str:
    """What a column's values are: "date", a unit ("%", "MiB", "W", "MHz", ...), "pstate", "number" (bare) or
    "text"."""
    present = values[~values.isin(MISSING_TEXT)]
    if not len(present):
        return "text"
    if (present.str.match(DATE_VALUE) | present.str.match(_DMY_VALUE)).all():
        return "date"
    if present.str.match(_PSTATE).all():
        return "pstate"
    units = value_units(present.to_numpy())
    if (units != "").all() and units.nunique() == 1:
        return str(units.iloc[0])
    if not parse_numbers(present)[1].any() and (units == "").all():
        return "number"
    return "text"


def _dominates(a: np.ndarray, b: np.ndarray) -> bool:
    """`a` at least `b` in UTIL_OVER_MEMORY_SHARE of the samples where both have a value and they differ (or
    they never differ)."""
    both = ~np.isnan(a) & ~np.isnan(b)
    differ = both & (a != b)
    return not differ.any() or float(np.mean(a[differ] > b[differ])) >= UTIL_OVER_MEMORY_SHARE


def _power(table: np.ndarray, kinds: list[str], headers: list[str], said: list[str]) -> None:
    """power.draw (the one W column that varies) and power.limit (a constant W column at or above it)."""
    watts = {j: parse_numbers(table[:, j])[0] for j, k in enumerate(kinds) if k == "W"}
    varying = [j for j, v in watts.items() if np.nanmax(v) > np.nanmin(v)]
    if len(varying) != 1:
        return
    draw = varying[0]
    headers[draw] = "power.draw [W]"
    said.append(f"column {draw + 1} (the W column that varies) as power.draw")
    top = np.nanmax(watts[draw])
    limits = [j for j, v in watts.items() if j != draw and np.nanmin(v) == np.nanmax(v) >= top]
    if len(limits) == 1:
        headers[limits[0]] = "power.limit [W]"
        said.append(f"column {limits[0] + 1} (constant, at or above every draw) as power.limit")


def _round_robin_ids(values: np.ndarray) -> bool:
    """Whole numbers, at least two of them, that come back round-robin (`round_robin`)."""
    parsed, bad = parse_numbers(values)
    if bad.any() or np.isnan(parsed).any() or (parsed % 1 != 0).any():
        return False
    codes, uniques = pd.factorize(parsed)
    return len(uniques) >= 2 and round_robin(codes, len(uniques))


def round_robin(codes: np.ndarray, k: int) -> bool:
    """Whether value codes come round-robin, one row per GPU per sample: one value throughout (one GPU),
    or several samples in which a value never follows itself and mostly comes back k rows later."""
    n = len(codes)
    if k == 1:
        return True
    if k >= n:
        return False
    repeats = float(np.mean(codes[1:] == codes[:-1]))
    period = float(np.mean(codes[k:] == codes[:-k]))
    return repeats < 0.1 and period >= 0.5
