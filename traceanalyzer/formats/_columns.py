"""Small helpers readers share to turn decoded values into typed columns without per-event work
beyond one list comprehension per field."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

_TRAILING_INT = re.compile(r"(-?\d+)\s*$")


class Interner:
    """Maps strings to stable int codes across chunks; becomes a pandas Categorical at the end."""

    def __init__(self) -> None:
        self._index: dict[str, int] = {}
        self.values: list[str] = []

    def code(self, value: Any) -> int:
        key = value if isinstance(value, str) else ("" if value is None else str(value))
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
        try:  # the common case once a trace's names have been seen: one dict lookup each
            return np.fromiter(map(self._index.__getitem__, values), dtype=np.int32, count=n)
        except (KeyError, TypeError):
            pass
        try:
            local = {u: self.code(u) for u in dict.fromkeys(values)}
        except TypeError:  # unhashable values (lists): pandas compares them as objects
            codes, uniques = pd.factorize(np.asarray(values, dtype=object), use_na_sentinel=False)
            mapping = np.fromiter((self.code(u) for u in uniques), dtype=np.int32, count=len(uniques))
            return mapping[codes]
        return np.fromiter(map(local.__getitem__, values), dtype=np.int32, count=n)

    def categorical(self, codes: np.ndarray) -> pd.Categorical:
        return pd.Categorical.from_codes(codes.astype(np.int32), categories=pd.Index(self.values, dtype=object))


def to_float(values: Sequence[Any]) -> np.ndarray:
    """Numbers as float64; anything else (None, strings) becomes NaN."""
    try:
        arr = np.array(values, dtype=np.float64)
        if arr.ndim == 1:  # lists as values (hostile input) would make a 2-D array
            return arr
    except (TypeError, ValueError):
        pass
    obj = np.empty(len(values), dtype=object)
    obj[:] = list(values)
    return pd.to_numeric(pd.Series(obj), errors="coerce").to_numpy(np.float64)


def to_int_id(values: Sequence[Any], missing: int = -1) -> np.ndarray:
    """Ids as int64: ints as is, strings by their trailing number ("stream 7" -> 7, "25738" ->
    25738), anything else (None, "", "Spans") -> `missing`."""
    try:
        arr = np.array(values, dtype=np.int64)
        if arr.ndim == 1:  # lists as ids (hostile input) would make a 2-D array
            return arr
    except (TypeError, ValueError, OverflowError):
        pass
    obj = np.empty(len(values), dtype=object)
    obj[:] = list(values)
    try:
        codes, uniques = pd.factorize(obj, use_na_sentinel=False)
    except TypeError:  # a list or object as an id (hostile input): not an id
        obj[:] = [v if v is None or isinstance(v, (int, float, str)) else None for v in values]
        codes, uniques = pd.factorize(obj, use_na_sentinel=False)
    parsed = np.fromiter((_parse_id(u, missing) for u in uniques), dtype=np.int64, count=len(uniques))
    return parsed[codes] if len(obj) else np.zeros(0, dtype=np.int64)


# An id that does not fit in int64 (>= 2^63): marked so readers drop and count its event rather
# than let it wrap onto another id.
ID_OUT_OF_RANGE = -(2**62)
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def _parse_id(value: Any, missing: int) -> int:
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
        return value if _INT64_MIN < value <= _INT64_MAX else ID_OUT_OF_RANGE
    return missing


def us_to_ns(us: np.ndarray) -> np.ndarray:
    """Float microseconds to int64 nanoseconds, rounded to the nearest nanosecond.

    Whole and fractional microseconds are scaled separately: `us * 1000` in float64 would lose
    about 0.25 us at epoch-microsecond magnitudes (1.7e15), more than the parse itself lost.
    NaN becomes 0 (callers mark missing values themselves).
    """
    us = np.nan_to_num(np.asarray(us, dtype=np.float64), nan=0.0)
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
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None
