"""Durations as users write them ("100us", "1.5s", "-2s") <-> int64 nanoseconds."""

from __future__ import annotations

import re

_UNITS_NS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000,
             "m": 60_000_000_000, "min": 60_000_000_000, "h": 3_600_000_000_000}
_DURATION = re.compile(r"^\s*([+-]?(?:\d+(?:\.\d*)?|\.\d+))\s*(ns|us|µs|ms|s|min|m|h)\s*$")


def parse_duration_ns(text: str) -> int:
    """'100us' -> 100000. A unit is required (ns, us, ms, s, m/min, h); raises ValueError."""
    if text.strip() in ("0", "+0", "-0"):
        return 0
    m = _DURATION.match(text)
    if not m:
        raise ValueError(f"{text!r} is not a duration: expected a number and a unit, "
                         f"e.g. 100us, 2.5ms, -2s (units: ns, us, ms, s, m, h)")
    return int(round(float(m.group(1)) * _UNITS_NS[m.group(2)]))


def ns_to_us(ns: float) -> float:
    return float(ns) / 1000.0
