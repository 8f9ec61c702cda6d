"""Markdown and terminal lines for throughput and host logs (glances): formatting only.

Called by one line each from `markdown.py` and `text.py`. Markdown strings from a log go through
`md`; the terminal lines are cleaned by the caller (`text.py`), so nothing from a log reaches the
output unescaped.
"""

from __future__ import annotations

from ..result.types import AnalysisData, Summary
from ._format import fmt_us, md

SPLIT_LABELS = {"cpu": "CPU-bound", "storage": "storage-bound", "unknown": "not split"}
# The terminal says what the split is and why it is unknown (definitions `input_split`)
SPLIT_WHY = {"cpu": "the CPU is saturated during the DataLoader waits",
             "storage": "reads wait on storage while the CPU has headroom during the DataLoader waits"}
TEXT_LABELS = {"cpu_user_pct": "user", "cpu_system_pct": "system", "cpu_iowait_pct": "iowait",
               "disk_read_bytes_per_s": "disk reads"}
SHOWN = ("cpu_user_pct", "cpu_system_pct", "cpu_iowait_pct", "load_1m", "mem_used_pct",
         "disk_read_bytes_per_s", "disk_write_bytes_per_s", "net_rx_bytes_per_s", "net_tx_bytes_per_s")


def throughput_figures(s: Summary) -> list[str]:
    """Headline pieces: median step (p10-p90) and steps/s (samples/s is said by the caller)."""
    if s.step_time_median_us is None:
        return []
    out = [f"median step **{fmt_us(s.step_time_median_us)}** (p10–p90 {fmt_us(s.step_time_p10_us)} – "
           f"{fmt_us(s.step_time_p90_us)})"]
    if s.steps_per_s is not None:
        out.append(f"**{s.steps_per_s:.2f}** steps/s")
    return out


def _value(metric: str, v: float | None) -> str:
    if v is None:
        return "n/a"
    if metric.endswith("_bytes_per_s"):
        return f"{v / 1e6:.1f} MB/s"
    if metric.endswith("_pct"):
        return f"{v:.1f}%"
    return f"{v:.2f}"


def _splits(a: AnalysisData) -> list[tuple[str, str]]:
    return [("this trace" if r.rank is None else f"rank {r.rank}", SPLIT_LABELS.get(r.diagnosis.input_split, ""))
            for r in a.ranks if r.diagnosis and r.diagnosis.input_split]


def host_markdown(a: AnalysisData) -> list[str]:
    """The host-log section: per log, how it was placed, and each metric overall and during the waits."""
    if not a.host_logs:
        return []
    out = ["### Host CPU and storage (glances)", ""]
    out += [f"- Input pipeline of {md(who)}: **{label}**" for who, label in _splits(a)]
    for h in a.host_logs:
        covered = h.wait_covered_fraction
        cover = ("" if covered is None else
                 f", covers {covered * 100:.0f}% of the DataLoader waits ({h.wait_samples} samples)")
        offset = "n/a" if h.offset_s is None else f"{h.offset_s:+.3f} s"
        method = md(h.offset_method or "n/a")
        out += ["", f"`{md(h.path, 200)}`: {md(h.format)}, {h.samples_kept} of {h.samples_read} samples, "
                    f"clock {md(h.clock or '?')}, offset {offset} ({method}){cover}", "",
                "| metric | mean | in trace window | during DataLoader waits |", "|---|---|---|---|"]
        wait = h.during_dataloader_wait
        for name in SHOWN:
            m = h.metrics.get(name)
            if m:
                out.append(f"| {name} | {_value(name, m.mean)} | {_value(name, m.window_mean)} | "
                           f"{_value(name, wait.get(name))} |")
    return out + [""]


def host_text(a: AnalysisData) -> list[str]:
    """Terminal lines: throughput, then one line per host log and the input split."""
    s = a.summary
    lines = []
    if s.step_time_median_us is not None:
        rate = f", {s.samples_per_s:,.1f} samples/s (batch {s.batch_size})" if s.samples_per_s else ""
        lines.append(f"Throughput: median step {fmt_us(s.step_time_median_us)} (p10-p90 "
                     f"{fmt_us(s.step_time_p10_us)} - {fmt_us(s.step_time_p90_us)}), "
                     + (f"{s.steps_per_s:.2f} steps/s" if s.steps_per_s is not None else "steps/s n/a")
                     + rate)
    for h in a.host_logs:
        wait = h.during_dataloader_wait
        during = ", ".join(f"{label} {_value(k, wait[k])}" for k, label in TEXT_LABELS.items() if k in wait)
        if during:
            tail = f"; during DataLoader waits: {during}"
        else:
            tail = "; no DataLoader wait to compare with" if h.wait_covered_fraction is None else \
                "; no sample inside a DataLoader wait"
        lines.append(f"{h.path}: {h.format}, {h.samples_kept} samples{tail}")
    for r in a.ranks:
        split = r.diagnosis.input_split if r.diagnosis else None
        if not split:
            continue
        who = "this trace" if r.rank is None else f"rank {r.rank}"
        why = SPLIT_WHY.get(split) or (
            "not known without a host log: record one with glances and pass it with --host-log" if not a.host_logs
            else "not known: the host log covers too little of the DataLoader waits, or shows neither a saturated "
                 "CPU nor storage waits")
        said = f"{SPLIT_LABELS[split]} ({why})" if split in SPLIT_WHY else why
        lines.append(f"Input pipeline of {who} (what the DataLoader waits on): {said}")
    return lines


__all__ = ["host_markdown", "host_text", "throughput_figures"]
