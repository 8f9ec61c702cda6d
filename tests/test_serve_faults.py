"""Faults: the server or an analysis process killed (SIGKILL) in the middle of its work, an analysis
past its memory limit. After a restart every completed upload is there, every interrupted job finishes,
nothing is half-written; a job over its limit fails with a clear line and the service keeps serving.
On SQLite and on PostgreSQL."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time

import httpx
import pytest
from serve_helpers import BACKENDS, SAMPLES, Server, analysis_processes, db_url

from traceanalyzer.serve.settings import Settings
from traceanalyzer.serve.store import Store

pytestmark = pytest.mark.slow  # servers started and killed, real analyses

TRACE = SAMPLES / "launch_bound.json.gz"


def _files(folder) -> list:
    """The files under a folder of DATA (each process has its own subfolder in tmp/ and work/)."""
    return [p for p in folder.rglob("*") if p.is_file()]


def _store(server: Server) -> Store:
    return Store(Settings(server.data, server.db).database_url)


def _wait_running(server: Server, run_id: str) -> dict:
    store = _store(server)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            row = store.run(run_id)
            if row and row["status"] == "running" and row["pid"]:
                return row
            assert row and row["status"] in ("queued", "running"), row
            time.sleep(0.01)
        raise AssertionError("the job never started")
    finally:
        store.close()


@pytest.fixture(params=BACKENDS)
def backend_url(request):
    return db_url(request.param)


def test_a_server_killed_during_an_analysis_finishes_the_job_after_restart(tmp_path, backend_url):
    server = Server(tmp_path / "data", backend_url).start()
    try:
        token = server.token("demo")
        done = server.upload(token, SAMPLES / "basic.json").json()
        assert server.wait(done["id"])["status"] == "done"
        run = server.upload(token, TRACE).json()
        _wait_running(server, run["id"])
        server.kill9()  # the server and its analysis process
        assert not (server.data / "reports" / run["id"]).exists()
        server.start()
        finished = server.wait(run["id"])
        assert finished["status"] == "done" and finished["tries"] == 2, finished
        assert server.get(f"/runs/{run['id']}/report.html").status_code == 200
        assert server.wait(done["id"])["status"] == "done"  # the completed one is still there
        assert not list((server.data / "reports").glob("*.tmp*")) and not _files(server.data / "work")
    finally:
        server.stop()


def test_sigterm_to_the_process_group_is_a_graceful_stop(tmp_path):
    """systemd's default stop (SIGTERM to the whole group): the analysis under way is stopped and queued
    again with its try given back, and no analysis starts during the shutdown."""
    server = Server(tmp_path / "data", None, "--jobs", "1").start()
    try:
        token = server.token("demo")
        first = server.upload(token, TRACE).json()["id"]
        second = server.upload(token, SAMPLES / "basic.json").json()["id"]
        row = _wait_running(server, first)
        assert server.proc is not None
        before = {pid for pid, (_, spec) in analysis_processes().items() if spec.startswith(str(server.data))}
        assert row["pid"] in before
        os.killpg(server.proc.pid, signal.SIGTERM)
        started: set[int] = set()
        while server.proc.poll() is None:  # until it has exited: any analysis process it starts meanwhile
            started |= {pid for pid, (_, spec) in analysis_processes().items()
                        if spec.startswith(str(server.data))} - before
            time.sleep(0.01)
        assert server.proc.returncode in (0, -signal.SIGTERM) and started == set()  # uvicorn re-raises it
        deadline = time.monotonic() + 10
        while row["pid"] in analysis_processes() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert row["pid"] not in analysis_processes()
        store = _store(server)
        try:
            for run in (first, second):
                got = store.run(run)
                assert got["status"] == "queued" and got["tries"] == 0, got  # no try counted
        finally:
            store.close()
        assert "Traceback" not in server.log.read_text()
        server.proc = None
        server.start()
        for run in (first, second):
            finished = server.wait(run)
            assert finished["status"] == "done" and finished["tries"] == 1, finished
    finally:
        server.stop()


def test_a_killed_analysis_process_is_retried(tmp_path, backend_url):
    server = Server(tmp_path / "data", backend_url).start()
    try:
        token = server.token("demo")
        run = server.upload(token, TRACE).json()
        row = _wait_running(server, run["id"])
        os.kill(row["pid"], signal.SIGKILL)
        finished = server.wait(run["id"])
        assert finished["status"] == "done" and finished["tries"] == 2, finished
    finally:
        server.stop()


def test_a_server_killed_during_an_upload_keeps_nothing_of_it(tmp_path, backend_url):
    server = Server(tmp_path / "data", backend_url).start()
    token = server.token("demo")
    sent = threading.Event()

    def slow_body():
        for _ in range(4):
            yield b"{" + b" " * 65535
        sent.set()
        time.sleep(30)  # the server is killed meanwhile
        yield b"}"

    def send():
        try:
            httpx.post(f"{server.url}/api/v1/projects/demo/runs", content=slow_body(), timeout=60,
                       headers={"Authorization": f"Bearer {token}", "Content-Type": "application/octet-stream"})
        except httpx.HTTPError:
            pass

    t = threading.Thread(target=send, daemon=True)
    t.start()
    assert sent.wait(30)
    deadline = time.monotonic() + 10
    while not _files(server.data / "tmp") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _files(server.data / "tmp"), "the upload never reached the disk"
    server.kill9()
    server.start()
    try:
        assert _files(server.data / "tmp") == []
        assert [p.name for p in (server.data / "tmp").iterdir()] == [f"{socket.gethostname()}-{server.proc.pid}"]
        assert [p for p in (server.data / "traces").rglob("*") if p.is_file()] == []
        assert server.get("/api/v1/runs").json()["total"] == 0
    finally:
        server.stop()


def test_an_analysis_over_its_memory_limit_fails_clearly(tmp_path, backend_url):
    server = Server(tmp_path / "data", backend_url, "--job-memory", "64MiB").start()
    try:
        token = server.token("demo")
        run = server.upload(token, TRACE).json()
        failed = server.wait(run["id"])
        assert failed["status"] == "failed" and "--job-memory" in failed["error"], failed
        assert "\n" not in failed["error"]
        assert server.get("/api/v1/health").status_code == 200
    finally:
        server.stop()


def test_keep_traces_removes_old_traces_and_keeps_their_analyses(tmp_path, backend_url):
    server = Server(tmp_path / "data", backend_url).start()
    try:
        token = server.token("demo")
        old = server.upload(token, SAMPLES / "basic.json").json()["id"]
        new = server.upload(token, SAMPLES / "gpu_bound.json").json()["id"]
        assert server.wait(old)["status"] == server.wait(new)["status"] == "done"
    finally:
        server.stop()
    store = _store(server)
    from traceanalyzer.serve.store import runs

    with store.engine.begin() as c:  # uploaded two days ago
        c.execute(runs.update().where(runs.c.id == old).values(created_at=time.time() - 2 * 86400))
    store.close()
    server.extra = ("--keep-traces", "1d")
    server.start()
    try:
        deadline = time.monotonic() + 30
        while server.get(f"/runs/{old}/files/0").status_code != 410:
            assert time.monotonic() < deadline, "the old trace was not removed"
            time.sleep(0.2)
        assert server.get(f"/runs/{new}/files/0").status_code == 200
        assert server.get(f"/runs/{old}/report.html").status_code == 200
        assert server.get(f"/api/v1/runs/{old}").json()["verdict"]
    finally:
        server.stop()


def test_an_analysis_past_its_time_limit_fails_clearly(tmp_path, backend_url):
    from serve_helpers import kineto_trace

    server = Server(tmp_path / "data", backend_url, "--job-timeout", "1s").start()
    try:
        token = server.token("demo")
        run = server.upload(token, data=kineto_trace(30_000_000), name="big.json").json()  # seconds to analyse
        failed = server.wait(run["id"])
        assert failed["status"] == "failed" and "--job-timeout" in failed["error"], failed
        assert server.get("/api/v1/health").status_code == 200
        assert not _files(server.data / "work")
    finally:
        server.stop()


def test_analyses_on_a_dask_cluster(tmp_path):
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as c:
        server = Server(tmp_path / "data", None, "--scheduler", c.scheduler_address).start()
        try:
            token = server.token("dask")
            files = [("file", (p.name, p.read_bytes())) for p in (SAMPLES / "comm_rank0.json", SAMPLES / "comm_rank1.json")]
            r = httpx.post(f"{server.url}/api/v1/projects/dask/runs", files=files, timeout=60,
                           headers={"Authorization": f"Bearer {token}"})
            run = server.wait(r.json()["id"])
            assert run["status"] == "done", run
            assert c.scheduler.transition_counter > 0  # the per-rank tasks ran on the cluster
        finally:
            server.stop()
