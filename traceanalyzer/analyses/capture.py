"""How complete a rank's capture is: was its file cut off, does its header list GPUs, did the host
launch GPU work whose activity is missing.

Kineto writes the host's events first and the GPU's activity last, so a trace cut mid-file keeps
the host's side and loses the GPU's: such a rank looks like a CPU-only run although it was not.
These figures let the diagnosis say so instead of advising to move the model to a GPU.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from .. import timeline as T
from ..timeline import Timeline

# CUDA / HIP runtime and driver calls (other accelerators' runtimes, e.g. MTIA's, launch no GPU work).
_GPU_RUNTIME = re.compile(r"^(cuda|cu[A-Z]|hip)")


@dataclass(frozen=True)
class CaptureFigures:
    gpus_listed: int  # GPUs the trace's header lists (visible ones, used or not)
    truncated: str  # how the file was cut off; "" when it was read to its end
    launches: int  # host CUDA/HIP runtime calls with a correlation id (launches and copies whose GPU side has an id)
    gpu_events: int  # GPU events (kernels, copies, memsets, GPU-side ranges) of the rank, anywhere in the trace
    gpu_end_ns: int | None  # end of the last GPU work event (None: none)
    host_end_ns: int | None  # end of the last host event (None: none)
    gpu_api: str = ""  # "hip": a ROCm trace (its devices are named rocm:N); "": CUDA

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
    runtime = ((kind == T.RUNTIME).to_numpy() & (ev["correlation"].to_numpy() >= 0)
               & np.r_[gpu_call, False][codes])
    host = ~T.category_mask(kind, T.DEVICE_KINDS) & (kind != T.TRACE_SPAN).to_numpy()
    ends = ev["ts_ns"].to_numpy() + ev["dur_ns"].to_numpy()
    return CaptureFigures(
        gpus_listed=int(info.gpus_listed), truncated=source.truncated if source is not None else "",
        launches=int(runtime.sum()), gpu_events=int(on_gpu.sum()),
        gpu_end_ns=int(ends[work].max()) if work.any() else None,
        host_end_ns=int(ends[host].max()) if host.any() else None, gpu_api=info.gpu_api)


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
    if c.gpu_events_cut and c.gpu_end_ns is not None and c.host_end_ns is not None:
        ms = (c.host_end_ns - c.gpu_end_ns) / 1e6
        return (f"GPU events partly lost to truncation: the last GPU activity that survived ends {ms:.1f} ms "
                f"before the host's last event; GPU figures near the end of the capture miss what was cut")
    return None
