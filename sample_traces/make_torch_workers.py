#!/usr/bin/env python3
"""Record real torch.profiler CPU traces of one training loop with num_workers=0 and num_workers=2.

Before/after pairs for `traceanalyzer diff` (tests/test_diff_runs.py): the same model and dataset,
whose __getitem__ costs `SLEEP_S` per item, loaded in the main process (workers0_*: the loop waits
for every batch) or by two worker processes (workers2_*: batches are loaded while the model runs).
Two captures of each setting (run a, run b), so a pair of the same setting shows run-to-run noise.

Needs a CPU build of torch (kept out of the project's own dependencies):

    python3 -m venv /tmp/torchenv && /tmp/torchenv/bin/pip install torch==2.13.0 numpy
    /tmp/torchenv/bin/python sample_traces/make_torch_workers.py [OUTDIR]

Writes OUTDIR/torch_workers/<name>.json.gz and <name>.expected.json (the loop's own wall-clock
measures of each profiled step and of its wait in next(iterator)). Not byte-reproducible (real
clocks, pids); re-running replaces the files.
"""

from __future__ import annotations

import gzip
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn
from torch.profiler import ProfilerAction, ProfilerActivity, profile, schedule
from torch.utils.data import DataLoader, Dataset

SLEEP_S = 0.003  # per item: 24 ms of loading per batch of 8
BATCH = 8
ACTIVE = 8  # profiled steps
MICRO_BATCHES = 3  # forward/backward passes per step
ACTIVE_ACTIONS = (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)


class CostlyDataset(Dataset):
    """Each item costs SLEEP_S of wall-clock time (stands in for decoding / augmentation)."""

    def __init__(self, n=512, dim=64):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, dim, generator=g)
        self.y = torch.randint(0, 4, (n,), generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        time.sleep(SLEEP_S)
        return self.x[i], self.y[i]


def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 4))


def capture(outdir: Path, name: str, workers: int) -> None:
    net = model()
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    loader = DataLoader(CostlyDataset(), batch_size=BATCH, num_workers=workers, shuffle=False)
    it = iter(loader)
    sched = schedule(wait=1, warmup=1, active=ACTIVE, repeat=1)
    rows = []
    with profile(activities=[ProfilerActivity.CPU], schedule=sched) as prof:
        t_prev = time.perf_counter()
        for i in range(2 + ACTIVE):
            t0 = time.perf_counter()
            x, y = next(it)
            t1 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            for _ in range(MICRO_BATCHES):  # a few micro-batches' worth of compute per step
                loss = loss_fn(net(x), y)
                loss.backward()
            opt.step()
            action = sched(i)
            t_end = time.perf_counter()
            prof.step()
            rows.append({"iteration": i, "active": action in ACTIVE_ACTIONS,
                         "step_wall_us": round((t_end - t_prev) * 1e6, 1),
                         "dataloader_wait_us": round((t1 - t0) * 1e6, 1)})
            t_prev = time.perf_counter()
    with tempfile.TemporaryDirectory() as td:
        raw = Path(td) / f"{name}.json"
        prof.export_chrome_trace(str(raw))
        data = raw.read_bytes()
    gz = outdir / f"{name}.json.gz"
    with open(gz, "wb") as fh, gzip.GzipFile(filename="", mode="wb", fileobj=fh, mtime=0) as g:
        g.write(data)
    active = [r for r in rows if r["active"]]
    exp = {"file": gz.name, "made_by": "sample_traces/make_torch_workers.py", "torch_version": torch.__version__,
           "python_version": platform.python_version(), "num_workers": workers, "batch_size": BATCH,
           "item_cost_s": SLEEP_S, "schedule": {"wait": 1, "warmup": 1, "active": ACTIVE, "repeat": 1},
           "measured": {"step_wall_us": [r["step_wall_us"] for r in active],
                        "dataloader_wait_us": [r["dataloader_wait_us"] for r in active]},
           "iterations": rows}
    (outdir / f"{name}.expected.json").write_text(json.dumps(exp, indent=1) + "\n")
    waits = exp["measured"]["dataloader_wait_us"]
    steps = exp["measured"]["step_wall_us"]
    print(f"{name}: {gz.stat().st_size} B gz; median step {sorted(steps)[len(steps) // 2] / 1e3:.1f} ms, "
          f"median wait {sorted(waits)[len(waits) // 2] / 1e3:.1f} ms", file=sys.stderr)


def main(argv):
    outdir = (Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parent) / "torch_workers"
    outdir.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    for run in ("a", "b"):
        for workers in (0, 2):
            capture(outdir, f"workers{workers}_{run}", workers)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
