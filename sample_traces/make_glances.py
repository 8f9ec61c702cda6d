#!/usr/bin/env python3
"""Record real glances exports (CSV and JSON) during two input-bound loops, with the loops' own trace.

    pip install glances numpy
    python3 sample_traces/make_glances.py [OUTDIR [SCENARIO ...]]   # default: sample_traces/glances/, both

Two scenarios, each about 25 s, each watched by one `glances --quiet --export csv,json` process
(1 s refresh; plugins and devices whose columns vary left out: see DISABLED and CONFIG) started
before the loop and stopped after it:

* **cpu_aug**: a pool of worker processes (one per core) runs a heavy numpy "augmentation" (FFT
  blur, rotations, noise, per-channel normalisation) on random images; the main loop waits for
  each batch (the DataLoader wait), then "trains" for 50 ms. CPU-bound input: user CPU near 100%.
* **small_files**: 20,000 files of 8 KiB are written and synced, the page cache is dropped
  (`/proc/sys/vm/drop_caches`, root only; said in the sidecar when not possible), and the main
  loop reads 400 of them per batch (the wait), then "trains" for 50 ms. Storage-bound input:
  iowait and disk reads high, CPU mostly idle.

The loop writes what it did as a Kineto-style Chrome trace on the epoch clock (`<name>.trace.json`):
`ProfilerStep#N` per step, `enumerate(DataLoader)#...__next__` for each wait, and one stand-in
GPU kernel per step covering the 50 ms "training" (this machine has no GPU; the host times are
real, the kernel is a placeholder so the trace has a GPU to be idle). `<name>.expected.json`
holds what the loop measured. Output is NOT byte-reproducible (real clocks); re-running replaces it.
glances measures the whole host: run it on a quiet machine, or other programs' CPU time shows up too
(the sidecar records the 1-minute load before the run).
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

TRAIN_S = 0.05
RUN_S = 25.0
SETTLE_S = 3.0  # glances needs a couple of refreshes before its rates mean anything
FILES = 20_000
FILE_BYTES = 8192
FILES_PER_BATCH = 400
# Plugins left out: the process list (heavy), and those whose items vary from refresh to refresh
# (glances 3 writes its CSV header once, so a varying plugin shifts the columns of later rows).
DISABLED = "processlist,ports,amps,folders,sensors,raid,wifi,cloud,irq,connections,smart,percpu,fs"
DL_NAME = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"


def _augment(seed: int) -> float:
    """A deliberately heavy augmentation of 8 random 256x256x3 images (CPU only)."""
    rng = np.random.default_rng(seed)
    out = 0.0
    for _ in range(8):
        img = rng.random((256, 256, 3), dtype=np.float32)
        for _ in range(3):
            f = np.fft.rfft2(img, axes=(0, 1))
            img = np.fft.irfft2(f * 0.9, s=img.shape[:2], axes=(0, 1)).astype(np.float32)
            img = np.rot90(img, k=int(rng.integers(4))).copy()
            img += rng.normal(0, 0.01, img.shape).astype(np.float32)
            img = (img - img.mean(axis=(0, 1))) / (img.std(axis=(0, 1)) + 1e-6)
        out += float(img[0, 0, 0])
    return out


class Trace:
    def __init__(self) -> None:
        self.events: list[dict] = []
        self.waits_us: list[float] = []
        self.steps_us: list[float] = []

    def x(self, name: str, cat: str, t0_ns: int, t1_ns: int, pid: int = 1, tid: int = 1, **args) -> None:
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid,
                            "ts": t0_ns // 1000, "dur": max((t1_ns - t0_ns) // 1000, 1), "args": args})

    def step(self, n: int, get_batch) -> None:  # noqa: ANN001
        t0 = time.time_ns()
        get_batch()
        t1 = time.time_ns()
        time.sleep(TRAIN_S)  # the stand-in for the GPU's work on the batch
        t2 = time.time_ns()
        self.x(f"ProfilerStep#{n}", "user_annotation", t0, t2)
        self.x(DL_NAME, "user_annotation", t0, t1)
        self.x("cudaLaunchKernel", "cuda_runtime", t1 + 1000, t1 + 6000, correlation=n + 1)
        self.x("train_step_kernel (stand-in)", "kernel", t1 + 10_000, t2 - 10_000, pid=0, tid=7,
               device=0, stream=7, correlation=n + 1)
        self.waits_us.append((t1 - t0) / 1000)
        self.steps_us.append((t2 - t0) / 1000)

    def write(self, path: Path) -> None:
        doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "stand-in GPU"}],
               "traceEvents": self.events}
        path.write_text(json.dumps(doc))


# Devices that come and go (loop, zram) or never carry data (lo, ifb) are hidden: glances 3 lists a
# varying set of them, which shifts its CSV columns from row to row.
CONFIG = """[diskio]
hide=loop.*,zram.*,ram.*
[network]
hide=lo,ifb.*,docker.*,veth.*
"""


def _glances(out: Path, name: str) -> subprocess.Popen:
    exe = shutil.which("glances") or str(Path(sys.executable).with_name("glances"))
    for suffix in (".csv", ".json"):
        (out / f"{name}{suffix}").unlink(missing_ok=True)
    conf = Path(tempfile.mkdtemp(prefix="glances-conf-")) / "glances.conf"
    conf.write_text(CONFIG)
    return subprocess.Popen([exe, "-C", str(conf), "--quiet", "-t", "1", "--export", "csv,json",
                             "--export-csv-file", str(out / f"{name}.csv"),
                             "--export-json-file", str(out / f"{name}.json"),
                             "--disable-plugin", DISABLED],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _stop(p: subprocess.Popen) -> None:
    p.send_signal(signal.SIGINT)
    try:
        p.wait(10)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def cpu_aug(out: Path) -> dict:
    tr = Trace()
    workers = os.cpu_count() or 2
    g = _glances(out, "cpu_aug")
    time.sleep(SETTLE_S)
    with mp.Pool(workers) as pool:
        results = pool.imap(_augment, range(10**6), chunksize=1)
        end = time.monotonic() + RUN_S
        n = 0
        while time.monotonic() < end:
            tr.step(n, lambda: next(results))
            n += 1
        pool.terminate()
        pool.join()
    time.sleep(1.5)
    _stop(g)
    tr.write(out / "cpu_aug.trace.json")
    return {"workers": workers, "steps": len(tr.steps_us), "wait_us": tr.waits_us, "step_us": tr.steps_us}


def _drop_caches() -> bool:
    try:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


def small_files(out: Path) -> dict:
    tr = Trace()
    root = Path(tempfile.mkdtemp(prefix="tinyfiles-", dir=os.environ.get("SMALL_FILES_DIR")))
    payload = os.urandom(FILE_BYTES)
    files = []
    for i in range(FILES):
        p = root / f"{i // 1000:03d}" / f"{i:06d}.bin"
        if i % 1000 == 0:
            p.parent.mkdir()
        p.write_bytes(payload)
        files.append(p)
    dropped = _drop_caches()
    time.sleep(SETTLE_S)  # let the writes settle before the log starts
    g = _glances(out, "small_files")
    time.sleep(SETTLE_S)
    order = np.random.default_rng(0).permutation(len(files))
    pos = 0

    def batch() -> None:
        nonlocal pos
        if pos + FILES_PER_BATCH > len(order):  # read them all: drop the cache and start again
            _drop_caches()
            pos = 0
        for k in order[pos:pos + FILES_PER_BATCH]:
            files[k].read_bytes()
        pos += FILES_PER_BATCH

    end = time.monotonic() + RUN_S
    n = 0
    while time.monotonic() < end:
        tr.step(n, batch)
        n += 1
    time.sleep(1.5)
    _stop(g)
    shutil.rmtree(root)
    tr.write(out / "small_files.trace.json")
    return {"files": FILES, "file_bytes": FILE_BYTES, "files_per_batch": FILES_PER_BATCH,
            "caches_dropped": dropped, "steps": len(tr.steps_us), "wait_us": tr.waits_us, "step_us": tr.steps_us}


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent / "glances"
    out.mkdir(parents=True, exist_ok=True)
    version = subprocess.run([shutil.which("glances") or str(Path(sys.executable).with_name("glances")), "-V"],
                             capture_output=True, text=True).stdout.strip().splitlines()[0]
    wanted = set(sys.argv[2:]) or {"cpu_aug", "small_files"}
    for name, run in (("cpu_aug", cpu_aug), ("small_files", small_files)):
        if name not in wanted:
            continue
        load_before = os.getloadavg()[0]
        got = run(out)
        got["load_1m_before"] = round(load_before, 2)
        w = np.array(got.pop("wait_us"))
        s = np.array(got.pop("step_us"))
        got.update(glances=version, machine=f"{platform.machine()}, {os.cpu_count()} cores",
                   train_us=TRAIN_S * 1e6, mean_wait_us=round(float(w.mean()), 1),
                   mean_step_us=round(float(s.mean()), 1),
                   wait_fraction=round(float(w.sum() / s.sum()), 4),
                   expected_split="cpu" if name == "cpu_aug" else "storage")
        (out / f"{name}.expected.json").write_text(json.dumps(got, indent=1) + "\n")
        print(name, got)


if __name__ == "__main__":
    main()
