#!/usr/bin/env python3
"""Record real torch.profiler CPU traces with memory events (profile_memory=True).

Needs a CPU build of torch (kept out of the project's own dependencies):

    python3 -m venv /work/torchvenv && /work/torchvenv/bin/pip install torch==2.13.0 numpy
    /work/torchvenv/bin/python sample_traces/make_torch_memory.py [OUTDIR]

Two small training loops of an MLP on random data, profiled with activities=[CPU],
profile_memory=True and a schedule (1 wait, 1 warm-up, 6 active steps):

* torch_memory_leak: every step keeps its hidden activations (`kept.append(h.detach())`, a
  known number of bytes) and its loss tensor (`losses.append(loss)`, no `.item()`): the memory
  allocated at the end of each step grows by at least LEAK_BYTES per step.
* torch_memory_steady: the same loop without keeping anything: the end-of-step memory is flat.

Each trace is written gzipped with a `<name>.expected.json` sidecar that records what the
script knows (the leaked bytes per step, the active steps, torch's version). The answers the
tests check (peaks, per-step values) are computed by the tests straight from the JSON.
The output is NOT byte-reproducible (real clocks, pids, addresses); re-running replaces it.
"""

from __future__ import annotations

import gzip
import json
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, schedule

BATCH, DIM_IN, HIDDEN, CLASSES = 32, 64, 256, 10
LEAK_BYTES = BATCH * HIDDEN * 4  # one float32 hidden activation of a batch, kept every step
WAIT, WARMUP, ACTIVE = 1, 1, 6


def run(name: str, leak: bool, out_dir: Path) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(DIM_IN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, CLASSES))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    x = torch.randn(BATCH, DIM_IN)
    y = torch.randint(0, CLASSES, (BATCH,))
    kept: list[torch.Tensor] = []
    losses: list[torch.Tensor] = []
    sched = schedule(wait=WAIT, warmup=WARMUP, active=ACTIVE, repeat=1)
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "trace.json"
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True, schedule=sched,
                     on_trace_ready=lambda p: p.export_chrome_trace(str(raw))) as prof:
            for _ in range(WAIT + WARMUP + ACTIVE):
                opt.zero_grad(set_to_none=True)
                h = model[1](model[0](x))
                out = model[2](h)
                loss = loss_fn(out, y)
                loss.backward()
                opt.step()
                if leak:
                    kept.append(h.detach())  # the bug: activations kept across steps
                    losses.append(loss)  # the other one: no .item()
                prof.step()
        with open(raw, "rb") as src, gzip.open(out_dir / f"{name}.json.gz", "wb", compresslevel=9) as dst:
            shutil.copyfileobj(src, dst)
    sidecar = {
        "made_by": "sample_traces/make_torch_memory.py",
        "torch": torch.__version__,
        "python": platform.python_version(),
        "profiler": {"activities": ["CPU"], "profile_memory": True,
                     "schedule": {"wait": WAIT, "warmup": WARMUP, "active": ACTIVE}},
        "active_steps": ACTIVE,
        "leak_bytes_per_step": LEAK_BYTES if leak else 0,
        "notes": "host (CPU) memory only; the tests compute peaks and per-step values from the JSON itself",
    }
    (out_dir / f"{name}.expected.json").write_text(json.dumps(sidecar, indent=2) + "\n")


SCENARIOS = {"torch_memory_leak": True, "torch_memory_steady": False}


def main() -> None:
    out_dir = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent
    out_dir.mkdir(parents=True, exist_ok=True)
    if len(sys.argv) > 2:  # one scenario, in its own process (the host allocator's totals are per process)
        run(sys.argv[2], SCENARIOS[sys.argv[2]], out_dir)
        return
    for name in SCENARIOS:
        subprocess.run([sys.executable, __file__, str(out_dir), name], check=True)


if __name__ == "__main__":
    main()
