"""Traces of one training job at successive commits, for the history and `upload` tests: each step waits
`dataloader_us` for its batch, then runs `compute_us` of kernels; `seed` varies the steps a little (about
1%), as two captures of the same code do."""

from __future__ import annotations

import json

import numpy as np
from kineto_builder import KinetoTrace


def training_trace(dataloader_us: float, compute_us: float = 9000.0, steps: int = 8, seed: int = 0) -> bytes:
    rng = np.random.default_rng(seed)
    t = KinetoTrace()
    ts = 0.0
    for n in range(steps):
        wait = dataloader_us * (1 + 0.01 * rng.standard_normal())
        kernels = compute_us * (1 + 0.01 * rng.standard_normal())
        dur = wait + kernels + 100
        t.step(n, ts, dur)
        t.dataloader(ts, wait)
        k = 4
        for i in range(k):
            start = ts + wait + 50 + i * kernels / k
            t.launched(start - 40, 5, start, kernels / k - 2, name=f"kernel_{i}")
        ts += dur
    return json.dumps(t.document()).encode()
