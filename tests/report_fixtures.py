"""Report fixtures: small Kineto traces for each input shape, and a fake diagnosis.

`fake_diagnosis` gives a typed result a diagnosis of the result's shape (the job's verdict and
findings, and each rank's gaps / per_step / idle_by_cause_us) made from the result's own gap tables,
with causes cycling through the registry, so that the renderers can be tested on edge cases the real
diagnosis never makes.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from kineto_builder import KinetoTrace
from timelines import load_paths

from traceanalyzer import Analysis, Options, analyze
from traceanalyzer.formats import ReadOptions
from traceanalyzer.result.types import (
    AttributedGap,
    DiagnosisResult,
    FindingResult,
    HostOp,
    RankDiagnosisResult,
    StepCausesResult,
)

PlainData = dict[str, Any]

HOSTILE = ['<script>alert(1)</script>', '"><img src=x onerror=alert(2)>', "</script><script>alert(3)</script>",
           "{{ 7*7 }}", "| pipe | `tick` *star* [link](javascript:alert(4))"]
CAUSE_CYCLE = ("dataloader", "sync", "memcpy", "launch", "host_compute", "checkpoint", "communication", "unknown")


def single_gpu(path: Path, steps: int = 4, kernels_per_step: int = 6, kernel_name: str = "gemm_kernel") -> Path:
    """Steps of 1000 us: DataLoader wait 0-300, kernels from 300, one HtoD copy; known figures."""
    t = KinetoTrace()
    for i in range(steps):
        base = i * 1000
        t.step(i + 1, base, 1000).dataloader(base, 300)
        t.memcpy(base + 300, 50, nbytes=4_000_000)
        for k in range(kernels_per_step):
            t.kernel(base + 360 + 100 * k, 80, name=kernel_name)
    return t.write(path)


def multi_rank(folder: Path, ranks: int = 2) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for r in range(ranks):
        t = KinetoTrace(rank=r)
        for i in range(3):
            base = i * 2000
            t.step(i + 1, base, 2000).dataloader(base, 200 * (r + 1))
            t.kernel(base + 500, 700, device=r)
            t.kernel(base + 1300, 400, name="ncclKernel_AllReduce_RING_LL_Sum_float", device=r)
            t.host("cudaStreamSynchronize", base + 1250, 300, cat="cuda_runtime")
        t.write(folder / f"rank{r}.json")
    return folder


def cpu_only(path: Path) -> Path:
    t = KinetoTrace()
    for i in range(3):
        t.step(i + 1, i * 500, 500, gpu_copy=False).host("aten::mm", i * 500 + 10, 400)
    return t.write(path)


def empty(path: Path) -> Path:
    return KinetoTrace().write(path)


def hostile(path: Path) -> Path:
    """Kernel, op and step-adjacent names that try to break out of HTML, JS, jinja and Markdown."""
    t = KinetoTrace()
    t.step(1, 0, 5000).dataloader(0, 400)
    for j, name in enumerate(HOSTILE):
        t.kernel(500 + 800 * j, 300, name=name)
        t.host(name, 450 + 800 * j, 40, cat="cpu_op")
        t.host(name + " cudaStreamSynchronize", 800 + 800 * j, 20, cat="cuda_runtime")
    return t.write(path)


def report_for(paths: list[Path], min_gap_ns: int = 100_000, diagnosed: bool | str = False, **fake: Any) -> Analysis:
    """The Analysis of `paths` through the library pipeline. `diagnosed="real"`: with the real diagnosis,
    exactly as the CLI builds it; `diagnosed=True`: with a fake diagnosis of the result's shape (for edge
    cases the real one never makes); False: figures only."""
    if diagnosed == "real":
        return analyze(paths, Options(min_gap_ns=min_gap_ns, find_logs_beside=False))
    analysis = analyze(paths, Options(min_gap_ns=min_gap_ns, diagnose=False, find_logs_beside=False))
    if diagnosed:
        analysis = fake_diagnosis(analysis, **fake)
    return analysis


def data_for(paths: list[Path], min_gap_ns: int = 100_000, diagnosed: bool | str = False, **fake: Any) -> PlainData:
    """`report_for(...)` as the JSON data renderers and scripts see."""
    return report_for(paths, min_gap_ns, diagnosed, **fake).to_data()


def report_with_counters(path: Path, samples: int = 600) -> Analysis:
    """A single-GPU analysis whose Timeline also holds SM-utilisation samples over -1 ms .. 5 ms."""
    import numpy as np
    import pandas as pd

    from traceanalyzer import timeline as T

    tl = load_paths([single_gpu(path)], ReadOptions())
    ts = np.linspace(-1_000_000, 5_000_000, samples).astype(np.int64)
    value = 50 + 45 * np.sin(np.arange(samples) / 20.0)
    tl.counters = pd.DataFrame({
        "ts_ns": ts, "device": np.zeros(samples, np.int32),
        "metric": pd.Categorical(["sm_util_pct"] * samples), "value": value,
        "source": np.zeros(samples, np.int32)})[list(T.COUNTER_COLUMNS)]
    return analyze(tl, Options(diagnose=False))


def fake_diagnosis(analysis: Analysis, evidence_name: str = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
                   findings: int = 4) -> Analysis:
    """`analysis` with a diagnosis of the result's shape: each rank's gaps are its own (every device's
    gap table), causes cycling; the job speaks through its first rank."""
    ranks = []
    for r in analysis.ranks:
        gaps: list[AttributedGap] = []
        by_cause = {c: 0.0 for c in CAUSE_CYCLE}
        for d in r.devices:
            table = d.gap_table
            if table is None:
                continue
            for i, (start, dur, step) in enumerate(zip(table.start_us, table.duration_us, table.step)):
                cause = CAUSE_CYCLE[i % len(CAUSE_CYCLE)]
                by_cause[cause] += dur
                gaps.append(AttributedGap(d.device, start, dur, step, cause, (HostOp(evidence_name, 0.93),)))
        gaps.sort(key=lambda g: -g.duration_us)
        per_step = tuple(StepCausesResult(s.step, {"dataloader": round(0.6 * s.idle_us, 3),
                                                    "sync": round(0.25 * s.idle_us, 3)}) for s in r.per_step)
        lost = round(sum(by_cause.values()), 3)
        diagnosis = RankDiagnosisResult(
            primary="input_bound", host_primary="input_bound", reason="fake", headline="fake", lost_us=lost,
            window_us=r.window_us or 0.0, idle_us=lost, idle_by_cause_us=by_cause, exposed_memcpy_us=0.0,
            exposed_communication_us=0.0, launch_threads=(), launch_thread_basis="none", periodic=None,
            host_shares=None, findings=(), devices=(), per_step=per_step, gaps=tuple(gaps))
        ranks.append(dataclasses.replace(r, diagnosis=diagnosis))
    found = (
        FindingResult("input_bound", "dataloader", f"The GPU waits for {evidence_name}", "high", 1234.5, 0.9,
                      evidence=(f"{evidence_name} covers 93% of idle time", "12 of 12 steps start with a wait"),
                      advice=("Raise DataLoader(num_workers=...) and set pin_memory=True.",
                              "Prefetch: persistent_workers=True.")),
        FindingResult("sync_bound", "sync", "Host synchronisations stall the queue", "medium", 300.0, 0.25,
                      evidence=("cudaStreamSynchronize 80 calls",), advice=("Avoid .item() in the training loop.",)),
        FindingResult("memcpy_bound", "memcpy", "Pageable host-to-device copies", "low", 50.0, 0.05,
                      evidence=("4 pageable HtoD copies",), advice=("Pin host memory.",)),
        FindingResult("launch_bound", "launch", "Many tiny kernels", "low", 10.0, 0.01,
                      evidence=("median kernel 4 us",), advice=("Use CUDA graphs or torch.compile.",)),
    )[:findings]
    job = DiagnosisResult(
        primary="input_bound", host_primary="input_bound",
        headline="GPU idle 44% of the window; 90% of that idle time is spent waiting for the DataLoader.",
        findings=found, rank=0 if ranks else None)
    return dataclasses.replace(analysis, ranks=tuple(ranks), diagnosis=job)

