#!/usr/bin/env python3
"""Record real torch.profiler CPU traces of small training loops, with measured answers.

Needs a CPU build of torch (kept out of the project's own dependencies):

    python3 -m venv /work/torchvenv && /work/torchvenv/bin/pip install torch==2.13.0 numpy
    /work/torchvenv/bin/python sample_traces/make_torch_cpu.py [OUTDIR]

For every scenario the loop itself measures, with time.perf_counter(), the wall-clock time
spent inside next(iterator) of the DataLoader and the wall-clock time of each profiled
(active) step, and writes them to <name>.expected.json next to the gzipped trace.  A
"step" here is what the trace calls ProfilerStep#N: the time from one prof.step() call to
the next.  The sidecar also records what the written trace itself says (the DataLoader and
ProfilerStep events found in it), as a cross-check for readers.

The output is NOT byte-reproducible (real clocks, pids, thread ids); re-running replaces
the files.  Scenarios: torch_cpu_input_bound, torch_cpu_well_fed, torch_cpu_multiworker,
torch_cpu_host_bound, and the tensorboard_trace_handler log dir torch_cpu_logdir/.
"""

from __future__ import annotations

import gzip
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn
from torch.profiler import (
    ProfilerAction,
    ProfilerActivity,
    profile,
    record_function,
    schedule,
    tensorboard_trace_handler,
)
from torch.utils.data import DataLoader, Dataset, TensorDataset

ACTIVE_ACTIONS = (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)


class SleepyDataset(Dataset):
    """Each item costs `sleep_s` of wall-clock time (stands in for slow decoding / IO)."""

    def __init__(self, n=256, dim=32, sleep_s=0.02):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, dim, generator=g)
        self.y = torch.randint(0, 4, (n,), generator=g)
        self.sleep_s = sleep_s

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        time.sleep(self.sleep_s)
        return self.x[i], self.y[i]


def mlp(dims):
    layers = []
    for a, b in zip(dims[:-1], dims[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


def run_loop(loader, model, sched, *, steps, on_trace_ready=None, postprocess_s=0.0):
    """Train `steps` iterations under the profiler; time next(it) and each step."""
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    it = iter(loader)
    rows = []
    with profile(activities=[ProfilerActivity.CPU], schedule=sched,
                 on_trace_ready=on_trace_ready) as prof:
        t_prev = time.perf_counter()
        for i in range(steps):
            t0 = time.perf_counter()
            x, y = next(it)
            t1 = time.perf_counter()
            opt.zero_grad()
            out = model(x)
            loss = loss_fn(out, y)
            loss.backward()
            opt.step()
            if postprocess_s:
                with record_function("postprocess"):
                    time.sleep(postprocess_s)
                    _ = out.detach().argmax(dim=1).tolist()
                    _ = [round(v, 4) for v in out.detach().softmax(dim=1).max(dim=1).values.tolist()]
            action = sched(i)
            t_end = time.perf_counter()
            prof.step()
            t_after = time.perf_counter()
            rows.append({
                "iteration": i,
                "profiler_step": f"ProfilerStep#{i}",
                "action": action.name,
                "active": action in ACTIVE_ACTIONS,
                # previous prof.step() return -> this prof.step() call: the ProfilerStep span
                "step_wall_us": round((t_end - t_prev) * 1e6, 1),
                "dataloader_wait_us": round((t1 - t0) * 1e6, 1),
                "loss": round(loss.item(), 6),
            })
            t_prev = t_after
    return prof, rows


def summarise(rows):
    act = [r for r in rows if r["active"]]
    total = sum(r["step_wall_us"] for r in act)
    wait = sum(r["dataloader_wait_us"] for r in act)
    return {
        "active_steps": len(act),
        "active_step_names": [r["profiler_step"] for r in act],
        "active_steps_wall_us": round(total, 1),
        "dataloader_wait_us": round(wait, 1),
        "dataloader_wait_fraction": round(wait / total, 4) if total else None,
        "step_wall_us": [r["step_wall_us"] for r in act],
        "step_dataloader_wait_us": [r["dataloader_wait_us"] for r in act],
    }


def union_len(ivs):
    tot, cur_s, cur_e = 0.0, None, None
    for s, e in sorted(ivs):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                tot += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        tot += cur_e - cur_s
    return tot


def trace_facts(trace):
    """What the written trace contains: step and DataLoader events, categories, threads."""
    evs = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    steps = [e for e in evs if str(e.get("name", "")).startswith("ProfilerStep#")]
    dl = [e for e in evs if str(e.get("name", "")).startswith("enumerate(DataLoader)#")]
    facts = {"top_level_keys": list(trace.keys()),
             "x_events": len(evs),
             "categories": sorted({str(e.get("cat")) for e in evs}),
             "profiler_steps": [{"name": e["name"], "cat": e.get("cat"), "tid": e.get("tid"),
                                 "dur_us": e["dur"]} for e in sorted(steps, key=lambda e: e["ts"])],
             "dataloader_events": {}}
    for e in dl:
        key = f'{e["name"]} | cat={e.get("cat")}'
        d = facts["dataloader_events"].setdefault(key, {"count": 0, "total_dur_us": 0.0})
        d["count"] += 1
        d["total_dur_us"] = round(d["total_dur_us"] + float(e["dur"]), 3)
    if steps:
        w0 = min(float(e["ts"]) for e in steps)
        w1 = max(float(e["ts"]) + float(e["dur"]) for e in steps)
        clipped = [(max(float(e["ts"]), w0), min(float(e["ts"]) + float(e["dur"]), w1)) for e in dl]
        waited = union_len([c for c in clipped if c[1] > c[0]])
        facts["window_us"] = round(w1 - w0, 3)
        facts["dataloader_wait_us_in_trace"] = round(waited, 3)
        facts["dataloader_wait_fraction_in_trace"] = round(waited / (w1 - w0), 4)
    facts["host_threads"] = sorted({str(e.get("tid")) for e in evs if e.get("cat") != "Trace"})
    facts["ts_is_float"] = any(isinstance(e.get("ts"), float) for e in evs)
    facts["baseTimeNanoseconds"] = trace.get("baseTimeNanoseconds")
    return facts


def common_meta():
    return {"torch_version": torch.__version__, "python_version": platform.python_version(),
            "made_by": "sample_traces/make_torch_cpu.py", "activities": ["CPU"],
            "torch_num_threads": torch.get_num_threads()}


def scenario(outdir, name, loader, model, *, active, postprocess_s=0.0, notes=""):
    sched = schedule(wait=1, warmup=1, active=active, repeat=1)
    steps = 2 + active
    prof, rows = run_loop(loader, model, sched, steps=steps, postprocess_s=postprocess_s)
    with tempfile.TemporaryDirectory() as td:
        raw = Path(td) / f"{name}.json"
        prof.export_chrome_trace(str(raw))
        data = raw.read_bytes()
    trace = json.loads(data)
    gz_path = outdir / f"{name}.json.gz"
    with open(gz_path, "wb") as fh, gzip.GzipFile(filename="", mode="wb", fileobj=fh, mtime=0) as g:
        g.write(data)
    exp = {"file": gz_path.name, "scenario": name, **common_meta(),
           "schedule": {"wait": 1, "warmup": 1, "active": active, "repeat": 1},
           "dataloader": {"batch_size": loader.batch_size, "num_workers": loader.num_workers,
                          "dataset": type(loader.dataset).__name__},
           "measured": summarise(rows), "iterations": rows,
           "trace_says": trace_facts(trace), "notes": notes}
    (outdir / f"{name}.expected.json").write_text(json.dumps(exp, indent=1) + "\n")
    m = exp["measured"]
    print(f"{name}: {len(data)} B raw, {gz_path.stat().st_size} B gz; measured wait fraction "
          f"{m['dataloader_wait_fraction']}, trace says {exp['trace_says'].get('dataloader_wait_fraction_in_trace')}",
          file=sys.stderr)


def logdir_scenario(outdir):
    d = outdir / "torch_cpu_logdir"
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    workers = {}
    for w in ("worker0", "worker1"):
        torch.manual_seed(1)
        ds = TensorDataset(torch.randn(64, 16), torch.randint(0, 4, (64,)))
        loader = DataLoader(ds, batch_size=4, shuffle=False, num_workers=0)
        model = mlp([16, 16, 4])
        sched = schedule(wait=1, warmup=1, active=2, repeat=2)
        before = set(os.listdir(d))
        _, rows = run_loop(loader, model, sched, steps=9,
                           on_trace_ready=tensorboard_trace_handler(str(d), worker_name=w))
        new = sorted(set(os.listdir(d)) - before)
        spans = []
        for f in new:
            tr = json.loads((d / f).read_text())
            facts = trace_facts(tr)
            names = [s["name"] for s in facts["profiler_steps"]]
            mine = [r for r in rows if r["profiler_step"] in names]
            spans.append({"file": f, "profiler_steps": names,
                          "measured_step_wall_us": [r["step_wall_us"] for r in mine],
                          "measured_dataloader_wait_us": [r["dataloader_wait_us"] for r in mine],
                          "trace_says": facts})
        workers[w] = {"files": new, "spans": spans, "iterations": rows}
    exp = {"dir": d.name, "scenario": "torch_cpu_logdir", **common_meta(),
           "schedule": {"wait": 1, "warmup": 1, "active": 2, "repeat": 2},
           "workers": workers,
           "notes": ("tensorboard_trace_handler names files <worker>.<time.time_ns()>.pt.trace.json; "
                     "two workers x two spans = four files, each span holding 2 ProfilerSteps. "
                     "Tiny MLP 16-16-4, batch 4, TensorDataset, num_workers=0.")}
    (outdir / "torch_cpu_logdir.expected.json").write_text(json.dumps(exp, indent=1) + "\n")
    print(f"logdir: {sorted(os.listdir(d))}", file=sys.stderr)


def main(argv):
    outdir = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parent
    outdir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    torch.set_num_threads(1)  # 2+ intra-op threads were 50x slower on a 2-core VM

    scenario(outdir, "torch_cpu_input_bound",
             DataLoader(SleepyDataset(sleep_s=0.02), batch_size=4, num_workers=0),
             mlp([32, 2048, 2048, 4]), active=4,
             notes=("__getitem__ sleeps 20 ms, batch 4 (80 ms of loading per step); small MLP "
                    "32-2048-2048-4 with SGD (~18 ms of compute per step on one thread)."))
    scenario(outdir, "torch_cpu_well_fed",
             DataLoader(TensorDataset(torch.randn(1024, 512), torch.randint(0, 10, (1024,))),
                        batch_size=64, num_workers=0),
             mlp([512, 1024, 1024, 1024, 10]), active=4,
             notes="In-memory TensorDataset, batch 64, MLP 512-1024-1024-1024-10 with SGD.")
    scenario(outdir, "torch_cpu_multiworker",
             DataLoader(SleepyDataset(sleep_s=0.02), batch_size=4, num_workers=2),
             mlp([32, 2048, 2048, 4]), active=4,
             notes=("The input-bound dataset and model with num_workers=2: two worker processes "
                    "load batches (80 ms each) in parallel, so a batch is ready about every 40 ms "
                    "and the main loop waits roughly 40 - 18 ms per step. Worker processes are "
                    "not in the trace; only the main thread's wait is."))
    scenario(outdir, "torch_cpu_host_bound",
             DataLoader(TensorDataset(torch.randn(512, 64), torch.randint(0, 4, (512,))),
                        batch_size=32, num_workers=0),
             mlp([64, 64, 4]), active=4, postprocess_s=0.02,
             notes=("Fast in-memory data, small MLP; each iteration ends with a 20 ms python "
                    "post-processing step inside record_function('postprocess') (time.sleep + "
                    "outputs converted to lists)."))
    logdir_scenario(outdir)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
