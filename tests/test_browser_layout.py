"""The report's layout in a real browser (headless Chromium through playwright), at 1024, 1280 and 1920 px,
over every sample report, a 16-rank job and a report of an nvidia-smi log alone:

* no table is wider than the box that holds it (nothing scrolls sideways, nothing is cut), and no table
  header is clipped;
* every in-page link (the navigation included) leads to an element of the page: the navigation is built
  from the sections present;
* no console error;
* the first screen holds the verdict, its number and the advice to try first; the derivation is one click
  away.

Screenshots go to artifacts/layout-*.png for a person to look at. Without Chromium the test is skipped,
except under CI, where it fails (as tests/test_browser_report.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import ROOT, SAMPLES
from test_browser_report import ARTIFACTS, _this_checkout_templates, browser, open_report  # noqa: F401

import traceanalyzer as ta
from traceanalyzer.report.html import render_html

pytestmark = pytest.mark.slow  # a real browser: runs with the full suite

WIDTHS = (1024, 1280, 1920)
SAMPLE_INPUTS = sorted(p for p in SAMPLES.iterdir() if p.name.endswith((".json", ".json.gz"))
                       and not p.name.endswith(".expected.json"))
SCREENSHOTS = {"input_bound.json", "job16", "log_only", "comm_rank0.json", "torch_cpu_input_bound.json.gz"}

# What the page measures: tables wider than their box, clipped headers, in-page links to nothing.
MEASURE = """() => {
  const wide = [], clipped = [], dead = [];
  for (const t of document.querySelectorAll('main table')) {
    const box = t.parentElement;
    if (t.offsetWidth > box.clientWidth + 1 || t.scrollWidth > t.offsetWidth + 1)
      wide.push(`${t.closest('section') ? t.closest('section').id : '?'}: table ${t.offsetWidth}px in ${box.clientWidth}px`);
  }
  for (const th of document.querySelectorAll('main th')) {
    if (th.scrollWidth > th.clientWidth + 1) clipped.push(th.textContent);
  }
  for (const a of document.querySelectorAll('a[href^="#"]')) {
    const id = decodeURIComponent(a.getAttribute('href').slice(1));
    if (!id || !document.getElementById(id)) dead.push(a.getAttribute('href'));
  }
  return {wide, clipped, dead, page: document.documentElement.scrollWidth, view: window.innerWidth};
}"""


def _job16(tmp: Path) -> ta.Analysis:
    from test_stragglers import write_job

    return ta.analyze(write_job(tmp / "job16", world=16, slow=11))


def _reports(tmp: Path) -> dict[str, ta.Analysis]:
    out = {p.name: ta.analyze(p, ta.Options(find_logs_beside=False)) for p in SAMPLE_INPUTS}
    (tmp / "job16").mkdir()
    out["job16"] = _job16(tmp)
    out["log_only"] = ta.analyze(SAMPLES / "dmon" / "idle_runs.log")
    return out


def test_layout_at_three_widths(browser, tmp_path):  # noqa: F811
    reports = _reports(tmp_path)
    problems: list[str] = []
    ARTIFACTS.mkdir(exist_ok=True)
    for name, analysis in reports.items():
        html_path = tmp_path / f"{name}.html"
        html_path.write_text(render_html(analysis), encoding="utf-8")
        page, errors, refused, dialogs = open_report(browser, html_path)
        try:
            for width in WIDTHS:
                page.set_viewport_size({"width": width, "height": 900})
                page.wait_for_timeout(50)  # charts redraw on resize
                m = page.evaluate(MEASURE)
                problems += [f"{name} @{width}: {w}" for w in m["wide"]]
                problems += [f"{name} @{width}: header clipped: {h!r}" for h in m["clipped"]]
                problems += [f"{name} @{width}: dead link {d}" for d in m["dead"]]
                if m["page"] > m["view"]:
                    problems.append(f"{name} @{width}: page {m['page']}px wide in a {m['view']}px window")
                if name in SCREENSHOTS and width in (1024, 1920):
                    page.evaluate("window.scrollTo(0, 0)")
                    page.screenshot(path=str(ARTIFACTS / f"layout-{name.split('.')[0]}-{width}.png"))
            d = analysis.diagnosis
            if d is not None:  # the first screen: verdict, its number, the advice; the derivation one click away
                page.set_viewport_size({"width": 1280, "height": 800})
                page.evaluate("window.scrollTo(0, 0)")
                h1 = page.locator("#verdict h1")
                assert h1.text_content() == d.headline and len(d.headline) <= 200
                assert h1.bounding_box()["y"] + h1.bounding_box()["height"] < 800
                advice = page.locator("#verdict .top-advice")
                if any(f.advice for f in d.findings):
                    assert advice.count() == 1 and advice.bounding_box()["y"] < 800, name
                if d.headline_detail:
                    how = page.locator("#verdict details.how")
                    assert not how.locator("p").first.is_visible()
                    how.locator("summary").click()
                    assert d.headline_detail in how.text_content() and how.locator("p").first.is_visible()
        finally:
            page.close()
        problems += [f"{name}: console error {e}" for e in errors]
        problems += [f"{name}: refused {r}" for r in refused] + [f"{name}: dialog {x}" for x in dialogs]
    assert problems == []


def test_measure_catches_a_wide_table_and_a_dead_link(browser, tmp_path):  # noqa: F811
    """The measurement fails on what it must catch (it is not a test that cannot fail)."""
    html_path = tmp_path / "bad.html"
    html_path.write_text("<html><body><main><section id='s'><div style='width:300px'><table><tr><td>"
                         + "x" * 400 + "</td></tr></table></div></section><a href='#nowhere'>x</a></main></body></html>",
                         encoding="utf-8")
    page, _, _, _ = open_report(browser, html_path)
    try:
        m = page.evaluate(MEASURE)
    finally:
        page.close()
    assert len(m["wide"]) == 1 and m["dead"] == ["#nowhere"]
    assert ROOT.is_dir()
