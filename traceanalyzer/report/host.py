"""Markdown and terminal lines for throughput and host logs (glances): formatting only.

Called by one line each from `markdown.py` and `text.py`; the escaper of each format is passed in
(`_md` / `_clean`), so nothing from a log reaches the output unescaped.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._format import fmt_us

Report = dict[str, Any]
SPLIT_LABELS = {"cpu": "CPU-bound", "storage": "storage-bound", "unknown": "not split"}
TEXT_LABELS = {"cpu_user_pct": "user", "cpu_system_pct": "system", "cpu_iowait_pct": "iowait",
               "disk_read_bytes_per_s": "disk reads"}
SHOWN = ("cpu_user_pct", "cpu_system_pct", "cpu_iowait_pct", "load_1m", "mem_used_pct",
         "disk_read_bytes_per_s", "disk_write_bytes_per_s", "net_rx_bytes_per_s", "net_tx_bytes_per_s")


def throughput_figures(s: Report) -> list[str]:
    """Headline pieces: median step (p10-p90) and steps/s (samples/s is said by the caller)."""
    if s.get("step_time_median_us") is None:
        return []
    out = [f"median step **{fmt_us(s['step_time_median_us'])}** (p10–p90 {fmt_us(s['step_time_p10_us'])} – "
           f"{fmt_us(s['step_time_p90_us'])})"]
    if s.get("steps_per_s") is not None:
        out.append(f"**{s['steps_per_s']:.2f}** steps/s")
    return out


def _value(metric: str, v: float | None) -> str:
    if v is None:
        return "n/a"
    if metric.endswith("_bytes_per_s"):
        return f"{v / 1e6:.1f} MB/s"
    if metric.endswith("_pct"):
        return f"{v:.1f}%"
    return f"{v:.2f}"


def _splits(report: Report) -> list[tuple[str, str]]:
    return [("this trace" if r.get("rank") is None else f"rank {r['rank']}",
             SPLIT_LABELS.get(r["diagnosis"]["input_split"], ""))
            for r in report.get("ranks", []) if (r.get("diagnosis") or {}).get("input_split")]


def host_markdown(report: Report, md: Callable[..., str]) -> list[str]:
    """The host-log section: per log, how it was placed, and each metric overall and during the waits."""
    logs = report.get("host_logs") or []
    if not logs:
        return []
    out = ["### Host CPU and storage (glances)", ""]
    out += [f"- Input pipeline of {md(who)}: **{label}**" for who, label in _splits(report)]
    for h in logs:
        covered = h.get("wait_covered_fraction")
        cover = ("" if covered is None else
                 f", covers {covered * 100:.0f}% of the DataLoader waits ({h['wait_samples']} samples)")
        offset = "n/a" if h["offset_s"] is None else f"{h['offset_s']:+.3f} s"
        method = md(h["offset_method"] or "n/a")
        out += ["", f"`{md(h['path'], 200)}`: {md(h['format'])}, {h['samples_kept']} of {h['samples_read']} samples, "
                    f"clock {md(h.get('clock') or '?')}, offset {offset} ({method}){cover}", "",
                "| metric | mean | in trace window | during DataLoader waits |", "|---|---|---|---|"]
        wait = h["during_dataloader_wait"]
        for name in SHOWN:
            m = h["metrics"].get(name)
            if m:
                out.append(f"| {name} | {_value(name, m['mean'])} | {_value(name, m['window_mean'])} | "
                           f"{_value(name, wait.get(name))} |")
    return out + [""]


def host_text(report: Report) -> list[str]:
    """Terminal lines: throughput, then one line per host log and the input split."""
    s = report.get("summary") or {}
    lines = []
    if s.get("step_time_median_us") is not None:
        rate = f", {s['samples_per_s']:,.1f} samples/s (batch {s['batch_size']})" if s.get("samples_per_s") else ""
        lines.append(f"Throughput: median step {fmt_us(s['step_time_median_us'])} (p10-p90 "
                     f"{fmt_us(s['step_time_p10_us'])} - {fmt_us(s['step_time_p90_us'])}), "
                     f"{s['steps_per_s']:.2f} steps/s{rate}")
    for h in report.get("host_logs") or []:
        wait = h["during_dataloader_wait"]
        during = ", ".join(f"{label} {_value(k, wait[k])}" for k, label in TEXT_LABELS.items() if k in wait)
        if during:
            tail = f"; during DataLoader waits: {during}"
        else:
            tail = "; no DataLoader wait to compare with" if h.get("wait_covered_fraction") is None else \
                "; no sample inside a DataLoader wait"
        lines.append(f"{h['path']}: {h['format']}, {h['samples_kept']} samples{tail}")
    for who, label in _splits(report):
        lines.append(f"Input pipeline of {who}: {label}")
    return lines


__all__ = ["host_markdown", "host_text", "throughput_figures"]
