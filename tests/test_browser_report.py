"""The HTML report in a real browser: headless Chromium (Debian's `chromium`) through playwright.

Each page must load with no console error and no network request (every request that is not
file: or data: is refused and fails the test), draw its timeline and charts at a real size,
react to hover and zoom, and run nothing from a hostile trace. A screenshot of each page goes
to artifacts/ for a person to look at. Without Chromium the test is skipped, except under CI,
where it fails.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from conftest import ROOT
from report_fixtures import HOSTILE, empty, hostile, report_for, report_with_counters

from traceanalyzer.report.html import render_html

pytestmark = pytest.mark.slow  # a real browser: runs with the full suite

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
                 "--disable-default-apps", "--disable-extensions"]
ARTIFACTS = ROOT / "artifacts"

# (screenshot name, corpus paths, diagnosis): the real diagnosis, as `traceanalyzer report` renders it
CORPUS_CASES = {
    "owlv2_h100": (["tl_h100/google_owlv2-large-patch14-ensemble__1016001.json.gz"], "real"),
    "sampled_2rank": (["hta_sampled_2rank"], "real"),
    "nccl": (["hta_nccl/nccl_data.json.gz"], "real"),
    "cpu_only": (["hta_cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"], "real"),
    "xdit_largest": (["tl_xdit_sd35/profile_trace_rank_0.json.gz"], "real"),
    "fake_diagnosis_edge_cases": (["hta_nccl/nccl_data.json.gz"], True),
    "memory_pressure_rocm": (["tl_vllm_graph_capture/graph_capture_rank_0.1773709742341309550.pt.trace.json.gz"],
                             "real"),
}


@pytest.fixture(autouse=True)
def _this_checkout_templates(monkeypatch):
    """Pages rendered with this checkout's templates (an editable install may point at another's)."""
    import jinja2

    from traceanalyzer.report import html as H

    monkeypatch.setattr(H, "_loader", lambda: jinja2.FileSystemLoader(str(ROOT / "templates")))
    H.template_env.cache_clear()
    yield
    H.template_env.cache_clear()


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    reason = None
    if not found:
        reason = "Chromium is not installed (apt-get install chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        reason = "the playwright package is not installed"
    if reason:
        if os.environ.get("CI"):
            pytest.fail(f"{reason}; CI is set, so the browser test must run")
        pytest.skip(reason)
    return str(found)


@pytest.fixture(scope="module")
def browser():
    path = _chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=path, args=CHROMIUM_ARGS)
        yield b
        b.close()


def open_report(browser, html_path: Path):
    """Load a report page; returns (page, console errors, refused requests, dialogs)."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    refused: list[str] = []
    dialogs: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))

    def route(r):
        url = r.request.url
        if url.startswith(("file:", "data:")):
            r.continue_()
        else:
            refused.append(url)
            r.abort()

    page.route("**/*", route)
    page.goto(html_path.resolve().as_uri())
    page.wait_for_load_state("load")
    return page, errors, refused, dialogs


def box(locator) -> dict:
    b = locator.bounding_box()
    assert b is not None, "element not rendered"
    return b


def check_page(page, analysis) -> None:
    report = analysis.to_data()
    timelines = page.locator(".tl canvas")
    assert timelines.count() == len(report["ranks"])
    for i in range(timelines.count()):
        b = box(timelines.nth(i))
        assert b["width"] > 600 and b["height"] > 20
    cpu_only = bool(report["ranks"]) and not any(r["devices"] for r in report["ranks"])
    stepcharts = page.locator(".stepchart svg")  # CPU-only captures: the host loop's chart instead (test_cpu_only)
    assert stepcharts.count() == (0 if cpu_only else sum(1 for r in report["ranks"] if r["per_step"]))
    for i in range(stepcharts.count()):
        b = box(stepcharts.nth(i))
        assert b["width"] > 300 and b["height"] > 100
        assert stepcharts.nth(i).locator("rect").count() > 0
    hists = page.locator(".histchart svg")
    assert hists.count() == sum(len(r["devices"]) for r in report["ranks"])
    for i in range(hists.count()):
        b = box(hists.nth(i))
        assert b["width"] > 200 and b["height"] > 100
    gpu_sections = ("steps", "gaps", "memcpy", "kernels")
    for section in ("verdict", "figures", "timeline", *(("hostloop",) if cpu_only else gpu_sections), "inputs",
                    "definitions"):
        assert box(page.locator(f"#{section}"))["height"] > 20
    if cpu_only:  # no empty GPU section
        assert all(page.locator(f"#{section}").count() == 0 for section in gpu_sections)
    else:  # a critical-path strip under each rank's steps, one block per segment of its path
        paths = [r["critical_path"] for r in report["ranks"] if r.get("critical_path")]
        strips = page.locator("#steps .cp-strip")
        assert strips.count() == len(paths)
        for i, cp in enumerate(paths):
            strip = strips.nth(i)
            strip.scroll_into_view_if_needed()
            assert box(strip)["width"] > 300 and box(strip)["height"] >= 8
            assert strip.locator(".cp-seg").count() == len(cp["segments"])
            widths = sum(box(s)["width"] for s in strip.locator(".cp-seg").all() if s.bounding_box())
            assert widths == pytest.approx(box(strip)["width"], rel=0.02)  # the segments fill the step
    check_memory_charts(page, report)


def check_memory_charts(page, report) -> None:
    """One memory chart per GPU (and host) with memory events, drawn at a real size with its lines."""
    memories = [(m, r["drawing"]["memory"][key]) for r in report["ranks"]
                for key, m in [*((d["device"], d["memory"]) for d in r["devices"]), ("host", r["host_memory"])] if m]
    charts = page.locator("#memory .memchart svg")
    assert charts.count() == len(memories)
    for i, (m, series) in enumerate(memories):
        chart = charts.nth(i)
        chart.scroll_into_view_if_needed()
        b = box(chart)
        assert b["width"] > 300 and b["height"] > 100
        assert box(chart.locator("path.mem-allocated"))["width"] > 0
        assert chart.locator("line.mem-total").count() == (1 if m["total_bytes"] else 0)
        assert chart.locator("path.mem-reserved").count() == (1 if series["reserved_bytes"] else 0)


def interact(page, report) -> None:
    """Hover over the first GPU lane shows a tooltip; wheel zoom changes the shown range."""
    tl = report.ranks[0].drawing.timeline
    if not tl["devices"] or not tl["window_us"]:
        return
    canvas = page.locator(".tl canvas").first
    canvas.scroll_into_view_if_needed()
    b = box(canvas)
    lane_y = 20 + 4 + (18 + 6 if tl["steps"]["step"] else 0) + 12  # axis, steps lane, into the GPU lane
    x = b["x"] + 124 + (b["width"] - 130) * 0.5
    page.mouse.move(x, b["y"] + lane_y)
    assert page.locator("#tip").is_visible()
    assert page.locator("#tip .t").text_content().startswith(tl["devices"][0]["device"])
    rng = page.locator(".tl .tl-range").first
    before = rng.text_content()
    page.mouse.wheel(0, -400)
    page.wait_for_timeout(100)
    assert rng.text_content() != before and " of " in rng.text_content()
    page.mouse.move(x + 40, b["y"] + lane_y)  # pan by dragging
    page.mouse.down()
    page.mouse.move(x - 120, b["y"] + lane_y, steps=4)
    page.mouse.up()
    page.locator(".tl button[data-act=reset]").first.click()
    page.wait_for_timeout(50)
    assert rng.text_content() == before


@pytest.mark.parametrize("name", list(CORPUS_CASES))
def test_corpus_report_in_browser(browser, corpus, tmp_path, name):
    paths, diagnosed = CORPUS_CASES[name]
    report = report_for([corpus / p for p in paths], diagnosed=diagnosed)
    html_path = tmp_path / f"{name}.html"
    html_path.write_text(render_html(report), encoding="utf-8")
    page, errors, refused, dialogs = open_report(browser, html_path)
    try:
        check_page(page, report)
        interact(page, report)
        ARTIFACTS.mkdir(exist_ok=True)
        page.mouse.move(0, 0)
        page.evaluate("window.scrollTo(0, 0)")
        page.screenshot(path=str(ARTIFACTS / f"report-{name}.png"), full_page=True)
    finally:
        page.close()
    assert errors == [] and refused == [] and dialogs == []


def test_memory_chart_of_a_real_torch_trace_in_browser(browser, tmp_path):
    """A CPU trace with a leak: the host memory chart and the leak finding on the page."""
    report = report_for([ROOT / "sample_traces" / "torch_memory_leak.json.gz"], diagnosed="real")
    assert report.ranks[0].host_memory is not None
    html_path = tmp_path / "memory.html"
    html_path.write_text(render_html(report), encoding="utf-8")
    page, errors, refused, dialogs = open_report(browser, html_path)
    try:
        check_memory_charts(page, report.to_data())
        assert "Memory grows every step" in page.locator("#findings").text_content()
        ARTIFACTS.mkdir(exist_ok=True)
        page.locator("#memory").screenshot(path=str(ARTIFACTS / "report-memory.png"))
    finally:
        page.close()
    assert errors == [] and refused == [] and dialogs == []


def test_hostile_names_execute_nothing(browser, tmp_path):
    report = report_for([hostile(tmp_path / "hostile.json")], diagnosed=True, evidence_name=HOSTILE[1])
    html_path = tmp_path / "hostile.html"
    html_path.write_text(render_html(report), encoding="utf-8")
    page, errors, refused, dialogs = open_report(browser, html_path)
    try:
        check_page(page, report)
        interact(page, report)
        page.wait_for_timeout(200)
        assert page.locator("img").count() == 0
        assert page.evaluate("document.scripts.length") == 2
        names = page.locator("td.kname code").all_text_contents()
        for name in HOSTILE:
            assert name in names
        assert HOSTILE[1] in page.locator("#findings").text_content()
        ARTIFACTS.mkdir(exist_ok=True)
        page.mouse.move(0, 0)
        page.evaluate("window.scrollTo(0, 0)")
        page.screenshot(path=str(ARTIFACTS / "report-hostile.png"), full_page=True)
    finally:
        page.close()
    assert dialogs == [] and errors == [] and refused == []


def test_empty_report_in_browser(browser, tmp_path):
    report = report_for([empty(tmp_path / "empty.json")])
    html_path = tmp_path / "empty.html"
    html_path.write_text(render_html(report), encoding="utf-8")
    page, errors, refused, dialogs = open_report(browser, html_path)
    try:
        assert page.locator(".tl canvas").count() == 1 and box(page.locator(".tl canvas"))["height"] > 0
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "report-empty.png"), full_page=True)
    finally:
        page.close()
    assert errors == [] and refused == [] and dialogs == []


def test_counter_lane_in_browser(browser, tmp_path):
    report = report_with_counters(tmp_path / "one.json")
    html_path = tmp_path / "counters.html"
    html_path.write_text(render_html(report), encoding="utf-8")
    page, errors, refused, dialogs = open_report(browser, html_path)
    try:
        check_page(page, report)
        interact(page, report)
        canvas = page.locator(".tl canvas").first
        b = box(canvas)
        page.mouse.move(b["x"] + 400, b["y"] + b["height"] - 12)  # the counter lane is the last one
        assert page.locator("#tip .t").text_content() == "cuda:0 sm_util_pct"
    finally:
        page.close()
    assert errors == [] and refused == [] and dialogs == []


def test_straggler_job_in_browser(browser, tmp_path):
    """Ranks and stragglers: the per-rank bars are drawn at a real size, the straggler's lateness bar
    is the only one, and the sentence names it."""
    from test_stragglers import write_job

    import traceanalyzer as ta

    report = ta.analyze(write_job(tmp_path))
    html_path = tmp_path / "stragglers.html"
    html_path.write_text(render_html(report), encoding="utf-8")
    page, errors, refused, dialogs = open_report(browser, html_path)
    try:
        check_page(page, report)
        section = page.locator("#stragglers")
        assert box(section)["height"] > 100
        assert "rank 5 is late by 30.0 ms per step" in section.locator(".straggler-line").text_content()
        rows = section.locator(".rank-row")
        assert rows.count() == 8
        for i in range(8):
            assert box(rows.nth(i).locator(".rank-bars.step .rbar").first)["width"] > 50  # compute
        late = [box(rows.nth(i).locator(".rbar.late"))["width"] for i in range(8)]
        assert late[5] > 100 and all(w == 0 for i, w in enumerate(late) if i != 5)
        waits = [box(rows.nth(i).locator(".rbar.wait"))["width"] for i in range(8)]
        assert waits[5] == 0 and all(w > 50 for i, w in enumerate(waits) if i != 5)
        # one job clock: every rank's timeline spans the job, and zooming one zooms them all
        ranges = page.locator(".tl .tl-range")
        assert ranges.count() == 8 and "job clock" in ranges.nth(0).text_content()
        first = page.locator(".tl canvas").first
        first.scroll_into_view_if_needed()
        b = box(first)
        page.mouse.move(b["x"] + b["width"] * 0.6, b["y"] + b["height"] / 2)
        page.mouse.wheel(0, -600)
        page.wait_for_timeout(200)
        zoomed = [ranges.nth(i).text_content() for i in range(8)]
        assert all("(job clock)" in z for z in zoomed)
        assert len(set(zoomed)) == 1  # the same stretch of the job clock on every rank
        ARTIFACTS.mkdir(exist_ok=True)
        page.locator("#timeline").screenshot(path=str(ARTIFACTS / "report-job-timeline.png"))
        section.scroll_into_view_if_needed()
        section.screenshot(path=str(ARTIFACTS / "report-stragglers.png"))
    finally:
        page.close()
    assert errors == [] and refused == [] and dialogs == []


def test_host_chart_in_browser(browser, tmp_path):
    """The glances section: CPU lines and the DataLoader-wait spans drawn at a real size, the split said."""
    from glances_builder import BASE_S, glances4_csv, input_bound_trace

    import traceanalyzer as ta

    trace = input_bound_trace(tmp_path / "t.json")
    log = glances4_csv(tmp_path / "host.csv", [BASE_S + k for k in range(1, 11)], [80.0] * 10, [12.0] * 10, [1.0] * 10)
    report = ta.analyze([trace, log])
    html_path = tmp_path / "host.html"
    html_path.write_text(render_html(report), encoding="utf-8")
    page, errors, refused, dialogs = open_report(browser, html_path)
    try:
        check_page(page, report)
        chart = page.locator("#host figure.hostchart svg")
        assert chart.count() == 1
        b = box(chart)
        assert b["width"] > 300 and b["height"] > 100
        table = box(page.locator("#host .scroll").first)  # the section's content width
        assert b["x"] == pytest.approx(table["x"], abs=1) and b["width"] == pytest.approx(table["width"], abs=1)
        for key in ("cpu_user_pct", "cpu_system_pct", "cpu_iowait_pct"):
            line = chart.locator(f"polyline.{key}")
            assert line.count() == 1 and len(line.get_attribute("points").split()) == 10
            assert box(line)["width"] > 200
        waits = chart.locator("rect.wait")
        assert waits.count() == 10 and all(box(waits.nth(i))["width"] > 5 for i in range(10))
        assert "input pipeline CPU-bound" in page.locator("#host .host-split").text_content()
        ARTIFACTS.mkdir(exist_ok=True)
        page.locator("#host").screenshot(path=str(ARTIFACTS / "report-host.png"))
    finally:
        page.close()
    assert errors == [] and refused == [] and dialogs == []


def test_page_writes_durations_as_python_does(browser, tmp_path):
    """The page's tooltips format a duration by the rules the data carries (units.format_rules), so a
    step of 3000 us reads "3.0 ms" on the page as in the Markdown, not a second spelling."""
    import traceanalyzer as ta
    from traceanalyzer.units import format_us

    analysis = ta.analyze(ROOT / "sample_traces" / "basic.json")
    durations = {s.duration_us for s in analysis.ranks[0].per_step}
    assert durations == {3000.0}
    out = tmp_path / "basic.html"
    out.write_text(render_html(analysis), encoding="utf-8")
    page, errors, refused, _ = open_report(browser, out)
    canvas = page.locator(".tl canvas").first
    canvas.scroll_into_view_if_needed()
    b = box(canvas)
    page.mouse.move(b["x"] + 124 + (b["width"] - 130) * 0.5, b["y"] + 20 + 4 + 9)  # the steps lane
    assert page.locator("#tip").is_visible()
    rows = dict(zip(page.locator("#tip .row .k").all_text_contents(), page.locator("#tip .row .v").all_text_contents()))
    assert rows["duration"] == format_us(3000.0) == "3.0 ms"
    assert not errors and not refused
    page.close()



def test_serving_iterations_chart_in_browser(browser, tmp_path):
    """A mixed serving capture (prefill, decode, mixed): the serving section's chart draws one bar per iteration at
    a real size, one line per phase; a phase name from a hostile saved report is text, never markup."""
    from test_serving_iterations import mixed_capture

    import traceanalyzer as ta
    from traceanalyzer.result.types import AnalysisData, from_data

    a = ta.analyze(mixed_capture().write(tmp_path / "mixed.json"))
    data = a.to_data()
    data["ranks"][0]["serving"]["phases"][0]["phase"] = HOSTILE[1]
    data["ranks"][0]["serving"]["iterations"][0]["phase"] = HOSTILE[1]
    for name, report in {"mixed": a, "hostile": from_data(AnalysisData, data)}.items():
        html_path = tmp_path / f"{name}.html"
        html_path.write_text(render_html(report), encoding="utf-8")
        page, errors, refused, dialogs = open_report(browser, html_path)
        try:
            chart = page.locator("#serving .servingchart svg")
            chart.scroll_into_view_if_needed()
            b = box(chart)
            assert b["width"] > 300 and b["height"] > 100
            assert chart.locator("g.it").count() == 5 and chart.locator("rect.it-busy").count() == 5
            assert box(chart.locator("rect.it-span").first)["height"] > 10
            lines = page.locator("#serving .serving-phases li").all_text_contents()
            assert len(lines) == 3 and lines[1].startswith("decode: 3 iterations, median 4.0 ms, GPU busy 75.0%")
            assert page.locator("a[href='#serving']").count() == 1
            if name == "hostile":
                assert page.locator("img").count() == 0 and lines[0].startswith(HOSTILE[1])
            ARTIFACTS.mkdir(exist_ok=True)
            page.locator("#serving").screenshot(path=str(ARTIFACTS / f"report-serving-{name}.png"))
        finally:
            page.close()
        assert errors == [] and refused == [] and dialogs == []


def test_serving_requests_in_browser(browser, tmp_path):
    """Request spans joined to a serving capture: the one line and the requests table show in the serving section;
    a request id from a hostile saved report is text, never markup."""
    from test_serving_requests import run

    from traceanalyzer.result.types import AnalysisData, from_data

    a = run(tmp_path)
    data = a.to_data()
    data["ranks"][0]["serving"]["requests"]["rows"][0]["request_id"] = HOSTILE[1]
    for name, report in {"requests": a, "hostile": from_data(AnalysisData, data)}.items():
        html_path = tmp_path / f"{name}.html"
        html_path.write_text(render_html(report), encoding="utf-8")
        page, errors, refused, dialogs = open_report(browser, html_path)
        try:
            line = page.locator("#serving .serving-requests")
            line.scroll_into_view_if_needed()
            assert line.text_content().startswith("requests: 4, median TTFT 25.0 ms (p90 41.0 ms), queue 5.0 ms")
            page.locator("#serving details summary", has_text="Requests").click()
            cells = page.locator("#serving details:has(summary:text('Requests')) tbody tr").first.locator("td")
            assert cells.count() == 8 and cells.nth(7).text_content() == "5 (#0–#4)"
            if name == "hostile":
                assert page.locator("img").count() == 0 and cells.nth(0).text_content() == HOSTILE[1]
        finally:
            page.close()
        assert errors == [] and refused == [] and dialogs == []
