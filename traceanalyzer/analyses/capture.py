"""How complete a rank's capture is: was its file cut off, does its header list GPUs, did the host
launch GPU work whose activity is missing.

Kineto writes the host's events first and the GPU's activity last, so a trace cut mid-file keeps
the host's side and loses the GPU's: such a rank looks like a CPU-only run although it was not.
These figures let the diagnosis say so instead of advising to move the model to a GPU.

A file cut inside the GPU's activity keeps some of it. Kineto writes that activity (with the runtime
calls that launched it) buffer by buffer, not in time order, so the lost buffers leave a hole in the
middle of the capture as well as its end. In a truncated file, the CUDA record (runtime calls and GPU
work) is complete only up to `cut_ns`: the start of the first hole of that record at least
CUT_HOLE_MIN_SHARE of the capture long in which the host (whose events all survived) kept running
operators (the stretch after the record's last event, when the host ran on, counts as one). Everything from
`cut_ns` on is out of every figure: steps that end after it are dropped (a single one is cut there),
every window ends there (`survived_steps`, `survived_window`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from .. import intervals as iv
from .. import timeline as T
from ..timeline import Timeline
from .figures import Steps, Window

# CUDA / HIP runtime and driver calls (other accelerators' runtimes, e.g. MTIA's, launch no GPU work).
_GPU_RUNTIME = re.compile(r"^(cuda|cu[A-Z]|hip)")
# A stretch of a truncated file's CUDA record (runtime calls and GPU work) this share of the host's
# capture long, with host operators running in it, was lost with the cut (a whole record's quiet
# stretches, such as the host preparing a batch, are a few percent of it).
CUT_HOLE_MIN_SHARE = 0.05


@dataclass(frozen=True)
class CaptureFigures:
    gpus_listed: int  # GPUs the trace's header lists (visible ones, used or not)
    truncated: str  # how the file was cut off; "" when it was read to its end
    launches: int  # host CUDA/HIP runtime calls with a correlation id (launches and copies whose GPU side has an id)
    gpu_events: int  # GPU events (kernels, copies, memsets, GPU-side ranges) of the rank, anywhere in the trace
    gpu_end_ns: int | None  # end of the last GPU work event (None: none)
    host_end_ns: int | None  # end of the last host event (None: none)
    gpu_api: str = ""  # "hip": a ROCm trace (its devices are named rocm:N); "": CUDA
    cut_ns: int | None = None  # truncated: the CUDA record is complete only before this time (None: whole)
    host_start_ns: int | None = None  # start of the first host event (None: none)

    @property
    def lost_after_cut_ns(self) -> int:
        """The capture's time from the cut to the host's last event: out of every figure."""
        if self.cut_ns is None or self.host_end_ns is None:
            return 0
        return max(self.host_end_ns - self.cut_ns, 0)

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
    gpu_call = np.array([bool(_GPU_RUNTIME.match(str(n))) for n in names.cat.categories], dtype=bool)
    codes = names.cat.codes.to_numpy()
    runtime = ((kind == T.RUNTIME).to_numpy() & (ev["correlation"].to_numpy() != -1)
               & np.r_[gpu_call, False][codes])
    host = ~T.category_mask(kind, T.DEVICE_KINDS) & (kind != T.TRACE_SPAN).to_numpy()
    ts = ev["ts_ns"].to_numpy()
    ends = ts + ev["dur_ns"].to_numpy()
    truncated = source.truncated if source is not None else ""
    host_start = int(ts[host].min()) if host.any() else None
    host_end = int(ends[host].max()) if host.any() else None
    cut = None
    if truncated and work.any() and host_start is not None and host_end is not None:
        record = work | (kind == T.RUNTIME).to_numpy()
        ops = (kind == T.CPU_OP).to_numpy()
        cut = cut_time(ts[record], ends[record], np.sort(ts[ops]), host_start, host_end)
    return CaptureFigures(
        gpus_listed=int(info.gpus_listed), truncated=truncated,
        launches=int(runtime.sum()), gpu_events=int(on_gpu.sum()),
        gpu_end_ns=int(ends[work].max()) if work.any() else None,
        host_end_ns=host_end, gpu_api=info.gpu_api, cut_ns=cut, host_start_ns=host_start)


def cut_time(start: np.ndarray, end: np.ndarray, op_starts: np.ndarray, host_start: int, host_end: int) -> int | None:
    """Where a truncated file's CUDA record (`start`, `end`: its runtime calls and GPU work) stops being
    complete: the start of its first hole of at least CUT_HOLE_MIN_SHARE of the host's capture in which a host
    operator starts (`op_starts`, sorted), the stretch after its last event up to the host's end included; None
    when nothing is known missing."""
    if not len(start):
        return None
    lo, hi = iv.union(start, end)
    least = CUT_HOLE_MIN_SHARE * max(host_end - host_start, 1)
    gap_lo, gap_hi = hi, np.r_[lo[1:], max(host_end, int(hi[-1]))]  # the holes, and the tail after the record
    ops_inside = np.searchsorted(op_starts, gap_hi, side="left") - np.searchsorted(op_starts, gap_lo, side="right")
    holes = np.flatnonzero(((gap_hi - gap_lo) >= least) & (ops_inside > 0))
    return int(gap_lo[holes[0]]) if len(holes) else None


def survived_steps(st: Steps, cut_ns: int | None) -> Steps:
    """The steps whose record survived a cut: those ending by `cut_ns`; without any, the first step that
    starts before it, cut there (a single marker around the whole capture keeps its surviving part)."""
    if cut_ns is None or not len(st) or int(st.end_ns.max()) <= cut_ns:
        return st
    whole = st.end_ns <= cut_ns
    if whole.any():
        return Steps(st.number[whole], st.start_ns[whole], st.end_ns[whole])
    first = np.flatnonzero(st.start_ns < cut_ns)[:1]
    return Steps(st.number[first], st.start_ns[first], np.minimum(st.end_ns[first], cut_ns))


def survived_window(w: Window, cut_ns: int | None) -> Window:
    """The window ending at the cut (at its start when it starts after the cut)."""
    if cut_ns is None or w.end_ns <= cut_ns:
        return w
    return Window(w.start_ns, max(min(w.end_ns, cut_ns), w.start_ns), w.basis)


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
        kept = max(c.cut_ns - c.host_start_ns, 0) / 1e6
        return (f"GPU events partly lost to truncation: the CUDA record is complete for the first {kept:.1f} ms of "
                f"the capture only; the {c.lost_after_cut_ns / 1e6:.1f} ms after the cut are out of every figure and "
                f"of the verdict, which speak of the window that survived")
    if c.gpu_events_cut and c.gpu_end_ns is not None and c.host_end_ns is not None:
        ms = (c.host_end_ns - c.gpu_end_ns) / 1e6
        return (f"GPU events partly lost to truncation: the last GPU activity that survived ends {ms:.1f} ms "
                f"before the host's last event; GPU figures near the end of the capture miss what was cut")
    return None
