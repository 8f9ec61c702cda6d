"""How the diagnosis writes numbers in its prose (one place, so every finding says them alike).

Every share a headline or a finding quotes is written through `Quoted`, which keeps the figures the
share is computed from (numerator and denominator, units in the keys) and, in the order the shares
appear in the text, which figures each one is of: a test recomputes every quoted percentage from them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..units import format_us

# In `Quoted.shares`, a denominator key that says the numerator is already a fraction ("") or a
# percentage ("%") rather than a figure to divide by.
FRACTION = ""
PERCENT = "%"


def percent(x: float, small_below: float = 0.1, small_digits: int = 1) -> str:
    """A share as a percentage: whole percent, with `small_digits` decimals below `small_below` (not 0)."""
    return f"{100 * x:.0f}%" if x >= small_below or x == 0 else f"{100 * x:.{small_digits}f}%"


def duration(ns: float) -> str:
    """A duration in nanoseconds as text (units.format_us)."""
    return format_us(ns / 1000)


@dataclass
class Quoted:
    """The figures behind a text's quoted shares: `figures` (units in the keys) and `shares`, one
    (numerator key, denominator key) per percentage in the text, in order."""

    figures: dict[str, float] = field(default_factory=dict)
    shares: list[tuple[str, str]] = field(default_factory=list)
    detail: str = ""  # a headline's derivation (durations, no shares), shown one click away

    def _put(self, key: str, value: float) -> str:
        k, n = key, 2
        while k in self.figures and self.figures[k] != value:  # same name, another value: name it apart
            k, n = f"{key}_{n}", n + 1
        self.figures[k] = value
        return k

    def ns(self, num_ns: float, num_key: str, den_ns: float, den_key: str, **fmt: float) -> str:
        """`num_ns / den_ns` as a percentage; both kept in microseconds (keys end in `_us`)."""
        a = self._put(num_key, round(num_ns / 1000, 3))
        b = self._put(den_key, round(den_ns / 1000, 3))
        self.shares.append((a, b))
        return percent(num_ns / den_ns if den_ns else 0.0, **fmt)  # type: ignore[arg-type]

    def of(self, num: float, num_key: str, den: float, den_key: str, **fmt: float) -> str:
        """`num / den` (counts, bytes) as a percentage."""
        a, b = self._put(num_key, float(num)), self._put(den_key, float(den))
        self.shares.append((a, b))
        return percent(num / den if den else 0.0, **fmt)  # type: ignore[arg-type]

    def fraction(self, x: float, key: str, **fmt: float) -> str:
        """A figure that is a fraction already, as a percentage."""
        self.shares.append((self._put(key, round(float(x), 6)), FRACTION))
        return percent(x, **fmt)  # type: ignore[arg-type]

    def pct(self, value: float, key: str, digits: int = 0) -> str:
        """A figure measured in percent (SM utilisation, CPU use), as written: `value` with `digits`."""
        self.shares.append((self._put(key, round(float(value), 6)), PERCENT))
        return f"{value:.{digits}f}%"

    def extend(self, other: Quoted, first: bool = False) -> None:
        """Add another text's shares (before this one's when `first`), renaming clashing keys."""
        moved = [(self._put(a, other.figures[a]), b if b in (FRACTION, PERCENT) else self._put(b, other.figures[b]))
                 for a, b in other.shares]
        self.shares = moved + self.shares if first else self.shares + moved
