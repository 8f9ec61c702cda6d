"""Builds Kineto traces of a loop without step markers: each iteration is an optional DataLoader wait, a
host-to-device copy of the batch and a fixed pattern of kernels, each launched by the host (times in us).

`loop_trace` says exactly how many full iterations it wrote, so tests can assert the count detected.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from kineto_builder import HOST_PID, HOST_TID, KinetoTrace

PATTERN = ("void embed_kernel<float>(float*)", "void gemm_kernel<float, 128>(float*, int)",
           "void softmax_kernel<float>(float*)", "void gemm_kernel<float, 64>(float*, int)",
           "void layernorm_kernel<float>(float*)", "void sgd_update_kernel<float>(float*)")
COPY = "Memcpy HtoD (Pageable -> Device)"


def loop_trace(path: Path, iterations: int = 8, pattern: tuple[str, ...] = PATTERN, kernel_us: float = 50.0,
               wait_us: float = 200.0, jitter: float = 0.0, seed: int = 0, head: int = 0, partial: int = 0,
               copy: bool = True, annotation: str | None = None, markers: bool = False,
               one_marker: bool = False) -> Path:
    """`iterations` full iterations; `head` warm-up kernels before them (names of their own); `partial` kernels
    of one more iteration at the end; `jitter` the relative spread of every duration; `annotation`: a host
    `record_function` around each iteration; `markers`: a `ProfilerStep#N` around each; `one_marker`: one
    `ProfilerStep#0` around the whole loop."""
    rng = np.random.default_rng(seed)
    t = KinetoTrace()

    def d(x: float) -> float:
        return round(x * (1 + jitter * rng.uniform(-1, 1)), 3)

    ts, gpu = 0.0, 0.0

    def launch(name: str, dur: float, is_copy: bool = False) -> None:
        nonlocal ts, gpu
        start = max(ts + 5, gpu + 1)
        if is_copy:
            t.copy(ts, 4, start, d(dur))
        else:
            t.launched(ts, 4, start, d(dur), name)
        gpu = start + dur
        ts += d(10)

    for i in range(head):
        launch(f"void warmup_autotune_kernel_{i}<float>(float*)", kernel_us)
    ts = max(ts, gpu) + 100
    first = ts
    for i in range(iterations + (1 if partial else 0)):
        begin = ts
        if wait_us:
            w = d(wait_us)
            t.dataloader(ts, w)
            ts += w + 2
        ops = pattern if i < iterations else pattern[:partial]
        if copy:
            launch(COPY, 20, is_copy=True)
        for name in ops:
            launch(name, kernel_us)
        if i < iterations:
            ts = max(ts, gpu) + 1  # the host waits for the step's result (loss.item())
            t.runtime("cudaStreamSynchronize", ts - 1, 1)
            if annotation:
                t.host(annotation, begin, ts - begin - 0.5, cat="user_annotation")
            if markers:
                t.step(i, begin, ts - begin)
    if one_marker:
        t.step(0, first - 1, ts - first + 2)
    return t.write(path)


def single_pass(path: Path, layers: int = 12) -> Path:
    """One forward pass of a deep model: an input copy, an embedding, `layers` identical layers launched
    back to back, a head and the result copied back: the layers repeat, the pass does not."""
    t = KinetoTrace()
    ts, gpu = 0.0, 0.0

    def launch(name: str, dur: float) -> None:
        nonlocal ts, gpu
        start = max(ts + 5, gpu + 1)
        t.launched(ts, 4, start, dur, name)
        gpu = start + dur
        ts += 10

    t.copy(0, 4, 5, 20)
    gpu, ts = 25, 10
    launch("void embed_kernel<float>(float*)", 30)
    for _ in range(layers):
        for name in PATTERN[1:5]:
            launch(name, 40)
    launch("void classifier_head_kernel<float>(float*)", 30)
    t.copy(ts, 4, max(ts + 5, gpu + 1), 10, name="Memcpy DtoH (Device -> Pageable)")
    return t.write(path)


def random_work(path: Path, kernels: int = 400, names: int = 25, seed: int = 0) -> Path:
    """Kernels drawn at random from a set of names, with a copy now and then: nothing repeats."""
    rng = np.random.default_rng(seed)
    t = KinetoTrace()
    ts, gpu = 0.0, 0.0
    for _ in range(kernels):
        start = max(ts + 5, gpu + 1)
        if rng.uniform() < 0.05:
            t.copy(ts, 4, start, 20)
            gpu = start + 20
        else:
            dur = float(rng.uniform(10, 100))
            t.launched(ts, 4, start, dur, f"void kernel_{int(rng.integers(names))}<float>(float*)")
            gpu = start + dur
        ts += float(rng.uniform(5, 400))
    return t.write(path)


BLOCK = ("void routing_kernel<float>(float*)", "void expert_gemm_kernel<float, 128>(float*, int)",
         "void expert_gemm_kernel<float, 64>(float*, int)", "void combine_kernel<float>(float*)")
OPTIMIZER = "Optimizer.step#SGD.step"


def blocks_trace(path: Path, blocks: int = 8, wrap: str | None = "module", loop: str | None = None,
                 grow_bytes: int = 0, kernel_us: float = 40.0, block_annotation: str | None = None) -> Path:
    """`blocks` identical blocks (an MoE layer: a small host-to-device copy, four kernels inside `aten::linear`
    ops, then `.item()`: the host synchronises on the routing), times in us.

    `wrap`: what holds them all on the host thread: "module" (the Python frame `nn.Module: Model_0`, with
    `with_stack=True`), "annotation" (a `record_function("forward")`), or None (each block at the top
    level). `loop`: what each block also does when it is an iteration of a real loop: "dataloader" (waits
    for the next batch first) or "optimizer" (steps the optimizer last). `grow_bytes`: GPU memory allocated
    and kept by every block ([memory] events), so that memory grows from block to block. `kernel_us`: each
    kernel's duration. `block_annotation`: a `record_function` around each block (a compiled piece of the
    model, as vLLM's piecewise graphs: `## Call CompiledFxGraph ... ##`)."""
    t = KinetoTrace()
    t.header["deviceProperties"] = [{"id": 0, "name": "Test GPU", "totalGlobalMem": 1000 << 20}]
    ts, gpu, allocated = 100.0, 0.0, 100 << 20

    def launch(name: str, dur: float, is_copy: bool = False) -> None:
        nonlocal ts, gpu
        start = max(ts + 5, gpu + 1)
        if is_copy:
            t.copy(ts, 4, start, dur, nbytes=4096)
        else:
            t.host("aten::linear", ts - 1, 8)
            t.launched(ts, 4, start, dur, name)
        gpu = start + dur
        ts += 10

    first = ts - 50
    for _ in range(blocks):
        begin = ts - 3
        if loop == "dataloader":
            t.dataloader(ts, 150)
            ts += 152
        launch(COPY, 5, is_copy=True)
        if grow_bytes:  # the block's output, kept
            allocated += grow_bytes
            t.events.append({"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]",
                             "pid": HOST_PID, "tid": HOST_TID, "ts": ts - 2,
                             "args": {"Device Type": 1, "Device Id": 0, "Addr": 140000000000 + int(ts),
                                      "Bytes": grow_bytes, "Total Allocated": allocated,
                                      "Total Reserved": 600 << 20}})
        for name in BLOCK:
            launch(name, kernel_us)
        ts = max(ts, gpu) + 1  # .item(): the host waits for the routing decision
        t.runtime("cudaStreamSynchronize", ts - 1, 1)
        if loop == "optimizer":
            t.host(OPTIMIZER, ts, 30)
            launch("void sgd_update_kernel<float>(float*)", 10)
            ts = max(ts, gpu) + 1
        if block_annotation:
            t.host(block_annotation, begin, ts - begin, cat="user_annotation")
        ts += 20
    if wrap == "module":
        t.host("nn.Module: Model_0", first, ts - first, cat="python_function")
    elif wrap == "annotation":
        t.host("forward", first, ts - first, cat="user_annotation")
    return t.write(path)
