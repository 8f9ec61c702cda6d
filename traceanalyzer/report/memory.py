"""Memory lines of the Markdown and terminal reports: one figure line per GPU (and the host) with
memory events. Only formats what the result holds (`DeviceResult.memory`, `RankResult.host_memory`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from ..result.types import AnalysisData, MemoryResult, RankResult
from ..units import format_bytes
from ._format import fmt_pct, md

MAX_ROWS = 40  # Markdown table rows
MAX_TEXT_ROWS = 8  # terminal lines


def _memories(a: AnalysisData) -> Iterator[tuple[RankResult, str, MemoryResult]]:
    for r in a.ranks:
        for d in r.devices:
            if d.memory:
                yield r, d.device, d.memory
        if r.host_memory:
            yield r, "host (CPU)", r.host_memory


def figure_text(m: MemoryResult) -> str:
    """'peak 3.1 GiB allocated, 3.4 GiB reserved of 79.2 GiB (peak 3.9%, headroom 95.7%), +512 B per step'."""
    text = f"peak {format_bytes(m.peak_allocated_bytes)} allocated"
    if m.peak_reserved_bytes is not None:
        text += f", {format_bytes(m.peak_reserved_bytes)} reserved"
    if m.total_bytes:
        text += (f" of {format_bytes(m.total_bytes)} (peak allocated {fmt_pct(m.peak_allocated_fraction)}, "
                 f"headroom {fmt_pct(m.headroom_fraction)})")
    growth = m.growth_per_step_bytes
    if growth is not None:
        text += f", {'+' if growth > 0 else ''}{format_bytes(growth)} per step (median growth)"
    return text


def text_lines(a: AnalysisData) -> list[str]:
    """Terminal: 'Memory:' then one line per device."""
    rows = list(_memories(a))
    if not rows:
        return []
    many = len(a.ranks) > 1
    lines = ["Memory (profiler memory events):"]
    for r, label, m in rows[:MAX_TEXT_ROWS]:
        who = f"rank {r.rank} " if many and r.rank is not None else ""
        lines.append(f"  {who}{label}: {figure_text(m)}")
    if len(rows) > MAX_TEXT_ROWS:
        lines.append(f"  ... and {len(rows) - MAX_TEXT_ROWS} more in the report")
    return lines


def markdown_lines(a: AnalysisData, who: Callable[[RankResult], str]) -> list[str]:
    """Markdown: a table, one row per device (`who`: the Markdown renderer's name of a rank)."""
    rows = list(_memories(a))
    if not rows:
        return []
    out = ["### Memory", "", "| rank | device | peak allocated | peak reserved | total | peak allocated / total "
           "| headroom | growth per step |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r, label, m in rows[:MAX_ROWS]:
        out.append(f"| {who(r)} | {md(label)} | {format_bytes(m.peak_allocated_bytes)} | "
                   f"{format_bytes(m.peak_reserved_bytes)} | {format_bytes(m.total_bytes)} | "
                   f"{fmt_pct(m.peak_allocated_fraction)} | {fmt_pct(m.headroom_fraction)} | "
                   f"{format_bytes(m.growth_per_step_bytes)} |")
    if len(rows) > MAX_ROWS:
        out.append(f"\n_{len(rows) - MAX_ROWS} more device(s) in the HTML and JSON reports._")
    return out + [""]
