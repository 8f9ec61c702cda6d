"""Pages under an upload flood: the runs page's latency at rest and while N clients upload 2 MB traces
as fast as they are let (each retrying a refused one after its Retry-After), on one server on loopback.

    python benchmarks/serve_load.py                  # 60 uploading clients, 15 s each phase
    python benchmarks/serve_load.py --clients 200 --seconds 20

It prints a table (p50 / p99 of `GET /runs` and `GET /api/v1/runs`, uploads stored and refused with 503)
and the p99 ratio flood / rest: the service keeps it within 3x (docs/service.md, "Pages under load").
The server runs no analyses (`--jobs 0`, as a web server beside workers), so the pages compete with the
uploads alone; the uploading clients run in a process of their own at a lower priority (they stand for
other machines: on a small box their CPU would otherwise be taken from the server). Everything it writes goes to a temporary folder that is removed at the end.
"""

from __future__ import annotations

import argparse
import http.client
import multiprocessing as mp
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import httpx  # noqa: E402
from serve_helpers import Server, kineto_trace  # noqa: E402

MB = 1_000_000
PAGES = ("/runs", "/api/v1/runs")


def percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def measure_pages(server: Server, seconds: float, readers: int = 2) -> list[float]:
    """Latencies (ms) of the pages, fetched one after another by `readers` clients for `seconds`."""
    times: list[float] = []
    end = time.monotonic() + seconds

    def read() -> None:
        with httpx.Client(base_url=server.url, timeout=120) as c:
            i = 0
            while time.monotonic() < end:
                t0 = time.perf_counter()
                r = c.get(PAGES[i % len(PAGES)])
                times.append((time.perf_counter() - t0) * 1000)
                assert r.status_code == 200, r.status_code
                i += 1
                time.sleep(0.02)

    threads = [threading.Thread(target=read) for _ in range(readers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return times


def flood(port: int, token: str, bodies: list[bytes], clients: int, stop: Any, counts: Any) -> None:
    """`clients` threads uploading `bodies` in turn until `stop` is set, in a process of their own (so the
    page readers do not wait for this process' lock); `counts`: stored, refused, errors."""
    os.nice(10)  # the clients stand for other machines: their CPU is not the server's
    lock = threading.Lock()

    def run(i: int) -> None:
        n = i
        while not stop.is_set():
            body = bodies[n % len(bodies)]
            n += 1
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            wait, slot = 0.0, 2
            try:
                conn.request("POST", "/api/v1/projects/flood/runs", body=body,
                             headers={"Authorization": f"Bearer {token}", "X-Filename": "t.json",
                                      "Content-Type": "application/octet-stream"})
                resp = conn.getresponse()
                resp.read()
                if resp.status == 201:
                    slot = 0
                elif resp.status == 503:
                    slot, wait = 1, float(resp.getheader("Retry-After") or 1)
            except OSError:  # refused before its body was read: the server closed the connection
                slot, wait = 1, 1.0
            finally:
                conn.close()
            with lock:
                counts[slot] += 1
            if wait:
                stop.wait(wait)

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=60)
    ap.add_argument("--mb", type=float, default=2.0, help="size of each upload")
    ap.add_argument("--seconds", type=float, default=15.0, help="length of each phase")
    ap.add_argument("--server-args", default="", help="more options for `traceanalyzer serve`")
    args = ap.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="ta-bench-load-"))
    server = Server(folder / "data", None, "--jobs", "0", *args.server_args.split())
    try:
        server.start()
        token = server.token("flood")
        base = kineto_trace(int(args.mb * MB))
        bodies = [base + b" " * i for i in range(8)]  # a few contents: the disk holds each once
        for i in range(50):  # a runs list to show
            assert server.upload(token, data=base + b" " * (100 + i), project="flood",
                                 branch=f"b{i % 3}").status_code == 201
        measure_pages(server, 2.0)  # warm up
        rest = measure_pages(server, args.seconds)
        stop, counts = mp.Event(), mp.Array("i", 3)
        proc = mp.Process(target=flood, args=(server.port, token, bodies, args.clients, stop, counts))
        proc.start()
        time.sleep(2.0)  # the flood under way
        loaded = measure_pages(server, args.seconds)
        stop.set()
        proc.join(timeout=180)
        stored, refused, errors = list(counts)
        print(f"| pages ({', '.join(PAGES)}) | requests | p50 ms | p99 ms | uploads stored | refused (503) | errors |")
        print("|---|---|---|---|---|---|---|")
        for label, times, fl in (("at rest", rest, ("", "", "")),
                                 (f"{args.clients} clients uploading {args.mb:g} MB", loaded, (stored, refused, errors))):
            print(f"| {label} | {len(times)} | {statistics.median(times):.1f} | {percentile(times, 0.99):.1f} | "
                  f"{fl[0]} | {fl[1]} | {fl[2]} |")
        ratio = percentile(loaded, 0.99) / percentile(rest, 0.99)
        print(f"p99 under the flood / at rest: {ratio:.2f}x (target: within 3x); {os.cpu_count()} cores, load "
              f"average {os.getloadavg()[0]:.1f}; uploads stored at {stored * args.mb / (args.seconds + 2):.0f} MB/s")
        sys.exit(0 if ratio <= 3.0 else 1)
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
