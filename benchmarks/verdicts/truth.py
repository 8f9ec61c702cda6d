"""Ground truth of a real trace, read from its raw events with nothing of the analyzer.

    python benchmarks/verdicts/truth.py FILE [FILE ...]            # one JSON object (the ranks of one job)
    python benchmarks/verdicts/truth.py --table [--out DIR]        # every present row of TABLE.tsv

Several files given together are the ranks of one job (collectives are matched across them). This
script uses orjson and numpy only (never `traceanalyzer`), so it can check the analyzer instead of
repeating it. Definitions (all times in microseconds, as in the trace):

- window: first to last timed event of the file; `gpu_window`: first to last GPU activity;
- steps: `ProfilerStep#N` host spans (count, median); the analysis span is the steps' span when there
  are steps, else the GPU window;
- busy: the union of kernels, memcpy and memset per device inside the analysis span; share = busy / span;
- gaps: idle stretches of a device's union inside the span. The GPU work that ends a gap is matched to
  its launch call by `correlation`. The part of the gap before that call returned is *host-caused* (the
  host had not yet queued the work); the rest is *device-side* (the work was queued and the GPU waited
  on something else: another stream's event, a peer, a graph's own dependencies). A gap whose work was
  launched before it began is all device-side. For the host-caused parts (of the 20,000 longest gaps),
  the launching thread's enclosing events at the middle of that part say what held the host: DataLoader (`enumerate(DataLoader)`), sync (`*Synchronize`, `.item()`,
  blocking `cudaMemcpy`), allocator (`cudaMalloc`/`cudaFree`), communication, optimizer, launch (inside
  a kernel-launch call), other host work (the innermost op named), or untraced (no event covers it);
- DataLoader time per step, memcpy by kind (the GPU event names carry direction and pageable/pinned),
  synchronising calls, collective kernels (NCCL/RCCL/DeepEP/NVSHMEM/MSCCL names) with per-rank launch
  (arrival) times matched by order across ranks;
- start-up: time from the window's start to the first GPU activity and to the first step, and the
  longest host calls before the first GPU activity.
- counter logs (nvidia-smi CSV, `nvidia-smi dmon`): per GPU, samples, mean utilisation, share of
  samples at 0%, memory used share when logged.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import io
import re
import sys
from pathlib import Path

import numpy as np
import orjson

GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset"}
RUNTIME_CATS = {"cuda_runtime", "cuda_driver", "runtime", "hip_runtime", "driver"}
HOST_CATS = {"cpu_op", "user_annotation", "python_function", "operator", "cuda_runtime", "cuda_driver", "runtime",
             "hip_runtime", "driver"}
COLLECTIVE = re.compile(r"nccl|rccl|deep_?ep|nvshmem|msccl|allreduce|all_reduce|allgather|reduce_scatter|alltoall",
                        re.I)
SYNC = re.compile(r"synchroni[sz]e|^aten::(item|_local_scalar_dense|is_nonzero)$|^(cuda|hip)Memcpy(2D|3D)?$"
                  r"|^cuMemcpy(HtoD|DtoH|DtoD)?(_v2)?$|^hipMemcpyWithStream$", re.I)
ALLOC = re.compile(r"^(cuda|hip)(Malloc|Free|MallocHost|FreeHost|HostAlloc)$|^cuMem(Alloc|Free)(_v2)?$", re.I)
LAUNCH = re.compile(r"launch", re.I)
COMM = re.compile(r"^(nccl|rccl|gloo)[:_]|c10d|record_param_comms|ProcessGroup", re.I)
OPTIM = re.compile(r"^Optimizer\.(step|zero_grad)", re.I)
DATALOADER = re.compile(r"^enumerate\(DataLoader\)#")
STEP = re.compile(r"^ProfilerStep#(\d+)$")
TOP_GAPS = 20_000


def load_events(path: Path) -> tuple[list[dict], dict]:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    doc = orjson.loads(raw)
    if isinstance(doc, list):
        return doc, {}
    return doc.get("traceEvents") or [], doc


def _num(x, default=np.nan) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return default


def union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Merged intervals of [start, end) spans."""
    if len(starts) == 0:
        return starts, ends
    o = np.argsort(starts, kind="stable")
    s, e = starts[o], ends[o]
    run_end = np.maximum.accumulate(e)
    new = np.ones(len(s), bool)
    new[1:] = s[1:] > run_end[:-1]
    idx = np.flatnonzero(new)
    return s[idx], np.maximum.reduceat(e, idx) if len(idx) else e[:0]


def clip_total(s: np.ndarray, e: np.ndarray, lo: float, hi: float) -> float:
    return float(np.clip(np.minimum(e, hi) - np.maximum(s, lo), 0, None).sum())


def classify(stack: list[str]) -> str:
    """What held the host, from the names of the events enclosing a moment (outermost first)."""
    names = stack
    for label, pat in (("dataloader", DATALOADER), ("sync", SYNC), ("allocator", ALLOC), ("communication", COMM),
                       ("optimizer", OPTIM)):
        if any(pat.search(n) for n in names):
            return label
    if not names:
        return "untraced"
    if LAUNCH.search(names[-1]):
        return "launch"
    inner = [n for n in names if not STEP.match(n)]
    return "host work: " + (inner[-1] if inner else names[-1])[:60]


def trace_truth(path: Path) -> dict:
    events, doc = load_events(path)
    xs = [e for e in events if isinstance(e, dict) and e.get("ph") == "X" and "ts" in e]
    out: dict = {"file": path.name, "events": len(events), "x_events": len(xs)}
    dist = doc.get("distributedInfo") or {}
    out["rank"] = dist.get("rank")
    props = doc.get("deviceProperties") or []
    out["gpu_names"] = sorted({str(p.get("name")) for p in props if isinstance(p, dict)})[:3]
    if not xs:
        out["verdict_hint"] = "no timed events"
        return out
    ts = np.array([_num(e.get("ts")) for e in xs])
    dur = np.nan_to_num(np.array([_num(e.get("dur"), 0.0) for e in xs]))
    cat = np.array([str(e.get("cat", "")).lower() for e in xs])
    name = np.array([str(e.get("name", "")) for e in xs], dtype=object)
    end = ts + dur
    out["window_us"] = round(float(np.nanmax(end) - np.nanmin(ts)), 1)
    t0 = float(np.nanmin(ts))

    gpu = np.isin(cat, list(GPU_CATS))
    rt = np.isin(cat, list(RUNTIME_CATS))
    host = np.isin(cat, list(HOST_CATS))
    args = [e.get("args") or {} for e in xs]
    corr = np.array([_num(a.get("correlation"), -1) for a in args])
    device = np.array([_num(a.get("device"), -1) if g else -1 for a, g in zip(args, gpu, strict=True)])
    pid = np.array([str(e.get("pid")) for e in xs], dtype=object)
    tid = np.array([str(e.get("tid")) for e in xs], dtype=object)

    # steps
    step_idx = np.array([bool(STEP.match(n)) and c in ("cpu_op", "user_annotation", "operator")
                         for n, c in zip(name, cat, strict=True)])
    steps = sorted(zip(ts[step_idx], end[step_idx], strict=True))
    out["steps"] = len(steps)
    if steps:
        sd = np.array([b - a for a, b in steps])
        out["step_median_us"] = round(float(np.median(sd)), 1)
        out["step_min_max_us"] = [round(float(sd.min()), 1), round(float(sd.max()), 1)]
    out["gpu_events"] = int(gpu.sum())
    if not gpu.any():
        out["host_busy_top"] = _top_names(name[host], dur[host])
        return out
    g0, g1 = float(ts[gpu].min()), float(end[gpu].max())
    out["gpu_window_us"] = round(g1 - g0, 1)
    lo, hi = (steps[0][0], steps[-1][1]) if steps else (g0, g1)
    out["span"] = "steps" if steps else "gpu_window"
    out["span_us"] = round(hi - lo, 1)

    # start-up before the first GPU activity and the first step
    out["startup_before_first_gpu_us"] = round(g0 - t0, 1)
    out["startup_before_first_step_us"] = round(steps[0][0] - t0, 1) if steps else None
    pre = host & (ts < g0)
    out["longest_host_calls_before_first_gpu"] = _top_names(name[pre], np.minimum(end[pre], g0) - ts[pre], 3)

    # launch calls by correlation
    launch_ts = {}
    launch_end = {}
    launch_where = {}
    for i in np.flatnonzero(rt & (corr >= 0)):
        launch_ts[corr[i]] = ts[i]
        launch_end[corr[i]] = end[i]
        launch_where[corr[i]] = (pid[i], tid[i])

    # host stacks per thread (for what held the launching thread), in duration classes so that the events
    # covering a moment are found among those that started at most one class length before it
    classes = (1e2, 1e3, 1e4, 1e5, np.inf)
    threads: dict[tuple, list[tuple[float, np.ndarray, np.ndarray, np.ndarray]]] = {}
    hidx = np.flatnonzero(host)
    by_thread: dict[tuple, list[int]] = {}
    for k, i in zip(zip(pid[hidx], tid[hidx], strict=True), hidx, strict=True):
        by_thread.setdefault(k, []).append(i)
    for k, ii in by_thread.items():
        a = np.array(ii)
        a = a[np.argsort(ts[a], kind="stable")]
        cls = np.searchsorted(np.array(classes), dur[a], side="right")
        threads[k] = [(lim, ts[a[cls == c]], end[a[cls == c]], a[cls == c]) for c, lim in enumerate(classes)]

    def stack_at(thread, t) -> list[str]:
        found = []
        for lim, s, e, a in threads.get(thread, []):
            i0 = 0 if lim == np.inf else np.searchsorted(s, t - lim, side="left")
            i1 = np.searchsorted(s, t, side="right")
            found += [(s[j], -e[j], a[j]) for j in range(i0, i1) if e[j] > t]
        return [name[j] for _, _, j in sorted(found)]  # outermost (earliest start, latest end) first

    devices = []
    for d in sorted(set(device[gpu].tolist())):
        m = gpu & (device == d)
        us, ue = union(ts[m], end[m])
        busy = clip_total(us, ue, lo, hi)
        dev: dict = {"device": int(d), "busy_us": round(busy, 1), "busy_share": round(busy / (hi - lo), 4)
                     if hi > lo else None}
        kern = m & (cat == "kernel")
        ks, ke = union(ts[kern], end[kern])
        dev["kernel_busy_us"] = round(clip_total(ks, ke, lo, hi), 1)
        coll = kern & np.array([bool(COLLECTIVE.search(n)) for n in name])
        cs, ce = union(ts[coll], end[coll])
        dev["collective_busy_us"] = round(clip_total(cs, ce, lo, hi), 1)
        dev["top_kernels"] = _top_names(name[kern], dur[kern], 3, total=busy)
        # gaps inside the span, between merged intervals and at the span's edges
        gs = np.concatenate([[lo], ue])
        ge = np.concatenate([us, [hi]])
        gs, ge = np.maximum(gs, lo), np.minimum(ge, hi)
        keep = ge > gs
        gs, ge = gs[keep], ge[keep]
        gap_len = ge - gs
        dev["idle_us"] = round(float(gap_len.sum()), 1)
        # the GPU work that ends each gap: the earliest-starting event at the gap's end
        mi = np.flatnonzero(m)
        order = mi[np.argsort(ts[mi], kind="stable")]
        first_at = np.searchsorted(ts[order], ge, side="left")
        split = {"device_side": 0.0, "host_caused": 0.0, "no_launch_record": 0.0, "after_last_work": 0.0}
        held: dict[str, float] = {}
        rows = []
        big = np.argsort(-gap_len, kind="stable")
        rank_of = np.empty(len(big), int)
        rank_of[big] = np.arange(len(big))
        for g in range(len(gs)):
            if first_at[g] >= len(order):
                split["after_last_work"] += gap_len[g]
                continue
            j = order[first_at[g]]
            c = corr[j]
            lt = launch_ts.get(c)
            if lt is None:
                split["no_launch_record"] += gap_len[g]
                host_part = 0.0
                kind = "no_launch_record"
            else:
                # the host delayed the GPU until the launch call returned; after that the work was queued
                host_part = float(np.clip(min(launch_end[c], ge[g]) - gs[g], 0, gap_len[g]))
                split["host_caused"] += host_part
                split["device_side"] += gap_len[g] - host_part
                kind = "host_caused" if host_part >= gap_len[g] / 2 else "device_side"
            if rank_of[g] < TOP_GAPS:
                why = None
                if host_part > 0:
                    why = classify(stack_at(launch_where[c], gs[g] + host_part / 2))
                    held[why] = held.get(why, 0.0) + host_part
                if rank_of[g] < 8:
                    rows.append({"start_us": round(gs[g] - lo, 1), "len_us": round(float(gap_len[g]), 1),
                                 "ended_by": str(name[j])[:60], "kind": kind, "host_part_us": round(host_part, 1),
                                 "launched_before_gap_us": None if lt is None else round(gs[g] - lt, 1),
                                 "host_was_in": why})
            elif host_part > 0:
                held["(smaller gaps)"] = held.get("(smaller gaps)", 0.0) + host_part
        dev["idle_split_us"] = {k: round(v, 1) for k, v in split.items()}
        dev["host_caused_by_us"] = dict(sorted(((k, round(v, 1)) for k, v in held.items()), key=lambda kv: -kv[1]))
        dev["largest_gaps"] = sorted(rows, key=lambda r: -r["len_us"])
        dev["gaps"] = len(gs)
        devices.append(dev)
    out["devices"] = devices

    # memcpy / memset by kind, syncs, DataLoader
    mc = gpu & np.array(["memcpy" in c or "memset" in c for c in cat])
    out["memcpy_by_kind_us"] = _top_names(name[mc], dur[mc], 8)
    sy = (rt | host) & np.array([bool(SYNC.search(n)) for n in name])
    out["sync_calls"] = {"count": int(sy.sum()), "total_us": round(float(dur[sy].sum()), 1),
                         "top": _top_names(name[sy], dur[sy], 3)}
    dl = host & np.array([bool(DATALOADER.search(n)) for n in name])
    out["dataloader_total_us"] = round(float(dur[dl].sum()), 1)
    if steps and dl.any():
        per = [float(dur[dl & (ts >= a) & (ts < b)].sum()) for a, b in steps]
        out["dataloader_per_step_median_us"] = round(float(np.median(per)), 1)
    # collectives (launch = arrival)
    coll = gpu & (cat == "kernel") & np.array([bool(COLLECTIVE.search(n)) for n in name])
    ci = np.flatnonzero(coll)
    ci = ci[np.argsort(ts[ci], kind="stable")]
    out["collectives"] = [{"name": str(name[i])[:50], "launch_ts": launch_ts.get(corr[i]), "start_ts": float(ts[i]),
                           "dur_us": float(dur[i])} for i in ci]
    return out


def _top_names(names, durs, n: int = 5, total: float | None = None) -> list:
    if len(names) == 0:
        return []
    keys, inv = np.unique(np.asarray(names, dtype=str), return_inverse=True)
    sums = np.bincount(inv, weights=np.asarray(durs, float))
    counts = np.bincount(inv)
    o = np.argsort(-sums)[:n]
    rows = []
    for k in o:
        r = [str(keys[k])[:70], round(float(sums[k]), 1), int(counts[k])]
        if total:
            r.append(round(float(sums[k]) / total, 3))
        rows.append(r)
    return rows


def collectives_across(ranks: list[dict]) -> dict:
    """Per matched collective (by order), arrival spread and the last rank to arrive."""
    lists = [r.get("collectives") or [] for r in ranks]
    n = min((len(x) for x in lists), default=0)
    late: dict[int, int] = {}
    spreads = []
    for k in range(n):
        arr = [x[k]["launch_ts"] if x[k]["launch_ts"] is not None else x[k]["start_ts"] for x in lists]
        spreads.append(max(arr) - min(arr))
        late[int(np.argmax(arr))] = late.get(int(np.argmax(arr)), 0) + 1
    return {"matched": n, "arrival_spread_median_us": round(float(np.median(spreads)), 1) if spreads else None,
            "arrival_spread_max_us": round(float(max(spreads)), 1) if spreads else None,
            "last_arrival_count_by_file_index": late}


def log_truth(path: Path) -> dict:
    """nvidia-smi CSV (`--query-gpu`) or `nvidia-smi dmon` logs: utilisation per GPU."""
    text = path.read_bytes().replace(b"\x00", b"").decode(errors="replace")
    lines = [ln for ln in text.splitlines() if ln.strip()]
    util: dict[str, list[float]] = {}
    mem: dict[str, list[float]] = {}
    if lines and lines[0].lstrip().startswith("#"):
        cols = lines[0].lstrip("#").split()
        for ln in lines[1:]:
            if ln.lstrip().startswith("#"):
                continue
            f = ln.split()
            if len(f) != len(cols):
                continue
            row = dict(zip(cols, f, strict=True))
            if "sm" in row:
                util.setdefault(row.get("gpu", "0"), []).append(_num(row["sm"]))
    else:
        rows = list(csv.reader(io.StringIO("\n".join(lines)), skipinitialspace=True))
        head = [h.strip().lower() for h in rows[0]] if rows else []
        ui = next((i for i, h in enumerate(head) if h.startswith("utilization.gpu")), None)
        gi = next((i for i, h in enumerate(head) if h == "index"), None)
        mu = next((i for i, h in enumerate(head) if h.startswith("memory.used")), None)
        mt = next((i for i, h in enumerate(head) if h.startswith("memory.total")), None)
        for r in rows[1:]:
            if ui is None or len(r) != len(head):
                continue
            g = r[gi].strip() if gi is not None else "0"
            util.setdefault(g, []).append(_num(r[ui].split()[0] if r[ui].split() else ""))
            if mu is not None and mt is not None and r[mu].split() and r[mt].split():
                mem.setdefault(g, []).append(_num(r[mu].split()[0]) / max(_num(r[mt].split()[0], 1), 1))
    gpus = {}
    for g, u in util.items():
        a = np.array(u)
        a = a[~np.isnan(a)]
        if len(a) == 0:
            continue
        gpus[g] = {"samples": len(a), "mean_util": round(float(a.mean()), 1), "zero_share": round(float((a == 0).mean()), 3)}
        if g in mem:
            gpus[g]["mem_used_share_mean"] = round(float(np.nanmean(mem[g])), 3)
    return {"file": path.name, "log": True, "gpus": gpus}


def truth(paths: list[Path]) -> dict:
    if any(p.is_dir() or p.suffix == ".pb" for p in paths):  # XSpace protobuf: not readable with orjson
        return {"ranks": [{"file": p.name, "note": "XSpace profile: the truth is the source's own measurement"}
                          for p in paths]}
    if all(p.suffix in (".log", ".csv", ".txt") for p in paths):
        return {"ranks": [log_truth(p) for p in paths]}
    ranks = [trace_truth(p) for p in paths]
    out: dict = {"ranks": ranks}
    if len(ranks) > 1:
        out["collectives_across_ranks"] = collectives_across(ranks)
    for r in ranks:
        r.pop("collectives", None) if len(r.get("collectives") or []) > 40 else None
        if "collectives" in r:
            r["collectives_count"] = len(r["collectives"])
            r["collectives_total_us"] = round(sum(c["dur_us"] for c in r["collectives"]), 1)
            r.pop("collectives")
    return out


def _ms(us: float | None) -> str:
    return "?" if us is None else (f"{us / 1000:.1f} ms" if us >= 1000 else f"{us:.0f} us")


def brief(t: dict) -> str:
    """One line per rank: the figures a truth sentence is written from."""
    lines = []
    for r in t["ranks"]:
        if r.get("note"):
            lines.append(f"{r['file']}: {r['note']}")
            continue
        if r.get("log"):
            lines.append(r["file"] + ": " + "; ".join(
                f"GPU {g}: {v['samples']} samples, mean util {v['mean_util']}%, {v['zero_share']:.0%} at 0%"
                + (f", memory {v['mem_used_share_mean']:.0%} used" if "mem_used_share_mean" in v else "")
                for g, v in r["gpus"].items()))
            continue
        parts = [f"{r['file']}: window {_ms(r.get('window_us'))}"]
        if r.get("steps"):
            parts.append(f"{r['steps']} steps, median {_ms(r['step_median_us'])}")
        if not r.get("gpu_events"):
            parts.append("no GPU events; host top " + ", ".join(f"{n} {_ms(d)}" for n, d, _ in
                                                                 (r.get("host_busy_top") or [])[:3]))
            lines.append("; ".join(parts))
            continue
        parts.append(f"first GPU activity after {_ms(r['startup_before_first_gpu_us'])}"
                     f" ({r['startup_before_first_gpu_us'] / r['window_us']:.0%} of window)")
        for d in r["devices"]:
            sp = d["idle_split_us"]
            idle = max(d["idle_us"], 1e-9)
            held = ", ".join(f"{k} {v / idle:.0%}" for k, v in list(d["host_caused_by_us"].items())[:3])
            top = d["top_kernels"][0] if d["top_kernels"] else None
            parts.append(
                f"dev {d['device']}: busy {d['busy_share']:.0%} of {r['span']} ({_ms(d['busy_us'])}), "
                f"collectives {_ms(d['collective_busy_us'])}, idle {_ms(d['idle_us'])}: device-side "
                f"{sp['device_side'] / idle:.0%}, host-caused {sp['host_caused'] / idle:.0%} [{held}], "
                f"no launch record {sp['no_launch_record'] / idle:.0%}"
                + (f"; top kernel {top[0][:40]} {top[3]:.0%} of busy" if top and len(top) > 3 else ""))
        if r.get("dataloader_total_us"):
            parts.append(f"DataLoader {_ms(r['dataloader_total_us'])}"
                         + (f" (median {_ms(r.get('dataloader_per_step_median_us'))}/step)"
                            if r.get("dataloader_per_step_median_us") is not None else ""))
        if r.get("memcpy_by_kind_us"):
            parts.append("copies " + ", ".join(f"{n} {_ms(d)}" for n, d, _ in r["memcpy_by_kind_us"][:2]))
        if r["sync_calls"]["count"]:
            parts.append(f"{r['sync_calls']['count']} sync calls {_ms(r['sync_calls']['total_us'])}")
        lines.append("; ".join(parts))
    if "collectives_across_ranks" in t:
        lines.append(f"collectives across ranks: {t['collectives_across_ranks']}")
    return "\n".join(lines)


def _plain(x):
    """numpy scalars as Python numbers in the JSON output."""
    if isinstance(x, np.generic):
        return x.item()
    raise TypeError(type(x).__name__)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="*", type=Path)
    ap.add_argument("--table", action="store_true", help="every row of TABLE.tsv whose files are present")
    ap.add_argument("--brief", action="store_true", help="one line per rank instead of JSON")
    ap.add_argument("--out", type=Path, help="write ID.json per row here instead of printing")
    args = ap.parse_args(argv)
    jobs: list[tuple[str, list[Path]]] = []
    if args.table:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from fetch_traces import corpus_dir, fetched_dir, rows

        for row in rows():
            base = corpus_dir() if row["origin"] == "corpus" else fetched_dir()
            files = [base / f for f in row["file"].split(";")]
            if all(f.is_file() for f in files):
                jobs.append((row["id"], files))
    else:
        jobs = [(args.files[0].name, args.files)] if args.files else []
    for ident, files in jobs:
        t = truth(files)
        t["id"] = ident
        if args.brief:
            print(f"[{ident}] {brief(t)}")
            continue
        blob = orjson.dumps(t, default=_plain, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS)
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / f"{ident}.json").write_bytes(blob)
        else:
            sys.stdout.buffer.write(blob + b"\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
