#!/usr/bin/env python3
"""Record real torch.profiler CPU traces with the newest torch that installs here (2.14.1 in
November 2026), beside the 2.13 ones of make_torch_cpu.py, with the same measured answers.

torch 2.14.1 on PyPI is a CUDA build (about 5.5 GB with its CUDA libraries); it runs on the CPU.
A throwaway venv, never in CI:

    python3 -m venv /tmp/t214 && /tmp/t214/bin/pip install torch==2.14.1
    /tmp/t214/bin/python sample_traces/make_torch_2026.py [OUTDIR]

Two scenarios of make_torch_cpu.py (their loops, models and sidecars), named torch214_*:
torch214_cpu_input_bound (a DataLoader whose items sleep 20 ms) and torch214_cpu_well_fed
(in-memory data). CPU activities only: the machine has no GPU, so the 2026 GPU-side layout
(graph ids, sync threads, counters, Seq) is covered by the built traces of tests/kineto2026_builder.py.
Not byte-reproducible (real clocks, pids and thread ids).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import make_torch_cpu as M  # noqa: E402  (the 2.13 script: same loops and sidecars)
import torch  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

_meta = M.common_meta


def common_meta():
    return {**_meta(), "made_by": "sample_traces/make_torch_2026.py"}


def main(argv):
    outdir = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parent
    outdir.mkdir(parents=True, exist_ok=True)
    M.common_meta = common_meta
    torch.manual_seed(0)
    torch.set_num_threads(1)
    M.scenario(outdir, "torch214_cpu_input_bound",
               DataLoader(M.SleepyDataset(sleep_s=0.02), batch_size=4, num_workers=0),
               M.mlp([32, 2048, 2048, 4]), active=4,
               notes=("torch 2.14: __getitem__ sleeps 20 ms, batch 4 (80 ms of loading per step); MLP "
                      "32-2048-2048-4 with SGD."))
    M.scenario(outdir, "torch214_cpu_well_fed",
               DataLoader(TensorDataset(torch.randn(1024, 512), torch.randint(0, 10, (1024,))),
                          batch_size=64, num_workers=0),
               M.mlp([512, 1024, 1024, 1024, 10]), active=4,
               notes="torch 2.14: in-memory TensorDataset, batch 64, MLP 512-1024-1024-1024-10 with SGD.")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
