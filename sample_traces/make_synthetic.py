#!/usr/bin/env python3
"""Write the synthetic Kineto traces in sample_traces/ and their known answers.

Plain Python (stdlib only) and deterministic: running it twice gives byte-identical
files.  Usage:

    python3 sample_traces/make_synthetic.py [OUTDIR]     # default: the folder of this script

Every scenario is laid out by hand on a timeline of integer microseconds measured from
the first host ProfilerStep (offset 0).  Each scenario function states the figures a
person can check with pencil and paper (``hand=...``); the script also derives the same
figures from the events it wrote, with a small interval union, and refuses to write
anything if the two disagree.  The derived figures go to ``<name>.expected.json``.

Conventions for the expected figures (also in README.md):
* window = first host ``ProfilerStep#N`` start .. last host ``ProfilerStep#N`` end (the
  ``user_annotation``/``Operator`` copy on the CPU thread, never the
  ``gpu_user_annotation`` copy on the GPU stream).
* GPU work = X events with cat kernel / gpu_memcpy / gpu_memset (2021: Kernel / Memcpy /
  Memset).  Busy time = length of the union of their intervals clipped to the window;
  exact duplicates and zero-length events add nothing.
* idle gaps = the holes of that union inside the window that last >= 100 us, including
  window start -> first GPU work and last GPU work -> window end.
* memcpy by direction = union of the memcpy events of that direction, clipped to window.
* dataloader wait = union of ``enumerate(DataLoader)#...__next__`` events, clipped.
* per step: host step interval [start, end); busy / dataloader wait clipped to it.
* top kernels: kernel events after removing exact duplicates (same ph, cat, name, pid,
  tid, ts, dur), grouped by name, summed *unclipped* dur, sorted by total desc then name.
"""

from __future__ import annotations

import copy
import gzip
import io
import json
import sys
from pathlib import Path

HOST_PID = 4242
HOST_TID = 4243
GPU_PID = 0
T0_EPOCH_US = 1_700_000_000_000_000  # int-us files: ts since the Unix epoch
T0_MONO_US = 4_458_676_000_000  # float-us variant: monotonic clock, plus baseTimeNanoseconds
BASE_TIME_NS = 1_711_964_646_000_000_000
GAP_MIN_US = 100

DL_SINGLE = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
GEMM_H100 = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k_off_kernel__5x_cublas"
SGEMM = "volta_sgemm_128x64_nn"
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)"
MUL = "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> >, at::detail::Array<char*, 3> >(int, at::native::BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> >, at::detail::Array<char*, 3>)"
RELU = "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, at::native::detail::ClampLimits)::{lambda()#1}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2> >(int, at::native::(anonymous namespace)::launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, at::native::detail::ClampLimits)::{lambda()#1}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2>)"
FILL = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)"
REDUCE = "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4> >(at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4>)"
CONV = "void cudnn::cnn::implicit_convolve_sgemm<float, float, 1024, 5, 5, 3, 3, 3, 1, false, false, true>(int, int, int, float const*, int, float*, float const*, kernel_conv_params, unsigned long long, int, float, float, int, float const*, float const*, bool, int, int)"
ADAM = "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, false>, float*, double, double, double, double, double, double, bool, float*, float*>"
NCCL_AR = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"

HTOD_PAGEABLE = "Memcpy HtoD (Pageable -> Device)"
HTOD_PINNED = "Memcpy HtoD (Pinned -> Device)"
DTOH_PINNED = "Memcpy DtoH (Device -> Pinned)"
DTOH_PAGEABLE = "Memcpy DtoH (Device -> Pageable)"
MEMSET = "Memset (Device)"

CBID = {"cudaLaunchKernel": 211, "cudaMemcpyAsync": 41, "cudaMemsetAsync": 51, "cudaStreamSynchronize": 131}

DEVICE_PROPERTIES = [{
    "id": 0, "name": "Synthetic GPU", "totalGlobalMem": 85899345920,
    "computeMajor": 9, "computeMinor": 0,
    "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048,
    "regsPerBlock": 65536, "regsPerMultiprocessor": 65536, "warpSize": 32,
    "sharedMemPerBlock": 49152, "sharedMemPerMultiprocessor": 233472,
    "numSms": 132, "sharedMemPerBlockOptin": 232448,
}]

GPU_WORK_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}


# --------------------------------------------------------------------------------------
# interval helpers (used to derive the expected figures from the written events)

def union(ivs):
    """Merge [start, end) intervals; zero-length ones vanish."""
    out = []
    for s, e in sorted(iv for iv in ivs if iv[1] > iv[0]):
        if out and s <= out[-1][1]:
            if e > out[-1][1]:
                out[-1][1] = e
        else:
            out.append([s, e])
    return out


def clip(ivs, lo, hi):
    return [[max(s, lo), min(e, hi)] for s, e in ivs if min(e, hi) > max(s, lo)]


def length(ivs):
    return sum(e - s for s, e in union(ivs))


def frac(a, b):
    return round(a / b, 6) if b else None


# --------------------------------------------------------------------------------------
# the trace builder: events on a relative-us timeline, serialised at the end

class Trace:
    def __init__(self, name, *, streams=(7,), gpu=True, dist=None, t0=T0_EPOCH_US):
        self.name = name
        self.streams = list(streams)
        self.gpu_present = gpu
        self.dist = dist
        self.t0 = t0
        self.host = []  # dicts: cat, name, start, dur, args, tid
        self.gpu = []   # dicts: cat, name, start, dur, stream, args
        self.flows = []  # (corr, host_start, gpu_start, host_tid, stream)
        self.steps = []  # (n, start, dur)
        self.corr = 1000
        self.ext = 1
        self.extra = {}  # scenario-specific figures

    # host side ------------------------------------------------------------------
    def _host(self, cat, name, start, dur, args=None, tid=HOST_TID):
        ev = {"cat": cat, "name": name, "start": start, "dur": dur, "args": args or {}, "tid": tid}
        self.host.append(ev)
        return ev

    def _next_ext(self):
        self.ext += 1
        return self.ext

    def step(self, n, start, dur):
        self.steps.append((n, start, dur))
        return self._host("user_annotation", f"ProfilerStep#{n}", start, dur,
                          {"External id": self._next_ext(), "Record function id": 0})

    def annotation(self, name, start, dur):
        return self._host("user_annotation", name, start, dur,
                          {"External id": self._next_ext(), "Record function id": 0})

    def op(self, name, start, dur):
        return self._host("cpu_op", name, start, dur, {"External id": self._next_ext()})

    def dataloader(self, start, dur, name=DL_SINGLE):
        return self.annotation(name, start, dur)

    def runtime(self, name, start, dur, ext=None):
        self.corr += 1
        args = {"External id": ext if ext is not None else 0, "cbid": CBID[name], "correlation": self.corr}
        self._host("cuda_runtime", name, start, dur, args)
        return self.corr

    def sync(self, start, dur, ext=None):
        return self.runtime("cudaStreamSynchronize", start, dur, ext)

    # device side ----------------------------------------------------------------
    def gpu_op(self, cat, name, start, dur, *, host, host_dur=8, op=None, stream=7, nbytes=None, extra=None):
        """One GPU event plus its host launch.

        host: start of the runtime call (relative us).  op: name of a cpu_op that wraps
        the runtime call 2 us either side (None: no wrapper).
        """
        ext = self._next_ext()
        if op is not None:
            self._host("cpu_op", op, host - 2, host_dur + 4, {"External id": ext})
        rname = {"kernel": "cudaLaunchKernel", "gpu_memcpy": "cudaMemcpyAsync",
                 "gpu_memset": "cudaMemsetAsync"}[cat]
        corr = self.runtime(rname, host, host_dur, ext)
        args = {"External id": ext, "device": 0, "stream": stream, "correlation": corr}
        if cat == "kernel":
            args = {"External id": ext, "queued": 0, "device": 0, "context": 1, "stream": stream,
                    "correlation": corr, "registers per thread": 32, "shared memory": 0,
                    "blocks per SM": 1.0, "warps per SM": 4.0, "grid": [132, 1, 1],
                    "block": [128, 1, 1], "est. achieved occupancy %": 6}
        else:
            args = {"External id": ext, "device": 0, "context": 1, "stream": stream,
                    "correlation": corr, "bytes": nbytes,
                    "memory bandwidth (GB/s)": round(nbytes / (dur * 1000.0), 6) if dur else 0}
        if extra:
            args.update(extra)
        ev = {"cat": cat, "name": name, "start": start, "dur": dur, "stream": stream, "args": args,
              "launch_at": host}
        self.gpu.append(ev)
        self.flows.append((corr, host, start, HOST_TID, stream))
        return ev

    def kernel(self, name, start, dur, **kw):
        return self.gpu_op("kernel", name, start, dur, **kw)

    def memcpy(self, name, start, dur, nbytes, **kw):
        return self.gpu_op("gpu_memcpy", name, start, dur, nbytes=nbytes, **kw)

    def memset(self, start, dur, nbytes, **kw):
        return self.gpu_op("gpu_memset", MEMSET, start, dur, nbytes=nbytes, **kw)

    def duplicate(self, ev):
        """Append an exact copy of a host or GPU event (no extra flow)."""
        dup = copy.deepcopy(ev)
        (self.gpu if "stream" in ev else self.host).append(dup)

    # checks ---------------------------------------------------------------------
    def check_nesting(self):
        """Host events on one thread must nest (no partial overlaps), like real traces."""
        by_tid = {}
        for ev in self.host:
            if ev["dur"] > 0:
                by_tid.setdefault(ev["tid"], []).append((ev["start"], -ev["dur"], ev["name"]))
        for tid, evs in by_tid.items():
            stack = []
            for s, negd, name in sorted(evs):
                e = s - negd
                while stack and stack[-1][1] <= s:
                    stack.pop()
                if stack and e > stack[-1][1]:
                    raise AssertionError(f"{self.name}: host event {name} [{s},{e}) partially overlaps "
                                         f"{stack[-1][2]} [{stack[-1][0]},{stack[-1][1]})")
                stack.append((s, e, name))
        for ev in self.gpu:
            if ev["launch_at"] >= ev["start"]:
                raise AssertionError(f"{self.name}: {ev['name']} starts before its launch")

    # expected figures -----------------------------------------------------------
    def expected(self, fname, primary, notes):
        steps = sorted(self.steps, key=lambda s: s[1])
        w0 = steps[0][1]
        w1 = max(s + d for _, s, d in steps)
        window = w1 - w0
        dl = [[e["start"], e["start"] + e["dur"]] for e in self.host
              if e["name"].startswith("enumerate(DataLoader)#")]
        dl_w = length(clip(dl, w0, w1))
        out = {
            "file": fname,
            "scenario": self.name,
            "made_by": "sample_traces/make_synthetic.py",
            "format": "kineto",
            "window": {"start_offset_us": w0, "end_offset_us": w1, "window_us": window},
        }
        step_rows = []
        gpu_ivs = [[e["start"], e["start"] + e["dur"]] for e in self.gpu if e["cat"] in GPU_WORK_CATS]
        for n, s, d in steps:
            row = {"name": f"ProfilerStep#{n}", "start_offset_us": s, "duration_us": d}
            if self.gpu_present:
                row["gpu_busy_us"] = length(clip(gpu_ivs, s, s + d))
            row["dataloader_wait_us"] = length(clip(dl, s, s + d))
            step_rows.append(row)
        out["step_count"] = len(steps)
        out["steps"] = step_rows
        if self.gpu_present:
            busy_u = union(clip(gpu_ivs, w0, w1))
            busy = length(busy_u)
            holes, cur = [], w0
            for s, e in busy_u:
                if s > cur:
                    holes.append([cur, s])
                cur = e
            if cur < w1:
                holes.append([cur, w1])
            gaps = [{"start_offset_us": s, "end_offset_us": e, "duration_us": e - s}
                    for s, e in holes if e - s >= GAP_MIN_US]
            mem = {}
            for d in ("HtoD", "DtoH", "DtoD"):
                ivs = [[e["start"], e["start"] + e["dur"]] for e in self.gpu
                       if e["cat"] == "gpu_memcpy" and e["name"].startswith(f"Memcpy {d}")]
                mem[d] = length(clip(ivs, w0, w1))
            mem_all = [[e["start"], e["start"] + e["dur"]] for e in self.gpu if e["cat"] == "gpu_memcpy"]
            mem["total"] = length(clip(mem_all, w0, w1))
            kern = [[e["start"], e["start"] + e["dur"]] for e in self.gpu if e["cat"] == "kernel"]
            mset = [[e["start"], e["start"] + e["dur"]] for e in self.gpu if e["cat"] == "gpu_memset"]
            out.update({
                "gpu_busy_us": busy,
                "gpu_busy_fraction": frac(busy, window),
                "gpu_idle_us": window - busy,
                "gpu_idle_fraction": frac(window - busy, window),
                "kernel_busy_us": length(clip(kern, w0, w1)),
                "memset_busy_us": length(clip(mset, w0, w1)),
                "idle_gap_threshold_us": GAP_MIN_US,
                "idle_gap_count": len(gaps),
                "idle_gaps_total_us": sum(g["duration_us"] for g in gaps),
                "idle_gaps": gaps,
                "memcpy_us": mem,
                "memcpy_fraction_of_window": frac(mem["total"], window),
                "memcpy_fraction_of_gpu_busy": frac(mem["total"], busy),
            })
            seen, agg = set(), {}
            for e in self.gpu:
                if e["cat"] != "kernel":
                    continue
                key = (e["name"], e["stream"], e["start"], e["dur"])
                if key in seen:
                    continue
                seen.add(key)
                a = agg.setdefault(e["name"], [0, 0])
                a[0] += 1
                a[1] += e["dur"]
            top = sorted(agg.items(), key=lambda kv: (-kv[1][1], kv[0]))[:5]
            out["top_kernels"] = [{"name": k, "count": c, "total_us": t} for k, (c, t) in top]
            syncs = [[e["start"], e["start"] + e["dur"]] for e in self.host
                     if e["cat"] == "cuda_runtime" and e["name"].endswith("Synchronize")]
            out["host_sync_us"] = length(clip(syncs, w0, w1))
            nccl = [[e["start"], e["start"] + e["dur"]] for e in self.gpu
                    if e["cat"] == "kernel" and "nccl" in e["name"].lower()]
            if nccl:
                comp = [[e["start"], e["start"] + e["dur"]] for e in self.gpu
                        if e["cat"] == "kernel" and "nccl" not in e["name"].lower()]
                comm_us = length(clip(nccl, w0, w1))
                comp_us = length(clip(comp, w0, w1))
                both = length(clip(nccl + comp, w0, w1))
                overlap = comm_us + comp_us - both
                out["communication"] = {
                    "nccl_kernel_us": comm_us, "compute_kernel_us": comp_us,
                    "overlap_us": overlap, "exposed_communication_us": comm_us - overlap,
                    "nccl_fraction_of_window": frac(comm_us, window),
                    "nccl_fraction_of_gpu_busy": frac(comm_us, busy),
                }
            # what a reader gets when it falls into the traps (for negative tests)
            ann = []
            for n, s, d in self.steps:
                mine = [g for g in self.gpu if s <= g["launch_at"] < s + d]
                if mine:
                    ann.append([min(g["start"] for g in mine), max(g["start"] + g["dur"] for g in mine)])
            out["trap_figures"] = {
                "gpu_busy_us_if_gpu_user_annotation_counted": length(clip(gpu_ivs + ann, w0, w1)),
                "gpu_work_dur_sum_with_duplicates_unclipped": sum(e["dur"] for e in self.gpu),
            }
        else:
            out.update({"gpu_busy_us": None, "gpu_busy_fraction": None, "idle_gaps": None,
                        "memcpy_us": None, "top_kernels": []})
        out["dataloader_wait_us"] = dl_w
        out["dataloader_wait_fraction"] = frac(dl_w, window)
        keys = {(e["cat"], e["name"], e["tid"], e["start"], e["dur"]) for e in self.host}
        gkeys = {(e["cat"], e["name"], e["stream"], e["start"], e["dur"]) for e in self.gpu}
        out["counts"] = {
            "host_x_events": len(self.host),
            "gpu_work_events": len(self.gpu),
            "kernel_events": sum(1 for e in self.gpu if e["cat"] == "kernel"),
            "exact_duplicate_x_events": len(self.host) - len(keys) + len(self.gpu) - len(gkeys),
            "zero_duration_x_events": sum(1 for e in self.host + self.gpu if e["dur"] == 0),
        }
        if self.extra:
            out["scenario_figures"] = self.extra
        out["primary_bottleneck"] = primary
        out["notes"] = notes
        return out

    # serialisation --------------------------------------------------------------
    def render(self, style="modern_int"):
        """style: modern_int (2.x, int us), modern_float (float us + baseTimeNanoseconds),
        legacy2021 (capitalised cats, string tids, no deviceProperties)."""
        legacy = style == "legacy2021"
        if style == "modern_float":
            base = T0_MONO_US

            def ts(x):
                return float(base + x) + 0.25

            def du(x):
                return float(x)
        else:
            base = self.t0

            def ts(x):
                return base + x

            def du(x):
                return x
        host_tid = str(HOST_TID) if legacy else HOST_TID

        def gtid(stream):
            return f"stream {stream}" if legacy else stream

        catmap = {"cpu_op": "Operator", "user_annotation": "Operator", "cuda_runtime": "Runtime",
                  "kernel": "Kernel", "gpu_memcpy": "Memcpy", "gpu_memset": "Memset"}

        def fix_args(args):
            if not legacy:
                return args
            out = {}
            for k, v in args.items():
                if k == "External id":
                    out["external id"] = v
                elif k in ("Record function id",):
                    continue
                else:
                    out[k] = v
            return out

        events = []
        for e in sorted(self.host, key=lambda e: (e["start"], -e["dur"])):
            events.append({"ph": "X", "cat": catmap[e["cat"]] if legacy else e["cat"], "name": e["name"],
                           "pid": HOST_PID, "tid": host_tid if e["tid"] == HOST_TID else e["tid"],
                           "ts": ts(e["start"]), "dur": du(e["dur"]), "args": fix_args(e["args"])})
        for e in self.gpu:
            events.append({"ph": "X", "cat": catmap[e["cat"]] if legacy else e["cat"], "name": e["name"],
                           "pid": GPU_PID, "tid": gtid(e["stream"]), "ts": ts(e["start"]),
                           "dur": du(e["dur"]), "args": fix_args(e["args"])})
        if not legacy and self.gpu_present:
            # the GPU copy of each ProfilerStep: spans the GPU work launched inside the step
            for n, s, d in self.steps:
                mine = [g for g in self.gpu if s <= g["launch_at"] < s + d]
                if not mine:
                    continue
                g0 = min(g["start"] for g in mine)
                g1 = max(g["start"] + g["dur"] for g in mine)
                events.append({"ph": "X", "cat": "gpu_user_annotation", "name": f"ProfilerStep#{n}",
                               "pid": GPU_PID, "tid": 7, "ts": ts(g0), "dur": du(g1 - g0),
                               "args": {"External id": 0}})
        fcat, fname = ("async", "launch") if legacy else ("ac2g", "ac2g")
        for corr, hs, gs, htid, stream in self.flows:
            events.append({"ph": "s", "id": corr, "pid": HOST_PID, "tid": HOST_TID, "ts": ts(hs),
                           "cat": fcat, "name": fname})
            events.append({"ph": "f", "id": corr, "pid": GPU_PID, "tid": gtid(stream), "ts": ts(gs),
                           "cat": fcat, "name": fname, "bp": "e"})
        first = min([e["start"] for e in self.host] + [g["start"] for g in self.gpu]) - 500
        last = max([e["start"] + e["dur"] for e in self.host] + [g["start"] + g["dur"] for g in self.gpu]) + 500
        m_ts = ts(first)
        meta = [
            ("process_name", HOST_PID, 0, {"name": "python3"}),
            ("process_labels", HOST_PID, 0, {"labels": "CPU"}),
            ("process_sort_index", HOST_PID, 0, {"sort_index": HOST_PID}),
        ]
        if self.gpu_present:
            meta += [
                ("process_name", GPU_PID, 0, {"name": "python3"}),
                ("process_labels", GPU_PID, 0, {"labels": "GPU 0"}),
                ("process_sort_index", GPU_PID, 0, {"sort_index": 5000000}),
            ]
            for st in self.streams:
                meta += [("thread_name", GPU_PID, gtid(st), {"name": f"stream {st} "}),
                         ("thread_sort_index", GPU_PID, gtid(st), {"sort_index": st})]
        meta += [("thread_name", HOST_PID, host_tid, {"name": f"thread {HOST_TID} (python3)"}),
                 ("thread_sort_index", HOST_PID, host_tid, {"sort_index": HOST_TID})]
        for name, pid, tid, args in meta:
            if legacy and name.endswith("sort_index"):
                continue
            events.append({"name": name, "ph": "M", "ts": m_ts, "pid": pid, "tid": tid, "args": args})
        span_pid = "Traces" if legacy else "Spans"
        events.append({"ph": "X", "cat": "Trace", "ts": m_ts, "dur": du(last - first), "pid": span_pid,
                       "tid": "PyTorch Profiler", "name": "PyTorch Profiler (0)", "args": {"Op count": 0}})
        if not legacy:
            events.append({"name": "process_sort_index", "ph": "M", "ts": m_ts, "pid": "Spans", "tid": 0,
                           "args": {"sort_index": 536870912}})
        # as PyTorch writes them (2021 samples, 2024 HTA files and torch 2.13 alike): the first
        # global instant sits on pid "Traces", only "Record Window End" has pid "" and tid ""
        events.append({"name": "Iteration Start: PyTorch Profiler", "ph": "i", "s": "g", "pid": "Traces",
                       "tid": "Trace PyTorch Profiler", "ts": m_ts})
        events.append({"name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": "",
                       "ts": ts(last)})

        top = {"schemaVersion": 1}
        if not legacy:
            top["deviceProperties"] = DEVICE_PROPERTIES if self.gpu_present else []
            if self.dist is not None:
                top["distributedInfo"] = self.dist
            if self.gpu_present:
                top["cupti_version"] = 24
                top["cuda_runtime_version"] = 12080
                top["cuda_driver_version"] = 12080
            top["record_shapes"] = 0
        top["traceEvents"] = events
        if not legacy:
            top["traceName"] = f"/tmp/synthetic/{self.name}.pt.trace.json"
            top["displayTimeUnit"] = "ms"
        if style == "modern_float":
            top["baseTimeNanoseconds"] = BASE_TIME_NS
        return dump_kineto(top)

    def window_start_ts(self, style="modern_int"):
        w0 = min(s for _, s, _ in self.steps)
        if style == "modern_float":
            return float(T0_MONO_US + w0) + 0.25
        return self.t0 + w0


def dump_kineto(top):
    """Kineto's layout: one event per line inside traceEvents."""
    parts = ["{"]
    items = list(top.items())
    for i, (k, v) in enumerate(items):
        comma = "," if i < len(items) - 1 else ""
        if k == "traceEvents":
            parts.append('  "traceEvents": [')
            for j, ev in enumerate(v):
                parts.append("  " + json.dumps(ev) + ("," if j < len(v) - 1 else ""))
            parts.append("  ]" + comma)
        else:
            parts.append(f"  {json.dumps(k)}: {json.dumps(v)}{comma}")
    parts.append("}")
    return ("\n".join(parts) + "\n").encode("utf-8")


def gz(data):
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as f:
        f.write(data)
    return buf.getvalue()


def check_hand(exp, hand):
    for k, v in hand.items():
        got = exp
        for part in k.split("."):
            got = got[int(part)] if isinstance(got, list) else got[part]
        if got != v:
            raise AssertionError(f"{exp['scenario']}: {k} hand={v!r} derived={got!r}")


# --------------------------------------------------------------------------------------
# scenarios

def sc_basic():
    t = Trace("basic", streams=(7, 20))
    for k in range(3):
        t.step(k, 3000 * k, 3000)
    # dataloader waits, one duplicated exactly
    t.dataloader(0, 100)
    dl1 = t.dataloader(3000, 100)
    t.duplicate(dl1)
    t.dataloader(6000, 100)
    # step 0: pageable HtoD (host blocks in cudaMemcpyAsync), two overlapping kernels on
    # streams 7 and 20, a zero-length kernel, a memset
    t.memcpy(HTOD_PAGEABLE, 200, 400, 4_194_304, host=150, host_dur=455, op="aten::copy_")
    t.kernel(SGEMM, 700, 800, host=620, op="aten::mm")
    t.kernel(ADD, 1200, 600, host=640, op="aten::add", stream=20)
    t.kernel(FILL, 1500, 0, host=660, op="aten::fill_")
    t.memset(1880, 50, 1_048_576, host=680, op="aten::zero_")
    t.op("aten::empty", 700, 0)  # zero-length cpu op
    # step 1: a duplicated kernel, overlap across streams, a short DtoH
    a = t.kernel(SGEMM, 3300, 800, host=3200, op="aten::mm")
    t.duplicate(a)
    t.kernel(ADD, 3900, 600, host=3220, op="aten::add", stream=20)
    t.kernel(REDUCE, 4620, 80, host=3240, op="aten::sum")
    t.memcpy(DTOH_PINNED, 4750, 50, 4096, host=3260, op="aten::copy_")
    # step 2: a duplicated kernel; the last kernel runs past the window end
    t.kernel(SGEMM, 6300, 800, host=6200, op="aten::mm")
    c = t.kernel(REDUCE, 7180, 100, host=6220, op="aten::sum")
    t.duplicate(c)
    t.annotation("Optimizer.step#SGD.step", 6234, 66)
    t.kernel(SGEMM, 8600, 800, host=6240, op="aten::mm")
    hand = {
        "window.window_us": 9000,
        "gpu_busy_us": 4180,  # 400 + (700..1800)=1100 + 50 | 1200 + 80 + 50 | 800 + 100 + 400(clipped)
        "gpu_idle_us": 4820,
        "idle_gaps_total_us": 4610,  # 200 + 100 + 1370 + 120 + 1500 + 1320
        "idle_gap_count": 6,
        "memcpy_us": {"HtoD": 400, "DtoH": 50, "DtoD": 0, "total": 450},
        "dataloader_wait_us": 300,
        "steps.0.gpu_busy_us": 1550, "steps.1.gpu_busy_us": 1330, "steps.2.gpu_busy_us": 1300,
        "top_kernels.0.total_us": 3200,  # volta_sgemm x4 (dedup), 800 each, unclipped
        "top_kernels.0.count": 4,
        "counts.exact_duplicate_x_events": 3,
    }
    notes = ("Arithmetic check, no designed bottleneck. Traps: 3 exact duplicates (a kernel, "
             "a reduce kernel, a dataloader wait) must not change union figures; a zero-length "
             "kernel (1500) and cpu op; kernels on streams 7 and 20 overlap (700..1800 is one "
             "busy stretch); the last GEMM runs 8600..9400 but the window ends at 9000 (only "
             "400 us count); the idle gap 600..700 is exactly 100 us (counts: threshold is >=); "
             "the gpu_user_annotation ProfilerStep copies on stream 7 are not GPU work "
             "(counting them gives 5,930 us busy: see trap_figures).")
    return t, hand, None, notes


def sc_input_bound():
    t = Trace("input_bound")
    for k in range(5):
        b = 10000 * k
        t.step(k, b, 10000)
        t.dataloader(b, 6000)
        t.memcpy(HTOD_PINNED, b + 6100, 100, 25_165_824, host=b + 6010, op="aten::copy_")
        t.kernel(CONV, b + 6250, 1000, host=b + 6030, op="aten::conv2d")
        t.kernel(SGEMM, b + 7250, 1000, host=b + 6050, op="aten::mm")
        t.kernel(ADAM, b + 8250, 1000, host=b + 6070, op="aten::_fused_adam_")
    hand = {
        "window.window_us": 50000,
        "gpu_busy_us": 15500,
        "dataloader_wait_us": 30000,
        "dataloader_wait_fraction": 0.6,
        "idle_gaps_total_us": 34250,  # 6100 + 4 x 6850 + 750
        "idle_gap_count": 6,
        "steps.2.dataloader_wait_us": 6000,
        "steps.2.gpu_busy_us": 3100,
    }
    notes = ("Each 10 ms step waits 6 ms in the DataLoader (60%) while the GPU is idle; the "
             "GPU then works 3.1 ms. Every long idle gap sits under a dataloader wait.")
    return t, hand, "input_bound", notes


def sc_memcpy_bound():
    t = Trace("memcpy_bound")
    for k in range(4):
        b = 10000 * k
        t.step(k, b, 10000)
        t.dataloader(b, 50)
        # synchronous pageable copy: the host sits in cudaMemcpyAsync for the whole copy
        t._host("cpu_op", "aten::to", b + 56, 5050)
        t.memcpy(HTOD_PAGEABLE, b + 100, 5000, 40_000_000, host=b + 60, host_dur=5042, op="aten::copy_")
        t.kernel(SGEMM, b + 5400, 2000, host=b + 5300, op="aten::mm")
        t._host("cpu_op", "aten::to", b + 5316, 3143)
        t.memcpy(DTOH_PAGEABLE, b + 7450, 1000, 8_000_000, host=b + 5320, host_dur=3135, op="aten::copy_")
    hand = {
        "window.window_us": 40000,
        "gpu_busy_us": 32000,
        "memcpy_us": {"HtoD": 20000, "DtoH": 4000, "DtoD": 0, "total": 24000},
        "memcpy_fraction_of_gpu_busy": 0.75,
        "memcpy_fraction_of_window": 0.6,
        "idle_gaps_total_us": 7800,  # 100 + 4 x 300 + 3 x 1650 + 1550
        "idle_gap_count": 9,
    }
    notes = ("Pageable HtoD copies of 40 MB (5 ms, 8 GB/s) and DtoH copies of 8 MB (1 ms) per "
             "10 ms step: memcpy is 75% of GPU busy time and 60% of the window. The host is "
             "blocked in cudaMemcpyAsync for the whole copy; the 300 us gap after each HtoD "
             "(the host only then launches the GEMM) and the gap after each DtoH sit behind "
             "the synchronous copies.")
    return t, hand, "memcpy_bound", notes


def sc_launch_bound():
    t = Trace("launch_bound")
    names = (ADD, MUL, RELU)
    for k in range(3):
        b = 20000 * k
        t.step(k, b, 20000)
        t.dataloader(b, 150)
        s = b + 200
        for i in range(1002):
            d = 3 + i % 3
            t.kernel(names[i % 3], s, d, host=s - 12, host_dur=10)
            s += d + (10 + 5 * (i % 3))
    hand = {
        "window.window_us": 60000,
        "gpu_busy_us": 12024,  # 3 steps x 334 x (3+4+5)
        "idle_gap_count": 4,
        "idle_gaps_total_us": 2946,  # 200 + 982 + 982 + 782
        "gpu_idle_us": 47976,  # of which 45030 in 3003 gaps of 10/15/20 us
        "counts.kernel_events": 3006,
        "top_kernels.0.total_us": 5010,
        "top_kernels.0.count": 1002,
    }
    t.extra = {"small_gaps_under_100us_total_us": 45030, "small_gap_count": 3003,
               "kernel_duration_us": "3, 4 or 5", "gap_between_kernels_us": "10, 15 or 20",
               "mean_kernel_duration_us": 4.0}
    notes = ("3,006 kernels of 3-5 us with 10-20 us holes between them: each cudaLaunchKernel "
             "takes 10 us on the host, so the GPU waits on launches. GPU busy 20%, yet 94% of "
             "the idle time is in holes shorter than 100 us; only 4 gaps reach 100 us. Written "
             "gzipped (launch_bound.json.gz).")
    return t, hand, "launch_bound", notes


def sc_sync_bound():
    t = Trace("sync_bound")
    for k in range(4):
        b = 10000 * k
        t.step(k, b, 10000)
        t.dataloader(b, 50)
        for half, (g, h) in enumerate(((100, 60), (5100, 5060))):
            t.kernel(SGEMM if half == 0 else CONV, b + g, 3000, host=b + h, host_dur=30, op="aten::mm")
            # loss.item(): aten::item -> aten::_local_scalar_dense -> cudaMemcpyAsync + sync
            t._host("cpu_op", "aten::item", b + h + 33, 3013)
            t._host("cpu_op", "aten::_local_scalar_dense", b + h + 34, 3011)
            t.memcpy(DTOH_PINNED, b + g + 3000, 2, 4, host=b + h + 35, host_dur=8)
            t.sync(b + h + 44, 3000)
        t.op("aten::eq", b + 3110, 90)
    hand = {
        "window.window_us": 40000,
        "gpu_busy_us": 24016,
        "idle_gap_count": 9,
        "idle_gaps_total_us": 15984,  # 100 + 7 x 1998 + 1898
        "steps.1.gpu_busy_us": 6004,
    }
    hand["host_sync_us"] = 24000  # 8 syncs x 3000
    t.extra = {"host_sync_fraction_of_window": 0.6,
               "idle_gaps_starting_at_a_sync_return": 8}
    notes = ("Twice per step the host calls aten::item (cudaMemcpyAsync DtoH of 4 bytes + "
             "cudaStreamSynchronize of 3 ms). After each sync returns the host needs ~2 ms "
             "before the next launch, so the GPU idles 1998 us after every 2-us DtoH copy: "
             "8 of the 9 long gaps start where a sync ends. Host time in "
             "cudaStreamSynchronize = 24,000 us (60% of the window).")
    return t, hand, "sync_bound", notes


def sc_host_bound():
    t = Trace("host_bound")
    for k in range(4):
        b = 10000 * k
        t.step(k, b, 10000)
        t.dataloader(b, 100)
        t.kernel(SGEMM, b + 300, 1000, host=b + 150, op="aten::linear")
        t.kernel(RELU, b + 1300, 1000, host=b + 170, op="aten::relu")
        t.kernel(SGEMM, b + 2300, 1000, host=b + 190, op="aten::linear")
        t.annotation("PostProcess", b + 3400, 4000)
        t.op("aten::sort", b + 3500, 1000)
        t.op("aten::unique", b + 5000, 1000)
        t.annotation("log_metrics", b + 7400, 2000)
    hand = {
        "window.window_us": 40000,
        "gpu_busy_us": 12000,
        "idle_gap_count": 5,
        "idle_gaps_total_us": 28000,  # 300 + 3 x 7000 + 6700
        "dataloader_wait_us": 400,
    }
    t.extra = {"host_postprocess_us": 16000, "host_log_metrics_us": 8000,
               "host_annotations_fraction_of_window": 0.6}
    notes = ("The GPU works 3 ms per 10 ms step; the host then spends 4 ms in PostProcess "
             "(CPU-only aten::sort/aten::unique, no CUDA calls, no sync) and 2 ms in "
             "log_metrics while the GPU idles. No dataloader wait to speak of (1%), no sync, "
             "no memcpy.")
    return t, hand, "host_bound", notes


def sc_periodic_stall():
    t = Trace("periodic_stall")
    b = 0
    for k in range(12):
        stall = k % 4 == 3
        d = 25000 if stall else 5000
        t.step(k, b, d)
        t.dataloader(b, 100)
        t.kernel(GEMM_H100, b + 200, 2000, host=b + 110, op="aten::mm")
        t.kernel(GEMM_H100, b + 2200, 2000, host=b + 130, op="aten::mm")
        t.kernel(ADD, b + 4200, 700, host=b + 150, op="aten::add")
        if stall:
            t.annotation("save_checkpoint", b + 5000, 20000)
            t.op("aten::clone", b + 5100, 100)
        b += d
    hand = {
        "window.window_us": 120000,
        "gpu_busy_us": 56400,
        "idle_gaps_total_us": 63600,  # 200 + 9 x 300 + 2 x 20300 + 20100
        "idle_gap_count": 13,
        "steps.3.duration_us": 25000,
        "steps.4.duration_us": 5000,
    }
    t.extra = {"stall_steps": ["ProfilerStep#3", "ProfilerStep#7", "ProfilerStep#11"],
               "normal_step_us": 5000, "stall_step_us": 25000, "median_step_us": 5000,
               "save_checkpoint_us_total": 60000}
    notes = ("12 steps; steps #3, #7 and #11 run a 20 ms save_checkpoint annotation on the host "
             "after their GPU work, and the GPU idles for it. Normal steps are 5 ms with the GPU "
             "94% busy; the three stall steps are 5x longer and hold 60,700 us of the 63,600 us "
             "of idle gaps.")
    return t, hand, "periodic_stall", notes


def _comm_rank(rank):
    dist = {"backend": "nccl", "rank": rank, "world_size": 2, "pg_count": 1,
            "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl",
                           "pg_size": 2, "ranks": [0, 1]}],
            "nccl_version": "2.21.5"}
    t = Trace(f"comm_rank{rank}", streams=(7, 20), dist=dist, t0=T0_EPOCH_US + 37 * rank)
    comp_end = 2100 if rank == 0 else 1900
    ar_start = 2000 if rank == 0 else 1900
    nccl_args = {"Collective name": "allreduce", "In msg nelems": 67108864, "Out msg nelems": 67108864,
                 "Group size": 2, "dtype": "Float", "In split size": "[]", "Out split size": "[]",
                 "Process Group Name": "0", "Process Group Description": "default_pg",
                 "Process Group Ranks": "[0, 1]"}
    for k in range(4):
        b = 10000 * k
        t.step(k, b, 10000)
        t.dataloader(b, 50)
        half = (comp_end - 100) // 2
        t.kernel(SGEMM, b + 100, half, host=b + 60, op="aten::mm")
        t.kernel(SGEMM, b + 100 + half, half, host=b + 74, op="aten::mm")
        t.annotation("nccl:all_reduce", b + 86, 18)
        t._host("cpu_op", "record_param_comms", b + 88, 14, {"External id": t._next_ext()})
        t.kernel(NCCL_AR, b + ar_start, 9500 - ar_start, host=b + 90, stream=20, extra=nccl_args)
        t.kernel(ADAM, b + 9500, 300, host=b + 110, op="aten::_fused_adam_")
    comm = 4 * (9500 - ar_start)  # 30000 (rank 0) or 30400 (rank 1)
    overlap = 4 * max(0, comp_end - ar_start)  # 400 or 0
    compute = 4 * (comp_end - 100 + 300)  # 9200 or 8400
    hand = {
        "window.window_us": 40000,
        "gpu_busy_us": 38800,
        "idle_gaps_total_us": 1200,  # 100 + 3 x 300 + 200
        "idle_gap_count": 5,
        "communication.nccl_kernel_us": comm,
        "communication.compute_kernel_us": compute,
        "communication.overlap_us": overlap,
        "communication.exposed_communication_us": comm - overlap,
    }
    notes = (f"Rank {rank} of 2 (clock offset {37 * rank} us). Each 10 ms step: "
             f"{comp_end - 100} us of GEMMs on stream 7, then ncclDevKernel_AllReduce on stream 20 "
             f"for {9500 - ar_start} us ({'100 us overlapping the last GEMM' if rank == 0 else 'no overlap'}), "
             "then a 300 us optimizer kernel. The GPU is 97% 'busy' but 75-76% of the window is "
             "the all-reduce: counting NCCL kernels as compute would call this gpu_bound.")
    return t, hand, "communication_bound", notes


def sc_gpu_bound():
    t = Trace("gpu_bound")
    for k in range(4):
        b = 10000 * k
        t.step(k, b, 10000)
        t.dataloader(b, 20)
        t.kernel(GEMM_H100, b + 100, 3000, host=b + 30, op="aten::mm")
        t.kernel(GEMM_H100, b + 3105, 3000, host=b + 50, op="aten::mm")
        t.kernel(GEMM_H100, b + 6110, 3000, host=b + 70, op="aten::mm")
        t.kernel(ADD, b + 9115, 800, host=b + 90, op="aten::add")
        t._host("cpu_op", "aten::item", b + 110, 9810)
        t._host("cpu_op", "aten::_local_scalar_dense", b + 111, 9808)
        t.memcpy(DTOH_PINNED, b + 9915, 2, 4, host=b + 112, host_dur=6)
        t.sync(b + 120, 9798)
    hand = {
        "window.window_us": 40000,
        "gpu_busy_us": 39208,
        "gpu_idle_us": 792,
        "gpu_idle_fraction": 0.0198,
        "idle_gap_count": 4,
        "idle_gaps_total_us": 649,  # 100 + 3 x 183
    }
    hand["host_sync_us"] = 39192  # 4 x 9798
    notes = ("Back-to-back bf16 GEMMs: the GPU is busy 98.02% of the window (idle 1.98%). "
             "Trap: the host spends 98% of the window inside cudaStreamSynchronize (loss.item() "
             "waiting on the GPU) - that is the symptom of a GPU-bound loop, not sync_bound, "
             "because the GPU never idles after the syncs.")
    return t, hand, "gpu_bound", notes


def sc_cpu_only():
    t = Trace("cpu_only", gpu=False)
    for k in range(4):
        b = 10000 * k
        t.step(k, b, 10000)
        t.dataloader(b, 2500)
        t.op("aten::linear", b + 2600, 3000)
        t.op("aten::addmm", b + 2610, 2980)
        t.op("autograd::engine::evaluate_function: AddmmBackward0", b + 5700, 3500)
        t.op("AddmmBackward0", b + 5710, 3480)
        t.annotation("Optimizer.step#SGD.step", b + 9300, 600)
        t.op("aten::add_", b + 9310, 580)
    hand = {"window.window_us": 40000, "dataloader_wait_us": 10000, "dataloader_wait_fraction": 0.25}
    notes = ("Host events only: deviceProperties is [], no GPU process, no cuda_runtime, no "
             "kernels. GPU figures must be reported as unavailable, not as 0% busy / 100% idle. "
             "Dataloader wait is 25% of the window; no GPU bottleneck can be named.")
    return t, hand, None, notes


def sc_hostile_names():
    t = Trace("hostile_names")
    for k in range(2):
        b = 5000 * k
        t.step(k, b, 5000)
        t.dataloader(b, 50)
        t.kernel("<script>alert(1)</script>", b + 200, 1000, host=b + 100,
                 op="\"><img src=x onerror=alert(2)>")
        t.kernel(SGEMM, b + 1200, 1000, host=b + 120, op="aten::mm")
        t.annotation("{{ 7*7 }} {% if true %}jinja{% endif %} ${7*7} </textarea>", b + 140, 20)
        t.kernel("unicode_\u00fc_\u65e5\u672c_\u2028_line_sep & <b>amp</b>", b + 2200, 500,
                 host=b + 142, op="aten::add & 'quote'")
    hand = {"window.window_us": 10000, "gpu_busy_us": 5000,
            "top_kernels.0.name": "<script>alert(1)</script>"}
    notes = ("For escaping tests: a kernel named <script>alert(1)</script>, a cpu op named "
             "\"><img src=x onerror=alert(2)>, a user annotation with Jinja/JS template syntax "
             "and </textarea>, and a kernel name with non-ASCII letters, U+2028 and &/<b>. A "
             "report must show these names as text: no script runs, no tag is made, no template "
             "is evaluated (49 must not appear in place of {{ 7*7 }}).")
    return t, hand, None, notes


# --------------------------------------------------------------------------------------

def bad_files(basic_bytes):
    half = len(basic_bytes) // 2
    gzb = gz(basic_bytes)
    rows = [[0, 1700000000000000, 4096, 1], [1, 1700000000000100, -4096, 1]]
    return {
        "empty.json": b"",
        "not_json.json": b"This is not a trace.\nIt is a plain text file that ends in .json.\n",
        "truncated.json": basic_bytes[:half],
        "truncated.json.gz": gzb[: len(gzb) // 2],
        "no_trace_events.json": (json.dumps({"schema": "1.0.1", "nodes": []}) + "\n").encode(),
        "list.json": (json.dumps(rows) + "\n").encode(),
    }


BAD_EXPECTED = {
    "empty.json": "reject: empty file (0 bytes)",
    "not_json.json": "reject: not JSON",
    "truncated.json": "salvage: JSON ends mid-way (first half of basic.json): the complete events before the cut "
                      "are reported, with a TRUNCATED warning",
    "truncated.json.gz": "salvage: gzip stream cut in half (first half of gzipped basic.json): the complete events "
                         "before the cut are reported, with a TRUNCATED warning",
    "no_trace_events.json": "reject: a JSON object without traceEvents (PyTorch Execution Trace shape)",
    "list.json": "reject: top level is a JSON list of rows, not a trace object",
}


def build_all():
    """Return {relative path: bytes} for every file this script writes."""
    files = {}
    scenarios = [
        ("basic", sc_basic, False), ("input_bound", sc_input_bound, False),
        ("memcpy_bound", sc_memcpy_bound, False), ("launch_bound", sc_launch_bound, True),
        ("sync_bound", sc_sync_bound, False), ("host_bound", sc_host_bound, False),
        ("periodic_stall", sc_periodic_stall, False),
        ("comm_rank0", lambda: _comm_rank(0), False), ("comm_rank1", lambda: _comm_rank(1), False),
        ("gpu_bound", sc_gpu_bound, False), ("cpu_only", sc_cpu_only, False),
        ("hostile_names", sc_hostile_names, False),
    ]
    basic_trace = None
    for name, fn, zipped in scenarios:
        t, hand, primary, notes = fn()
        t.check_nesting()
        fname = f"{name}.json.gz" if zipped else f"{name}.json"
        exp = t.expected(fname, primary, notes)
        check_hand(exp, hand)
        exp["window"]["start_ts"] = t.window_start_ts()
        exp["window"]["ts_type"] = "int"
        data = t.render("modern_int")
        files[fname] = gz(data) if zipped else data
        files[f"{name}.expected.json"] = dump_expected(exp)
        if name == "basic":
            basic_trace, basic_exp = t, exp
    # variants of basic: same events, other encodings; same figures
    for vname, style, ts_type, extra in (
        ("basic_float_us", "modern_float", "float",
         "Same events as basic.json, but ts/dur are float us on a monotonic clock "
         "(ts ~4.46e12, every ts ends in .25) with baseTimeNanoseconds; displayTimeUnit 'ms' "
         "does not change the unit. All figures equal basic's."),
        ("basic_2021", "legacy2021", "int",
         "Same events as basic.json in 2021 (PyTorch 1.8) style: cats Operator/Runtime/Kernel/"
         "Memcpy/Memset, string tids ('4243', 'stream 7', 'stream 20'), lowercase 'external id', "
         "async/launch flows, pid 'Traces' span, no deviceProperties and no gpu_user_annotation "
         "copies. All figures equal basic's."),
    ):
        exp = copy.deepcopy(basic_exp)
        exp["file"] = f"{vname}.json"
        exp["scenario"] = vname
        exp["window"]["start_ts"] = basic_trace.window_start_ts(style)
        exp["window"]["ts_type"] = ts_type
        exp["notes"] = extra + " " + basic_exp["notes"]
        files[f"{vname}.json"] = basic_trace.render(style)
        files[f"{vname}.expected.json"] = dump_expected(exp)
    for bname, data in bad_files(files["basic.json"]).items():
        files[f"bad/{bname}"] = data
    files["bad.expected.json"] = dump_expected(BAD_EXPECTED)  # beside bad/, so bad/ holds only bad files
    return files


def dump_expected(obj):
    return (json.dumps(obj, indent=1, ensure_ascii=False) + "\n").encode("utf-8")


def main(argv):
    outdir = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parent
    files = build_all()
    for rel, data in sorted(files.items()):
        if len(data) >= 200_000:
            raise SystemExit(f"{rel} is {len(data)} bytes (limit 200 KB)")
        p = outdir / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    print(f"wrote {len(files)} files to {outdir}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
