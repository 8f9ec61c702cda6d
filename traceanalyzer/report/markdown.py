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
    if report["ranks"]:
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
    out += _counters(report)
    return "\n".join(out)


def _counters(report: Report) -> list[str]:
    out: list[str] = []
    logs = report.get("counter_logs", [])
    if not logs:
        return out
    out += ["### nvidia-smi logs", "", "| log | clock | offset | found by | fit r | ambiguous |",
            "|---|---|---|---|---|---|"]
    for log in logs:
        fit = log["fit"] or {}
        offset = "own clock" if log["offset_s"] is None else f"{log['offset_s']:+.3f} s"
        out.append(f"| {_cell(log['path'])} | {log['clock']} | {offset} | {log['offset_method'] or 'n/a'} | "
                   f"{_num(fit.get('correlation'))} | {fit.get('ambiguous', 'n/a')} |")
    out += ["", "| GPU | SM util mean | in trace window | zero-util runs | longest zero run | trace busy vs log |",
            "|---|---|---|---|---|---|"]
    for d in report.get("counters", []):
        sm = d["metrics"].get("sm_util_pct") or {}
        z = d["zero_util_runs"] or {}
        cc = d["cross_check"]
        check = "n/a" if not cc else (f"{cc['trace_busy_pct']:.1f}% vs {cc['log_util_pct']:.1f}%"
                                      + (" (disagree)" if cc["disagrees"] else ""))
        longest = "n/a" if not z.get("runs") else f"{z['longest_s']:g} s from +{z['longest_start_s']:g} s"
        out.append(f"| {d['device']} | {_pct(sm.get('mean'))} | {_pct(sm.get('window_mean'))} | "
                   f"{z.get('runs', 'n/a')} | {longest} | {check} |")
    out.append("")
    return out


def _num(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}"


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1f}%"
