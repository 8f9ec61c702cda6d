"""Durations as users write them ("100us", "1.5s", "-2s") <-> int64 nanoseconds."""

from __future__ import annotations

import math
import re
from datetime import datetime, timedelta, timezone

from .timeline import CLOCK_EPOCH, CLOCK_SAMPLES, CLOCK_TIME_OF_DAY, CLOCK_WALL

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
INT64_MAX = 2**63 - 1
# Dates a user may name (--dmon-start): the epoch up to the year 2200, like the times readers keep.
FIRST_DATE = datetime(1970, 1, 1, tzinfo=timezone.utc)
END_DATE = datetime(2200, 1, 1, tzinfo=timezone.utc)
_UNITS_NS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000,
             "m": 60_000_000_000, "min": 60_000_000_000, "h": 3_600_000_000_000}
_DURATION = re.compile(r"^\s*([+-]?(?:\d+(?:\.\d*)?|\.\d+))\s*(ns|us|µs|ms|s|min|m|h)\s*$")


class OutOfRange(ValueError):
    """A well-formed value too large for any use (and for int64 arithmetic)."""


def parse_duration_ns(text: str) -> int:
    """'100us' -> 100000. A unit is required (ns, us, ms, s, m/min, h); raises ValueError."""
    if text.strip() in ("0", "+0", "-0"):
        return 0
    m = _DURATION.match(text)
    if not m:
        raise ValueError(f"{text!r} is not a duration: expected a number and a unit, "
                         f"e.g. 100us, 2.5ms, -2s (units: ns, us, ms, s, m, h)")
    ns = float(m.group(1)) * _UNITS_NS[m.group(2)]
    if not math.isfinite(ns) or abs(ns) > INT64_MAX:
        raise OutOfRange(f"{text!r} is too long a duration")
    return int(round(ns))


def format_duration(ns: int) -> str:
    """1_000_000 -> '1ms', 90_000_000_000 -> '90s': the largest unit that writes `ns` as an integer
    (the inverse of `parse_duration_ns`, for messages naming an accepted range)."""
    if ns == 0:
        return "0"
    for unit in ("h", "min", "s", "ms", "us"):
        if ns and ns % _UNITS_NS[unit] == 0:
            return f"{ns // _UNITS_NS[unit]}{unit}"
    return f"{ns}ns"


# How durations and shares are written, for prose, tables and the HTML page alike: the first rule whose
# `from_us` the magnitude reaches gives the unit and the decimals. The page receives these rules in its
# data (report/html.py), so its tooltips and tables write a duration exactly as the Markdown does.
DURATION_RULES: tuple[dict[str, float | str | int], ...] = (
    {"from_us": 1_000_000, "per": 1_000_000, "unit": "s", "decimals": 2},
    {"from_us": 1_000, "per": 1_000, "unit": "ms", "decimals": 1},
    {"from_us": 0, "per": 1, "unit": "us", "decimals": 0},
)
PERCENT_DECIMALS = 1


def format_us(us: float | None) -> str:
    """A duration in the most readable unit for prose and tables: 850 us, 12.3 ms, 4.56 s."""
    if us is None or us != us:
        return "n/a"
    for rule in DURATION_RULES:
        if abs(us) >= float(rule["from_us"]):
            text = f"{us / float(rule['per']):.{int(rule['decimals'])}f}"
            if text.startswith("-") and not text.strip("-0."):
                text = text[1:]  # -0.3 us is written 0 us, not -0 us
            return f"{text} {rule['unit']}"
    return f"{us:.0f} us"  # not reached: the last rule starts at 0


def format_rules() -> dict[str, object]:
    """The formatting rules as data, for the page's scripts."""
    return {"duration": [dict(r) for r in DURATION_RULES], "percent_decimals": PERCENT_DECIMALS}


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
    if not FIRST_DATE <= (dt if dt.tzinfo else dt.replace(tzinfo=timezone.utc)) < END_DATE:
        raise ValueError(f"{text!r} is out of range: expected a date from {FIRST_DATE:%Y-%m-%d} "
                         f"to before {END_DATE:%Y-%m-%d}")
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
    size = float(m.group(1)) * _SIZE_UNITS.get(unit, 1)
    if not math.isfinite(size) or size > INT64_MAX:
        raise OutOfRange(f"{text!r} is too large a size")
    return int(size)


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


def time_text(ns: int, clock: str) -> str:
    """An absolute time as text, in the clock it is on."""
    if clock == CLOCK_SAMPLES:
        return f"sample at {ns / 1e9:.3f} s"
    if clock == "trace":
        return f"{ns / 1e9:.6f} s (trace clock)"
    if clock == CLOCK_TIME_OF_DAY:
        day_ns = ns % (86_400 * 10**9)
        t = datetime(1970, 1, 1) + timedelta(microseconds=day_ns // 1000)
        return t.strftime("%H:%M:%S.%f")[:-3] + " (local time of day)"
    t = datetime(1970, 1, 1) + timedelta(microseconds=ns // 1000)
    text = t.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    return text + (" UTC" if clock == CLOCK_EPOCH else " (local)")
