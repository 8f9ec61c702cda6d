"""TensorFlow / JAX (XLA profiler) events -> Timeline rows, shared by the XSpace and the
trace-viewer JSON readers so that both give the same table for the same capture.

Both formats describe planes (a host `/host:CPU` or a device `/device:GPU:N`) holding lines
(host threads, GPU streams) holding events. A reader hands over flat columns (`RawEvents`) with the
plane and line of each event; `to_events` decides what each event is:

* device plane `/device:GPU:N`, line `Stream #S[(...)]`: GPU work on device N, stream S. A copy
  when the line says `Memcpy...` or the event has `memcpy_details` or a copy name; a memset when
  the line or name says `Memset`; a kernel otherwise (ROCm blit kernels such as
  `__amd_rocclr_copyBuffer.kd` stay kernels: that is what the device ran).
  Other lines on a GPU plane (`XLA Ops`, `XLA Modules`, `TensorFlow Ops`, ...) are annotations
  derived from the same kernels -> `gpu_annotation`, never busy time. A `Steps` line gives steps.
* host plane: `Profiled batch` (Keras, `step_num`) -> step; the consumer's get-next call
  (`IteratorGetNextOp::DoCompute`, the op `IteratorGetNext[AsOptional|Sync]`) -> dataloader;
  tf.data's own work (`Iterator::...`, `PrefetchProduce`, map functions) stays cpu_op;
  CUDA/HIP API calls -> runtime; `$file:line fn` python frames -> python.
* steps, in order of preference: `Profiled batch` spans; else a `Steps` line; else the step
  functions (`train_function`, `multi_step_on_iterator`, ...) numbered in time order.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .. import timeline as T
from ..names import is_comm_kernel
from ._columns import Interner, names_cut_warning

GPU_PLANE = re.compile(r"^/device:GPU:(\d+)$")
HOST_PLANE = re.compile(r"^/host:CPU$")
STREAM_LINE = re.compile(r"^Stream #(\d+)(?:\((.*)\))?\s*$")
STEPS_LINE = "Steps"
PROFILED_BATCH = "Profiled batch"
# tf.function step bodies Keras runs once per step (or per steps_per_execution steps).
STEP_FUNCTIONS = re.compile(r"^(train_function|train_step|multi_step_on_iterator|one_step_on_iterator"
                            r"|one_step_on_data)$")
# The training thread's call that blocks until tf.data hands over the next element.
DATALOADER_NAME = re.compile(r"(?:^IteratorGetNextOp::DoCompute$)"
                             r"|(?:(?:^|[\s/:])IteratorGetNext(?:AsOptional|Sync)?$)")
RUNTIME_NAME = re.compile(r"^(?:cuda|cu[A-Z]|hip|hsa_)[A-Za-z]")
PYTHON_NAME = re.compile(r"^\$")
COPY_NAME = re.compile(r"(?i)memcpy|^Copy(?:HostToDevice|DeviceToHost|DeviceToDevice|PeerToPeer)")
MEMSET_NAME = re.compile(r"(?i)memset")
COPY_DIRECTIONS = (
    (re.compile(r"H(?:to|2)D|HostToDevice"), "HtoD"),
    (re.compile(r"D(?:to|2)H|DeviceToHost"), "DtoH"),
    (re.compile(r"D(?:to|2)D|DeviceToDevice"), "DtoD"),
    (re.compile(r"P(?:to|2)P|PeerToPeer"), "PtoP"),
    (re.compile(r"H(?:to|2)H|HostToHost"), "HtoH"),
)
DETAIL_SIZE = re.compile(r"\bsize:(\d+)")
DETAIL_KIND = re.compile(r"\bkind:(\S+)")
DIGITS = re.compile(r"(\d+)")


@dataclass
class RawEvents:
    """Flat per-event columns a TF-family reader collects; strings are codes into the interners."""

    names: Interner = field(default_factory=Interner)
    planes: Interner = field(default_factory=Interner)
    lines: Interner = field(default_factory=Interner)
    details: Interner = field(default_factory=Interner)  # memcpy_details / memset_details text
    parts: dict[str, list[np.ndarray]] = field(default_factory=lambda: {k: [] for k in (
        "ts", "dur", "name", "plane", "line", "line_id", "step_num", "correlation", "details")})

    def add(self, *, ts_ns: np.ndarray, dur_ns: np.ndarray, name: np.ndarray, plane: np.ndarray,
            line: np.ndarray, line_id: np.ndarray, step_num: np.ndarray, correlation: np.ndarray,
            details: np.ndarray) -> None:
        for key, value in (("ts", ts_ns), ("dur", dur_ns), ("name", name), ("plane", plane),
                           ("line", line), ("line_id", line_id), ("step_num", step_num),
                           ("correlation", correlation), ("details", details)):
            self.parts[key].append(np.asarray(value))

    def column(self, key: str, dtype: type) -> np.ndarray:
        chunks = self.parts[key]
        return np.concatenate(chunks).astype(dtype) if chunks else np.zeros(0, dtype=dtype)


@dataclass
class Mapped:
    events: pd.DataFrame
    not_kept: dict[str, int]
    warnings: list[str]
    devices: list[int]  # GPU indices of the device planes seen (with or without work)


def to_events(raw: RawEvents, gpu_numbers: dict[str, int] | None = None) -> Mapped:
    """Classify raw TF/XLA events into Timeline kinds (vectorized over distinct names/lines).
    `gpu_numbers`: the device index of each GPU plane (`gpu_numbers`; by default from the planes
    holding events)."""
    ts = raw.column("ts", np.int64)
    dur = raw.column("dur", np.int64)
    name = raw.column("name", np.int64)
    plane = raw.column("plane", np.int64)
    line = raw.column("line", np.int64)
    line_id = raw.column("line_id", np.int64)
    step_num = raw.column("step_num", np.int64)
    correlation = raw.column("correlation", np.int64)
    details = raw.column("details", np.int64)
    n = len(ts)
    not_kept: Counter[str] = Counter()
    warnings: list[str] = names_cut_warning(raw.names, raw.planes, raw.lines, raw.details)

    # --- per plane: host, GPU N, or something we do not map ---------------------------------
    plane_names = raw.planes.values
    if gpu_numbers is None:
        gpu_numbers = number_gpu_planes(plane_names, warnings)
    plane_gpu = np.array([gpu_numbers.get(p, -1) for p in plane_names] or [-1], dtype=np.int64)
    plane_host = np.array([bool(HOST_PLANE.match(p)) for p in plane_names] or [False])
    ev_gpu = plane_gpu[plane] if n else np.zeros(0, np.int64)
    ev_host = plane_host[plane] if n else np.zeros(0, bool)
    unmapped = ~ev_host & (ev_gpu < 0)
    if unmapped.any():
        counts = Counter(plane_names[c] for c in plane[unmapped])
        for pname, count in sorted(counts.items()):
            not_kept[f"plane {pname}"] += count
        warnings.append("events on planes other than /host:CPU and /device:GPU:N not kept: "
                        + ", ".join(f"{p} ({c})" for p, c in sorted(counts.items())))

    # --- per line: GPU stream (and what the line name says it carries), Steps, other ---------
    line_names = raw.lines.values
    parsed = [STREAM_LINE.match(v) for v in line_names]
    line_stream = np.array([_small_int(m.group(1)) if m else -1 for m in parsed] or [-1], dtype=np.int64)
    line_copy = np.array([bool(m and m.group(2) and COPY_NAME.search(m.group(2))) for m in parsed]
                         or [False])
    line_memset = np.array([bool(m and m.group(2) and MEMSET_NAME.search(m.group(2))) for m in parsed]
                           or [False])
    line_dir = np.array([_direction(m.group(2)) if m and m.group(2) else "" for m in parsed] or [""],
                        dtype=object)
    line_steps = np.array([v == STEPS_LINE for v in line_names] or [False])

    # --- per name -------------------------------------------------------------------------------
    names = raw.names.values
    name_copy = np.array([bool(COPY_NAME.search(v)) for v in names] or [False])
    name_memset = np.array([bool(MEMSET_NAME.search(v)) for v in names] or [False])
    name_dir = np.array([_direction(v) for v in names] or [""], dtype=object)
    name_loader = np.array([bool(DATALOADER_NAME.search(v)) for v in names] or [False])
    name_runtime = np.array([bool(RUNTIME_NAME.match(v)) for v in names] or [False])
    name_python = np.array([bool(PYTHON_NAME.match(v)) for v in names] or [False])
    name_batch = np.array([v == PROFILED_BATCH for v in names] or [False])
    name_stepfn = np.array([bool(STEP_FUNCTIONS.match(v)) for v in names] or [False])
    name_number = np.array([_number(v) for v in names] or [-1], dtype=np.int64)

    # --- per details text (memcpy_details "kind:HtoD size:655360 dest:2 async:1") -------------
    detail_values = raw.details.values
    detail_size = np.array([_detail_size(v) for v in detail_values] or [-1], dtype=np.int64)
    detail_dir = np.array([_detail_direction(v) for v in detail_values] or [""], dtype=object)
    has_details = np.array([v != "" for v in detail_values] or [False])

    if n == 0:
        return Mapped(T.empty_events(), dict(not_kept), warnings, sorted(set(plane_gpu[plane_gpu >= 0])))

    on_gpu = ev_gpu >= 0
    stream = line_stream[line]
    work_line = on_gpu & (stream >= 0)
    ev_details = has_details[details]
    is_memset = work_line & (line_memset[line] | name_memset[name])
    is_copy = work_line & ~is_memset & (line_copy[line] | ev_details | name_copy[name])
    kind = np.full(n, T.OTHER, dtype=object)
    kind[on_gpu] = T.GPU_ANNOTATION
    kind[work_line] = T.KERNEL
    kind[is_copy] = T.MEMCPY
    kind[is_memset] = T.MEMSET

    host = ev_host
    kind[host] = T.CPU_OP
    kind[host & name_runtime[name]] = T.RUNTIME
    kind[host & name_python[name]] = T.PYTHON
    kind[host & name_loader[name]] = T.DATALOADER
    kind[host & (dur == 0) & (kind == T.CPU_OP)] = T.OTHER  # instants (ThreadpoolListener marks)

    # Steps: Profiled batch > Steps line > step functions.
    step = np.full(n, -1, dtype=np.int64)
    batch = host & name_batch[name]
    steps_line = line_steps[line] & (host | on_gpu)
    fn = host & name_stepfn[name]
    if batch.any():
        chosen = batch
        numbers = np.where(step_num[batch] >= 0, step_num[batch], -1)
        if (numbers < 0).any():
            numbers = _order_numbers(ts[batch])
    elif steps_line.any():
        chosen = steps_line
        numbers = np.where(step_num[chosen] >= 0, step_num[chosen], name_number[name[chosen]])
        if (numbers < 0).any():
            numbers = _order_numbers(ts[chosen])
    elif fn.any():
        chosen = fn
        numbers = _order_numbers(ts[fn])
    else:
        chosen = np.zeros(n, dtype=bool)
        numbers = np.zeros(0, dtype=np.int64)
    step[chosen] = numbers
    kind[chosen] = T.STEP
    if not chosen.any():
        warnings.append("no steps found (no Keras 'Profiled batch', no 'Steps' line, no train function)")

    direction = np.full(n, "", dtype=object)
    direction[is_copy] = detail_dir[details[is_copy]]
    fill = is_copy & (direction == "")
    direction[fill] = line_dir[line[fill]]
    fill = is_copy & (direction == "")
    direction[fill] = name_dir[name[fill]]
    nbytes = np.where(is_copy | is_memset, detail_size[details], -1)

    keep = ~unmapped
    device_kinds = np.isin(kind, T.DEVICE_KINDS)
    frame = T.events_frame({
        "ts_ns": ts[keep], "dur_ns": dur[keep],
        "kind": pd.Categorical(kind[keep], categories=T.EVENT_KINDS),
        "name": raw.names.categorical(name[keep].astype(np.int32)),
        "category": "",
        "rank": 0,
        "device": np.where(device_kinds, ev_gpu, -1)[keep],
        "stream": np.where(device_kinds, np.where(stream >= 0, stream, line_id), -1)[keep],
        "pid": -1,
        "tid": np.where(host, line_id, -1)[keep],
        "step": step[keep],
        "bytes": nbytes[keep],
        "copy_kind": pd.Categorical(direction[keep], categories=T.COPY_KINDS),
        "pinned": -1,
        "comm": (kind == T.KERNEL)[keep] & np.array([_is_comm(v) for v in names] or [False])[name[keep]],
        "correlation": correlation[keep],
    })
    negative = frame["dur_ns"].to_numpy() < 0
    if negative.any():
        not_kept["negative_duration"] += int(negative.sum())
        warnings.append(f"{int(negative.sum())} events dropped: negative duration")
        frame = frame[~negative].reset_index(drop=True)
    gpus = sorted(int(g) for g in set(plane_gpu[plane_gpu >= 0]))
    return Mapped(frame, dict(not_kept), warnings, gpus)


def framework_of(names: list[str]) -> str:
    """'jax' for PjRt/XLA-only captures, else 'tensorflow' (TF executor or Keras markers)."""
    tf_markers = ("Profiled batch", "EagerExecute", "ExecutorState::Process", "IteratorGetNextOp::DoCompute")
    if any(n in tf_markers or n.startswith("EagerLocalExecute") for n in names):
        return "tensorflow"
    if any("PjRt" in n or n.startswith("PjitFunction") for n in names):
        return "jax"
    return "tensorflow"


# Device and stream numbers beyond int32 are no real GPU's: such a plane or line is not mapped
# (its events are counted as not kept) rather than wrapped onto another device.
_MAX_INDEX = 2**31 - 1


def _small_int(digits: str) -> int:
    """A run of digits as an int, -1 beyond _MAX_INDEX (never converts thousands of digits)."""
    return int(digits) if len(digits) <= 10 and int(digits) <= _MAX_INDEX else -1


def gpu_index(plane_name: str) -> int:
    m = GPU_PLANE.match(plane_name)
    return _small_int(m.group(1)) if m else -1


def number_gpu_planes(plane_names: list[str], warnings: list[str]) -> dict[str, int]:
    """Each GPU plane's device index: its number, or for a number beyond int32 (no real GPU's, yet a
    plane of GPU work) the next index free after the others, said in `warnings`, rather than no device."""
    out = {name: gpu_index(name) for name in plane_names if GPU_PLANE.match(name)}
    odd = sorted(name for name, index in out.items() if index < 0)
    free = max((i for i in out.values() if i >= 0), default=-1) + 1
    for name in odd:
        out[name] = free
        warnings.append(f"plane {name[:60]}: its GPU number is beyond int32, shown as device {free}")
        free += 1
    return out


def _direction(text: str) -> str:
    for pattern, value in COPY_DIRECTIONS:
        if pattern.search(text):
            return value
    return ""


def _detail_size(text: str) -> int:
    m = DETAIL_SIZE.search(text)
    return int(m.group(1)) if m and len(m.group(1)) <= 18 else -1


def _detail_direction(text: str) -> str:
    m = DETAIL_KIND.search(text)
    return _direction(m.group(1)) if m else ""


def _number(text: str) -> int:
    m = DIGITS.search(text)
    return int(m.group(1)) if m and text.strip().isdigit() and len(m.group(1)) <= 18 else -1


def _order_numbers(ts: np.ndarray) -> np.ndarray:
    """Step numbers 0..n-1 in time order (for spans that carry no number)."""
    order = np.argsort(ts, kind="stable")
    numbers = np.empty(len(ts), dtype=np.int64)
    numbers[order] = np.arange(len(ts))
    return numbers


def _is_comm(name: str) -> bool:
    return is_comm_kernel(name)
