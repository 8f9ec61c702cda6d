"""How complete a rank's capture is: was its file cut off, does its header list GPUs, did the host
launch GPU work whose activity is missing.

Kineto writes the host's events first and the GPU's activity last, so a trace cut mid-file keeps
the host's side and loses the GPU's: such a rank looks like a CPU-only run although it was not.
These figures let the diagnosis say so instead of advising to move the model to a GPU.

A file cut inside the GPU's activity keeps some of it. Kineto writes that activity (with the runtime
calls that launched it) buffer by buffer, not in time order, so the lost buffers leave holes anywhere in
the capture: at its start, in its middle, at its end. In a truncated file, the CUDA record (runtime calls
and GPU work) has a hole wherever a stretch at least CUT_HOLE_MIN_SHARE of the capture long holds none of
it while the host (whose events all survived) started operators (before the record's first event and after
its last one too). The record is trusted in the first stretch between holes at least a hole long (from its
start up to its first hole), [`kept_from_ns`, `cut_ns`); after a hole, from the first GPU work launched inside
it (work running as it starts was launched in the hole, where its record was lost: a kernel's record can be in
another buffer than its launch's, as it completes long after it when the host runs ahead); narrowed to each GPU
stream's own record: a stream silent for at least a hole's length after the stretch starts (or before it ends),
longer than its own quiet times, lost its head (tail), and the stretch starts (ends) with its first (last)
event (`_stream_ends`). Everything outside the stretch is out of every figure: steps not inside it are dropped (without
any, the step overlapping it most is cut to it), every window is cut to it (`survived_steps`,
`survived_window`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .. import intervals as iv
from .. import timeline as T
from ..timeline import Timeline
from . import figures as F
from .figures import Steps, Window

# CUDA / HIP runtime and driver calls (other accelerators' runtimes, e.g. MTIA's, launch no GPU work).
_GPU_RUNTIME = re.compile(r"^(cuda|cu[A-Z]|hip)")
# ... those that put work on a GPU (kernel and graph launches, copies, memsets); the rest (device queries,
# stream and event set-up, allocation, synchronisation) run with or without any GPU work.
GPU_WORK_CALL = re.compile(r"^(cuda|cu|hip)\w*(Launch|Memcpy|Memset)", re.IGNORECASE)
# Host operators that run only with a GPU (cuDNN / MIOpen kernels' ATen ops, cuBLAS calls, NCCL
# collectives' ranges): a capture holding them ran on a GPU, recorded or not. `cudnn_is_acceptable` is
# asked on the CPU too.
GPU_ONLY_OP = re.compile(r"^aten::_?(cudnn|miopen)_(?!is_acceptable)|cublas|^nccl:", re.IGNORECASE)
# A stretch of a truncated file's CUDA record (runtime calls and GPU work) this share of the host's
# capture long, with host operators running in it, was lost with the cut (a whole record's quiet
# stretches, such as the host preparing a batch, are a few percent of it).
CUT_HOLE_MIN_SHARE = 0.05


@dataclass(frozen=True)
class CaptureFigures:
    gpus_listed: int  # GPUs the trace's header lists (visible ones, used or not)
    truncated: str  # how the file was cut off; "" when it was read to its end
    launches: int  # host CUDA/HIP calls that put work on a GPU (launches, copies, memsets) with a correlation id
    gpu_events: int  # GPU events (kernels, copies, memsets, GPU-side ranges) of the rank, anywhere in the trace
    gpu_end_ns: int | None  # end of the last GPU work event (None: none)
    host_end_ns: int | None  # end of the last host event (None: none)
    gpu_api: str = ""  # "hip": a ROCm trace (its devices are named rocm:N); "": CUDA
    cut_ns: int | None = None  # truncated: the CUDA record is complete only before this time (None: whole)
    host_start_ns: int | None = None  # start of the first host event (None: none)
    kept_from_ns: int | None = None  # truncated: ... and only from this time (None: from the capture's start)
    gpu_runtime_calls: int = 0  # host CUDA/HIP runtime calls with a correlation id, device queries included
    gpu_only_ops: int = 0  # host operators that run only with a GPU (GPU_ONLY_OP): cuDNN convolutions, NCCL ranges

    @property
    def lost_after_cut_ns(self) -> int:
        """The capture's time from the cut to the host's last event: out of every figure."""
        if self.cut_ns is None or self.host_end_ns is None:
            return 0
        return max(self.host_end_ns - self.cut_ns, 0)

    @property
    def lost_before_ns(self) -> int:
        """The capture's time from the host's first event to the stretch kept: out of every figure."""
        if self.kept_from_ns is None or self.host_start_ns is None:
            return 0
        return max(self.kept_from_ns - self.host_start_ns, 0)

    @property
    def kept_ns(self) -> int:
        """How long the stretch whose record survived whole is (0: no cut found)."""
        if self.cut_ns is None or self.host_start_ns is None:
            return 0
        return max(self.cut_ns - (self.host_start_ns if self.kept_from_ns is None else self.kept_from_ns), 0)

    def device_label(self, device: int) -> str:
        """How the device is named in results: "rocm:N" on a ROCm trace, else "cuda:N"."""
        return device_label(self.gpu_api, device)

    @property
    def gpu_events_lost(self) -> bool:
        """None of the GPU activity survived although the capture shows it had some: the file was cut
        off (Kineto writes GPU events last), or the host launched GPU work none of which was recorded."""
        return self.gpu_events == 0 and (bool(self.truncated) or self.launches > 0)

    @property
    def gpu_events_cut(self) -> bool:
        """Some GPU activity survived a cut, ending before the host's events do: the GPU's figures
        near the end of the capture miss the activity that was cut off."""
        return (bool(self.truncated) and self.gpu_events > 0 and self.gpu_end_ns is not None
                and self.host_end_ns is not None and self.gpu_end_ns < self.host_end_ns)


def capture_figures(tl: Timeline, rank: int) -> CaptureFigures:
    info = tl.ranks[rank]
    source = tl.sources[info.source] if 0 <= info.source < len(tl.sources) else None
    ev = tl.rank_events(rank)
    kind = ev["kind"]
    work = T.category_mask(kind, T.GPU_WORK_KINDS)
    # GPU-side annotations (a CUPTI range-profiler capture records GPU work only as ranges) are activity too
    on_gpu = work | (kind == T.GPU_ANNOTATION).to_numpy()
    names = ev["name"]
    categories = [str(n) for n in names.cat.categories]
    gpu_call = np.array([bool(_GPU_RUNTIME.match(n)) for n in categories], dtype=bool)
    work_call = np.array([bool(GPU_WORK_CALL.match(n)) for n in categories], dtype=bool)
    codes = names.cat.codes.to_numpy()
    traced = (kind == T.RUNTIME).to_numpy() & (ev["correlation"].to_numpy() != -1)
    runtime = traced & np.r_[gpu_call, False][codes]
    launched = traced & np.r_[work_call, False][codes]
    gpu_op = np.array([bool(GPU_ONLY_OP.search(n)) for n in categories], dtype=bool)
    host_op = T.category_mask(kind, (T.CPU_OP, T.ANNOTATION))
    gpu_only_ops = int((host_op & np.r_[gpu_op, False][codes]).sum())
    host = ~T.category_mask(kind, T.DEVICE_KINDS) & (kind != T.TRACE_SPAN).to_numpy()
    ts = ev["ts_ns"].to_numpy()
    ends = ts + ev["dur_ns"].to_numpy()
    truncated = source.truncated if source is not None else ""
    host_start = int(ts[host].min()) if host.any() else None
    host_end = int(ends[host].max()) if host.any() else None
    span = None
    if truncated and work.any() and host_start is not None and host_end is not None:
        record = work | (kind == T.RUNTIME).to_numpy()
        ops = (kind == T.CPU_OP).to_numpy()
        # the GPU stream of each event of the record (device -1: a runtime call)
        device, stream = (ev[c].to_numpy()[record].astype(np.int64) for c in ("device", "stream"))
        keys = (np.where(work[record], device, -1), stream)
        st = F.steps(tl, rank)
        longest_step = int((st.end_ns - st.start_ns).max()) if len(st) else None
        span = kept_span(ts[record], ends[record], np.sort(ts[ops]), host_start, host_end, keys, longest_step,
                         _launch_times(ev, work, record))
    return CaptureFigures(
        gpus_listed=int(info.gpus_listed), truncated=truncated,
        launches=int(launched.sum()), gpu_events=int(on_gpu.sum()), gpu_runtime_calls=int(runtime.sum()),
        gpu_only_ops=gpu_only_ops,
        gpu_end_ns=int(ends[work].max()) if work.any() else None,
        host_end_ns=host_end, gpu_api=info.gpu_api, cut_ns=span[1] if span else None, host_start_ns=host_start,
        kept_from_ns=span[0] if span and host_start is not None and span[0] > host_start else None)


_NO_LAUNCH = np.iinfo(np.int64).min


def _launch_times(ev: pd.DataFrame, work: np.ndarray, record: np.ndarray) -> np.ndarray:
    """For each event of the record (`record` of the rank's events `ev`): when the runtime call that launched it
    started, for GPU work whose launch is in the record (same correlation id); _NO_LAUNCH for the others."""
    corr = ev["correlation"].to_numpy()
    ts = ev["ts_ns"].to_numpy()
    calls = record & ~work & (corr != -1)
    order = np.argsort(corr[calls], kind="stable")
    call_corr, call_ts = corr[calls][order], ts[calls][order]
    out = np.full(int(record.sum()), _NO_LAUNCH, dtype=np.int64)
    mine = work[record] & (corr[record] != -1)
    if not len(call_corr) or not mine.any():
        return out
    at = np.minimum(np.searchsorted(call_corr, corr[record][mine]), len(call_corr) - 1)
    found = call_corr[at] == corr[record][mine]
    out[np.flatnonzero(mine)[found]] = call_ts[at[found]]
    return out


def kept_span(start: np.ndarray, end: np.ndarray, op_starts: np.ndarray, host_start: int, host_end: int,
              streams: tuple[np.ndarray, np.ndarray] | None = None, longest_step: int | None = None,
              launched: np.ndarray | None = None) -> tuple[int, int] | None:
    """The stretch [from, to) in which a truncated file's CUDA record (`start`, `end`: its runtime calls and GPU
    work; `streams`: each event's stream, as two key columns) is trusted whole: the first one at least a hole long
    between holes (stretches of at least CUT_HOLE_MIN_SHARE of the host's capture in which a host operator starts,
    `op_starts`, sorted, and the record has no event; before its first event and after its last one included);
    narrowed to the streams' own record (`_stream_ends`). None when nothing is known missing."""
    if not len(start):
        return None
    lo, hi = iv.union(start, end)
    least = CUT_HOLE_MIN_SHARE * max(host_end - host_start, 1)
    first, last = min(host_start, int(lo[0])), max(host_end, int(hi[-1]))
    gap_lo, gap_hi = np.r_[first, hi], np.r_[lo, last]  # the holes: before the record, between its runs, after it
    ops_inside = np.searchsorted(op_starts, gap_hi, side="left") - np.searchsorted(op_starts, gap_lo, side="right")
    holes = np.flatnonzero(((gap_hi - gap_lo) >= least) & (ops_inside > 0))
    # the stretches between holes (the first from the capture's start, the last to its end): the first one at least
    # a hole long (the record is trusted up to its first hole), else the longest
    seg_lo, seg_hi = np.r_[first, gap_hi[holes]], np.r_[gap_lo[holes], last]
    long_enough = np.flatnonzero(seg_hi - seg_lo >= least)
    best = int(long_enough[0]) if len(long_enough) else int(np.argmax(seg_hi - seg_lo))
    a, b = int(seg_lo[best]), int(seg_hi[best])
    if launched is not None and a > first:
        # after a hole: the GPU work running as the stretch starts was launched in the hole, with the record lost
        # there; the GPU's record is whole from the first work launched inside the stretch on
        inside = launched >= a
        if inside.any():
            a = min(max(a, int(start[inside].min())), b)
    if streams is not None:
        a, b = _stream_ends(start, end, streams, a, b, least, longest_step)
    return (a, b) if len(holes) or b < last or a > first else None


def _stream_ends(start: np.ndarray, end: np.ndarray, streams: tuple[np.ndarray, np.ndarray], a: int, b: int,
                 least: float, longest_step: int | None = None) -> tuple[int, int]:
    """The stretch [a, b) once every GPU stream's lost head and tail are out (`streams`: device and stream of each
    event, device -1 for a runtime call, which is not judged). A stream with two events or more in the stretch,
    silent for at least `least` after the stretch starts, lost its head (its record starts late: a kernel's record
    can be in another buffer than its launch's, written after it) when that silence is longer than its own quiet
    times: the silences between its events there when these span half the stretch or more, else the longest step
    (`longest_step`; a stream busy in one burst a step is silent most of a step; without steps such a stream is not
    judged). The stretch then starts with its first event; a stream silent as long before the stretch ends lost its
    tail, and the stretch ends with its last event. Judged once, on the stretch as found (judged again on a narrowed
    one, a stream's own quiet stretches would narrow it on and on), the busiest stream first; a stream whose cut
    would leave nothing (its record and a busier stream's do not meet) is left out: its loss, smaller than the
    busier streams', stays in the figures."""
    inside = (start >= a) & (end <= b) & (streams[0] >= 0)
    if not inside.any():
        return a, b
    key = np.stack([k[inside] for k in streams], axis=1)
    group = np.unique(key, axis=0, return_inverse=True)[1].reshape(-1)
    order = np.lexsort((start[inside], group))
    g, s, e = group[order], start[inside][order], end[inside][order]
    heads = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
    cuts = []  # (busy time, where its head makes the stretch start, where its tail makes it end)
    for h, t in zip(heads, np.r_[heads[1:], len(g)]):  # a loop over streams (a few), not events
        if t - h < 2:
            continue  # one event: no rhythm of its own
        reach = np.maximum.accumulate(e[h:t])  # how far the stream's events reach so far
        if 2 * (int(reach[-1]) - int(s[h])) >= b - a:
            quiet = int((s[h + 1:t] - reach[:-1]).max())  # its events span half the stretch: its own rhythm
        elif longest_step is not None:
            quiet = longest_step
        else:
            continue
        head, tail = int(s[h]) - a, b - int(reach[-1])
        lost_head, lost_tail = head >= least and head > quiet, tail >= least and tail > quiet
        if lost_head or lost_tail:
            busy = int((e[h:t] - s[h:t]).sum())
            cuts.append((busy, int(s[h]) if lost_head else a, int(reach[-1]) if lost_tail else b))
    # the busiest stream first; one whose cut would leave nothing (its record and a busier one's do not meet) is
    # left out
    for _, lo, hi in sorted(cuts, key=lambda c: -c[0]):
        if min(b, hi) > max(a, lo):
            a, b = max(a, lo), min(b, hi)
    return a, b


def survived_steps(st: Steps, cut_ns: int | None, from_ns: int | None = None) -> Steps:
    """The steps whose record survived a cut: those inside [`from_ns`, `cut_ns`]; without any, the step that
    overlaps it most, cut to it (a single marker around the whole capture keeps its surviving part); none when no
    step reaches into it."""
    lo = from_ns if from_ns is not None else np.iinfo(np.int64).min
    if cut_ns is None or not len(st) or (int(st.end_ns.max()) <= cut_ns and int(st.start_ns.min()) >= lo):
        return st
    whole = (st.end_ns <= cut_ns) & (st.start_ns >= lo)
    if whole.any():
        return Steps(st.number[whole], st.start_ns[whole], st.end_ns[whole])
    start, end = np.maximum(st.start_ns, lo), np.minimum(st.end_ns, cut_ns)
    most = int(np.argmax(end - start))
    if end[most] <= start[most]:  # no step reaches into what survived
        return Steps(st.number[:0], st.start_ns[:0], st.end_ns[:0])
    return Steps(st.number[most:most + 1], start[most:most + 1], end[most:most + 1])


def survived_window(w: Window, cut_ns: int | None, from_ns: int | None = None) -> Window:
    """The window cut to [`from_ns`, `cut_ns`] (empty when it lies outside)."""
    if cut_ns is None or (w.end_ns <= cut_ns and (from_ns is None or w.start_ns >= from_ns)):
        return w
    start = max(w.start_ns, from_ns) if from_ns is not None else w.start_ns
    return Window(start, max(min(w.end_ns, cut_ns), start), w.basis)


def device_label(gpu_api: str, device: int) -> str:
    """A GPU's name in results and findings: "rocm:N" for a ROCm/HIP trace, "cuda:N" otherwise (PyTorch
    itself calls ROCm GPUs "cuda" devices; the trace says which it was)."""
    return f"{'rocm' if gpu_api == 'hip' else 'cuda'}:{device}"


def rank_device_label(capture: CaptureFigures | None, device: int) -> str:
    return device_label(capture.gpu_api if capture is not None else "", device)


def capture_note(c: CaptureFigures) -> str | None:
    """One sentence on what the capture lost, or None when nothing is known to be missing."""
    listed = f"{c.gpus_listed} GPU{'s' if c.gpus_listed != 1 else ''} listed"
    if c.gpu_events_lost and c.truncated:
        if c.gpus_listed or c.launches:
            launched = f" ({c.launches} GPU launches recorded by the host)" if c.launches else ""
            return f"GPU events lost to truncation: {listed}, none of their activity survived{launched}"
        return ("GPU events may have been lost to truncation: the file was cut before any GPU activity "
                "(Kineto writes it last), and the part of the header that lists GPUs was cut too")
    if c.gpu_events_lost:
        return (f"GPU events missing: {listed}, {c.launches} GPU launches recorded by the host, none of their "
                f"activity in the trace (GPU activity tracing off, or its buffers dropped)")
    if c.cut_ns is not None and c.host_start_ns is not None and c.host_end_ns is not None:
        kept = c.kept_ns / 1e6
        if c.kept_from_ns is None:
            return (f"GPU events partly lost to truncation: the CUDA record is complete for the first {kept:.1f} ms "
                    f"of the capture only; the {c.lost_after_cut_ns / 1e6:.1f} ms after the cut are out of every "
                    f"figure and of the verdict, which speak of the window that survived")
        return (f"GPU events partly lost to truncation: the CUDA record is complete for {kept:.1f} ms of the capture "
                f"only, from {c.lost_before_ns / 1e6:.1f} ms into it; the {c.lost_before_ns / 1e6:.1f} ms before and "
                f"the {c.lost_after_cut_ns / 1e6:.1f} ms after are out of every figure and of the verdict, which "
                f"speak of the window that survived")
    if c.gpu_events_cut and c.gpu_end_ns is not None and c.host_end_ns is not None:
        ms = (c.host_end_ns - c.gpu_end_ns) / 1e6
        return (f"GPU events partly lost to truncation: the last GPU activity that survived ends {ms:.1f} ms "
                f"before the host's last event; GPU figures near the end of the capture miss what was cut")
    return None
