"""Report -> one self-contained HTML page through the jinja2 templates (autoescaped).

The page is offline and deterministic: its CSS and JS (our own, in `templates/`) are inlined,
the data the scripts draw is embedded once with `|tojson` in a `<script type="application/json">`
block and read with JSON.parse, and every string from a trace is either autoescaped by jinja2 or
set with `textContent` by the scripts. Control, bidi and zero-width characters in those strings
are shown as visible escapes (`\\u202e`): for every `{{ ... }}` of the templates by the
environment's `finalize`, and in the scripts' data by `page_data`, so a kernel name cannot
reorder or hide what the page shows. Nothing here computes a figure: `page_data` only selects
what the scripts need from the Report, and the cause / verdict vocabulary below is presentation.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jinja2
import markupsafe

from .. import inert
from ..causes import PALETTE, page_registry
from ..result.types import AnalysisData as Analysis
from ..result.types import PlainData as Report
from ..units import format_bytes
from ._format import fmt_pct, fmt_us
from .ranks import straggler_sentence

# Labels and colours of causes and verdicts come from the one registry (traceanalyzer/causes.py).
CAUSES: dict[str, dict[str, str]] = page_registry()["causes"]
VERDICTS: dict[str, dict[str, str]] = page_registry()["verdicts"]
HOST_LANES: dict[str, str] = {
    "ops": "host ops", "dataloader": "DataLoader wait", "sync": "sync calls", "copy": "copy calls",
}
TOP_FINDINGS = 3  # shown in full on the first screen; the rest are folded


def template_env() -> jinja2.Environment:
    try:
        loader: jinja2.BaseLoader = jinja2.PackageLoader("traceanalyzer.templates", ".")
    except (ImportError, ValueError):  # running from a source checkout that is not installed
        loader = jinja2.FileSystemLoader(Path(__file__).resolve().parents[2] / "templates")
    env = jinja2.Environment(loader=loader, autoescape=True, trim_blocks=True, lstrip_blocks=True,
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                             finalize=_visible_text)
    env.filters["us"] = fmt_us
    env.filters["pct"] = fmt_pct
    env.filters["rank_label"] = rank_label
    env.filters["nbytes"] = fmt_bytes
    env.filters["gib"] = format_bytes
    env.filters["rate"] = fmt_rate
    env.filters["code_spans"] = code_spans
    env.globals["straggler_sentence"] = straggler_sentence
    env.filters["visible"] = inert.visible
    return env


def _visible_text(value: Any) -> Any:
    """Every plain string a template prints, with invisible characters shown (`inert.visible`);
    markup we made ourselves (inlined CSS/JS, `tojson`, `code_spans`) is left as it is."""
    return inert.visible(value) if type(value) is str else value


def code_spans(text: str) -> markupsafe.Markup:
    """`a` -> <code>a</code> for our own definition texts; every piece is escaped first."""
    parts = str(text).split("`")
    if len(parts) % 2 == 0:  # unbalanced: show as written
        return markupsafe.escape(inert.visible(text))
    return markupsafe.Markup("").join(
        markupsafe.Markup("<code>%s</code>") % inert.visible(p) if i % 2 else markupsafe.escape(inert.visible(p))
        for i, p in enumerate(parts))


def rank_label(rank: dict[str, Any]) -> str:
    """`rank N`, or the input's file name when the trace records no rank (a single-process capture)."""
    if rank.get("rank") is not None:
        return f"rank {rank['rank']}"
    return str(rank.get("input") or "trace").replace("\\", "/").rsplit("/", 1)[-1]


def fmt_bytes(n: int | None) -> str:
    if n is None or n < 0:
        return "n/a"
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def fmt_rate(bytes_per_s: float) -> str:
    """A byte rate for tables: 1.5 MiB/s (the units of `format_bytes`, per second)."""
    return f"{format_bytes(bytes_per_s)}/s"


def page_data(report: Report) -> dict[str, Any]:
    """What the page's scripts draw: a selection of the Report, nothing computed; its strings
    with invisible characters shown (the scripts set them with textContent or draw them)."""
    return inert.visible_data({
        "min_gap_us": report["options"]["min_gap_us"],
        "causes": CAUSES,
        "palette": PALETTE,
        "host_lanes": HOST_LANES,
        "ranks": [
            {"label": rank_label(r), "timeline": (r.get("drawing") or {}).get("timeline"),
             "charts": (r.get("drawing") or {}).get("charts") or {},
             "devices": [{"device": d["device"], "histogram": d["gaps"]["histogram"]} for d in r["devices"]]}
            for r in report["ranks"]
        ],
        # many ranks: where each rank's window starts on the job clock (the timelines share it)
        "job_shift_us": (report.get("job") or {}).get("timeline_shift_us") or [],
    })


def render_html(analysis: Analysis) -> str:
    report = analysis.to_data()
    env = template_env()
    return env.get_template("report.html.j2").render(
        report=report, diagnosis=report.get("diagnosis"), page=page_data(report),
        causes=CAUSES, verdicts=VERDICTS, palette=PALETTE, top_findings=TOP_FINDINGS,
        css=env.loader.get_source(env, "report.css")[0],  # type: ignore[union-attr]
        js=env.loader.get_source(env, "report.js")[0],  # type: ignore[union-attr]
    )
