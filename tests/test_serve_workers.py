"""Several servers and workers on one PostgreSQL database and one DATA folder: jobs are claimed with
leases, a worker killed with -9 loses its jobs to the others once its lease expires (its analysis process
dies with it), and every run is analysed to the end exactly once: never two analysis processes for one
job at the same time, none lost, none stuck. Also: a run deleted while it is analysed (canceled), a
delete racing a re-upload of the same content, a database outage (503 + Retry-After, the health says
what is down, jobs finished once it is back), slow-header connections, and the leases on SQLite."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from serve_helpers import SAMPLES, Postgres, Server, Worker, analysis_processes, kineto_trace, postgres

from traceanalyzer.serve.store import Store, StoredFile, jobs

pytestmark = pytest.mark.slow  # servers, workers and a PostgreSQL server started and killed


def _job_of(spec: str) -> int:
    return int(Path(spec).parent.name.split("-")[0])


class Watch:
    """Polls the analysis processes of one service's DATA folder (other tests may run services beside this
    one, with job ids of their own): fails the test if two run for one job at the same time."""

    def __init__(self, data: Path) -> None:
        self.data = str(data)
        self.twice: list[tuple[int, list[int]]] = []
        self.seen: dict[int, set[int]] = {}  # job id -> analysis pids
        self.parent: dict[int, int] = {}  # analysis pid -> its parent
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while not self.stop.is_set():
            by_job: dict[int, list[int]] = {}
            for pid, (ppid, spec) in analysis_processes().items():
                if spec and spec.startswith(self.data):
                    by_job.setdefault(_job_of(spec), []).append(pid)
                    self.seen.setdefault(_job_of(spec), set()).add(pid)
                    self.parent[pid] = ppid
            self.twice += [(j, p) for j, p in by_job.items() if len(p) > 1]
            time.sleep(0.02)

    def close(self) -> None:
        self.stop.set()
        self.thread.join()


def test_servers_and_workers_share_one_database_and_storage_and_survive_a_worker_killed(tmp_path):
    db = postgres().new_database()
    data = tmp_path / "data"
    lease = ("--lease", "3s")
    a = Server(data, db, "--jobs", "2", *lease, name="a").start()
    b = Server(data, db, "--jobs", "1", *lease, name="b").start()
    web = Server(data, db, "--jobs", "0", name="web").start()  # a web server alone
    worker = Worker(data, db, "--jobs", "2", *lease).start()
    watch = Watch(data)
    try:
        token = a.token("multi")
        body = kineto_trace(3_000_000)
        ids = []
        for i in range(24):  # each upload its own content (trailing spaces), spread over the three servers
            server = (a, b, web)[i % 3]
            r = server.upload(token, data=body + b" " * i, name=f"t{i}.json", project="multi")
            assert r.status_code == 201, r.text
            ids.append(r.json()["id"])
        # kill -9 the worker (its process alone) while it analyses a job
        deadline = time.monotonic() + 60
        while not any(ppid == worker.proc.pid for ppid, _ in analysis_processes().values()):
            assert time.monotonic() < deadline, "the worker never took a job"
            time.sleep(0.02)
        held = [pid for pid, (ppid, _) in analysis_processes().items() if ppid == worker.proc.pid]
        worker_pid = worker.proc.pid
        os.kill(worker_pid, signal.SIGKILL)
        worker.proc.wait(timeout=10)
        time.sleep(3)
        assert not set(held) & set(analysis_processes()), "an analysis process outlived its killed worker"
        runs = {run_id: web.wait(run_id, timeout=300) for run_id in ids}
    finally:
        watch.close()
        for s in (a, b, web):
            s.stop()
        worker.stop()
    assert watch.twice == [], f"two analysis processes for one job at once: {watch.twice}"
    assert {r["status"] for r in runs.values()} == {"done"}, [r for r in runs.values() if r["status"] != "done"]
    store = Store(db)
    try:
        with store.engine.connect() as c:
            rows = {r.run_id: r for r in c.execute(jobs.select())}
    finally:
        store.close()
    retried = [run_id for run_id, row in rows.items() if row.tries > 1]
    assert 1 <= len(retried) <= 2, {k: r.tries for k, r in rows.items()}  # the killed worker's jobs, tried again
    owners = {row.worker_id.split(":")[1] for row in rows.values()}
    assert len(owners) >= 2, owners  # the jobs were spread over the workers
    assert all(r["verdict"] for r in runs.values())
    for run_id in ids:
        assert (data / "reports" / run_id / "report.json").is_file()
    killed = f"-{worker_pid}"  # the killed worker's folder stays until a process of this host cleans it
    assert not [p for p in (data / "work").rglob("*") if p.is_file() and not p.relative_to(data / "work").parts[0]
                .endswith(killed)]


def test_a_run_deleted_while_analysed_is_canceled_and_removed(tmp_path):
    server = Server(tmp_path / "data", None, "--lease", "3s").start()  # a heartbeat every second
    try:
        token = server.token("demo")
        run_id = server.upload(token, data=kineto_trace(30_000_000), name="big.json").json()["id"]
        deadline = time.monotonic() + 60
        while server.get(f"/api/v1/runs/{run_id}").json()["status"] != "running":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        time.sleep(0.5)
        r = httpx.delete(f"{server.url}/api/v1/runs/{run_id}", headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 202 and r.json()["status"] == "canceled", r.text
        deadline = time.monotonic() + 30
        while server.get(f"/api/v1/runs/{run_id}").status_code != 404:
            assert time.monotonic() < deadline, "the canceled run was not removed"
            time.sleep(0.1)
        assert not (server.data / "reports" / run_id).exists()
        assert not [p for p in (server.data / "traces").rglob("*") if p.is_file()]
        assert not [p for p in analysis_processes().values() if str(server.data) in p[1]]
        assert server.upload(token, SAMPLES / "basic.json").status_code == 201  # still serving
    finally:
        server.stop()


def test_a_delete_racing_a_reupload_of_the_same_content_never_removes_its_file(tmp_path):
    server = Server(tmp_path / "data", None, "--jobs", "2").start()
    try:
        token = server.token("demo")
        auth = {"Authorization": f"Bearer {token}"}
        body = (SAMPLES / "basic.json").read_bytes()
        old = server.upload(token, data=body, name="a.json").json()["id"]
        assert server.wait(old)["status"] == "done"
        new_ids = []

        def race(old: str) -> dict[str, httpx.Response]:
            start = threading.Barrier(2)
            out: dict[str, httpx.Response] = {}

            def delete() -> None:
                start.wait()
                out["delete"] = httpx.delete(f"{server.url}/api/v1/runs/{old}", headers=auth, timeout=60)

            def reupload() -> None:
                start.wait()
                out["upload"] = server.upload(token, data=body, name="a.json")

            threads = [threading.Thread(target=f) for f in (delete, reupload)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            return out

        for _ in range(10):  # each round is one race; ten lost none of 25 before (and cost 40% of the time)
            out = race(old)
            assert out["delete"].status_code == 204 and out["upload"].status_code == 201, out
            old = out["upload"].json()["id"]
            new_ids.append(old)
            assert server.wait(old)["status"] == "done"  # before the next delete: the run is not running
        assert server.get(f"/runs/{old}/files/0").content == body
        assert server.get("/api/v1/runs").json()["total"] == 1
    finally:
        server.stop()


def test_a_database_outage_answers_503_and_the_jobs_finish_once_it_is_back(tmp_path):
    pg = Postgres()  # a server of its own: this test stops it
    try:
        db = pg.new_database()
        server = Server(tmp_path / "data", db, "--jobs", "2").start()
        try:
            token = server.token("demo")
            body = kineto_trace(2_000_000)
            ids = [server.upload(token, data=body + b" " * i, name="t.json").json()["id"] for i in range(3)]
            deadline = time.monotonic() + 60
            while server.get(f"/api/v1/runs/{ids[0]}").json()["status"] != "running":
                assert time.monotonic() < deadline
                time.sleep(0.05)
            pg.pause()
            try:
                time.sleep(1)
                r = server.get("/api/v1/runs")
                assert r.status_code == 503 and r.headers["retry-after"] and set(r.json()) == {"error"}, r.text
                h = server.get("/api/v1/health")
                assert h.status_code == 503 and h.json()["database"].startswith("down"), h.text
                assert h.json()["storage"] == "ok"
                page = server.get("/runs", headers={"Accept": "text/html"})
                assert page.status_code == 503 and "Traceback" not in page.text
                up = server.upload(token, SAMPLES / "basic.json")
                assert up.status_code == 503, up.text
                deadline = time.monotonic() + 120  # the analyses under way end: their end cannot be written yet
                while [p for p in analysis_processes().values() if str(server.data) in p[1]]:
                    assert time.monotonic() < deadline, "the analyses did not end"
                    time.sleep(0.1)
                time.sleep(2)
            finally:
                pg.resume()
            runs = [server.wait(i, timeout=90) for i in ids]  # no restart
            assert [r["status"] for r in runs] == ["done"] * 3, runs
            assert [r["tries"] for r in runs] == [1, 1, 1], runs  # each analysed once
            assert server.get("/api/v1/health").json()["database"] == "ok"
            assert not [p for p in (server.data / "tmp").rglob("*") if p.is_file()]  # the refused upload's file
            log = server.log.read_text()
            assert "Traceback" not in log and log.count("\n") < 200, log[-3000:]
            assert "database away" in log  # an analysis ended during the outage: its end was written after
        finally:
            server.stop()
    finally:
        pg.stop()


def test_slow_header_connections_do_not_lock_out_a_normal_request(tmp_path):
    server = Server(tmp_path / "data", None, "--header-timeout", "1s", "--max-connections", "60").start()
    socks = []
    try:
        for _ in range(100):  # more than the connection cap, each sending its headers a byte at a time
            s = socket.create_connection(("127.0.0.1", server.port))
            s.sendall(b"GET /api/v1/health HTTP/1.1\r\nHost: x\r\n")
            socks.append(s)
        start = time.monotonic()
        while True:
            r = httpx.get(f"{server.url}/api/v1/health", timeout=5)
            if r.status_code == 200:
                break
            assert r.status_code == 503 and time.monotonic() - start < 5, r.text
            time.sleep(0.2)
        assert time.monotonic() - start < 5
        closed = 0
        for s in socks:
            s.settimeout(5)
            try:
                s.sendall(b"X")
                closed += s.recv(100) == b""
            except OSError:
                closed += 1
        assert closed == len(socks)  # the server closed every one
        # a slow client that completes its headers in time is served
        s = socket.create_connection(("127.0.0.1", server.port))
        for ch in b"GET /api/v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n":
            s.sendall(bytes([ch]))
        s.settimeout(5)
        assert s.recv(100).startswith(b"HTTP/1.1 200")
        s.close()
    finally:
        for s in socks:
            s.close()
        server.stop()


def test_leases_on_sqlite_fence_a_worker_that_lost_its_job(tmp_path):
    store = Store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    store.migrate()
    try:
        f = StoredFile("a" * 64, "t.json", 1, "file")
        run_id = store.create_run("p", None, None, [f])
        first = store.claim("h:1:a", lease_s=0.2)
        assert first is not None and first.tries == 1
        assert store.claim("h:2:b", lease_s=10) is None  # held: not taken
        assert store.heartbeat(first, 0.2) == "held"
        time.sleep(0.3)  # the lease expires (the worker is stuck or cut off)
        second = store.claim("h:2:b", lease_s=10)
        assert second is not None and second.id == first.id and second.tries == 2
        assert store.heartbeat(first, 10) == "lost"
        assert store.finish(first, run_id, None, {"verdict": "stale"}) is False  # fenced: changes nothing
        assert store.requeue(first) is False
        assert store.run(run_id)["status"] == "running"
        assert store.finish(second, run_id, None, {"verdict": "gpu_bound"}) is True
        assert store.run(run_id)["verdict"] == "gpu_bound" and store.run(run_id)["status"] == "done"
        # a lease that expires after max_tries fails the job instead
        other = store.create_run("p", None, None, [f])
        job = store.claim("h:1:a", lease_s=0.01, max_tries=1)
        assert job is not None and job.run_id == other
        time.sleep(0.05)
        assert store.claim("h:2:b", lease_s=10, max_tries=1) is None
        assert store.run(other)["status"] == "failed" and "interrupted 1 times" in store.run(other)["error"]
        # a dead worker of this host: its lease ends at once
        third = store.create_run("p", None, None, [f])
        job = store.claim(f"{socket.gethostname()}:999999:x", lease_s=600)
        assert job is not None and job.run_id == third
        assert store.release_dead(socket.gethostname(), lambda pid: pid != 999999) == 1
        retaken = store.claim("h:2:b", lease_s=10)
        assert retaken is not None and retaken.run_id == third and retaken.tries == 2
    finally:
        store.close()


@pytest.fixture
def small_disk(tmp_path):
    """DATA on a 8 MiB file system of its own (a tmpfs: needs root), the database beside it."""
    folder = tmp_path / "data"
    folder.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(folder)],
                                           capture_output=True).returncode != 0:
        pytest.skip("mounting a small file system needs root")
    yield folder
    subprocess.run(["umount", "-l", str(folder)], check=False)


def test_a_full_disk_answers_507_stores_nothing_and_uploads_work_again_once_freed(tmp_path, small_disk):
    server = Server(small_disk, f"sqlite:///{tmp_path / 'db.sqlite'}").start()
    try:
        token = server.token("demo")
        first = server.upload(token, SAMPLES / "basic.json").json()["id"]
        assert server.wait(first)["status"] == "done"
        filler = small_disk / "filler"
        with open(filler, "wb") as f:  # the disk filled by something else
            try:
                while True:
                    f.write(b"\0" * 65536)
                    f.flush()
            except OSError:
                pass
        body = kineto_trace(1_000_000)
        r = server.upload(token, data=body, name="t.json")
        assert r.status_code == 507 and set(r.json()) == {"error"} and "disk is full" in r.json()["error"], r.text
        h = server.get("/api/v1/health")
        assert h.status_code == 503 and h.json()["storage"].startswith("full"), h.text
        # a multipart upload (the browser page, `traceanalyzer upload` with several files): 507 too, not 400
        r = httpx.post(f"{server.url}/api/v1/projects/demo/runs", headers={"Authorization": f"Bearer {token}"},
                       files=[("file", ("a.json", body)), ("file", ("b.json", body))], timeout=60)
        assert r.status_code == 507 and "disk is full" in r.json()["error"], r.text
        one, two = tmp_path / "one.json", tmp_path / "two.json"
        one.write_bytes(body)
        two.write_bytes(body + b" ")
        env = {k: v for k, v in os.environ.items() if k != "GITHUB_STEP_SUMMARY"}
        client = subprocess.run([sys.executable, "-m", "traceanalyzer", "upload", str(one), str(two), "--server",
                                 server.url, "--project", "demo"], capture_output=True, text=True, timeout=120,
                                env={**env, "TRACEANALYZER_TOKEN": token})
        assert client.returncode == 3 and "507" in client.stderr, client.stderr  # as for a single file
        assert server.get("/api/v1/runs").json()["total"] == 1  # nothing half-stored
        assert not [p for p in (small_disk / "tmp").rglob("*") if p.is_file()]
        filler.unlink()
        r = server.upload(token, data=body, name="t.json")
        assert r.status_code == 201, r.text
        assert server.wait(r.json()["id"])["status"] == "done"
        assert server.get("/api/v1/health").status_code == 200
        assert "Traceback" not in server.log.read_text()
    finally:
        server.stop()
