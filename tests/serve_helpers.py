"""Helpers of the service tests: a real `traceanalyzer serve` in a subprocess on a free loopback port,
and a real PostgreSQL server started in a temp dir (Debian's `postgresql` package: initdb / pg_ctl).

Without PostgreSQL the PostgreSQL variants are skipped, except under CI, where they fail.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_traces"


def kineto_trace(target_bytes: int) -> bytes:
    """A valid Kineto trace of about `target_bytes`: steps of a DataLoader wait and a few kernels."""
    import json

    from kineto_builder import KinetoTrace

    def build(steps: int) -> bytes:
        t = KinetoTrace()
        for step in range(steps):
            ts = step * 1000.0
            t.step(step, ts, 1000.0)
            t.dataloader(ts, 200.0)
            for k in range(8):
                t.launched(ts + 210 + k * 5, 4.0, ts + 250 + k * 90, 80.0, name=f"kernel_{k}")
        return json.dumps(t.document()).encode()

    per_step = len(build(100)) / 100
    return build(max(10, int(target_bytes / per_step)))


def session_of(store, token: str, ttl_s: float = 3600.0) -> str:
    """A login session of `token` (what POST /login makes), straight in the store."""
    from traceanalyzer.serve import sessions

    found = store.token(token)
    assert found is not None, "no such token"
    return sessions.create(store, found.id, ttl_s, "test")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cli(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "traceanalyzer", *args], capture_output=True, text=True,
                          check=check, timeout=120)


class Server:
    """`traceanalyzer serve` in its own process group (so a test can kill -9 it with its workers)."""

    def __init__(self, data: Path, db: str | None, *extra: str, name: str | None = None) -> None:
        self.data, self.db, self.extra = data, db, extra
        self.proc: subprocess.Popen | None = None
        self.port = 0
        self.log = data.parent / f"{name or data.name}.server.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def token(self, project: str, read_only: bool = False, cli_: bool = False) -> str:
        """A new token: straight from the store (a CLI start per token would double the tests' time)."""
        if not cli_:
            from traceanalyzer.serve.settings import Settings
            from traceanalyzer.serve.store import Store

            store = Store(Settings(self.data, self.db).database_url)
            try:
                return store.create_token(project, read_only)
            finally:
                store.close()
        args = ["serve", "token", "create", "--data", str(self.data), "--project", project]
        if self.db:
            args += ["--db", self.db]
        if read_only:
            args.append("--read-only")
        out = cli(*args).stdout
        assert out.count("\n") == 1 and out.startswith("ta_"), out
        return out.strip()

    def login(self, token: str) -> dict[str, str]:
        """The cookies of a browser logged in with `token` (a session made straight in the store)."""
        from traceanalyzer.serve.settings import Settings
        from traceanalyzer.serve.store import Store

        store = Store(Settings(self.data, self.db).database_url)
        try:
            return {"ta_session": session_of(store, token)}
        finally:
            store.close()

    def start(self) -> Server:
        self.port = free_port()
        args = [sys.executable, "-m", "traceanalyzer", "serve", "--data", str(self.data), "--port", str(self.port),
                *self.extra]
        if self.db:
            args += ["--db", self.db]
        log = open(self.log, "ab")  # noqa: SIM115 (the child holds it)
        self.proc = subprocess.Popen(args, stdout=log, stderr=log, start_new_session=True)
        log.close()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"the server exited ({self.proc.returncode}): {self.log.read_text()[-3000:]}")
            try:
                if httpx.get(f"{self.url}/api/v1/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"the server did not start: {self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        stop_process(self.proc)
        self.proc = None

    def kill9(self) -> None:
        """SIGKILL to the server and every process of its group (its analysis processes)."""
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=20)
        self.proc = None

    def upload(self, token: str, path: Path | None = None, project: str = "demo", data: bytes | None = None,
               name: str | None = None, **params: str) -> httpx.Response:
        body = data if data is not None else path.read_bytes()  # type: ignore[union-attr]
        return httpx.post(f"{self.url}/api/v1/projects/{project}/runs", params=params, content=body, timeout=60,
                          headers={"Authorization": f"Bearer {token}", "Content-Type": "application/octet-stream",
                                   "X-Filename": name or (path.name if path else "upload")})

    def get(self, path: str, **kw) -> httpx.Response:
        return httpx.get(f"{self.url}{path}", timeout=60, **kw)

    def wait(self, run_id: str, until: tuple[str, ...] = ("done", "failed"), timeout: float = 120) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            r = self.get(f"/api/v1/runs/{run_id}")
            assert r.status_code == 200, r.text
            if r.json()["status"] in until:
                return r.json()
            if time.monotonic() > deadline:
                raise AssertionError(f"run {run_id} still {r.json()['status']}: {self.log.read_text()[-3000:]}")
            time.sleep(0.1)


def _pg_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


class Postgres:
    """A throwaway PostgreSQL server: initdb in a temp dir, trust auth, TCP on a free loopback port."""

    def __init__(self) -> None:
        bin_dir = _pg_bin()
        if bin_dir is None:
            reason = "PostgreSQL is not installed (apt-get install postgresql)"
            if os.environ.get("CI"):
                pytest.fail(f"{reason}; CI is set, so the PostgreSQL tests must run")
            pytest.skip(reason)
        self.bin = bin_dir
        self.dir = Path(tempfile.mkdtemp(prefix="ta-pg-"))
        self.port = free_port()
        self.as_user: list[str] = []
        if os.geteuid() == 0:  # initdb refuses root: run the server as Debian's postgres user
            shutil.chown(self.dir, "postgres", "postgres")
            self.as_user = ["runuser", "-u", "postgres", "--"]
        self._run("initdb", "-D", str(self.dir / "db"), "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8")
        self._run("pg_ctl", "-D", str(self.dir / "db"), "-l", str(self.dir / "log"), "-w", "-t", "60", "-o",
                  f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off", "start")

    def _run(self, tool: str, *args: str) -> None:
        res = subprocess.run([*self.as_user, str(self.bin / tool), *args], capture_output=True, text=True,
                             timeout=120, check=False)
        if res.returncode != 0:
            raise AssertionError(f"{tool} failed: {res.stdout}{res.stderr}")

    def new_database(self) -> str:
        import psycopg

        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres",
                             autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return f"postgresql://postgres@127.0.0.1:{self.port}/{name}"

    def stop(self) -> None:
        self.pause()
        shutil.rmtree(self.dir, ignore_errors=True)

    def pause(self) -> None:
        """The database server stopped at once (an outage); `resume` starts it again on the same port."""
        self._run("pg_ctl", "-D", str(self.dir / "db"), "-m", "immediate", "stop")

    def resume(self) -> None:
        self._run("pg_ctl", "-D", str(self.dir / "db"), "-l", str(self.dir / "log"), "-w", "-t", "60", "-o",
                  f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off", "start")


_POSTGRES: list[Postgres] = []


def postgres() -> Postgres:
    """One PostgreSQL server for the whole test session (each test gets its own database)."""
    if not _POSTGRES:
        import atexit

        server = Postgres()
        _POSTGRES.append(server)
        atexit.register(server.stop)
    return _POSTGRES[0]


BACKENDS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.slow)]


def db_url(backend: str) -> str | None:
    return None if backend == "sqlite" else postgres().new_database()


class Worker:
    """`traceanalyzer serve worker` in its own process group."""

    def __init__(self, data: Path, db: str | None, *extra: str, name: str = "worker") -> None:
        self.data, self.db, self.extra = data, db, extra
        self.proc: subprocess.Popen | None = None
        self.log = data.parent / f"{name}.log"

    def start(self) -> Worker:
        args = [sys.executable, "-m", "traceanalyzer", "serve", "worker", "--data", str(self.data), *self.extra]
        if self.db:
            args += ["--db", self.db]
        log = open(self.log, "ab")  # noqa: SIM115 (the child holds it)
        self.proc = subprocess.Popen(args, stdout=log, stderr=log, start_new_session=True)
        log.close()
        return self

    def stop(self) -> None:
        stop_process(self.proc)
        self.proc = None


def stop_process(proc: subprocess.Popen | None) -> None:
    """Ctrl-C to a server or worker (it finishes what it holds), then SIGKILL to its process group after 20 s."""
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=20)


def analysis_processes() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, spec path) of every analysis process running on this machine."""
    out = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            args = (d / "cmdline").read_bytes().split(b"\0")
            stat = (d / "stat").read_text()
        except OSError:
            continue
        if b"from traceanalyzer.serve.jobs import child_main" not in b" ".join(args):
            continue
        if stat.rsplit(")", 1)[-1].split()[0] == "Z":
            continue  # a zombie: dead, not yet reaped
        specs = [a.decode() for a in args if a.endswith(b"spec.json")]
        out[int(d.name)] = (int(stat.rsplit(")", 1)[-1].split()[1]), specs[0] if specs else "")
    return out
