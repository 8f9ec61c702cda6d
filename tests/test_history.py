"""History in the service: each run's figures stored when its analysis is done, a series per figure over a
branch's runs (upload order, or commit order when every run gives one), change points with their commit
range, before/after and attribution, and the comparison of a run with a branch's last runs (the route
`traceanalyzer upload` gates on). The fast tests build histories from rows made here; the slow ones drive
a real server with traces whose DataLoader wait jumps at a known commit."""

from __future__ import annotations

import numpy as np
import pytest
from history_builder import training_trace
from serve_helpers import Server

from traceanalyzer.serve import history as hist


def rows(values: list[float], verdicts: list[str], order: list[float] | None = None) -> list[dict]:
    return [{"id": f"{i:012x}", "commit": f"c{i:02d}", "created_at": 1000.0 + i, "verdict": v,
             "commit_order": None if order is None else order[i],
             "metrics": {"step_time_ms": x, "gpu_idle": 0.1, "samples_per_s": None}}
            for i, (x, v) in enumerate(zip(values, verdicts, strict=True))]


def step_series(n: int = 20, at: int = 12, seed: int = 4) -> list[float]:
    x = 10.0 * (1 + 0.02 * np.random.default_rng(seed).standard_normal(n))
    x[at:] *= 1.3
    return [float(v) for v in x]


def test_a_history_has_every_series_in_order_and_the_change_points_of_the_step_time():
    values = step_series()
    verdicts = ["gpu_bound"] * 12 + ["input_bound"] * 8
    h = hist.build(rows(values, verdicts), None, "http://x", "demo", "main")
    assert h["order"] == "upload" and h["runs"] == 20
    assert set(h["series"]) == {*hist.METRIC_KEYS, "verdict"}
    st = h["series"]["step_time_ms"]["points"]
    assert [p["commit"] for p in st] == [f"c{i:02d}" for i in range(20)]
    assert [p["value"] for p in st] == values
    assert h["series"]["samples_per_s"]["points"] == []  # no run has it
    assert [p["value"] for p in h["series"]["verdict"]["points"]] == verdicts
    by_metric = {c["metric"]: c for c in h["change_points"]}
    assert set(by_metric) == {"step_time_ms", "verdict"}  # gpu_idle is flat (the same in every run)
    cp = by_metric["step_time_ms"]
    assert cp["commit"] == "c12" and cp["previous_commit"] == "c11" and cp["run"] == f"{12:012x}"
    assert cp["before"] == pytest.approx(float(np.median(values[:12])), rel=1e-5)
    assert cp["after"] == pytest.approx(float(np.median(values[12:])), rel=1e-5)
    assert cp["change"] == pytest.approx(0.3, abs=0.03) and cp["direction"] == "worse"
    assert cp["compare"] == f"http://x/compare?base={11:012x}&head={12:012x}"
    v = by_metric["verdict"]
    assert (v["commit"], v["before"], v["after"]) == ("c12", "gpu_bound", "input_bound")


def test_commit_order_is_used_when_every_run_gives_one():
    values = step_series()
    order = [float(19 - i) for i in range(20)]  # uploaded newest commit first
    h = hist.build(rows(values, ["gpu_bound"] * 20, order), None, "", "demo", "main")
    assert h["order"] == "commit"
    assert [p["commit"] for p in h["series"]["step_time_ms"]["points"]] == [f"c{i:02d}" for i in range(19, -1, -1)]
    assert [c["commit"] for c in h["change_points"]] == ["c11"]  # the first commit of the old level, read backwards
    mixed = rows(values, ["gpu_bound"] * 20, order)
    mixed[3]["commit_order"] = None
    assert hist.build(mixed, None, "", "demo", "main")["order"] == "upload"


def test_a_verdict_seen_once_is_not_a_change():
    verdicts = ["gpu_bound"] * 6 + ["input_bound"] + ["gpu_bound"] * 6 + ["input_bound"] * 2
    assert hist._verdict_changes(verdicts) == [(13, "gpu_bound", "input_bound")]
    assert hist._verdict_changes(["gpu_bound"] * 5 + ["input_bound"]) == []  # the last run alone: not yet
    flat = [10.0 + 0.01 * (i % 3) for i in range(25)]
    assert hist.build(rows(flat, ["gpu_bound"] * 25), None, "", "p", "b")["change_points"] == []


def test_the_charts_put_a_point_per_run_and_the_mark_between_the_two_runs_of_the_change():
    h = hist.build(rows(step_series(), ["gpu_bound"] * 20), None, "", "demo", "main")
    charts = {c["key"]: c for c in hist.charts(h)}
    st = charts["step_time_ms"]
    assert len(st["points"]) == 20 and [m["run"] for m in st["marks"]] == [f"{12:012x}"]
    xs = [p["x"] for p in st["points"]]
    assert xs[11] < st["marks"][0]["x"] < xs[12]
    ys = [p["y"] for p in st["points"]]
    assert max(ys[12:]) < min(ys[:12])  # slower is higher on the chart (smaller y)
    assert st["ticks"][0]["text"].endswith(" ms") and charts["gpu_idle"]["marks"] == []


# --- a real server ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("history") / "data", None, "--jobs", "2").start()
    yield s
    s.stop()


REGRESSION_AT = 8  # the DataLoader wait goes from 0.5 ms to 4 ms a step from this commit on


@pytest.fixture(scope="module")
def uploaded(server):
    token = server.token("demo")
    ids = []
    for i in range(16):
        wait = 500.0 if i < REGRESSION_AT else 4000.0
        r = server.upload(token, data=training_trace(wait, seed=i), name="trace.json", branch="main",
                          commit=f"{i:02d}" + "ab" * 19)
        assert r.status_code == 201, r.text
        ids.append(r.json()["id"])
    for run_id in ids:
        assert server.wait(run_id)["status"] == "done"
    return token, ids


@pytest.mark.slow
def test_the_history_of_a_branch_finds_the_commit_where_the_dataloader_wait_rose(server, uploaded):
    token, ids = uploaded
    r = server.get("/api/v1/projects/demo/history", params={"branch": "main"})
    assert r.status_code == 200, r.text
    h = r.json()
    st = h["series"]["step_time_ms"]["points"]
    assert [p["run"] for p in st] == ids and [p["commit"][:2] for p in st] == [f"{i:02d}" for i in range(16)]
    assert all(9.0 < p["value"] < 10.5 for p in st[:REGRESSION_AT]) and all(12.5 < p["value"] < 14 for p in st[REGRESSION_AT:])
    dl = h["series"]["dataloader_wait"]["points"]
    assert dl[0]["value"] == pytest.approx(0.05, abs=0.01) and dl[-1]["value"] == pytest.approx(0.31, abs=0.02)
    by_metric = {c["metric"]: c for c in h["change_points"]}
    assert {"step_time_ms", "dataloader_wait", "gpu_idle", "verdict"} <= set(by_metric)
    for metric in ("step_time_ms", "dataloader_wait", "verdict"):
        cp = by_metric[metric]
        assert cp["run"] == ids[REGRESSION_AT] and cp["previous_run"] == ids[REGRESSION_AT - 1], cp
        assert cp["commit"].startswith("08") and cp["previous_commit"].startswith("07")
    st_cp = by_metric["step_time_ms"]
    assert st_cp["before"] == pytest.approx(9.6, abs=0.3) and st_cp["after"] == pytest.approx(13.1, abs=0.3)
    assert (by_metric["verdict"]["before"], by_metric["verdict"]["after"]) == ("gpu_bound", "input_bound")
    attribution = st_cp["attribution"]
    assert attribution["change_verdict"] == "regressed", attribution
    top = attribution["parts"][0]
    assert top["cause"] == "idle:dataloader" and top["delta_per_step_us"] == pytest.approx(3500, rel=0.1)
    assert server.get(st_cp["compare"].replace(server.url, "")).status_code == 200


@pytest.mark.slow
def test_the_history_page_and_who_may_read_it(server, uploaded):
    token, ids = uploaded
    page = server.get("/projects/demo/history", params={"branch": "main"})
    # seven figures have points (no batch size and no memory events here: samples/s and peak memory have none)
    assert page.status_code == 200 and page.text.count('class="pt"') == 16 * 7
    assert page.text.count("No run of this branch has this figure") == 2
    assert f'data-run="{ids[REGRESSION_AT]}"' in page.text and 'class="cp"' in page.text
    assert "/static/history.js" in page.text and server.get("/static/history.js").status_code == 200
    assert "/projects/demo/history" in server.get("/projects").text
    other = server.token("other")
    for path in ("/api/v1/projects/demo/history", "/projects/demo/history"):
        assert server.get(path, headers={"Authorization": f"Bearer {other}"}).status_code == 404
        assert server.get(path, headers={"Authorization": "Bearer ta_nope"}).status_code == 401
    assert server.get("/api/v1/projects/nope/history").status_code == 404
    assert server.get("/api/v1/projects/demo/history", params={"runs": "x"}).status_code == 400
    hostile = server.get("/projects/demo/history", params={"branch": "<script>alert(1)</script>"})
    assert hostile.status_code == 200 and "<script>alert" not in hostile.text and "&lt;script&gt;" in hostile.text


@pytest.mark.slow
def test_a_run_compared_with_the_last_runs_of_a_branch_with_gates(server, uploaded):
    token, ids = uploaded
    r = server.get(f"/api/v1/runs/{ids[REGRESSION_AT]}/compare",
                   params=[("branch", "main"), ("last", "3"), ("fail_on", "step_time:+5%")])
    assert r.status_code == 200, r.text
    c = r.json()
    # the latest run before it on its own branch; the runs before that are other commits, never its setting
    assert c["bases"] == [ids[REGRESSION_AT - 1]]
    assert c["change_verdict"] == "regressed" and c["failed"].startswith("gate failed: step_time:+5%")
    assert [g["passed"] for g in c["gates"]] == [False]
    assert c["comment"].startswith("<!-- traceanalyzer-diff -->")
    same = server.get(f"/api/v1/runs/{ids[-1]}/compare", params=[("branch", "main"), ("fail_on", "step_time:+5%")])
    assert same.json()["failed"] is None and same.json()["bases"] == [ids[-2]]
    assert server.get(f"/api/v1/runs/{ids[0]}/compare", params={"branch": "main"}).json()["bases"] == []
    assert server.get(f"/api/v1/runs/{ids[0]}/compare", params={"fail_on": "nonsense"}).status_code == 400


# --- the store: figures written with the job, read back per branch, filled in for older runs ------------
@pytest.mark.slow
@pytest.mark.parametrize("backend", __import__("serve_helpers").BACKENDS)
def test_the_store_keeps_each_runs_figures_and_fills_in_older_runs(backend, tmp_path):
    import sqlalchemy as sa
    from serve_helpers import SAMPLES, db_url

    import traceanalyzer as ta
    from traceanalyzer.serve.jobs import backfill_metrics
    from traceanalyzer.serve.settings import Settings
    from traceanalyzer.serve.store import Store, StoredFile, jobs, run_metrics

    settings = Settings(tmp_path / "data", db_url(backend))
    settings.make_dirs()
    store = Store(settings.database_url)
    store.migrate()
    try:
        f = [StoredFile("ab" * 32, "t.json", 1, "file")]
        ids = [store.create_run("p", "main", f"c{i}", f, commit_order=float(10 - i)) for i in range(3)]
        other = store.create_run("p", "feature", "cx", f)
        store.create_run("p", "main", "queued", f)  # not analysed: not in the history
        for n, run_id in enumerate([*ids, other]):
            job = store.claim()
            assert job is not None and job[1] == run_id
            metrics = None if n == 1 else {"step_time_ms": 10.0 + n, "samples_per_s": None}
            store.finish(job[0], run_id, None, {"verdict": "gpu_bound"}, metrics)
        rows = store.history("p", "main", 10)
        assert [r["id"] for r in rows] == ids and [r["commit_order"] for r in rows] == [10.0, 9.0, 8.0]
        assert rows[0]["metrics"] == {"step_time_ms": 10.0, "samples_per_s": None} and rows[1]["metrics"] == {}
        assert [r["id"] for r in store.history("p", "main", 2)] == ids[1:]  # the newest 2, oldest first
        assert [r["id"] for r in store.history("p", "main", 10, exclude=ids[2])] == ids[:2]
        assert store.branches("p") == ["feature", "main"]
        assert store.runs_without_metrics() == [ids[1]]
        (settings.reports / ids[1]).mkdir(parents=True)
        ta.analyze(SAMPLES / "input_bound.json").save(settings.reports / ids[1] / "report.json")
        assert backfill_metrics(settings, store) == 1 and store.runs_without_metrics() == []
        assert store.history("p", "main", 10)[1]["metrics"]["step_time_ms"] == pytest.approx(10.0)
        store.delete_run(ids[0])
        with store.engine.connect() as c:
            assert c.execute(sa.select(sa.func.count()).select_from(run_metrics)
                             .where(run_metrics.c.run_id == ids[0])).scalar_one() == 0
            assert c.execute(sa.select(sa.func.count()).select_from(jobs)).scalar_one() == 4
    finally:
        store.close()
