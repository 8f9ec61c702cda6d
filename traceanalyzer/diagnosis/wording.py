"""How the diagnosis writes numbers in its prose (one place, so every finding says them alike)."""

from __future__ import annotations

from ..units import format_us


def percent(x: float, small_below: float = 0.1, small_digits: int = 1) -> str:
    """A share as a percentage: whole percent, with `small_digits` decimals below `small_below` (not 0)."""
    return f"{100 * x:.0f}%" if x >= small_below or x == 0 else f"{100 * x:.{small_digits}f}%"


def duration(ns: float) -> str:
    """A duration in nanoseconds as text (units.format_us)."""
    return format_us(ns / 1000)
