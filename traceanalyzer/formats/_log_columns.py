"""What a GPU log's column means whatever its header calls it, its values in the metric's unit, and its
times to the nanosecond.

Headers written by nvidia-smi (`utilization.gpu [%]`, `power.draw [W]`, `clocks.sm [MHz]`) and by scripts
(`utilization_gpu_percent`, `gpu_util`, `power_draw_w`, `memUsedMB`, `sm_clock_mhz`) are read by one rule,
not a list of names: the header is cut into lower-case words (camelCase split; `._ -[]()%/` separate), a
trailing or bracketed unit word is taken off (`%`/`percent`/`pct`, `MiB`/`MB`/`GiB`/`GB`, `W`, `MHz`, `C`),
and a QUANTITY word (utilisation, memory, power, clock, temperature, fan) with the PART it is of (gpu/sm,
memory, encoder, ...) and its STATE (used/free/total, draw/limit/instant) gives the metric
(`timeline.COUNTER_METRICS`). Words that make it another quantity (`max`, `min`, `default`, `applications`,
`throttle`, ...) or another device (`cpu`, `host`, `ram`, `disk`, ...) leave it unmapped. Without a unit
in the header the values' unit decides (`45 %`, `2.5 GiB`, `120.5 W`); values are scaled to the metric's
unit (MB and GB are read as MiB and GiB: what nvidia-smi and NVML scripts mean by them).

Times (`stamps_to_ns`): `YYYY/MM/DD HH:MM:SS.fff` (nvidia-smi) and ISO-8601 (`2025-03-01T12:00:00.123Z`),
with any fraction kept to the nanosecond; a zone (`Z`, `UTC`, `+02:00`, `+0200`) makes the time UTC
(CLOCK_EPOCH); without one it is the logging machine's local time (CLOCK_WALL). Epoch numbers
(`epoch_numbers_to_ns`): seconds, ms, us or ns by their magnitude, fraction kept.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .. import timeline as T

# --- column meaning ------------------------------------------------------------------------------------
UNIT_WORDS = {
    "%": "%", "percent": "%", "pct": "%", "perc": "%", "percentage": "%",
    "mib": "MiB", "mb": "MiB", "gib": "GiB", "gb": "GiB", "kib": "KiB", "kb": "KiB", "bytes": "B",
    "w": "W", "watt": "W", "watts": "W", "mw": "mW",
    "mhz": "MHz", "ghz": "GHz", "khz": "kHz",
    "c": "C", "celsius": "C", "degc": "C",
}
# each metric family's unit, and the factor that turns another unit of the family into it
SCALE = {
    "MiB": {"MiB": 1.0, "GiB": 1024.0, "KiB": 1 / 1024, "B": 1 / 2**20, "TiB": 2.0**20},
    "W": {"W": 1.0, "mW": 1e-3, "kW": 1e3},
    "MHz": {"MHz": 1.0, "GHz": 1e3, "kHz": 1e-3},
    "%": {"%": 1.0}, "C": {"C": 1.0},
}
_VALUE_UNITS = {"mib": "MiB", "mb": "MiB", "gib": "GiB", "gb": "GiB", "kib": "KiB", "kb": "KiB", "b": "B",
                "tib": "TiB", "w": "W", "mw": "mW", "kw": "kW", "mhz": "MHz", "ghz": "GHz", "khz": "kHz",
                "%": "%", "c": "C"}
UTIL = {"utilization", "utilisation", "util", "utl", "usage", "busy", "load"}
MEMORY = {"memory", "mem", "fb", "vram", "framebuffer", "dram", "hbm"}
POWER = {"power", "pwr"}
CLOCK = {"clock", "clocks", "clk", "freq", "frequency"}
TEMPERATURE = {"temperature", "temp"}
GPU_PART = {"gpu", "sm", "graphics", "gr", "core", "compute"}
OTHER_PARTS = {"enc": "enc", "encoder": "enc", "dec": "dec", "decoder": "dec", "jpg": "jpg", "jpeg": "jpg",
               "ofa": "ofa"}
# words that make a column another quantity than the current reading, or of another device
NOT_CURRENT = {"max", "min", "default", "app", "apps", "applications", "target", "slowdown", "shutdown",
               "throttle", "reasons", "reason", "event", "events", "violation", "tlimit", "requested", "video",
               "reserved", "ecc", "retired", "remapped", "bar1"}
OTHER_DEVICE = {"cpu", "host", "ram", "swap", "disk", "net", "network", "process", "proc", "pid", "system", "sys"}
ID_WORDS = {"gpu", "device", "dev", "index", "idx", "id", "num", "no", "number", "minor", "bus", "pci", "uuid",
            "serial", "module", "card"}
TIME_WORDS = {"timestamp", "time", "date", "datetime", "ts", "now", "utc", "unix", "when", "elapsed", "uptime",
              "seconds", "secs", "sec"}
# a time column's unit word (`elapsed_sec`, `time_ms`, `t [us]`): what its numbers count when they are no epoch
TIME_UNITS_NS = {"s": 10**9, "sec": 10**9, "secs": 10**9, "second": 10**9, "seconds": 10**9,
                 "ms": 10**6, "msec": 10**6, "msecs": 10**6, "millis": 10**6, "milliseconds": 10**6,
                 "us": 10**3, "usec": 10**3, "usecs": 10**3, "micros": 10**3, "microseconds": 10**3,
                 "ns": 1, "nanos": 1, "nanoseconds": 1}

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_BRACKET = re.compile(r"[\[(]\s*([^\])]*?)\s*[\])]\s*$")
_SPLIT = re.compile(r"[^a-z0-9%]+")


@dataclass(frozen=True)
class Meaning:
    """A header's words (unit word taken off), its unit (header's, canonical; "" when none) and the metric
    it means (None: no counter metric the rule knows)."""

    words: tuple[str, ...]
    unit: str
    metric: str | None

    @property
    def is_gpu_id(self) -> bool:
        """Words that can only name which GPU a row is of (`index`, `gpu_id`, `pci.bus_id`, `uuid`)."""
        return bool(self.words) and self.metric is None and set(self.words) <= ID_WORDS and not self.unit

    @property
    def is_time(self) -> bool:
        return bool(set(self.words) & TIME_WORDS) and self.metric is None


def header_words(header: str) -> tuple[tuple[str, ...], str]:
    """`header` -> (lower-case words without the unit word, canonical unit or "")."""
    text = header.strip()
    unit = ""
    m = _BRACKET.search(text)
    if m:
        unit = UNIT_WORDS.get(m.group(1).strip().lower(), "")
        text = text[: m.start()]
    if "%" in text and not unit:
        unit = "%"
    words = [w for w in _SPLIT.split(_CAMEL.sub(" ", text).lower().replace("%", " ")) if w]
    if words and not unit and words[-1] in UNIT_WORDS and len(words) > 1:
        unit = UNIT_WORDS[words.pop()]
    return tuple(words), unit


def meaning(header: str, value_unit: str = "") -> Meaning:
    """The metric a column header means (see the module docstring); `value_unit` (canonical) decides when
    the header gives none."""
    words, unit = header_words(header)
    return Meaning(words, unit, _metric(set(words), unit or value_unit))


def _metric(w: set[str], unit: str) -> str | None:
    if not w or w & NOT_CURRENT or w & OTHER_DEVICE:
        return None
    part = next((OTHER_PARTS[x] for x in w if x in OTHER_PARTS), None)
    memory = bool(w & MEMORY)
    if w & POWER and unit in ("", "W", "mW"):
        return "power_limit_w" if w & {"limit", "cap", "enforced"} else (
            "power_instant_w" if "instant" in w else "power_w")
    if w & CLOCK or unit in ("MHz", "GHz", "kHz"):
        if unit not in ("", "MHz", "GHz", "kHz"):
            return None
        return "mem_clock_mhz" if memory else "sm_clock_mhz" if "sm" in w else "graphics_clock_mhz"
    if w & TEMPERATURE and unit in ("", "C"):
        return "mem_temp_c" if memory else "gpu_temp_c"
    if "fan" in w and unit in ("", "%"):
        return "fan_pct"
    if "pstate" in w or {"performance", "state"} <= w:
        return "pstate"
    util = w & UTIL
    if util and unit in ("", "%") and not (memory and (w & {"used", "free", "total"} or util == {"usage"})):
        if part:
            return f"{part}_util_pct"
        return "mem_util_pct" if memory else "sm_util_pct"
    if memory and unit in ("", "MiB", "GiB", "KiB", "B") and not part:
        if "free" in w:
            return "fb_free_mib"
        if "total" in w:
            return "fb_total_mib"
        return "fb_used_mib" if not (w - MEMORY - {"used", "usage", "gpu", "allocated", "alloc"}) else None
    if memory and unit == "%" and not w - MEMORY - GPU_PART:  # dmon's `mem` column: the memory's utilisation
        return "mem_util_pct"
    if util and unit in ("", "%") and w & GPU_PART:  # "gpu_usage [%]"
        return "sm_util_pct"
    return None


def metric_unit(metric: str) -> str:
    """The unit a metric is kept in (from its name's suffix)."""
    return {"pct": "%", "mib": "MiB", "w": "W", "mhz": "MHz", "c": "C"}.get(metric.rsplit("_", 1)[-1], "")


_VALUE = re.compile(r"^\s*[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?\s*([A-Za-z%]+)\s*$")


def value_units(values: np.ndarray) -> pd.Series:
    """Each value's unit, canonical ("" when none or not a unit)."""
    found = pd.Series(values, dtype=object).astype(str).str.extract(_VALUE)[0].str.lower()
    return found.map(_VALUE_UNITS).fillna("")


def common_value_unit(values: np.ndarray) -> str:
    """The unit most values carry ("" when none does)."""
    units = value_units(values)
    units = units[units != ""]
    return str(units.mode().iloc[0]) if len(units) else ""


def scale(parsed: np.ndarray, values: np.ndarray, metric: str, header_unit: str) -> np.ndarray:
    """Parsed numbers in the metric's unit: each value by its own unit when it carries one of the metric's
    family, else by the header's."""
    family = SCALE.get(metric_unit(metric))
    if family is None:
        return parsed
    factor = np.full(len(parsed), family.get(header_unit, 1.0))
    units = value_units(values).to_numpy(dtype=object)
    for unit, f in family.items():
        if f != 1.0 or unit != metric_unit(metric):
            factor[units == unit] = f
    return parsed * factor if (factor != 1.0).any() else parsed


# --- times ---------------------------------------------------------------------------------------------
_STAMP = re.compile(r"^(\d{4})[-/](\d{2})[-/](\d{2})[T ](\d{2}):(\d{2}):(\d{2})(?:[.,](\d{1,9}))?\s*"
                    r"(Z|UTC|GMT|[+-]\d{2}(?::?\d{2})?)?$", re.IGNORECASE)
DATE_VALUE = re.compile(r"^\d{4}[/-]\d{2}[/-]\d{2}[ T]\d{2}:\d{2}:\d{2}")
_DAY_NS = 86_400 * 10**9
_MAX_ZONE_NS = 14 * 3600 * 10**9


def stamps_to_ns(text: pd.Series) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Date-and-time texts -> (ns as written, with a zone made UTC; whether each parsed; whether each had a
    zone). Exact integer arithmetic: fractions to the nanosecond, never rounded to a resolution."""
    parts = text.astype(str).str.strip().str.extract(_STAMP)
    n = len(text)
    num = [pd.to_numeric(parts[i], errors="coerce").to_numpy(np.float64) for i in range(6)]
    day = pd.to_datetime(parts[0] + "-" + parts[1] + "-" + parts[2], format="%Y-%m-%d", errors="coerce")
    ok = day.notna().to_numpy() & (num[3] < 24) & (num[4] < 60) & (num[5] < 60)
    zone = parts[7].fillna("").str.upper()
    offset = _zone_ns(zone)
    ok &= np.abs(offset) <= _MAX_ZONE_NS
    ns = np.zeros(n, dtype=np.int64)
    if ok.any():
        days = day[ok].to_numpy().astype("datetime64[D]").astype(np.int64)
        hms = [np.nan_to_num(x[ok]).astype(np.int64) for x in num[3:6]]
        frac = parts[6][ok].fillna("").str.ljust(9, "0").replace("", "0").astype(np.int64).to_numpy()
        ns[ok] = days * _DAY_NS + ((hms[0] * 60 + hms[1]) * 60 + hms[2]) * 10**9 + frac - offset[ok]
    return ns, ok, (zone != "").to_numpy()


def _zone_ns(zone: pd.Series) -> np.ndarray:
    """`Z`/`UTC`/`GMT` -> 0, `+02:00`/`+0200`/`-05` -> the offset in ns (east positive)."""
    m = zone.str.extract(r"^([+-])(\d{2}):?(\d{2})?$")
    sign = np.where(m[0].to_numpy(dtype=object) == "-", -1, 1)
    hours = pd.to_numeric(m[1], errors="coerce").fillna(0).to_numpy(np.int64)
    minutes = pd.to_numeric(m[2], errors="coerce").fillna(0).to_numpy(np.int64)
    return sign * (hours * 3600 + minutes * 60) * 10**9


# Epoch numbers by magnitude (dates 1973 to 2286 in each unit; the ranges do not overlap):
# (lowest, highest, ns per unit)
EPOCH_UNITS = ((1e8, 1e10, 10**9), (1e11, 1e13, 10**6), (1e14, 1e16, 10**3), (1e17, 1e19, 1))
_EPOCH = re.compile(r"^\s*(\d+)(?:\.(\d*))?\s*$")


def _numbers_ns(parts: pd.DataFrame, unit: int) -> np.ndarray:
    """Whole and fraction digits (`_EPOCH`'s groups) of numbers counting `unit` ns each -> ns, exactly."""
    digits = len(str(unit)) - 1  # fraction digits that still name whole ns
    frac = parts[1].fillna("").str.slice(0, digits).str.ljust(digits, "0")
    frac_ns = frac.replace("", "0").astype(np.int64).to_numpy() if digits else np.zeros(len(parts), np.int64)
    return parts[0].astype(np.int64).to_numpy() * np.int64(unit) + frac_ns


def epoch_numbers_to_ns(text: pd.Series) -> np.ndarray | None:
    """Epoch numbers (`1740830400.123`, `1740830400123`) -> UTC ns, exactly; None when they are not all
    numbers of one epoch unit (seconds, ms, us or ns, told by magnitude)."""
    parts = text.astype(str).str.extract(_EPOCH)
    if not len(text) or parts[0].isna().any():
        return None
    whole = pd.to_numeric(parts[0], errors="coerce").to_numpy(np.float64)
    unit = next((u for lo, hi, u in EPOCH_UNITS if (whole >= lo).all() and (whole < hi).all()), None)
    return None if unit is None else _numbers_ns(parts, unit)


def relative_numbers_to_ns(text: pd.Series, unit: int) -> np.ndarray | None:
    """Times counted from the logger's start (`0.08`, `12.5`; `unit` ns each) -> ns, exactly; None when they
    are not all non-negative numbers below the epoch range of their unit (those are dates: epoch_numbers_to_ns)."""
    parts = text.astype(str).str.extract(_EPOCH)
    if not len(text) or parts[0].isna().any() or len(parts[0].max()) > 18:
        return None
    lowest = next(lo for lo, _, u in EPOCH_UNITS if u == unit) if unit in (10**9, 10**6, 10**3, 1) else None
    whole = pd.to_numeric(parts[0], errors="coerce").to_numpy(np.float64)
    if lowest is not None and (whole >= lowest).any():
        return None
    return _numbers_ns(parts, unit)


def time_unit_ns(header: str) -> int:
    """What a time column's numbers count, from its header's unit word (`elapsed_sec`, `time [ms]`); seconds
    when it names none."""
    words = _SPLIT.split(_CAMEL.sub(" ", header).lower())
    return next((TIME_UNITS_NS[w] for w in reversed(words) if w in TIME_UNITS_NS), 10**9)


# Dates written day and month first (`03-11-2026 15:13:16`, `11/03/2026 3:13:16 PM`, `11.03.2026 15:13`): which
# of the two is the month is told by the values (`day_month_order`).
_DMY = re.compile(r"^(\d{1,2})[-/.](\d{1,2})[-/.](\d{4})[T ]\s*(\d{1,2}):(\d{2})(?::(\d{2}))?(?:[.,](\d{1,9}))?\s*"
                  r"(AM|PM)?\s*(Z|UTC|GMT|[+-]\d{2}(?::?\d{2})?)?$", re.IGNORECASE)
MONTH_FIRST, DAY_FIRST = "month-day-year", "day-month-year"


def _dmy_as_iso(parts: pd.DataFrame, month_first: bool) -> pd.Series:
    """`_DMY`'s groups -> `YYYY-MM-DD HH:MM:SS[.f][zone]` text (`_STAMP`'s form), 12-hour times made 24-hour."""
    month, day = (parts[0], parts[1]) if month_first else (parts[1], parts[0])
    hour = parts[3].astype(int)
    ampm = parts[7].fillna("").str.upper()
    hour = hour.where(ampm == "", hour % 12 + np.where(ampm == "PM", 12, 0))
    frac = ("." + parts[6]).where(parts[6].notna(), "")
    return (parts[2] + "-" + month.str.zfill(2) + "-" + day.str.zfill(2) + " " + hour.astype(str).str.zfill(2) + ":"
            + parts[4] + ":" + parts[5].fillna("00") + frac + parts[8].fillna(""))


def day_month_order(text: pd.Series) -> tuple[pd.Series | None, str]:
    """Day-month dates as `_STAMP` text, by the order the values show: a field above 12 is the day (one row
    that shows it decides for the file; rows that show both orders are no dates); when every row could be
    either, the order under which consecutive samples lie closer in time (a log whose date changes: a wrong
    order moves the next day a month away). (None, why) when the values do not tell: every row of one date that
    reads both ways (`"ambiguous"`), or not such dates (`"row k"`)."""
    parts = text.astype(str).str.strip().str.extract(_DMY)
    bad = parts[0].isna().to_numpy()
    if bad.any():
        return None, f"row {int(np.flatnonzero(bad)[0])}"
    first, second = parts[0].astype(int).to_numpy(), parts[1].astype(int).to_numpy()
    can_md, can_dm = (first <= 12) & (second <= 31), (second <= 12) & (first <= 31)
    if not (can_md | can_dm).all():
        return None, f"row {int(np.flatnonzero(~(can_md | can_dm))[0])}"
    if can_md.all() != can_dm.all():
        k = int(np.flatnonzero(~can_dm if can_md.all() else ~can_md)[0])
        why = f"{str(text.iloc[k]).strip()[:10]!r} has a day above 12"
        return _dmy_as_iso(parts, bool(can_md.all())), (MONTH_FIRST if can_md.all() else DAY_FIRST) + f" ({why})"
    if not can_md.all():  # rows that can only be month-first beside rows that can only be day-first: the later
        return None, f"row {max(int(np.flatnonzero(~can_md)[0]), int(np.flatnonzero(~can_dm)[0]))}"
    read = [stamps_to_ns(_dmy_as_iso(parts, month_first)) for month_first in (True, False)]
    valid = [bool(ok.all()) for _, ok, _ in read]
    if valid[0] != valid[1]:  # one order names a day no month has (02-30)
        why = f"read {'day' if valid[0] else 'month'} first, a date would name a day its month does not have"
        return _dmy_as_iso(parts, valid[0]), (MONTH_FIRST if valid[0] else DAY_FIRST) + f" ({why})"
    if len(text) < 2 or not valid[0]:
        return None, "ambiguous"
    jumps = [int(np.abs(np.diff(ns)).max()) for ns, _, _ in read]
    if jumps[0] == jumps[1]:
        return None, "ambiguous"
    month_first = jumps[0] < jumps[1]
    why = (f"no day above 12; read {'day' if month_first else 'month'} first, two consecutive samples would lie "
           f"{max(jumps) / 86_400e9:.0f} days apart")
    return _dmy_as_iso(parts, month_first), (MONTH_FIRST if month_first else DAY_FIRST) + f" ({why})"


@dataclass(frozen=True)
class Times:
    """A time column read: ns, the clock they are on, and what the reader must say about them ("" when nothing)."""

    ns: np.ndarray
    clock: str
    note: str = ""


def parse_times(text: pd.Series, relative_unit_ns: int | None = None) -> Times | str:
    """A time column -> Times, or the reason it is not one: dates with a zone on every row (UTC: CLOCK_EPOCH),
    without a zone on any (local: CLOCK_WALL), epoch numbers (CLOCK_EPOCH); dates written day and month first
    in the order their values show (`day_month_order`), or relative to the first sample when they do not show
    it; numbers below the epoch range, given `relative_unit_ns` (a column named for the time), counted from the
    logger's start (CLOCK_SAMPLES: no wall time to place the log by)."""
    epoch = epoch_numbers_to_ns(text)
    if epoch is not None:
        return Times(epoch, T.CLOCK_EPOCH)
    if relative_unit_ns is not None:
        rel = relative_numbers_to_ns(text, relative_unit_ns)
        if rel is not None:
            unit = {10**9: "seconds", 10**6: "milliseconds", 10**3: "microseconds", 1: "nanoseconds"}[relative_unit_ns]
            return Times(rel, T.CLOCK_SAMPLES, f"times are {unit} since the logger started (no date): the log is on "
                                               f"its own clock, not placed on a trace's clock by wall time")
    note = ""
    ns, ok, zoned = stamps_to_ns(text)
    if not ok.any():
        iso, order = day_month_order(text)
        if iso is None and order == "ambiguous":
            first = str(text.iloc[0]).split()[0]
            iso = day_month_order_as(text, month_first=True)
            ns, ok, zoned = stamps_to_ns(iso)
            if not ok.all():
                return f"row {int(np.flatnonzero(~ok)[0])}"
            if zoned.any() and not zoned.all():
                return "zone"
            return Times(ns - ns.min(), T.CLOCK_SAMPLES,
                         f"dates such as {first!r} read month first or day first give different days and the log "
                         f"does not tell which: its times are kept relative to its first sample (not placed on a "
                         f"trace's clock by wall time); log ISO dates (YYYY-MM-DD) to place it")
        if iso is None:
            return order
        note = f"dates read as {order}"
        ns, ok, zoned = stamps_to_ns(iso)
    if not ok.all():
        return f"row {int(np.flatnonzero(~ok)[0])}"
    if zoned.any() and not zoned.all():
        return "zone"
    return Times(ns, T.CLOCK_EPOCH if zoned.all() else T.CLOCK_WALL, note)


def day_month_order_as(text: pd.Series, month_first: bool) -> pd.Series:
    """Day-month dates as `_STAMP` text in a given order."""
    return _dmy_as_iso(text.astype(str).str.strip().str.extract(_DMY), month_first)
