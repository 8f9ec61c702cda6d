"""The one registry of gap causes and verdicts: id, label, colour, verdict, phrase, and for the
causes a host thread's events show, the names (or event kind) that recognise them.

Every part that names a cause or a verdict reads it from here: the host-event classes and the gap
attribution (analyses/host.py, analyses/gaps.py: one class per cause with `priority`, built in one
loop over this registry), the drawn host lanes (analyses/tracks.py), the rules (which turn lost time
by cause into verdicts and findings), the advice table (keyed by verdict id) and every renderer
(labels and colours; the HTML page receives the registry in its embedded data, so `report.js` draws
with the same colours).

Adding a cause that host events recognise is: a `Cause` with its `host_pattern`, `priority` and
`direct=True` and its `Verdict` here, plus the verdict's advice (diagnosis/advice.py), then
`python docs/_generate.py` (docs/diagnosis.md's tables come from this registry);
`tests/test_add_a_cause.py` shows it end to end, `tests/test_causes.py` checks that they agree.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# timeline.DATALOADER, written here so the registry (and the command line's --help, which lists the verdicts)
# loads without pandas; tests/test_cli_imports.py checks they are equal.
DATALOADER_KIND = "dataloader"


@dataclass(frozen=True)
class Cause:
    """Why a GPU was idle (or lost time) during a stretch of the window."""

    id: str  # the JSON name
    label: str  # short label for legends and tables
    color: str  # legend / chart colour (CSS hex)
    verdict: str  # the verdict this cause leads to when it loses the most time
    phrase: str  # completes "N% of that idle time is spent ..."
    # --- host classes: the launching threads' events this cause recognises (None: not a host class)
    host_pattern: re.Pattern[str] | None = None  # event names (`search`; anchored where it must be)
    host_kind: str | None = None  # or every event of this Timeline kind
    # A host event is claimed by the matching class of lowest priority; a gap's share of each class
    # is measured on these disjoint pieces, so nested events count once.
    priority: int | None = None
    # A gap whose largest part the class covers gets this cause directly (else the gap goes through
    # the sync / copy / launch / host-compute rules of analyses/gaps.py).
    direct: bool = False

    @property
    def host_class(self) -> bool:
        return self.priority is not None and (self.host_pattern is not None or self.host_kind is not None)


@dataclass(frozen=True)
class Verdict:
    """A primary verdict of a rank or a job."""

    id: str  # the JSON name
    label: str  # short label ("Input bound")
    title: str  # a finding's title
    cause: str  # the cause whose colour the verdict wears ("" for none)


# --- causes (gap attribution order: most specific first) ----------------------------------------------
DATALOADER = "dataloader"
MEMCPY = "memcpy"
SYNC = "sync"
LAUNCH = "launch"
HOST_COMPUTE = "host_compute"
CHECKPOINT = "checkpoint"
COMMUNICATION = "communication"
UNKNOWN = "unknown"
STARTUP = "startup"
ALLOCATOR = "allocator"
# Device-side: the work that ended the gap was already queued when it began (the host delayed nothing).
DEPENDENCY = "device_dependency"

# --- verdicts -------------------------------------------------------------------------------------------
INPUT_BOUND = "input_bound"
MEMCPY_BOUND = "memcpy_bound"
LAUNCH_BOUND = "launch_bound"
SYNC_BOUND = "sync_bound"
HOST_BOUND = "host_bound"
PERIODIC_STALL = "periodic_stall"
COMMUNICATION_BOUND = "communication_bound"
GPU_BOUND = "gpu_bound"
UNDETERMINED = "undetermined"
UNEXPLAINED = "unexplained_idle"  # a finding (idle time of cause `unknown`), never a primary verdict
STARTUP_DOMINATED = "startup_dominated"
ALLOCATOR_BOUND = "allocator_bound"
DEPENDENCY_BOUND = "dependency_bound"
GPU_UNDERUSED = "gpu_underused"  # nvidia-smi logs alone: GPUs idle for much of the log
# The host loop's own verdicts (CPU-only captures, and the host loop of ranks with too little GPU work to
# judge): never the GPU verdicts, which say what starves a GPU.
CPU_INPUT_BOUND = "cpu_input_bound"
CPU_COMPUTE_BOUND = "cpu_compute_bound"

# --- host event names that recognise causes (matched case-insensitively on the original name) ----------
# Calls that only start-up makes: context, stream and event creation, module loading, library handle
# creation, autotuning, torch.compile / XLA compilation.
STARTUP_CALLS = re.compile(
    r"^cu(Init|CtxCreate|DevicePrimaryCtxRetain|ModuleLoad\w*|LibraryLoad\w*)(_v\d)?$"
    r"|^(cuda|hip)(StreamCreate\w*|EventCreate\w*|GetDeviceProperties\w*|ModuleLoad\w*|Init)$"
    r"|^(cublas|cublasLt|cudnn|cusparse|cufft|hipblas|hipblasLt|miopen|rocblas)(Create|_create)\w*$"
    r"|cudnnFind|Autotun|autotune|torch/_dynamo/convert_frame|torch/_inductor/compile|compile_fx"
    r"|^TorchDynamo Compil|^Torch-Compiled Region: \d+/\d+ \(compil|XlaCompile|jit_compile|CompileModule",
    re.IGNORECASE)
# Collectives and waits on them, on the host.
COMMUNICATION_CALLS = re.compile(
    r"^(nccl|rccl|gloo|mpi)[:_]|^(c10d|_c10d_functional|c10d_functional)::|^record_param_comms$"
    r"|^ProcessGroup|torch/distributed/|^torch\.distributed\.", re.IGNORECASE)
# Synchronous device-memory allocation and release (stream-ordered *Async variants do not block).
ALLOCATOR_CALLS = re.compile(
    r"^(cuda|hip)(Malloc|Free|MallocHost|FreeHost|HostAlloc|MallocManaged|MallocPitch|Malloc3D)$"
    r"|^cuMem(Alloc|Free|AllocHost|FreeHost|AllocManaged|AllocPitch)(_v2)?$", re.IGNORECASE)
# Host-side copy work: every copy API (sync or async: pageable async copies are staged by the host)
# and pinning on the hot loop. The drawn "copy" host lane shows the runtime calls among these.
COPY_CALLS = re.compile(r"memcpy|^aten::_?pin_memory$", re.IGNORECASE)
# Explicit synchronisations (cudaStreamSynchronize, hipDeviceSynchronize, ...): the drawn "sync" lane.
SYNCHRONIZE_CALLS = re.compile(r"synchroni[sz]", re.IGNORECASE)
# Synchronous copy APIs (cudaMemcpy without Async, hipMemcpyWithStream): they block the host.
SYNC_COPY_CALLS = re.compile(
    r"^(cuda|hip)Memcpy(2D|3D)?$|^cuMemcpy(HtoD|DtoH|DtoD)?(_v2)?$|^hipMemcpyWithStream$", re.IGNORECASE)
# ATen ops that read a device scalar (`.item()`, `if tensor:`): a copy and a stream synchronisation.
SCALAR_READ_CALLS = re.compile(r"^aten::(item|_local_scalar_dense|is_nonzero)$", re.IGNORECASE)
# Calls that block the host until the GPU catches up: the three above.
SYNC_CALLS = re.compile("|".join(p.pattern for p in (SYNCHRONIZE_CALLS, SYNC_COPY_CALLS, SCALAR_READ_CALLS)),
                        re.IGNORECASE)
# The optimizer's step and zero_grad (torch.optim's `Optimizer.step#SGD.step` record_function ranges, Keras
# and Optax update ops): the host loop's "optimizer" part on CPU-only captures.
OPTIMIZER_CALLS = re.compile(r"^Optimizer\.(step|zero_grad)\b|^optimizer[._/]|/optimizer/|apply_gradients",
                             re.IGNORECASE)

# Work that only training does: the backward pass (autograd's engine, `*Backward0` nodes, TF `gradients/`
# ops) and the optimizer's update. A rank whose trace has host ops but none of these is an inference or
# serving workload: its advice leaves out training-loop advice (analyses/gaps.py `workload`).
TRAINING_CALLS = re.compile(
    r"backward|^autograd::engine|^Optimizer\.(step|zero_grad)\b|^optimizer[._/]|/optimizer/|apply_gradients"
    r"|(^|/)gradients?/|GradientTape", re.IGNORECASE)

CAUSE_LIST: tuple[Cause, ...] = (
    Cause(DATALOADER, "DataLoader wait", "#e4572e", INPUT_BOUND, "waiting for the DataLoader",
          host_kind=DATALOADER_KIND, priority=20, direct=True),
    Cause(MEMCPY, "memcpy", "#b5179e", MEMCPY_BOUND, "in host-device copies",
          host_pattern=COPY_CALLS, priority=50, direct=True),
    Cause(SYNC, "synchronisation", "#f2a541", SYNC_BOUND, "behind host-device synchronisations",
          host_pattern=SYNC_CALLS, priority=60, direct=True),
    Cause(LAUNCH, "launch overhead", "#17bebb", LAUNCH_BOUND, "launching short kernels one by one"),
    Cause(HOST_COMPUTE, "host compute", "#3a86ff", HOST_BOUND, "in host work between GPU launches"),
    Cause(CHECKPOINT, "checkpointing", "#a1785c", PERIODIC_STALL, "in periodic stalls"),
    Cause(COMMUNICATION, "communication", "#2a9d4f", COMMUNICATION_BOUND, "waiting on communication",
          host_pattern=COMMUNICATION_CALLS, priority=30, direct=True),
    Cause(UNKNOWN, "unknown cause", "#6c7a89", UNEXPLAINED, "with no traced host activity"),
    Cause(STARTUP, "start-up / first call", "#8d99ae", STARTUP_DOMINATED,
          "in one-off start-up costs (first calls, context and handle creation, compilation)",
          host_pattern=STARTUP_CALLS, priority=10, direct=True),
    Cause(ALLOCATOR, "allocator (cudaMalloc/Free)", "#ef476f", ALLOCATOR_BOUND,
          "in synchronous device-memory allocation and release", host_pattern=ALLOCATOR_CALLS, priority=40,
          direct=True),
    # Not a host class: given by the gap attribution when the next GPU work's launch call had returned
    # before the gap began (analyses/gaps.py), whatever the host did meanwhile.
    Cause(DEPENDENCY, "device-side wait", "#9c89b8", DEPENDENCY_BOUND,
          "with the next GPU work already queued (waiting on another stream, an event, a peer rank, or "
          "between a graph's kernels)"),
)

VERDICT_LIST: tuple[Verdict, ...] = (
    Verdict(INPUT_BOUND, "Input bound", "Input-bound: the GPU waits for the next batch", DATALOADER),
    Verdict(MEMCPY_BOUND, "Memcpy bound", "Host-device copies hold the GPU up", MEMCPY),
    Verdict(LAUNCH_BOUND, "Launch bound", "Launch-bound: short kernels, the host cannot launch them fast enough",
            LAUNCH),
    Verdict(SYNC_BOUND, "Synchronisation bound", "Synchronisations stall the launch queue", SYNC),
    Verdict(HOST_BOUND, "Host bound", "Host-bound: host work between GPU launches", HOST_COMPUTE),
    Verdict(PERIODIC_STALL, "Periodic stalls", "Periodic stalls (checkpoint / evaluation)", CHECKPOINT),
    Verdict(COMMUNICATION_BOUND, "Communication bound", "Waiting on communication", COMMUNICATION),
    Verdict(STARTUP_DOMINATED, "Start-up dominated", "One-off start-up costs dominate this capture", STARTUP),
    Verdict(ALLOCATOR_BOUND, "Allocator bound", "Synchronous cudaMalloc/cudaFree in the training loop", ALLOCATOR),
    Verdict(DEPENDENCY_BOUND, "Device-side waits",
            "The GPU waits with work already queued (streams, events, peers, graph bubbles)", DEPENDENCY),
    Verdict(GPU_UNDERUSED, "GPU underused", "GPUs sit idle for much of the log", UNKNOWN),
    Verdict(CPU_INPUT_BOUND, "CPU loop input bound", "The host loop waits for data", DATALOADER),
    Verdict(CPU_COMPUTE_BOUND, "CPU loop compute bound",
            "The host loop is busy in its own work (model ops, optimizer, annotated code)", HOST_COMPUTE),
    Verdict(GPU_BOUND, "GPU bound", "GPU-bound: the GPU itself is the bottleneck", ""),
    Verdict(UNDETERMINED, "Undetermined", "Undetermined", UNKNOWN),
    Verdict(UNEXPLAINED, "Unexplained idle", "GPU idle with no traced host activity", UNKNOWN),
)

CAUSE_BY_ID: dict[str, Cause] = {c.id: c for c in CAUSE_LIST}
VERDICT_BY_ID: dict[str, Verdict] = {v.id: v for v in VERDICT_LIST}
CAUSES: tuple[str, ...] = tuple(c.id for c in CAUSE_LIST)
# Primary verdicts (a finding id such as `unexplained_idle` is not one).
VERDICTS: tuple[str, ...] = tuple(v.id for v in VERDICT_LIST if v.id != UNEXPLAINED)
VERDICT_OF_CAUSE: dict[str, str] = {c.id: c.verdict for c in CAUSE_LIST}


def host_causes(causes: tuple[Cause, ...] | None = None) -> tuple[Cause, ...]:
    """The causes that host events recognise, in claiming order (lowest priority first)."""
    return tuple(sorted((c for c in (CAUSE_LIST if causes is None else causes) if c.host_class),
                        key=lambda c: c.priority or 0))


# Colours of drawn things that are not causes (GPU work, idle without a cause, step stripes).
PALETTE: dict[str, str] = {
    "busy": "#2f4b7c", "compute": "#2f4b7c", "memcpy": "#9b5de5", "idle": "#c9ced6",
    "unattributed": "#c9ced6", "step_a": "#e8ecf2", "step_b": "#d5dce6", "ops": "#5f7fa8",
    "communication": "#1b6b36",
    # the host loop's parts on CPU-only captures (DataLoader wait wears its cause's colour)
    "host_optimizer": "#17bebb", "host_annotations": "#a1785c", "host_model_ops": "#3a86ff",
    "host_elsewhere": "#c9ced6",
}


def cause_label(cause_id: str | None) -> str:
    c = CAUSE_BY_ID.get(cause_id or "")
    return c.label if c else (cause_id or "–")


def page_registry() -> dict[str, dict[str, dict[str, str]]]:
    """The registry as plain data for the HTML page's scripts (labels and colours)."""
    return {
        "causes": {c.id: {"label": c.label, "color": c.color} for c in CAUSE_LIST},
        "verdicts": {v.id: {"label": v.label, "cause": v.cause} for v in VERDICT_LIST},
    }
