"""Report -> GitHub-flavoured Markdown for a pull-request comment."""

from __future__ import annotations

from .build import Report
from .text import fmt_pct, fmt_us


def _cell(text: object) -> str:
    """Table-cell safe: no pipes, no newlines, no raw HTML."""
    s = str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")
    return s.replace("<", "&lt;").replace(">", "&gt;")


def render_markdown(report: Report) -> str:
    out = ["## traceanalyzer report", ""]
    out += ["| rank | device | window | steps | GPU idle | memcpy / busy | dataloader wait |",
            "|---|---|---|---|---|---|---|"]
    for r in report["ranks"]:
        who = "?" if r["rank"] is None else r["rank"]
        if not r["devices"]:
            out.append(f"| {who} | no GPU activity | {fmt_us(r['window_us'])} | {r['steps']} | n/a | n/a | "
                       f"{fmt_pct(r['dataloader_wait_fraction'])} |")
        for d in r["devices"]:
            out.append(f"| {who} | {_cell(d['device'])} | {fmt_us(d['window_us'])} | {r['steps']} | "
                       f"{fmt_pct(d['gpu_idle_fraction'])} | {fmt_pct(d['memcpy_share_of_busy'])} | "
                       f"{fmt_pct(r['dataloader_wait_fraction'])} |")
    out.append("")
    return "\n".join(out)
