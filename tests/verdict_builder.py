"""Jobs with a known per-step change and distorted steps, for the diff verdict's tests.

A step: the DataLoader wait (`wait_us`), then `kernels` kernels of `kernel_us` each (each with its launch),
then 20 us of host work; every duration jittered by `jitter` (relative, normal); `distorted` steps (never
the first, which the diagnosis may call warm-up) get a stall with no GPU work and no cause, of `distort` x
the step's length, after their first kernel (as the profiler's own stop or a stray page fault does in real
captures; mid-step, so it does not merge with the next step's DataLoader wait into one gap).
`arrays` gives the same generator's step durations and parts without writing a trace (for 100-seed tests).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from kineto_builder import KinetoTrace


def _draw(seed: int, steps: int, wait_us: float, kernel_us: float, kernels: int, jitter: float, distorted: int,
          distort: tuple[float, float]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    wait = wait_us * (1 + jitter * rng.standard_normal(steps))
    k = kernel_us * (1 + jitter * rng.standard_normal((steps, kernels)))
    stall = np.zeros(steps)
    if distorted:
        where = rng.choice(np.arange(1, steps), size=distorted, replace=False)
        stall[where] = rng.uniform(*distort, size=distorted) * (wait_us + kernel_us * kernels)
    return np.maximum(wait, 1.0), np.maximum(k, 1.0), stall


def job(path: Path, seed: int, steps: int = 8, wait_us: float = 100.0, kernel_us: float = 1000.0,
        kernels: int = 7, jitter: float = 0.02, distorted: int = 2, distort: tuple[float, float] = (0.6, 1.5),
        kernel: str = "void gemm_kernel<float>(float*)") -> Path:
    wait, k, stall = _draw(seed, steps, wait_us, kernel_us, kernels, jitter, distorted, distort)
    path.parent.mkdir(parents=True, exist_ok=True)
    t = KinetoTrace()
    ts = 0.0
    for i in range(steps):
        dur = wait[i] + k[i].sum() + 20 + stall[i]
        t.step(i + 1, ts, dur).dataloader(ts, wait[i])
        at = ts + wait[i]
        for j in range(kernels):
            t.launched(at - 8, 5, at + 2, k[i, j] - 2, kernel)
            at += k[i, j] + (stall[i] if j == 0 else 0.0)
        ts += dur
    return t.write(path)


def arrays(seed: int, steps: int = 8, wait_us: float = 100.0, kernel_us: float = 1000.0, kernels: int = 7,
           jitter: float = 0.02, distorted: int = 2,
           distort: tuple[float, float] = (0.6, 1.5)) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The same job's step durations and parts (DataLoader idle, compute, unattributed idle), steps 2.. only
    (as the diff sees a job whose first step is warm-up)."""
    wait, k, stall = _draw(seed, steps, wait_us, kernel_us, kernels, jitter, distorted, distort)
    dur = wait + k.sum(axis=1) + 20 + stall
    parts = {"idle:dataloader": wait, "gpu_compute": k.sum(axis=1), "idle:unattributed": 20 + stall}
    return dur[1:], {key: v[1:] for key, v in parts.items()}
