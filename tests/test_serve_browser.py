"""The service in headless Chromium: upload through the page, see the run go from queued to done and
the stored report render in its sandboxed frame (its script ran: the timeline is drawn); compare two
runs. No console error (a Content-Security-Policy violation is one), no request outside the service.
A screenshot of the run page goes to artifacts/.
"""

from __future__ import annotations

import re

import pytest
from serve_helpers import ROOT, SAMPLES, Server
from test_browser_report import browser as browser  # noqa: F401  (the fixture: a real Chromium)

pytestmark = pytest.mark.slow  # a real browser and a real server


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("serve-browser") / "data", None).start()
    yield s
    s.stop()


def open_page(browser, server: Server):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    refused: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))

    def route(r):
        if r.request.url.startswith(server.url + "/") or r.request.url.startswith(("data:", "blob:")):
            r.continue_()
        else:
            refused.append(r.request.url)
            r.abort()

    page.context.route("**/*", route)
    return page, errors, refused


def test_upload_through_the_page_and_see_the_report(browser, server):
    from playwright.sync_api import expect

    token = server.token("web")
    page, errors, refused = open_page(browser, server)
    try:
        page.goto(f"{server.url}/upload")
        page.fill("#project", "web")
        page.fill("#branch", "main")
        page.fill("#commit", "cafe1234")
        page.fill("#token", token)
        page.set_input_files("#file", str(SAMPLES / "input_bound.json"))
        page.click("#send")
        page.wait_for_url(re.compile(r"/runs/[0-9a-f]{12}$"), timeout=30_000)
        run_id = page.url.rsplit("/", 1)[1]
        expect(page.locator("#run-status")).to_have_text("done", timeout=60_000)  # the page reloads itself
        frame = page.frame_locator("iframe#report")
        expect(frame.locator("#verdict")).to_contain_text("Input bound", timeout=30_000)
        canvas = frame.locator(".tl canvas").first
        expect(canvas).to_be_visible()
        assert canvas.bounding_box()["width"] > 300  # drawn by the report's own script, allowed by its hash
        run = server.get(f"/api/v1/runs/{run_id}").json()
        assert run["project"] == "web" and run["branch"] == "main" and run["commit"] == "cafe1234"
        (ROOT / "artifacts").mkdir(exist_ok=True)
        page.screenshot(path=str(ROOT / "artifacts" / "serve-run.png"))

        other = server.upload(token, SAMPLES / "gpu_bound.json", project="web").json()["id"]
        assert server.wait(other)["status"] == "done"
        page.goto(f"{server.url}/compare?base={run_id}&head={other}")
        expect(page.frame_locator("iframe#diff").locator("body")).to_contain_text("gpu_bound", ignore_case=True,
                                                                                  timeout=30_000)
        page.screenshot(path=str(ROOT / "artifacts" / "serve-compare.png"))
        page.goto(f"{server.url}/runs")
        expect(page.locator("table.runs")).to_contain_text(run_id)
        page.screenshot(path=str(ROOT / "artifacts" / "serve-runs.png"))
    finally:
        page.close()
    assert errors == [] and refused == []


def test_a_dropped_file_refused_says_why_on_the_page(browser, server):
    from playwright.sync_api import expect

    page, errors, refused = open_page(browser, server)
    try:
        page.goto(f"{server.url}/upload")
        page.fill("#project", "web")
        page.fill("#token", "ta_wrong")
        page.evaluate("""text => {  // a file dropped on the drop zone
            const dt = new DataTransfer();
            dt.items.add(new File([text], "dropped.json", {type: "application/json"}));
            document.getElementById("drop").dispatchEvent(new DragEvent("drop", {dataTransfer: dt, bubbles: true,
                                                                                cancelable: true}));
        }""", (SAMPLES / "basic.json").read_text())
        expect(page.locator("#chosen")).to_contain_text("dropped.json")
        page.click("#send")
        expect(page.locator("#message")).to_contain_text("unknown token", timeout=30_000)
        (ROOT / "artifacts").mkdir(exist_ok=True)
        page.screenshot(path=str(ROOT / "artifacts" / "serve-upload.png"))
    finally:
        page.close()
    # the refused request itself is logged by Chromium as a failed resource load (401): not a page error
    assert [e for e in errors if "401" not in e] == [] and refused == []


def test_log_in_search_by_commit_see_the_uploader_and_a_revoked_token_logged_out(browser, server):
    from playwright.sync_api import expect

    from traceanalyzer.serve.settings import Settings
    from traceanalyzer.serve.store import Store

    store = Store(Settings(server.data, None).database_url)
    try:
        token = store.create_token("people", False, name="nightly ci")
        token_id = store.list_tokens("people")[-1]["id"]
    finally:
        store.close()
    ids = [server.upload(token, SAMPLES / name, project="people", commit=commit).json()["id"]
           for name, commit in (("basic.json", "feed0001"), ("gpu_bound.json", "beef0002"))]
    for run_id in ids:
        server.wait(run_id)
    page, errors, refused = open_page(browser, server)
    try:
        page.goto(f"{server.url}/login")
        expect(page.locator("nav")).to_contain_text("Log in")
        page.fill("input[name=token]", token)
        page.locator("main form button[type=submit]").click()
        page.wait_for_url(re.compile(r"/runs$"))
        nav = page.locator("nav")
        expect(nav).to_contain_text("Log out")
        expect(nav).not_to_contain_text("Log in")
        expect(nav).to_contain_text("people")
        page.fill("input[name=commit]", "beef")
        page.locator("form.filters button[type=submit]").click()
        expect(page.locator("table.runs")).to_contain_text(ids[1])
        expect(page.locator("table.runs")).not_to_contain_text(ids[0])
        page.click(f"text={ids[1]}")
        expect(page.locator("dl.facts")).to_contain_text(f"by nightly ci (token #{token_id})")
        store = Store(Settings(server.data, None).database_url)
        try:
            assert store.revoke_token(token_id)
        finally:
            store.close()
        page.goto(f"{server.url}/projects")  # the revoked token's cookie: logged out at once
        assert page.locator("nav").inner_text().count("Log in") == 1
    finally:
        page.close()
    assert [e for e in errors if "401" not in e] == [] and refused == []


# Stands in for ui.perfetto.dev (the tests reach no third party): answers PING with PONG, as the Perfetto UI
# does, and keeps what the run page then posts.
FAKE_PERFETTO = """<!doctype html><title>Perfetto UI (stand-in)</title><script>
window.got = null;
window.addEventListener("message", function (e) {
  if (e.data === "PING") { e.source.postMessage("PONG", "*"); return; }
  if (e.data && e.data.perfetto) {
    const p = e.data.perfetto;
    window.got = {origin: e.origin, keys: Object.keys(p).sort(), title: p.title, url: p.url || null, fileName: p.fileName,
                  isBuffer: p.buffer instanceof ArrayBuffer, bytes: p.buffer.byteLength,
                  head: new TextDecoder().decode(new Uint8Array(p.buffer).slice(0, 64))};
  }
});
</script>"""


def test_the_report_is_shown_whole_and_its_trace_opens_in_perfetto(browser, server):
    from playwright.sync_api import expect

    token = server.token("tall")
    trace = SAMPLES / "input_bound.json"
    run_id = server.upload(token, trace, project="tall").json()["id"]
    assert server.wait(run_id)["status"] == "done"
    page, errors, refused = open_page(browser, server)
    served: list[str] = []

    def perfetto(r):
        served.append(r.request.url)
        r.fulfill(status=200, content_type="text/html", body=FAKE_PERFETTO)

    page.context.route(re.compile(r"^https://ui\.perfetto\.dev/"), perfetto)  # tried before open_page's route
    try:
        page.goto(f"{server.url}/runs/{run_id}")
        frame = page.locator("iframe#report")
        expect(frame).to_have_attribute("data-sized", "1", timeout=30_000)
        inner = next(f for f in page.frames if f.url.endswith("/report.html"))
        content = inner.evaluate("document.documentElement.getBoundingClientRect().height")
        height = frame.bounding_box()["height"]
        assert height > 900 and abs(height - (content + 2)) <= 4, (height, content)  # the whole report, no inner scroll
        assert inner.evaluate("document.scrollingElement.scrollHeight <= window.innerHeight + 1")
        page.evaluate("window.postMessage({traceanalyzerReportHeight: 120}, '*')")  # not from the report: ignored
        page.wait_for_timeout(300)
        assert frame.bounding_box()["height"] == height

        expect(page.locator("#perfetto-note")).to_contain_text("sends the trace to no third party")
        with page.expect_popup() as opened:
            page.locator("button.open-perfetto").click()
        ui = opened.value
        ui.wait_for_function("window.got !== null", timeout=30_000)
        got = ui.evaluate("window.got")
        data = trace.read_bytes()
        # no link back: without --public-url the service hands Perfetto no address of its own
        assert got == {"origin": server.url, "keys": ["buffer", "fileName", "title"],
                       "title": f"tall · run {run_id} · input_bound.json", "url": None,
                       "fileName": "input_bound.json", "isBuffer": True, "bytes": len(data),
                       "head": data[:64].decode()}
        expect(page.locator("#perfetto-message")).to_contain_text("Opened in the Perfetto UI")
        assert served and all(u.startswith("https://ui.perfetto.dev/") for u in served)
        (ROOT / "artifacts").mkdir(exist_ok=True)
        page.screenshot(path=str(ROOT / "artifacts" / "serve-run-full.png"), full_page=True)
    finally:
        page.close()
    assert errors == [] and refused == []
