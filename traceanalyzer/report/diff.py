"""Comparison -> Markdown (pull-request comment), terminal text, JSON and a self-contained HTML page.

Verdict first in every format. The Markdown carries a hidden marker (`STICKY_MARKER`) so a
workflow can find and update one comment instead of adding new ones, stays under GitHub's
comment limit, names inputs by relative path or file name, and escapes every trace string.
"""

from __future__ import annotations

import orjson

from .. import inert
from ..causes import VERDICT_BY_ID
from ..compare import STEP_BASES, WHOLE_CAPTURES, Comparison, Part, PhaseChange, Side, StepTime, runs_text
from ..units import format_bytes
from . import DIFF_RENDERERS
from ._format import WIDTH, clean, fmt_pct, fmt_pct_change, fmt_us, md, wrap
from .base import Renderer
from .html import asset, template_env
from .markdown import MAX_CHARS

STICKY_MARKER = "<!-- traceanalyzer-diff -->"
ICONS = {"regressed": "🔴", "improved": "🟢", "likely_slower": "🟠", "likely_faster": "🔵", "unchanged": "⚪",
         "inconclusive": "🟡"}


def _verdict_label(v: str | None) -> str:
    return VERDICT_BY_ID[v].label if v in VERDICT_BY_ID else (v or "none")


def _signed_us(us: float | None) -> str:
    if us is None:
        return "n/a"
    return ("+" if us > 0 else "−" if us < 0 else "±") + fmt_us(abs(us))


SHARE_NOTE = ("<sub>share: of the summed change of the parts that moved with the net change (those add up "
              "to 100%); *offsets N%*: a part that moved against it, N% of that sum. Evidence: *decisive* when "
              "the part's per-step values differ beyond chance (rank test p ≤ 0.01) and do not overlap or differ "
              "by more than 3× their spread; else the rank test's p.</sub>")


def interval_text(st: StepTime) -> str:
    """The step-time interval, labelled with how it was taken."""
    if st.ci_low is None or st.ci_high is None:
        return ""
    how = ("across runs" if st.interval == "runs" else "rank test, steps of one run a side"
           if st.base_runs == 1 and st.head_runs == 1 else f"rank test over the pooled steps of {runs_text(st)}")
    return f"(95% interval {fmt_pct_change(st.ci_low)} to {fmt_pct_change(st.ci_high)}, {how})"


def attribution_sentence(c: Comparison) -> str:
    """What the parts add up to, with the parts that offset each other named as such: one statistic (the
    mean per step), labelled."""
    adds = [p for p in c.attribution if p.role == "adds"]
    offsets = [p for p in c.attribution if p.role == "offsets"]
    unit = _unit(c)
    text = (f"Mean {unit} {_signed_us(c.mean_step_change_us)} (change of the mean per {unit}); "
            "the parts' means add up to it.")
    if adds and offsets:
        gross = sum(p.delta_per_step_us for p in adds)
        back = sum(p.delta_per_step_us for p in offsets)
        grew = "grew" if gross > 0 else "shrank"
        text += (f" Parts that {grew} moved it {_signed_us(gross)}; parts moving the other way offset "
                 f"{_signed_us(back)} of that ({abs(back) / abs(gross) * 100:.0f}%): "
                 + ", ".join(p.label for p in offsets[:3]) + ".")
    return text


def share_text(p: Part) -> str:
    if p.share_of_change is None:
        return ""
    return f"{p.share_of_change * 100:.0f}%" if p.role == "adds" else f"offsets {abs(p.share_of_change) * 100:.0f}%"


def evidence_text(p: Part) -> str:
    if p.decisive:
        return "**decisive** (no overlap)" if p.separated else "**decisive** (beyond spread)"
    if p.p_value is None:
        return ""
    return "p < 0.001" if p.p_value < 0.001 else f"p = {p.p_value:.2g}"


def render_diff_markdown(c: Comparison, max_chars: int = MAX_CHARS) -> str:
    rows = {"parts": 12, "kernels": 15}
    while True:
        text = _markdown(c, rows)
        if len(text) <= max_chars or all(v <= 1 for v in rows.values()):
            break
        rows = {k: max(v // 2, 1) for k, v in rows.items()}
    if len(text) <= max_chars:
        return text
    # still too long (very long names): cut at a line end, close what the cut left open, say so
    note = "\n\n<sub>(cut: over GitHub's comment limit)</sub>\n"
    cut = text[:max(text.rfind("\n", 0, max_chars - len(note) - 20), 0)]
    if cut.count("<details>") > cut.count("</details>"):
        cut += "\n\n</details>"
    return cut + note


def _unit(c: Comparison) -> str:
    """What one value of the comparison is: a step, or a whole capture (a side without steps)."""
    return "capture" if c.compared == WHOLE_CAPTURES else "step"


def _markdown(c: Comparison, rows: dict[str, int]) -> str:
    st = c.step_time
    unit = _unit(c)
    title = md(c.title or c.change_verdict, 200)
    out = [STICKY_MARKER, f"## {ICONS.get(c.change_verdict, '')} traceanalyzer diff · {title}"]
    if c.lead:
        out.append(f"**{md(c.lead, 300)}**")
    out.append("")
    if c.detail:
        out += [md(". ".join(c.detail) + ".", 1200), ""]
    if c.compared == WHOLE_CAPTURES:  # one value per run: no per-step spread to show
        out += ["| | base | head | change |", "|---|---|---|---|",
                f"| whole capture (median over runs) | {fmt_us(st.base_median_us)} | {fmt_us(st.head_median_us)} | "
                f"{fmt_pct_change(st.median_change)} {md(interval_text(st))} |",
                f"| captures measured | {st.base_steps}{_basis(c.base)} | {st.head_steps}{_basis(c.head)} | |"]
    else:
        out += ["| | base | head | change |", "|---|---|---|---|",
                f"| median step | {fmt_us(st.base_median_us)} | {fmt_us(st.head_median_us)} | "
                f"{fmt_pct_change(st.median_change)} |",
                f"| step time shift (Hodges–Lehmann) | | | {fmt_pct_change(st.change)} {md(interval_text(st))} |",
                f"| p10 – p90 step | {fmt_us(st.base_p10_us)} – {fmt_us(st.base_p90_us)} | "
                f"{fmt_us(st.head_p10_us)} – {fmt_us(st.head_p90_us)} | |",
                f"| steps measured | {st.base_steps}{_basis(c.base)} | {st.head_steps}{_basis(c.head)} | |"]
    out += [
            f"| runs | {st.base_runs} | {st.head_runs} | {md(_runs_note(c))} |",
            f"| verdict | {md(_verdict_label(c.base.primary))} | {md(_verdict_label(c.head.primary))} | "
            f"{'changed' if c.verdict_changed else 'same'} |",
            f"| GPU idle | {fmt_pct(c.base.gpu_idle_fraction)} | {fmt_pct(c.head.gpu_idle_fraction)} | |",
            f"| DataLoader wait | {fmt_pct(c.base.dataloader_wait_fraction)} | "
            f"{fmt_pct(c.head.dataloader_wait_fraction)} | |"]
    if c.base.sm_util_mean_pct is not None and c.head.sm_util_mean_pct is not None:
        out.append(f"| nvidia-smi SM util | {c.base.sm_util_mean_pct:.1f}% | {c.head.sm_util_mean_pct:.1f}% | |")
    out += _samples_rows(c)
    out += _memory_and_straggler_rows(c)
    out.append("")
    if c.gates:
        out += ["### Gates", ""]
        out += [f"- {'✅' if g.passed else '❌'} {inert.markdown_code(g.rule)}: {md(g.detail, 300)}" for g in c.gates]
        out.append("")
    if c.attribution:
        out += [f"### Where the per-{unit} change comes from", "", md(attribution_sentence(c), 1000), "",
                f"| part | base mean / {unit} | head mean / {unit} | change of the mean | share | "
                f"Hodges–Lehmann shift / {unit} | evidence |", "|---|---|---|---|---|---|---|"]
        for p in c.attribution[:rows["parts"]]:
            out.append(f"| {md(p.label)} | {fmt_us(p.base_per_step_us)} | {fmt_us(p.head_per_step_us)} | "
                       f"{_signed_us(p.delta_per_step_us)} | {share_text(p)} | {_signed_us(p.shift_per_step_us)} | "
                       f"{evidence_text(p)} |")
        out += ["", SHARE_NOTE, ""]
    if c.serving:
        out += ["### Serving iterations", ""] + [f"- {md(phase_change_line(p), 300)}" for p in c.serving] + [""]
    if c.kernels:
        out += [f"<details><summary>Kernel movers (time per {unit})</summary>", "",
                "| kernel | base | head | change | |", "|---|---|---|---|---|"]
        for k in c.kernels[:rows["kernels"]]:
            out.append(f"| {md(k.name, 120)} | {fmt_us(k.base_per_step_us)} | {fmt_us(k.head_per_step_us)} | "
                       f"{_signed_us(k.delta_per_step_us)} | {k.status} |")
        out += ["", "</details>", ""]
    for w in c.warnings:
        out.append(f"> ⚠️ {md(w, 400)}")
    if c.warnings:
        out.append("")
    out.append(f"<sub>base: {md(', '.join(c.base.inputs), 300)} · head: {md(', '.join(c.head.inputs), 300)} · "
               f"tolerance ±{c.tolerance * 100:.0f}% · traceanalyzer {md(c.tool['version'])}</sub>")
    return "\n".join(out) + "\n"


def _runs_note(c: Comparison) -> str:
    """What the run counts allowed for run-to-run variation, in the table's few words."""
    if c.run_to_run_measured:
        return "interval across runs"
    noise = c.run_noise
    if noise is None:
        return ""
    if noise.basis == "history":
        return f"run-to-run ±{noise.allowance * 100:.1f}% from {noise.runs} runs"
    return f"run-to-run not measured: ±{noise.allowance * 100:.1f}% allowed"


def _samples_rows(c: Comparison) -> list[str]:
    """Samples/s on both sides, when both were given a batch size (step time alone is not comparable
    across batch sizes)."""
    b, h = c.base.samples_per_s, c.head.samples_per_s
    if b is None or h is None:
        return []
    change = fmt_pct_change(h / b - 1 if b else None)
    return [f"| samples/s (batch {c.base.batch_size} / {c.head.batch_size}) | {b:,.1f} | {h:,.1f} | {change} |"]


def _memory_and_straggler_rows(c: Comparison) -> list[str]:
    """GPU memory peak when both sides have memory events; stragglers when either side has one."""
    rows = []
    b, h = c.base.peak_memory_bytes, c.head.peak_memory_bytes
    if b is not None and h is not None:
        rows.append(f"| GPU memory peak | {format_bytes(b)} | {format_bytes(h)} | "
                    f"{fmt_pct_change(h / b - 1 if b else None)} |")
    if c.base.stragglers or c.head.stragglers:
        rows.append(f"| stragglers | {_ranks_text(c.base)} | {_ranks_text(c.head)} | |")
    return rows


def _basis(s: Side) -> str:
    """" (by step markers)", " (detected from repeating work)", " (mixed)" or "" (not recorded)."""
    return f" ({STEP_BASES.get(s.step_basis, s.step_basis)})" if s.step_basis else ""


def _bases(c: Comparison) -> str:
    """", by step markers on both sides", ", base by step markers, head detected ..." or "" (not recorded)."""
    b, h = c.base.step_basis, c.head.step_basis
    if not b or not h:
        return ""
    if b == h:
        return f", {STEP_BASES.get(b, b)} on both sides"
    return f", base {STEP_BASES.get(b, b)}, head {STEP_BASES.get(h, h)}"


def _ranks_text(s: Side) -> str:
    if not s.stragglers:
        return "none"
    wait = f" ({fmt_us(s.straggler_wait_per_step_us)} wait/step)" if s.straggler_wait_per_step_us else ""
    return "rank " + ", ".join(str(r) for r in s.stragglers[:5]) + wait


def phase_change_line(p: PhaseChange) -> str:
    """A serving phase's median iteration, base -> head: "decode: median iteration 77.0 ms -> 70.0 ms (-9.1%), 10 vs
    10 iterations"."""
    change = f" ({fmt_pct_change(p.change)})" if p.change is not None else ""
    base, head = (fmt_us(x) if x is not None else "none" for x in (p.base_median_iteration_us,
                                                                   p.head_median_iteration_us))
    return (f"{clean(p.phase)}: median iteration {base} -> {head}{change}, {p.base_iterations} vs "
            f"{p.head_iterations} iterations")


def render_diff_text(c: Comparison) -> str:
    st = c.step_time
    lines = wrap(c.title, "Change: ", "  ")
    if c.lead:
        lines += wrap(c.lead, "  ", "  ")
    for sentence in c.detail:
        lines += wrap(sentence, "  ", "    ")
    if c.compared == WHOLE_CAPTURES:
        lines.append(f"whole capture {fmt_us(st.base_median_us)} -> {fmt_us(st.head_median_us)} "
                     f"({st.base_steps} vs {st.head_steps} captures, no steps)")
    else:
        lines.append(f"median step {fmt_us(st.base_median_us)} -> {fmt_us(st.head_median_us)} "
                     f"({st.base_steps} vs {st.head_steps} steps{_bases(c)}"
                     + (f", {st.base_runs} vs {st.head_runs} runs" if st.base_runs > 1 or st.head_runs > 1 else "")
                     + ")")
    b_rate, h_rate = c.base.samples_per_s, c.head.samples_per_s
    if b_rate is not None and h_rate is not None:
        change = fmt_pct_change(h_rate / b_rate - 1 if b_rate else None)
        lines.append(f"samples/s {b_rate:,.1f} -> {h_rate:,.1f} ({change})")
    if c.base.peak_memory_bytes is not None and c.head.peak_memory_bytes is not None:
        lines.append(f"GPU memory peak {format_bytes(c.base.peak_memory_bytes)} -> "
                     f"{format_bytes(c.head.peak_memory_bytes)}")
    if c.base.stragglers or c.head.stragglers:
        lines.append(f"stragglers {_ranks_text(c.base)} -> {_ranks_text(c.head)}")
    for phase in c.serving:
        lines += wrap(phase_change_line(phase), "serving ", "  ")
    if c.attribution:
        lines.append(f"change of the mean per {_unit(c)}, by part:")
    for p in c.attribution[:5]:
        tag = " (decisive)" if p.decisive else " (offsets)" if p.role == "offsets" else ""
        lines.append(f"  {_signed_us(p.delta_per_step_us):>10}  {clean(p.label)}{tag}")
    for g in c.gates:
        lines += wrap(f"{g.rule}: {g.detail}", f"gate {'passed' if g.passed else 'FAILED'}: ", "  ")
    for w in c.warnings:
        lines += wrap(w, "warning: ", "  ")
    return "\n".join(clean(line)[:WIDTH] for line in lines) + "\n"


def render_diff_json(c: Comparison) -> bytes:
    return inert.json_text(orjson.dumps(c.to_data(), option=orjson.OPT_INDENT_2)) + b"\n"


def render_diff_html(c: Comparison) -> str:
    scale = max([abs(p.delta_per_step_us) for p in c.attribution] + [1e-9])
    steps_scale = max(list(c.base.step_durations_us) + list(c.head.step_durations_us) + [1e-9])
    return template_env().get_template("diff.html.j2").render(
        c=c, verdict_labels={k: v.label for k, v in VERDICT_BY_ID.items()}, scale=scale,
        steps_scale=steps_scale, extra_rows=_side_rows(c), css=asset("report.css"),
        interval=interval_text(c.step_time), attribution_sentence=attribution_sentence(c),
        serving_lines=[phase_change_line(p) for p in c.serving],
        shares={p.cause: share_text(p) for p in c.attribution},
        evidence={p.cause: evidence_text(p).replace("**", "") for p in c.attribution})


def _side_rows(c: Comparison) -> dict[str, list[tuple[str, str]]]:
    """The rows the Markdown table adds for memory and stragglers, per side (label, formatted value),
    under the same conditions: the memory peak when both sides have one, stragglers when either has."""
    rows: dict[str, list[tuple[str, str]]] = {"base": [], "head": []}
    both_memory = c.base.peak_memory_bytes is not None and c.head.peak_memory_bytes is not None
    for name, side in (("base", c.base), ("head", c.head)):
        if both_memory:
            rows[name].append(("GPU memory peak", format_bytes(side.peak_memory_bytes or 0)))
        if c.base.stragglers or c.head.stragglers:
            rows[name].append(("stragglers", _ranks_text(side)))
    return rows


RENDERERS: dict[str, Renderer[Comparison]] = DIFF_RENDERERS  # the registry lives in report/__init__.py
