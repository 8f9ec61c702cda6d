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
TIME_WORDS = {"timestamp", "time", "date", "datetime", "ts", "now", "utc", "unix", "when"}

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


def epoch_numbers_to_ns(text: pd.Series) -> np.ndarray | None:
    """Epoch numbers (`1740830400.123`, `1740830400123`) -> UTC ns, exactly; None when they are not all
    numbers of one epoch unit (seconds, ms, us or ns, told by magnitude)."""
    parts = text.astype(str).str.extract(_EPOCH)
    if not len(text) or parts[0].isna().any():
        return None
    whole = pd.to_numeric(parts[0], errors="coerce").to_numpy(np.float64)
    unit = next((u for lo, hi, u in EPOCH_UNITS if (whole >= lo).all() and (whole < hi).all()), None)
    if unit is None:
        return None
    digits = len(str(unit)) - 1  # fraction digits that still name whole ns
    frac = parts[1].fillna("").str.slice(0, digits).str.ljust(digits, "0")
    frac_ns = frac.replace("", "0").astype(np.int64).to_numpy() if digits else np.zeros(len(text), np.int64)
    return parts[0].astype(np.int64).to_numpy() * np.int64(unit) + frac_ns


def parse_times(text: pd.Series) -> tuple[np.ndarray, str] | str:
    """A time column -> (ns, clock), or the reason it is not one: dates with a zone on every row (UTC:
    CLOCK_EPOCH), without a zone on any (local: CLOCK_WALL), or epoch numbers (CLOCK_EPOCH)."""
    epoch = epoch_numbers_to_ns(text)
    if epoch is not None:
        return epoch, T.CLOCK_EPOCH
    ns, ok, zoned = stamps_to_ns(text)
    if not ok.all():
        return f"row {int(np.flatnonzero(~ok)[0])}"
    if zoned.any() and not zoned.all():
        return "zone"
    return ns, T.CLOCK_EPOCH if zoned.all() else T.CLOCK_WALL
