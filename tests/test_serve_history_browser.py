"""The history page in headless Chromium: one chart per figure with a point per run, the change point
marked between the two runs where the DataLoader wait rose, a click on a point opens its run, and with
"Compare" ticked two clicks open the compare page of the two runs (the earlier one as base). No console
error (a Content-Security-Policy violation is one), no request outside the service. A screenshot of the
page goes to artifacts/serve-history.png.

The service's database is filled before it starts: 16 runs of one branch, each with a saved analysis
(one of two traces made here, before and after the change) and its figures, so no analysis has to run."""

from __future__ import annotations

import re
import shutil

import numpy as np
import pytest
from history_builder import training_trace
from serve_helpers import ROOT, Server
from test_browser_report import browser as browser  # noqa: F401  (the fixture: a real Chromium)
from test_serve_browser import open_page

pytestmark = pytest.mark.slow  # a real browser and a real server

RUNS, CHANGE_AT = 16, 8


@pytest.fixture(scope="module")
def seeded(tmp_path_factory):
    import sqlalchemy as sa

    import traceanalyzer as ta
    from traceanalyzer.serve.history import metrics_of
    from traceanalyzer.serve.settings import Settings
    from traceanalyzer.serve.store import Store, StoredFile, jobs

    folder = tmp_path_factory.mktemp("history-browser")
    data = folder / "data"
    settings = Settings(data)
    settings.make_dirs()
    saved = {}
    for side, wait in (("fast", 500.0), ("slow", 4000.0)):
        trace = folder / f"{side}.json"
        trace.write_bytes(training_trace(wait, seed=len(side)))
        saved[side] = folder / f"{side}.report.json"
        ta.analyze(trace).save(saved[side])
        # the run page's frame: a stand-in page (the report's own rendering is tested elsewhere)
        (folder / f"{side}.report.html").write_text(f"<!doctype html><title>{side}</title><p>{side} run</p>")
    figures = {side: metrics_of(ta.load(path)) for side, path in saved.items()}
    store = Store(settings.database_url)
    store.migrate()
    rng = np.random.default_rng(3)
    ids = []
    for i in range(RUNS):
        side = "fast" if i < CHANGE_AT else "slow"
        run_id = store.create_run("web", "main", f"{i:02d}" + "cd" * 19, [StoredFile("ab" * 32, "trace.json", 1, "file")])
        (settings.reports / run_id).mkdir()
        shutil.copy(saved[side], settings.reports / run_id / "report.json")
        shutil.copy(folder / f"{side}.report.html", settings.reports / run_id / "report.html")
        metrics = {k: None if v is None else v * (1 + 0.01 * rng.standard_normal()) for k, v in figures[side].items()}
        with store.engine.begin() as c:
            c.execute(jobs.update().where(jobs.c.run_id == run_id).values(status="done", finished_at=1.0))
        # the run's figures are stored once, with its other metrics (run_metrics)
        store.finish(store_job(store, run_id), run_id, None,
                     {"verdict": "gpu_bound" if side == "fast" else "input_bound"}, metrics)
        with store.engine.begin() as c:  # one second apart: the upload order is the commit order
            c.execute(sa.text("UPDATE runs SET created_at = :t WHERE id = :id"), {"t": 1.7e9 + i, "id": run_id})
        ids.append(run_id)
    store.close()
    server = Server(data, None).start()
    yield server, ids
    server.stop()


def store_job(store, run_id: str) -> int:
    import sqlalchemy as sa

    from traceanalyzer.serve.store import jobs

    with store.engine.connect() as c:
        return int(c.execute(sa.select(jobs.c.id).where(jobs.c.run_id == run_id)).scalar_one())


def test_points_marks_and_clicks(browser, seeded):
    from playwright.sync_api import expect

    server, ids = seeded
    page, errors, refused = open_page(browser, server)
    try:
        page.goto(f"{server.url}/projects/web/history?branch=main")
        chart = page.locator("#chart-step_time_ms")
        expect(chart.locator("a.pt")).to_have_count(RUNS)
        marks = chart.locator("line.cp")
        expect(marks).to_have_count(1)
        assert marks.first.get_attribute("data-run") == ids[CHANGE_AT]
        xs = [float(c.get_attribute("cx")) for c in chart.locator("a.pt circle").all()]
        assert xs == sorted(xs) and xs[CHANGE_AT - 1] < float(marks.first.get_attribute("x1")) < xs[CHANGE_AT]
        for figure in ("dataloader_wait", "verdict"):
            expect(page.locator(f"#chart-{figure} line.cp")).to_have_count(1)
        expect(page.locator("#change-points")).to_contain_text("regressed")  # the attribution's verdict
        (ROOT / "artifacts").mkdir(exist_ok=True)
        page.screenshot(path=str(ROOT / "artifacts" / "serve-history.png"), full_page=True)

        chart.locator(f'a.pt[data-run="{ids[2]}"]').click()
        page.wait_for_url(re.compile(rf"/runs/{ids[2]}$"))
        page.go_back()
        page.check("#compare-mode")
        page.locator(f'#chart-step_time_ms a.pt[data-run="{ids[11]}"]').click()
        expect(page.locator("#picked")).to_contain_text(ids[11])
        page.locator(f'#chart-dataloader_wait a.pt[data-run="{ids[3]}"]').click()  # any chart: the same runs
        page.wait_for_url(re.compile(rf"/compare\?base={ids[3]}&head={ids[11]}$"))
        expect(page.frame_locator("iframe#diff").locator("body")).to_contain_text("regressed", timeout=30_000)
    finally:
        page.close()
    assert errors == [] and refused == []
