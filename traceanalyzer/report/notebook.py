"""Analysis -> its notebook faces: a short `repr` (the verdict, the headline figures, the ranks, how to
see more; under 2,000 characters whatever the job) and a small HTML card (`_repr_html_`: the verdict
card and the headline figures, under 50 KB, inline styles, no script).

Everything from a trace (file names, kernel names) is made inert: terminal-safe in the repr, escaped
and with invisible characters shown in the HTML. They format; they never compute.
"""

from __future__ import annotations

import html

from .. import inert
from ..causes import CAUSE_BY_ID, VERDICT_BY_ID
from ..result.types import AnalysisData, RankResult
from ._format import fmt_pct, fmt_us, rank_label, rank_name
from .capture import no_gpu_text
from .verdict import top_advice

MAX_RANKS = 8  # ranks listed, one line each
NAME_CHARS = 60  # a file or kernel name is cut to this
HEADLINE_CHARS = 400
ADVICE_CHARS = 300
# Every view of an Analysis: its DataFrames (one row per rank x ...), then its renderers
# (tests/test_notebook.py checks that each DataFrame method of Analysis is listed).
VIEWS = ("a.findings()", "a.steps()", "a.gaps()", "a.kernels(top=None)", "a.ops()", "a.frames()", "a.devices()",
         "a.iterations()", "a.requests()")
FACES = ("a.to_text()", "a.to_markdown()", "a.to_html(\"report.html\")", "a.save(\"report.json\")")
MORE = "DataFrames: " + "  ".join(VIEWS) + "; reports: " + "  ".join(FACES)


def _short(text: object, limit: int = NAME_CHARS) -> str:
    return inert.shorten(" ".join(inert.terminal(text).split()), limit)


def _verdict(a: AnalysisData) -> tuple[str, str, str]:
    """(verdict id, its label, the headline) of the job; empty strings when not diagnosed."""
    d = a.diagnosis
    if d is None:
        return "", "", ""
    v = VERDICT_BY_ID.get(d.primary)
    return d.primary, v.label if v else d.primary, d.headline


def _headline_figures(a: AnalysisData) -> list[tuple[str, str]]:
    s = a.summary
    figures = [("GPU idle", fmt_pct(s.gpu_idle_fraction)), ("memcpy share of busy", fmt_pct(s.memcpy_share_of_busy)),
               ("host DataLoader wait", fmt_pct(s.dataloader_wait_fraction)), ("steps", str(s.steps))]
    if s.step_time_median_us is not None:
        figures.append(("median step", fmt_us(s.step_time_median_us)))
    if s.samples_per_s is not None:
        figures.append(("samples/s", f"{s.samples_per_s:,.1f}"))
    return figures


def _rank_cells(r: RankResult) -> tuple[str, str, str, str]:
    name = rank_name(r)
    idle = ", ".join(f"{d.device} idle {fmt_pct(d.gpu_idle_fraction)}" for d in r.devices[:2])
    if len(r.devices) > 2:
        idle += f", +{len(r.devices) - 2} GPU(s)"
    v = VERDICT_BY_ID.get(r.diagnosis.primary) if r.diagnosis else None
    verdict = (v.label if v else r.diagnosis.primary) if r.diagnosis else ""
    top = max((k for d in r.devices for k in d.top_kernels[:1]), key=lambda k: k.total_ns, default=None)
    return name, idle or no_gpu_text(r), verdict, top.name if top else ""


def render_repr(a: AnalysisData) -> str:
    verdict, label, headline = _verdict(a)
    s = a.summary
    lines = [f"<traceanalyzer.Analysis: {s.ranks} rank(s), {s.devices} GPU(s), {len(a.inputs)} input(s), "
             f"{a.schema}>"]
    if verdict:
        lines.append(f"Verdict: {label} ({verdict}): {_short(headline, HEADLINE_CHARS)}")
        advice = top_advice(a.diagnosis)
        if advice:
            lines.append(f"Try first: {_short(advice, ADVICE_CHARS)}")
    lines.append("Headline: " + ", ".join(f"{name} {value}" for name, value in _headline_figures(a)))
    for r in a.ranks[:MAX_RANKS]:
        _, idle, rank_verdict, _ = _rank_cells(r)
        lines.append(f"  {_short(rank_label(r))}: {idle}" + (f"; {rank_verdict}" if rank_verdict else ""))
    if len(a.ranks) > MAX_RANKS:
        lines.append(f"  ... and {len(a.ranks) - MAX_RANKS} more rank(s): a.devices()")
    warnings = sum(len(i.warnings) for i in a.inputs) + len(a.warnings)
    if warnings:
        lines.append(f"{warnings} warning(s) while reading: a.warnings, a.inputs")
    lines.append("More: " + MORE)
    return "\n".join(lines)


def _h(text: object, limit: int = NAME_CHARS) -> str:
    return html.escape(inert.shorten(inert.visible(text), limit), quote=True)


def render_card_html(a: AnalysisData) -> str:
    verdict, label, headline = _verdict(a)
    v = VERDICT_BY_ID.get(verdict)
    cause = CAUSE_BY_ID.get(v.cause) if v else None
    color = cause.color if cause else "#2f4b7c"
    figures = "".join(
        f'<div style="border:1px solid #d5dce6;border-radius:6px;padding:6px 10px;min-width:7em">'
        f'<div style="font-size:1.3em;font-weight:700">{_h(value)}</div>'
        f'<div style="color:#4a5568;font-size:.85em">{_h(name)}</div></div>'
        for name, value in _headline_figures(a))
    rows = "".join(
        f"<tr><td>{_h(name)}</td><td>{_h(idle)}</td><td>{_h(rank_verdict)}</td><td><code>{_h(kernel)}</code></td></tr>"
        for name, idle, rank_verdict, kernel in map(_rank_cells, a.ranks[:MAX_RANKS]))
    more = (f'<tr><td colspan="4">... and {len(a.ranks) - MAX_RANKS} more rank(s): '
            f"<code>a.devices()</code></td></tr>" if len(a.ranks) > MAX_RANKS else "")
    table = ('<table style="border-collapse:collapse;margin-top:8px;font-size:.9em">'
             "<tr><th align=left>rank</th><th align=left>GPUs</th><th align=left>verdict</th>"
             f"<th align=left>top kernel</th></tr>{rows}{more}</table>") if a.ranks else ""
    advice = top_advice(a.diagnosis)
    title = (f'<div style="color:{color};font-weight:700;text-transform:uppercase;font-size:.8em">{_h(label)}</div>'
             f'<div style="font-size:1.15em;font-weight:600;margin:2px 0 4px">{_h(headline, HEADLINE_CHARS)}</div>'
             + (f'<div style="margin:0 0 8px"><div style="font-weight:700;display:inline">Try first:</div> '
                f'{_h(advice, ADVICE_CHARS)}</div>' if advice else "")
             if verdict else "")
    inputs = ", ".join(_h(i.path) for i in a.inputs[:3])
    if len(a.inputs) > 3:
        inputs += f" and {len(a.inputs) - 3} more"
    return (f'<div class="traceanalyzer-analysis" style="border-left:4px solid {color};padding:8px 12px;'
            f'font-family:system-ui,sans-serif;max-width:60em">{title}'
            f'<div style="display:flex;flex-wrap:wrap;gap:6px">{figures}</div>{table}'
            f'<div style="color:#4a5568;font-size:.8em;margin-top:6px">{inputs} · traceanalyzer '
            f"{_h(a.tool.version)} · more: <code>{_h(MORE, 400)}</code></div></div>")
