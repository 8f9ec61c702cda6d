"""Durations as users write them ("100us", "1.5s", "-2s") <-> int64 nanoseconds."""

from __future__ import annotations

import re
from datetime import datetime, timezone

from .timeline import CLOCK_EPOCH, CLOCK_WALL

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
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



def parse_start(text: str) -> tuple[int, str]:
    """A date and time as users write it -> (ns, clock).

    '2024-01-04 13:54:35[.123]' (no zone: the logging machine's local time) -> (ns as if UTC,
    CLOCK_WALL); with a zone ('...Z', '...+01:00') -> (ns since the epoch, CLOCK_EPOCH).
    Raises ValueError naming the expected shape.
    """
    try:
        dt = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{text!r} is not a date and time: expected e.g. 2024-01-04 13:54:35 "
                         f"(local time of the logging machine) or 2024-01-04T12:54:35Z") from None
    if dt.tzinfo is None:
        return datetime_to_ns(dt.replace(tzinfo=timezone.utc)), CLOCK_WALL
    return datetime_to_ns(dt), CLOCK_EPOCH


def datetime_to_ns(dt: datetime) -> int:
    """An aware datetime -> integer ns since the epoch, exactly (no float rounding)."""
    delta = dt - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1_000


_SIZE_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
               "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4,
               "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-zA-Z]*)\s*$")


def parse_size_bytes(text: str) -> int:
    """'16GiB' -> 17179869184, '500MB' -> 500000000, '2G' -> 2 GiB; bare numbers are bytes."""
    m = _SIZE.match(text)
    unit = m.group(2).lower() if m else ""
    if not m or unit not in _SIZE_UNITS and unit != "":
        raise ValueError(f"{text!r} is not a size: expected a number and a unit, e.g. 500MB, 16GiB")
    return int(float(m.group(1)) * _SIZE_UNITS.get(unit, 1))


def format_bytes(n: float | None) -> str:
    """Bytes in binary units for prose and tables: 512 B, 1.5 KiB, 3.2 GiB; "n/a" for None."""
    if n is None:
        return "n/a"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"  # pragma: no cover (the loop returns)
