"""DataFrame views of an Analysis for notebooks: one row per rank x (step | gap | kernel | finding | GPU).

Columns are the result's own field names (times in microseconds, `_us`), plus `rank` (the rank
number, or the input file name when the trace records none) and `device` where it applies; beside each
cause id (`cause`, as in the JSON) its label as the reports show it (`cause_label`).
"""

from __future__ import annotations

import warnings

import pandas as pd

from ..causes import CAUSE_BY_ID
from .types import AnalysisData as Analysis
from .types import RankResult, to_data


def cause_label(cause: str | None) -> str | None:
    """A cause's label as the reports show it (`causes` registry): "DataLoader wait" for `dataloader`."""
    if cause is None:
        return None
    c = CAUSE_BY_ID.get(cause)
    return c.label if c else cause


def rank_name(r: RankResult) -> int | str:
    return r.rank if r.rank is not None else r.input.rsplit("/", 1)[-1]


STEP_COLUMNS = ["rank", "step", "start_us", "duration_us", "gpu_busy_us", "memcpy_us", "dataloader_wait_us",
                "idle_us"]
GAP_COLUMNS = ["rank", "device", "start_us", "duration_us", "step", "cause", "cause_label"]
KERNEL_COLUMNS = ["rank", "device", "name", "count", "total_us", "mean_us", "communication", "launched_by"]
OP_COLUMNS = ["rank", "name", "kind", "count", "total_us", "self_us", "per_step_us", "share_of_steps", "idle_us",
              "share_of_idle", "top_level"]
FRAME_COLUMNS = ["rank", "frame", "host_us", "idle_us"]
FINDING_COLUMNS = ["rank", "id", "cause", "cause_label", "severity", "explains_us", "share_of_idle",
                   "share_of_window", "gaps", "title", "top_host_op"]
ITERATION_COLUMNS = ["rank", "phase", "batch_size", "tokens", "start_us", "duration_us", "gpu_busy_us", "gpu_bubble_us",
                     "host_gap_before_us", "graph_replays"]
REQUEST_COLUMNS = ["rank", "request_id", "start_us", "queue_us", "prefill_us", "decode_us", "ttft_us", "e2e_us",
                   "prompt_tokens", "output_tokens", "iterations", "first_iteration", "last_iteration"]
DEVICE_COLUMNS = ["rank", "device", "name", "window_us", "gpu_busy_us", "gpu_idle_fraction", "kernel_us",
                  "memcpy_us", "memcpy_share_of_busy", "communication_us", "exposed_communication_us", "gaps",
                  "gaps_total_us", "memory_peak_allocated_bytes", "memory_peak_reserved_bytes", "memory_total_bytes",
                  "memory_peak_allocated_fraction", "memory_headroom_fraction"]
# The device's memory figures (result.MemoryResult fields) shown in devices(), NaN without memory events.
_MEMORY_FIELDS = ("peak_allocated_bytes", "peak_reserved_bytes", "total_bytes", "peak_allocated_fraction",
                  "headroom_fraction")


def steps_frame(a: Analysis) -> pd.DataFrame:
    rows = [{"rank": rank_name(r), **{c: getattr(s, c) for c in STEP_COLUMNS[1:]}} for r in a.ranks
            for s in r.per_step]
    return pd.DataFrame(rows, columns=STEP_COLUMNS)


def gaps_frame(a: Analysis) -> pd.DataFrame:
    """Every gap of at least `min_gap` of every device (its gap table), start from the device's window start."""
    rows = []
    for r in a.ranks:
        for d in r.devices:
            g = d.gap_table
            if g is None:
                continue
            rows += [{"rank": rank_name(r), "device": d.device, "start_us": s, "duration_us": u, "step": st,
                      "cause": c, "cause_label": cause_label(c)}
                     for s, u, st, c in zip(g.start_us, g.duration_us, g.step, g.cause)]
            if g.omitted:  # the result keeps the longest gaps of a device with very many: say so
                warnings.warn(f"{rank_name(r)} {d.device}: {g.omitted} shorter gaps are not in the result "
                              f"(it keeps the {len(g.start_us)} longest)", stacklevel=3)
    return pd.DataFrame(rows, columns=GAP_COLUMNS)


def kernels_frame(a: Analysis, top: int | None = None) -> pd.DataFrame:
    """Each device's kernels by time: the first `top` (None: every row the result holds). A report
    saved without its kernel table has only the top kernels. `launched_by`: the host operator that
    launched most of the kernel's time (the operator view), None when the trace does not link them."""
    rows = []
    for r in a.ranks:
        launcher = {(k.device, k.name): k.launched_by for k in (r.operators.kernels if r.operators else ())}
        rows += [{"rank": rank_name(r), "device": d.device, **to_data(k),  # the JSON keys: times in us
                  "launched_by": launcher.get((d.device, k.name))}
                 for d in r.devices for k in (d.kernel_table or d.top_kernels)[:top]]
    return pd.DataFrame(rows, columns=KERNEL_COLUMNS)


def ops_frame(a: Analysis) -> pd.DataFrame:
    """One row per rank and host operator or annotation the result keeps (the operator view)."""
    rows = [{"rank": rank_name(r), **{c: getattr(o, c) for c in OP_COLUMNS[1:]}} for r in a.ranks if r.operators
            for o in r.operators.ops]
    return pd.DataFrame(rows, columns=OP_COLUMNS)


def frames_frame(a: Analysis) -> pd.DataFrame:
    """One row per rank and user Python frame the result keeps (traces recorded with_stack=True)."""
    rows = [{"rank": rank_name(r), "frame": f.frame, "host_us": f.host_us, "idle_us": f.idle_us} for r in a.ranks
            if r.operators for f in r.operators.frames]
    return pd.DataFrame(rows, columns=FRAME_COLUMNS)


def iterations_frame(a: Analysis) -> pd.DataFrame:
    """One row per rank and serving-engine iteration the result lists (`serving.iterations`)."""
    rows = [{"rank": rank_name(r), **{c: getattr(x, c) for c in ITERATION_COLUMNS[1:]}} for r in a.ranks
            if r.serving for x in r.serving.iterations]
    for r in a.ranks:
        if r.serving and r.serving.iterations_omitted:
            warnings.warn(f"{rank_name(r)}: {r.serving.iterations_omitted} later iterations are not in the result "
                          f"(it lists the first {len(r.serving.iterations)}; its phases count them all)", stacklevel=3)
    return pd.DataFrame(rows, columns=ITERATION_COLUMNS)


def requests_frame(a: Analysis) -> pd.DataFrame:
    """One row per rank and serving request the result lists (`serving.requests`), joined to its iterations."""
    rows = [{"rank": rank_name(r), **{c: getattr(x, c) for c in REQUEST_COLUMNS[1:]}} for r in a.ranks
            if r.serving and r.serving.requests for x in r.serving.requests.rows]
    for r in a.ranks:
        q = r.serving.requests if r.serving else None
        if q is not None and q.rows_omitted:
            warnings.warn(f"{rank_name(r)}: {q.rows_omitted} later requests are not in the result (it lists the "
                          f"first {len(q.rows)}; its summaries count them all)", stacklevel=3)
    return pd.DataFrame(rows, columns=REQUEST_COLUMNS)


def findings_frame(a: Analysis) -> pd.DataFrame:
    rows = []
    for r in a.ranks:
        dr = r.diagnosis
        if dr is not None:
            rows += [{"rank": rank_name(r), "id": f.id, "cause": f.cause, "cause_label": cause_label(f.cause),
                      "severity": f.severity,
                      "explains_us": f.explains_us, "share_of_idle": f.share_of_idle,
                      "share_of_window": f.share_of_window, "gaps": f.gaps, "title": f.title,
                      "top_host_op": f.host_ops[0].name if f.host_ops else None} for f in dr.findings]
    return pd.DataFrame(rows, columns=FINDING_COLUMNS)


def devices_frame(a: Analysis) -> pd.DataFrame:
    rows = [{"rank": rank_name(r), "device": d.device, "name": d.name, "window_us": d.window_us,
             "gpu_busy_us": d.gpu_busy_us, "gpu_idle_fraction": d.gpu_idle_fraction, "kernel_us": d.kernel_us,
             "memcpy_us": d.memcpy_us, "memcpy_share_of_busy": d.memcpy_share_of_busy,
             "communication_us": d.communication_us, "exposed_communication_us": d.exposed_communication_us,
             "gaps": d.gaps.count, "gaps_total_us": d.gaps.total_us,
             **{f"memory_{f}": _or_nan(getattr(d.memory, f) if d.memory else None) for f in _MEMORY_FIELDS}}
            for r in a.ranks for d in r.devices]
    return pd.DataFrame(rows, columns=DEVICE_COLUMNS)


def _or_nan(value: float | None) -> float:
    return float("nan") if value is None else float(value)
