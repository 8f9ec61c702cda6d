"""Analysis -> the short summary shown on the terminal after every run (fits 80 columns).

Every line goes through `inert.terminal` before it is returned: escape sequences in a trace
name or file name are removed, other control and bidi characters shown escaped (`\\n`, `\\u202e`).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from .. import inert
from ..causes import VERDICT_BY_ID
from ..result.types import AnalysisData, DeviceResult, DiagnosisResult, RankResult
from ._format import (
    WHOLE_LOG,
    WIDTH,
    clean,
    fmt_pct,
    fmt_pct_points,
    fmt_s,
    fmt_us,
    rank_label,
    requests_line,
    serving_line,
    step_source_text,
    wrap,
)
from .capture import no_gpu_line
from .host import host_text
from .memory import text_lines as memory_text_lines
from .ranks import text_lines as ranks_text_lines
from .verdict import finding_parts, share_basis, top_advice

TOP_FINDINGS = 3  # findings shown in the summary
ADVICE_PER_FINDING = 2


MAX_RANKS_SHOWN = 8


def render_text(analysis: AnalysisData) -> str:
    a = analysis
    lines: list[str] = []
    ranks = a.ranks
    lines.append(f"traceanalyzer {a.tool.version}: {len(a.inputs)} input(s), {len(ranks)} rank(s)"
                 + implicit_logs(a))
    for w in a.warnings:  # a cut-off trace is said first: the figures cover only what was read
        if "TRUNCATED" in w:
            lines += wrap(w, "WARNING: ", "  ")
    diag = a.diagnosis
    if diag and diag.headline:
        lines += wrap(diag.headline, "Verdict: ", "  ")
        advice = top_advice(diag)
        if advice:
            lines += wrap(advice, "Try first: ", "  ")
    if diag:
        lines.extend(_diagnosis_lines(diag, share_basis(a)))
    lines.extend(ranks_text_lines(a))  # many ranks: stragglers and the job clock
    s = a.summary
    if len(ranks) > 1:
        lines += wrap(f"GPU idle {fmt_pct(s.gpu_idle_fraction)}, memcpy {fmt_pct(s.memcpy_share_of_busy)} of "
                      f"busy, host blocked in the DataLoader {fmt_pct(s.dataloader_wait_fraction)}, {s.steps} step(s), "
                      f"{s.devices} GPU(s)", "Overall: ", "  ")
    for r in ranks[:MAX_RANKS_SHOWN]:
        lines.append(_rank_line(r))
        if not r.devices:
            lines += wrap(no_gpu_line(r), "  ", "    ")
        for d in r.devices:
            lines.extend(_device_lines(d))
        for p in r.serving.phases if r.serving else ():
            lines += wrap(serving_line(p), "  serving ", "    ")
        if r.serving and r.serving.requests:
            lines += wrap(requests_line(r.serving.requests), "  serving ", "    ")
        if len(ranks) == 1:  # many ranks: the summary stays short (the report has every rank's operators)
            lines.extend(_operator_lines(r))
    if len(ranks) > MAX_RANKS_SHOWN:
        lines.append(f"... and {len(ranks) - MAX_RANKS_SHOWN} more rank(s) in the report")
    lines.extend(memory_text_lines(a))
    lines.extend(counter_lines(a))
    lines.extend(clean(line) for line in host_text(a))
    warnings = sum(len(i.warnings) for i in a.inputs) + len(a.warnings)
    if warnings:
        lines.append(f"{warnings} warning(s) while reading; see the report's Inputs section")
    return "\n".join(fit([inert.terminal(line) for line in lines])) + "\n"


def implicit_logs(a: AnalysisData) -> str:
    """The logs used without being named on the command line (beside the trace, in an input folder), named:
    their figures are in the report, so the reader should know where they came from."""
    found = a.implicit_logs
    if not found:
        return ""
    shown = ", ".join(Path(f).name for f in found[:3]) + (f" and {len(found) - 3} more" if len(found) > 3 else "")
    return f", with nvidia-smi log{'s' if len(found) > 1 else ''} picked up from the trace's folder: {shown}"


def fit(lines: list[str]) -> list[str]:
    """Lines wider than the terminal are wrapped (continuation indented), never cut mid-figure."""
    out: list[str] = []
    for line in lines:
        if len(line) <= WIDTH:
            out.append(line)
            continue
        indent = len(line) - len(line.lstrip(" "))
        out += textwrap.wrap(clean(line), WIDTH, initial_indent=" " * indent, subsequent_indent=" " * (indent + 2),
                             break_long_words=True, break_on_hyphens=False)
    return out


def _label(verdict: str) -> str:
    """A verdict's id (what --fail-on and the JSON use) and its label."""
    v = VERDICT_BY_ID.get(verdict)
    return f"{verdict} ({v.label})" if v else clean(verdict)


def _diagnosis_lines(d: DiagnosisResult, share_of: str = "GPU time lost") -> list[str]:
    """Primary verdict, then the top findings with their figures (the time the cause lost, its share of
    the window) and their first pieces of advice (trace text cleaned)."""
    primary = f"Primary bottleneck: {_label(d.primary or 'undetermined')}"
    if d.host_primary and d.host_primary != d.primary:
        primary += f"; host loop: {_label(d.host_primary)}"
    lines = [primary]
    if d.verdict_note:
        lines += wrap(d.verdict_note, "  ", "  ")
    for f in d.findings[:TOP_FINDINGS]:
        parts = finding_parts(f, share_of)
        win = f" - {', '.join(parts)}" if parts else ""
        lines += wrap(f"[{f.severity or ''}] {f.title or f.id or ''}{win}", "* ", "    ")
        for advice in f.advice[:ADVICE_PER_FINDING]:
            lines += wrap(advice, "  - ", "    ")
    return lines


def _rank_line(r: RankResult) -> str:
    who = rank_label(r)
    steps = f"{r.steps} steps" if r.steps else f"no steps, window from {r.window_basis.replace('_', ' ')}"
    detected = step_source_text(r.step_source)
    steps = f"{steps}; {clean(detected)}" if detected else steps
    return (f"{who}: window {fmt_us(r.window_us)} ({steps}), "
            f"host blocked in the DataLoader {fmt_pct(r.dataloader_wait_fraction)} of it")


# Top host operators and user Python frames named per rank in the terminal summary.
TOP_OPS_SHOWN = 3


def _operator_lines(r: RankResult) -> list[str]:
    o = r.operators
    if o is None or not o.ops:
        return []
    ops = ", ".join(f"{clean(x.name)[:60]} {fmt_us(x.total_us)} ({fmt_pct(x.share_of_steps)})"
                    for x in o.ops[:TOP_OPS_SHOWN])
    lines = [f"  top host ops (total, share of steps): {ops}"]
    if o.frames:
        frames = ", ".join(f"{clean(f.frame)[:80]} {fmt_us(f.idle_us if r.devices else f.host_us)}"
                           for f in o.frames[:TOP_OPS_SHOWN])
        lines.append(f"  top user Python frames ({'during host/unexplained GPU idle' if r.devices else 'host time'}): "
                     f"{frames}")
    elif not o.has_stacks:
        lines.append("  no Python stacks: with_stack=True would name the code behind host time")
    return lines


def _device_lines(d: DeviceResult) -> list[str]:
    g = d.gaps
    busy = None if d.gpu_idle_fraction is None else 1 - d.gpu_idle_fraction
    return [
        f"  {d.device}: busy {fmt_pct(busy)}, idle {fmt_pct(d.gpu_idle_fraction)}, "
        f"memcpy {fmt_pct(d.memcpy_share_of_busy)} of busy",
        f"    GPU idle gaps of {fmt_us(g.min_gap_us)} or more: {g.count}, total {fmt_us(g.total_us)}, "
        f"largest {fmt_us(g.largest_us)}",
    ]


def counter_lines(a: AnalysisData) -> list[str]:
    """nvidia-smi / DCGM logs: how each was put on the trace clock, and per GPU its utilisation,
    zero-utilisation runs and the cross-check with the trace."""
    lines: list[str] = []
    for log in a.counter_logs:
        if log.offset_s is None:
            lines.append(f"{log.path}: {log.format}, {log.samples_kept} rows, on its own clock ({log.clock} time; "
                         f"not placed on a trace's clock)")
            continue
        r = log.fit.correlation if log.fit else None
        ambiguous = bool(log.fit and log.fit.ambiguous)
        quality = "fit n/a" if r is None else f"fit r={r:.2f}" + (", ambiguous" if ambiguous else "")
        lines.append(f"{log.path}: placed on the trace clock at offset {log.offset_s:+.3f} s (found by "
                     f"{log.offset_method}, {quality})")
    for d in a.counters:
        sm = d.metrics.get("sm_util_pct")
        if sm is None:
            lines.append(f"  GPU {d.device} (log): {d.samples} samples, no SM utilisation column")
            continue
        inside = "" if not sm.window_samples else f", in trace window {fmt_pct_points(sm.window_mean)}"
        lines.append(f"  GPU {d.device} (log): SM util mean {fmt_pct_points(sm.mean)}{inside} {WHOLE_LOG} "
                     f"({d.samples} samples)")
        z = d.zero_util_runs
        if z and z.runs:
            lines.append(f"    runs of samples at 0% SM utilisation {WHOLE_LOG}: {z.runs} ({fmt_s(z.total_s)} in all); "
                         f"longest {z.longest_samples} samples = {fmt_s(z.longest_s)}, from {fmt_s(z.longest_start_s)} "
                         f"into the log")
        cc = d.cross_check
        if cc:
            lines.append(f"    GPU busy in the trace {fmt_pct_points(cc.trace_busy_pct)} vs SM utilisation in the log "
                         f"{fmt_pct_points(cc.log_util_pct)} over the same samples"
                         + (" - DISAGREE: another process used the GPU, or the alignment is wrong" if cc.disagrees
                            else ""))
    return lines
