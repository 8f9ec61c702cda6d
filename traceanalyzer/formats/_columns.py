"""Small helpers readers share to turn decoded values into typed columns without per-event work
beyond one list comprehension per field."""

from __future__ import annotations

import re
from collections.abc import Sequence
from itertools import compress, repeat
from typing import Any

import numpy as np
import pandas as pd

_TRAILING_INT = re.compile(r"(-?\d+)\s*$")


# Strings longer than this (a name, a category) are cut to it: no profiler writes such names,
# and a hostile 100 MB name would otherwise be copied through every table and report.
MAX_NAME_CHARS = 64 * 1024
CUT_MARK = "\u2026[cut]"


def cut_text(value: str, limit: int = MAX_NAME_CHARS) -> str:
    """`value`, cut to `limit` characters with a visible mark when longer."""
    return value if len(value) <= limit else value[:limit] + CUT_MARK


class Interner:
    """Maps strings to stable int codes across chunks; becomes a pandas Categorical at the end.

    Strings longer than MAX_NAME_CHARS are cut (`cut` counts the distinct ones)."""

    def __init__(self) -> None:
        self._index: dict[str, int] = {}
        self.values: list[str] = []
        self._cut: set[str] = set()

    @property
    def cut(self) -> int:
        return len(self._cut)

    def code(self, value: Any) -> int:
        key = value if isinstance(value, str) else ("" if value is None else _short_str(value))
        if len(key) > MAX_NAME_CHARS:
            key = cut_text(key)
            self._cut.add(key)
        found = self._index.get(key)
        if found is None:
            found = self._index[key] = len(self.values)
            self.values.append(key)
        return found

    def codes(self, values: Sequence[Any]) -> np.ndarray:
        """Codes of `values`; unseen values get new codes in order of first appearance."""
        n = len(values)
        if n == 0:
            return np.zeros(0, dtype=np.int32)
        try:  # one dict lookup each; -1 where not seen yet
            out = np.fromiter(map(self._index.get, values, repeat(-1)), dtype=np.int32, count=n)
        except TypeError:  # unhashable values (lists, objects): by their bounded text
            return self.codes([v if isinstance(v, str) or v is None else _short_str(v) for v in values])
        unseen = out < 0
        n_unseen = int(unseen.sum())
        if n_unseen:  # new values (or None, long or non-string ones): coded once per distinct value
            keep = unseen.tolist()  # C-level selection of the unseen values (no Python loop over them)
            local = {u: self.code(u) for u in dict.fromkeys(compress(values, keep))}
            out[unseen] = np.fromiter(map(local.__getitem__, compress(values, keep)), dtype=np.int32, count=n_unseen)
        return out

    def categorical(self, codes: np.ndarray) -> pd.Categorical:
        return pd.Categorical.from_codes(codes.astype(np.int32, copy=False),
                                         categories=pd.Index(self.values, dtype=object))


def _short_str(value: Any) -> str:
    """str() of a non-string value (a number, a list), bounded: a huge nested value is not copied whole."""
    if isinstance(value, (list, dict)) and len(value) > 1000:
        return f"<{type(value).__name__} of {len(value)} items>"
    try:
        return str(value)
    except (ValueError, RecursionError):  # ints beyond the str() digit limit, deep nesting
        return f"<{type(value).__name__}>"


def names_cut_warning(*interners: Interner) -> list[str]:
    """The one warning for names cut to MAX_NAME_CHARS, if any were."""
    n = sum(i.cut for i in interners)
    if not n:
        return []
    return [f"names cut: {n} names longer than {MAX_NAME_CHARS} characters cut to that length"]


def _has_bool(values: Sequence[Any]) -> bool:
    return any(v.__class__ is bool for v in values)


def to_float(values: Sequence[Any]) -> np.ndarray:
    """Numbers as float64; anything else (None, strings, booleans) becomes NaN."""
    if not _has_bool(values):
        try:
            arr = np.array(values, dtype=np.float64)
            if arr.ndim == 1:  # lists among the values make a 2-D array: not numbers
                return arr
        except (TypeError, ValueError):
            pass
    obj = np.empty(len(values), dtype=object)
    obj[:] = [v if v is None or (isinstance(v, (int, float, str)) and v.__class__ is not bool) else None
              for v in values]
    return pd.to_numeric(pd.Series(obj), errors="coerce").to_numpy(np.float64)


def to_int_id(values: Sequence[Any], missing: int = -1, unsigned64: bool = False) -> np.ndarray:
    """Ids as int64: ints as is, strings by their trailing number ("stream 7" -> 7, "25738" ->
    25738), anything else (None, "", "Spans") -> `missing`. `unsigned64`: ids the writer declares
    uint64 (Kineto's correlation, graph id): 2^63 to 2^64-1 kept exact as their int64 bit pattern
    (`as_uint64` gives them back), so equal ids stay equal for joins; 2^64-1 (all ones, CUPTI's
    invalid id) is -1, no id."""
    if not _has_bool(values):
        try:
            arr = np.array(values, dtype=np.int64)
            if arr.ndim == 1:  # lists among the values make a 2-D array: not ids
                return arr
        except (TypeError, ValueError, OverflowError):
            pass
    obj = np.empty(len(values), dtype=object)
    obj[:] = [v if v is None or (isinstance(v, (int, float, str)) and v.__class__ is not bool) else None
              for v in values]  # lists, dicts, booleans: no id
    codes, uniques = pd.factorize(obj, use_na_sentinel=False)
    parsed = np.fromiter((_parse_id(u, missing, unsigned64) for u in uniques), dtype=np.int64, count=len(uniques))
    return parsed[codes] if len(obj) else np.zeros(0, dtype=np.int64)


# An id that does not fit in int64 (>= 2^63): marked so readers drop and count its event rather
# than let it wrap onto another id.
ID_OUT_OF_RANGE = -(2**62)
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def as_uint64(ids: np.ndarray) -> np.ndarray:
    """Unsigned 64-bit ids read with `to_int_id(..., unsigned64=True)`, as the writer wrote them."""
    return np.asarray(ids, dtype=np.int64).view(np.uint64)


def _parse_id(value: Any, missing: int, unsigned64: bool = False) -> int:
    if isinstance(value, bool) or value is None:
        return missing
    if isinstance(value, float):
        if value != value:
            return missing
        if not -9.2e18 < value < 9.2e18:
            return ID_OUT_OF_RANGE
        value = int(value)
    if isinstance(value, str):
        m = _TRAILING_INT.search(value)
        if not m:
            return missing
        value = int(m.group(1)) if len(m.group(1)) < 30 else 2**64
    if isinstance(value, int):
        if unsigned64 and _INT64_MAX < value < 2**64:
            return value - 2**64  # the same 64 bits, read as int64
        return value if _INT64_MIN < value <= _INT64_MAX else ID_OUT_OF_RANGE
    return missing


def us_to_ns(us: np.ndarray) -> np.ndarray:
    """Float microseconds to int64 nanoseconds, rounded to the nearest nanosecond.

    Whole and fractional microseconds are scaled separately: `us * 1000` in float64 would lose
    about 0.25 us at epoch-microsecond magnitudes (1.7e15), more than the parse itself lost.
    NaN becomes 0 (callers mark missing values themselves).
    """
    us = np.nan_to_num(np.asarray(us, dtype=np.float64), nan=0.0, posinf=0.0, neginf=0.0)
    us = np.where(np.abs(us) < 9e15, us, 0.0)  # beyond int64 ns: callers drop such values first
    whole = np.floor(us)
    frac_ns = np.rint((us - whole) * 1000.0).astype(np.int64)
    return whole.astype(np.int64) * 1000 + frac_ns


def int_or_none(value: Any) -> int | None:
    """A header or argument value as an int when it is one (7, 7.0, "7"); None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit() and len(value.strip()) <= 40:
        return int(value)
    return None


def small_int_or_none(value: Any, limit: int = 2**31 - 1) -> int | None:
    """`int_or_none` limited to 0..limit (ranks, world sizes, device ids); None beyond."""
    found = int_or_none(value)
    return found if found is not None and 0 <= found <= limit else None
