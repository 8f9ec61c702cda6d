"""Memory lines of the Markdown and terminal reports: one figure line per GPU (and the host) with
memory events. Only formats what the Report holds (ranks[].devices[].memory, ranks[].host_memory)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from ..result.types import PlainData as Report
from ..units import format_bytes

MAX_ROWS = 40  # Markdown table rows
MAX_TEXT_ROWS = 8  # terminal lines


def fmt_pct(x: float | None) -> str:  # as report.text's (which imports this module)
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _memories(report: Report) -> Iterator[tuple[dict[str, Any], str, dict[str, Any]]]:
    for r in report.get("ranks", []):
        for d in r["devices"]:
            if d.get("memory"):
                yield r, d["device"], d["memory"]
        if r.get("host_memory"):
            yield r, "host (CPU)", r["host_memory"]


def figure_text(m: dict[str, Any]) -> str:
    """'peak 3.1 GiB allocated, 3.4 GiB reserved of 79.2 GiB (peak 3.9%, headroom 95.7%), +512 B per step'."""
    text = f"peak {format_bytes(m['peak_allocated_bytes'])} allocated"
    if m.get("peak_reserved_bytes") is not None:
        text += f", {format_bytes(m['peak_reserved_bytes'])} reserved"
    if m.get("total_bytes"):
        text += (f" of {format_bytes(m['total_bytes'])} (peak allocated {fmt_pct(m['peak_allocated_fraction'])}, "
                 f"headroom {fmt_pct(m['headroom_fraction'])})")
    growth = m.get("growth_per_step_bytes")
    if growth is not None:
        text += f", {'+' if growth > 0 else ''}{format_bytes(growth)} per step (median growth)"
    return text


def text_lines(report: Report) -> list[str]:
    """Terminal: 'Memory:' then one line per device."""
    rows = list(_memories(report))
    if not rows:
        return []
    many = len(report.get("ranks", [])) > 1
    lines = ["Memory (profiler memory events):"]
    for r, label, m in rows[:MAX_TEXT_ROWS]:
        who = f"rank {r['rank']} " if many and r.get("rank") is not None else ""
        lines.append(f"  {who}{label}: {figure_text(m)}")
    if len(rows) > MAX_TEXT_ROWS:
        lines.append(f"  ... and {len(rows) - MAX_TEXT_ROWS} more in the report")
    return lines


def markdown_lines(report: Report, escape: Callable[[object], str], who: Callable[[dict[str, Any]], str]) -> list[str]:
    """Markdown: a table, one row per device (`escape` / `who`: the Markdown renderer's own helpers)."""
    rows = list(_memories(report))
    if not rows:
        return []
    out = ["### Memory", "", "| rank | device | peak allocated | peak reserved | total | peak allocated / total "
           "| headroom | growth per step |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r, label, m in rows[:MAX_ROWS]:
        growth = m.get("growth_per_step_bytes")
        out.append(f"| {who(r)} | {escape(label)} | {format_bytes(m['peak_allocated_bytes'])} | "
                   f"{format_bytes(m.get('peak_reserved_bytes'))} | {format_bytes(m.get('total_bytes'))} | "
                   f"{fmt_pct(m.get('peak_allocated_fraction'))} | {fmt_pct(m.get('headroom_fraction'))} | "
                   f"{format_bytes(growth)} |")
    if len(rows) > MAX_ROWS:
        out.append(f"\n_{len(rows) - MAX_ROWS} more device(s) in the HTML and JSON reports._")
    return out + [""]
