"""Report -> one self-contained HTML page through the jinja2 templates (autoescaped)."""

from __future__ import annotations

from pathlib import Path

import jinja2

from .build import Report
from .text import fmt_pct, fmt_us


def template_env() -> jinja2.Environment:
    try:
        loader: jinja2.BaseLoader = jinja2.PackageLoader("traceanalyzer.templates", ".")
    except (ImportError, ValueError):  # running from a source checkout that is not installed
        loader = jinja2.FileSystemLoader(Path(__file__).resolve().parents[2] / "templates")
    env = jinja2.Environment(loader=loader, autoescape=True, trim_blocks=True, lstrip_blocks=True,
                             undefined=jinja2.StrictUndefined)
    env.filters["us"] = fmt_us
    env.filters["pct"] = fmt_pct
    return env


def render_html(report: Report) -> str:
    return template_env().get_template("report.html.j2").render(report=report)
