"""`GET /metrics`: the service's figures in Prometheus' text format, read back with Prometheus' own parser
(prometheus_client, a test dependency only): the queue, jobs by status, the analysis-time histogram, uploads
and their bytes, and leases that expired; behind a token in private mode."""

from __future__ import annotations

import time

import pytest
from serve_helpers import SAMPLES, Server

from traceanalyzer.serve.store import Store, StoredFile, jobs

parser = pytest.importorskip("prometheus_client.parser")


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """(name, labels) -> value, through Prometheus' parser (it raises on a malformed exposition)."""
    out = {}
    for family in parser.text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_the_exposition_counts_uploads_jobs_and_expired_leases(tmp_path):
    from traceanalyzer.serve.metrics import ANALYSIS_BUCKETS_S, exposition

    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    store.migrate()
    try:
        for i, size in enumerate((1000, 2500, 40)):
            store.create_run("m", None, None, [StoredFile(f"{i:064x}", f"t{i}.json", size, "file")])
        dead = store.claim("host:1:a", lease_s=0.0)  # a worker that dies at once: its lease runs out
        assert dead is not None
        time.sleep(0.01)
        taken = store.claim("host:2:b", lease_s=60.0)  # taken again: one expiry
        assert taken is not None and taken.id == dead.id and taken.tries == 2
        assert store.finish(taken, taken.run_id, None)
        with store.engine.begin() as c:  # its analysis took 7 s
            c.execute(jobs.update().where(jobs.c.id == taken.id).values(started_at=100.0, finished_at=107.0))
        got = samples(exposition(store))
    finally:
        store.close()
    assert got[("traceanalyzer_uploads_total", ())] == 3
    assert got[("traceanalyzer_upload_bytes_total", ())] == 3540
    assert got[("traceanalyzer_lease_expiries_total", ())] == 1
    assert got[("traceanalyzer_queue_depth", ())] == 2
    assert {k[1][0][1]: v for k, v in got.items() if k[0] == "traceanalyzer_jobs"} == {
        "queued": 2, "running": 0, "done": 1, "failed": 0, "canceled": 0}
    assert got[("traceanalyzer_analysis_seconds_count", ())] == 1
    assert got[("traceanalyzer_analysis_seconds_sum", ())] == 7.0
    buckets = {float(k[1][0][1]): v for k, v in got.items() if k[0] == "traceanalyzer_analysis_seconds_bucket"}
    assert buckets == {**{b: float(b >= 7.0) for b in ANALYSIS_BUCKETS_S}, float("inf"): 1.0}


@pytest.mark.slow
def test_a_private_server_is_scraped_with_a_token(tmp_path):
    server = Server(tmp_path / "data", None, "--private").start()
    try:
        assert server.get("/metrics").status_code == 401
        token = server.token("scraped")
        reader = server.token("scraped", read_only=True)
        traces = [SAMPLES / "basic.json", SAMPLES / "input_bound.json"]
        ids = [server.upload(token, t, project="scraped").json()["id"] for t in traces]
        auth = {"Authorization": f"Bearer {reader}"}
        deadline = time.monotonic() + 120
        while {server.get(f"/api/v1/runs/{i}", headers=auth).json()["status"] for i in ids} != {"done"}:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        r = server.get("/metrics", headers=auth)
    finally:
        server.stop()
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain; version=0.0.4")
    got = samples(r.text)
    assert got[("traceanalyzer_uploads_total", ())] == 2
    assert got[("traceanalyzer_upload_bytes_total", ())] == sum(t.stat().st_size for t in traces)
    assert got[("traceanalyzer_queue_depth", ())] == 0
    assert got[("traceanalyzer_jobs", (("status", "done"),))] == 2
    assert got[("traceanalyzer_analysis_seconds_count", ())] == 2
    assert 0 < got[("traceanalyzer_analysis_seconds_sum", ())] < 120
    assert got[("traceanalyzer_analysis_seconds_bucket", (("le", "+Inf"),))] == 2
    assert got[("traceanalyzer_lease_expiries_total", ())] == 0
