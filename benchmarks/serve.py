"""The service on loopback, measured in one run:

1. 50 concurrent uploads of a 10 MB Kineto trace (each copy different, so each is stored): all
   stored, all analysed, none lost (counts asserted), with the wall time until the last is done;
2. upload throughput (MB/s) of one big file sent with curl to `POST /api/v1/projects/P/runs`, against
   curl fetching the same file from a bare static file server (python -m http.server) in the same run;
3. p50 / p99 latency of the runs list (the page and the JSON API, first and 100th page) with 10,000
   runs in the database.

    python benchmarks/serve.py                 # as above (SQLite)
    python benchmarks/serve.py --quick         # 10 uploads of 2 MB, 1,000 runs
    python benchmarks/serve.py --db postgresql://user@127.0.0.1:5432/db   # an empty PostgreSQL database

Everything it writes goes to a temporary folder that is removed at the end.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import httpx  # noqa: E402
from serve_helpers import Server, free_port, kineto_trace  # noqa: E402

MB = 1_000_000


def percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def concurrent_uploads(server: Server, token: str, base: bytes, n: int) -> None:
    bodies = [base + b" " * i for i in range(n)]  # trailing blanks: a valid trace each, a different hash each
    start = time.perf_counter()

    def send(body: bytes) -> str:
        while True:  # past --max-uploads: 503 + Retry-After, sent again as `traceanalyzer upload` does
            try:
                r = httpx.post(f"{server.url}/api/v1/projects/bench/runs", content=body, timeout=600,
                               headers={"Authorization": f"Bearer {token}", "Content-Type": "application/octet-stream",
                                        "X-Filename": "trace.json"})
            except httpx.TransportError:  # refused before its body was read, the connection closed
                time.sleep(1.0)
                continue
            if r.status_code != 503:
                break
            time.sleep(float(r.headers.get("retry-after", "1")))
        assert r.status_code == 201, r.text
        return str(r.json()["id"])

    with ThreadPoolExecutor(n) as pool:
        ids = list(pool.map(send, bodies))
    uploaded = time.perf_counter() - start
    runs = [server.wait(i, timeout=3600) for i in ids]
    done = time.perf_counter() - start
    stored = [p for p in (server.data / "traces").rglob("*") if p.is_file()]
    listed = server.get("/api/v1/runs", params={"project": "bench"}).json()["total"]
    assert len(set(ids)) == n and listed == n, (len(set(ids)), listed)
    assert all(r["status"] == "done" for r in runs), [r["error"] for r in runs if r["status"] != "done"][:3]
    assert len(stored) == n, len(stored)
    print(f"{n} concurrent uploads of {len(base) / MB:.1f} MB: all {n} stored ({len(stored)} files), all analysed, "
          f"none lost; uploads in {uploaded:.2f} s ({n * len(base) / MB / uploaded:.0f} MB/s), "
          f"all analysed after {done:.1f} s")


def curl_seconds(args: list[str]) -> float:
    out = subprocess.run(["curl", "-sS", "-o", "/dev/null", "-w", "%{time_total}", *args], capture_output=True,
                         text=True, check=True).stdout
    return float(out)


def throughput(server: Server, token: str, folder: Path, size: int) -> None:
    big = folder / "static" / "big.bin"
    big.parent.mkdir()
    with open(big, "wb") as f:
        for _ in range(size // (1 << 20)):
            f.write(secrets.token_bytes(1 << 20))
    port = free_port()
    static = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
                              cwd=big.parent, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                httpx.head(f"http://127.0.0.1:{port}/big.bin", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.05)
        baseline = min(curl_seconds([f"http://127.0.0.1:{port}/big.bin"]) for _ in range(3))
        ours = min(curl_seconds(["-H", f"Authorization: Bearer {token}", "-H", "Content-Type: application/octet-stream",
                                 "--data-binary", f"@{big}", f"{server.url}/api/v1/projects/throughput/runs"])
                   for _ in range(3))
    finally:
        static.terminate()
        static.wait()
    mb = big.stat().st_size / MB
    print(f"upload of {mb:.0f} MB: {mb / ours:.0f} MB/s (hashed, written, stored by content) against "
          f"{mb / baseline:.0f} MB/s for curl fetching it from python -m http.server (x{ours / baseline:.2f} the time)")


def runs_list_latency(server: Server, n: int, queries: int) -> None:
    from traceanalyzer.serve.settings import Settings
    from traceanalyzer.serve.store import Store, StoredFile, jobs, projects, run_files, runs

    store = Store(Settings(server.data, server.db).database_url)
    now = time.time()
    with store.engine.begin() as c:
        c.execute(projects.insert().values(name="many", created_at=now))
        pid = c.execute(projects.select().where(projects.c.name == "many")).first().id
        rows = [dict(id=f"{i:012x}", project_id=pid, branch=f"b{i % 20}", commit=f"{i:040x}", created_at=now - i,
                     size_bytes=10 * MB, files=1, verdict="input_bound", step_time_ms=10.0 + i % 7, gpu_idle=0.5)
                for i in range(n)]
        c.execute(runs.insert(), rows)
        f = StoredFile("0" * 64, "trace.json", 10 * MB, "file")
        c.execute(run_files.insert(), [dict(run_id=r["id"], position=0, sha256=f.sha256, name=f.name,
                                            size_bytes=f.size_bytes, kind=f.kind) for r in rows])
        c.execute(jobs.insert(), [dict(run_id=r["id"], status="done", tries=1, queued_at=now) for r in rows])
    store.close()
    client = httpx.Client(base_url=server.url, timeout=60)
    for label, path, params in (("runs page, first page", "/runs", {"project": "many"}),
                                ("runs page, page 100", "/runs", {"project": "many", "page": "100"}),
                                ("runs page, branch filter", "/runs", {"project": "many", "branch": "b3"}),
                                ("JSON API, first page", "/api/v1/runs", {"project": "many"})):
        times = []
        for _ in range(queries):
            t0 = time.perf_counter()
            r = client.get(path, params=params)
            times.append((time.perf_counter() - t0) * 1000)
            assert r.status_code == 200
        print(f"{label} with {n:,} runs: p50 {statistics.median(times):.1f} ms, p99 {percentile(times, 0.99):.1f} ms "
              f"({queries} requests)")
    client.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--db", help="an empty PostgreSQL database (default: SQLite in the temp folder)")
    ap.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2) // 2))
    args = ap.parse_args()
    uploads, size, big, many, queries = (10, 2 * MB, 64 << 20, 1000, 50) if args.quick else \
        (50, 10 * MB, 512 << 20, 10_000, 200)
    folder = Path(tempfile.mkdtemp(prefix="ta-bench-serve-"))
    server = Server(folder / "data", args.db, "--jobs", str(args.jobs), "--max-upload", "8GiB")
    try:
        server.start()
        token = server.token("bench")
        concurrent_uploads(server, token, kineto_trace(size), uploads)
        throughput(server, server.token("throughput"), folder, big)
        runs_list_latency(server, many, queries)
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
