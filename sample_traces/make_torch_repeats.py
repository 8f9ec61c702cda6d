#!/usr/bin/env python3
"""Record real torch.profiler CPU traces of one training loop, ten times with identical settings, and a
DataLoader fix (num_workers=0 against num_workers=4), two captures of each.

What run-to-run variation is: the ten `same_*` captures are one setting (single-process DataLoader,
as most first attempts are), made one after the other; any difference between two of them is noise,
never a change. `diff --fail-on step_time:+5%` must pass on every pair (tests/test_run_noise.py), and
their between-capture step-time differences are the basis of `diff --run-noise`'s default (docs/ci.md).
The `fix_workers{0,4}_*` captures are a real change of the loader: slower without workers.

The loop is sample_traces/make_torch_workers.py's, its dataset's items costing SLEEP_S each, with one
micro-batch a step so the files stay small. Needs a CPU build of torch (not a project dependency):

    python3 -m venv /tmp/torchenv && /tmp/torchenv/bin/pip install torch==2.13.0 numpy
    /tmp/torchenv/bin/python sample_traces/make_torch_repeats.py [OUTDIR]

Writes OUTDIR/torch_repeats/<name>.json.gz and <name>.expected.json (the loop's own wall-clock measures
of each profiled step and of its wait in next(iterator)). Not byte-reproducible (real clocks, pids, a
real machine's load); re-running replaces the files.
"""

from __future__ import annotations

import sys
from pathlib import Path

import make_torch_workers as loop
import torch

REPEATS = 10
FIX = (0, 4)  # num_workers before / after the fix (either way round in the tests)
SLEEP_S = 0.006  # per item: 48 ms of loading per batch of 8, most of a single-process step


def main(argv: list[str]) -> int:
    outdir = (Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parent) / "torch_repeats"
    outdir.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    loop.MICRO_BATCHES = 1
    loop.SLEEP_S = SLEEP_S
    for i in range(REPEATS):
        loop.capture(outdir, f"same_{i:02d}", 0)
    for run in ("a", "b"):
        for workers in FIX:
            loop.capture(outdir, f"fix_workers{workers}_{run}", workers)
    for f in outdir.glob("*.expected.json"):  # name the script that made them
        f.write_text(f.read_text().replace("make_torch_workers.py", "make_torch_repeats.py"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
