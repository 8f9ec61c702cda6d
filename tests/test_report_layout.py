"""The report and diff pages in headless Chromium at 1024, 1400 and 1920 px: every header cell of every
table is visible, or reachable by the horizontal scroll of its own box (no column covers another);
the definitions are those of the figures the report shows, folded."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import ROOT
from test_browser_report import browser as browser  # noqa: F401  (the fixture: a real Chromium)
from test_browser_report import open_report

import traceanalyzer as ta
from traceanalyzer.compare import compare
from traceanalyzer.report.diff import render_diff_html

pytestmark = pytest.mark.slow

S = ROOT / "sample_traces"
WIDTHS = (1024, 1400, 1920)

# Each header cell, brought into view the way a reader would (the page's and its box's scrolling),
# must then be the element at its own centre: not covered, not outside the window.
HIDDEN_HEADERS = """() => {
  document.querySelectorAll('details').forEach(d => { d.open = true; });
  const hidden = [];
  for (const th of document.querySelectorAll('table th')) {
    th.scrollIntoView({block: 'center', inline: 'nearest', behavior: 'instant'});
    const r = th.getBoundingClientRect();
    if (r.width === 0 && r.height === 0) continue;
    const x = Math.min(r.left + r.width / 2, r.right - 2), y = r.top + r.height / 2;
    const hit = document.elementFromPoint(x, y);
    if (!(hit && (hit === th || th.contains(hit)) && x >= 0 && x <= innerWidth)) {
      hidden.push((th.closest('section') || {}).id + ': ' + th.textContent.trim());
    }
  }
  return hidden;
}"""


def _pages(tmp_path: Path) -> dict[str, Path]:
    reports = {
        "two ranks": ta.analyze([S / "comm_rank0.json", S / "comm_rank1.json"]),
        "host log": ta.analyze(S / "glances" / "cpu_aug.trace.json",
                               ta.Options(host_logs=(S / "glances" / "cpu_aug.csv",))),
        "memory": ta.analyze(S / "torch_memory_leak.json.gz"),
        "nvidia-smi log": ta.analyze(S / "dmon" / "idle_runs.log"),
        "hostile names": ta.analyze(S / "hostile_names.json"),
    }
    out = {}
    for name, a in reports.items():
        out[name] = tmp_path / f"{name.replace(' ', '_')}.html"
        a.to_html(out[name])
    diff = tmp_path / "diff.html"
    diff.write_text(render_diff_html(compare(ta.analyze(S / "gpu_bound.json"), ta.analyze(S / "input_bound.json"))))
    out["diff"] = diff
    return out


def test_no_table_hides_a_column(tmp_path, browser):  # noqa: F811
    hidden = []
    for name, path in _pages(tmp_path).items():
        page, errors, refused, _ = open_report(browser, path)
        assert not errors and not refused, (name, errors, refused)
        for width in WIDTHS:
            page.set_viewport_size({"width": width, "height": 900})
            hidden += [f"{name} at {width} px: {h}" for h in page.evaluate(HIDDEN_HEADERS)]
        page.close()
    assert not hidden, hidden


def test_only_the_definitions_of_figures_shown_folded(tmp_path):
    one = ta.analyze(S / "input_bound.json").to_html()
    assert '<details><summary>How each of the' in one
    assert 'id="def-window"' in one and 'id="def-idle_gaps"' in one
    for absent in ("stragglers", "job_clock", "counter_alignment", "host_metrics", "memory"):
        assert f'id="def-{absent}"' not in one, absent
    two = ta.analyze([S / "comm_rank0.json", S / "comm_rank1.json"]).to_html()
    assert 'id="def-stragglers"' in two and 'id="def-job_clock"' in two
