#!/usr/bin/env python3
"""Record real torch.profiler CPU traces for the operator view, the Python frames and the advice catalogue.

Needs a CPU build of torch (kept out of the project's own dependencies):

    python3 -m venv /tmp/torchenv_ops && /tmp/torchenv_ops/bin/pip install torch==2.13.0 numpy
    /tmp/torchenv_ops/bin/python sample_traces/make_torch_ops.py [OUTDIR]

Scenarios (each a gzipped trace <name>.json.gz in OUTDIR, default this folder):

* torch_cpu_postprocess: a small training loop whose step spends most of its time inside a
  `record_function("postprocess_callback")` range (host work after the optimizer step).
* torch_cpu_stack: the same kind of loop recorded with `with_stack=True`; the host work is in the
  user function `postprocess_batch` of this script, called from the loop.
* torch_cpu_zero_grad_item: a model of many small layers, `optimizer.zero_grad(set_to_none=False)`
  and `loss.item()` every step.

Tests compute the expected shares by hand from the raw events of the written files, so the
output need not be reproducible (real clocks, pids, thread ids); re-running replaces the files.
"""

from __future__ import annotations

import gzip
import json
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function, schedule

STEPS = 8  # wait 1, warm-up 1, then 6 active steps recorded


def mlp(dims: list[int]) -> nn.Module:
    layers: list[nn.Module] = []
    for a, b in zip(dims[:-1], dims[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


def _spin(n: int) -> float:
    x = 0.0
    for i in range(n):  # no calls inside: with_stack=True records one frame per Python call
        x += i * 0.5
    return x


_PER_SECOND: list[float] = []


def busy(seconds: float) -> float:
    """Host work that holds the thread for about `seconds` (Python arithmetic, not a sleep)."""
    if not _PER_SECOND:
        t = time.perf_counter()
        _spin(200_000)
        _PER_SECOND.append(200_000 / (time.perf_counter() - t))
    return _spin(int(seconds * _PER_SECOND[0]))


def postprocess_batch(out: torch.Tensor, seconds: float) -> list[int]:
    """The user's post-processing of a batch's outputs (what with_stack=True should name)."""
    labels = out.detach().argmax(dim=1).tolist()
    busy(seconds)
    return labels


def in_steps_us(events: list[dict], match) -> float:  # noqa: ANN001
    """Summed duration of the events `match` accepts, inside the ProfilerStep spans (us)."""
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in events if str(e["name"]).startswith("ProfilerStep#")]
    return round(sum(max(0.0, min(e["ts"] + e["dur"], hi) - max(e["ts"], lo))
                     for e in events if match(e) for lo, hi in steps), 3)


def sidecar(out_path: Path, with_stack: bool, names: dict[str, str]) -> None:
    """<name>.expected.json: what the written trace itself says, counted by hand from its raw events."""
    events = [e for e in json.loads(gzip.decompress(out_path.read_bytes()))["traceEvents"] if e.get("ph") == "X"]
    steps = [e for e in events if str(e["name"]).startswith("ProfilerStep#")]
    says = {"steps": len(steps), "step_total_us": round(sum(e["dur"] for e in steps), 3)}
    for key, suffix in names.items():
        says[f"{key}_in_steps_us"] = in_steps_us(events, lambda e, s=suffix: str(e["name"]).endswith(s))
    stem = out_path.name.removesuffix(".json.gz")
    doc = {"file": out_path.name, "scenario": stem, "torch_version": torch.__version__,
           "python_version": platform.python_version(), "made_by": "sample_traces/make_torch_ops.py",
           "activities": ["CPU"], "with_stack": with_stack, "torch_num_threads": torch.get_num_threads(),
           "schedule": {"wait": 1, "warmup": 1, "active": STEPS - 2, "repeat": 1}, "trace_says": says}
    (out_path.parent / f"{stem}.expected.json").write_text(json.dumps(doc, indent=1) + "\n")


def record(out_path: Path, *, with_stack: bool, body, names: dict[str, str]) -> None:  # noqa: ANN001
    torch.manual_seed(0)
    sched = schedule(wait=1, warmup=1, active=STEPS - 2, repeat=1)
    tmp = Path(tempfile.mkdtemp())
    try:
        trace = tmp / "trace.json"
        with profile(activities=[ProfilerActivity.CPU], schedule=sched, with_stack=with_stack,
                     on_trace_ready=lambda p: p.export_chrome_trace(str(trace))) as prof:
            for i in range(STEPS):
                body(i)
                prof.step()
        with open(trace, "rb") as src, gzip.open(out_path, "wb", compresslevel=9) as dst:
            shutil.copyfileobj(src, dst)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    sidecar(out_path, with_stack, names)
    print(out_path, out_path.stat().st_size, "bytes")


def training_step(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor,
                  set_to_none: bool = True) -> torch.Tensor:
    opt.zero_grad(set_to_none=set_to_none)
    out = model(x)
    loss = nn.functional.cross_entropy(out, y)
    loss.backward()
    opt.step()
    return out


def main(outdir: Path) -> None:
    torch.set_num_threads(1)
    x, y = torch.randn(64, 32), torch.randint(0, 4, (64,))

    model = mlp([32, 64, 64, 4])
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def postprocess_loop(i: int) -> None:
        out = training_step(model, opt, x, y)
        with record_function("postprocess_callback"):
            busy(0.020)
            _ = out.detach().softmax(dim=1).max(dim=1).values.tolist()

    record(outdir / "torch_cpu_postprocess.json.gz", with_stack=False, body=postprocess_loop,
           names={"postprocess_callback": "postprocess_callback"})

    def stack_loop(i: int) -> None:
        out = training_step(model, opt, x, y)
        postprocess_batch(out, 0.015)

    record(outdir / "torch_cpu_stack.json.gz", with_stack=True, body=stack_loop,
           names={"spin_frames": ": _spin", "postprocess_batch_frames": ": postprocess_batch"})

    many = mlp([32] + [32] * 30 + [4])
    opt_many = torch.optim.SGD(many.parameters(), lr=0.01)

    def zero_grad_item_loop(i: int) -> None:
        out = training_step(many, opt_many, x, y, set_to_none=False)
        loss = nn.functional.cross_entropy(out, y)
        _ = loss.item()

    record(outdir / "torch_cpu_zero_grad_item.json.gz", with_stack=False, body=zero_grad_item_loop,
           names={"zero_grad": ".zero_grad", "item": "aten::item"})


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent)
