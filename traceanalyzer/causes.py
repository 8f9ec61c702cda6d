"""The one registry of gap causes and verdicts: id, label, colour, title, phrase, advice key.

Every part that names a cause or a verdict imports it from here: the gap attribution (which
assigns causes), the rules (which turn lost time by cause into verdicts and findings), the advice
table (keyed by `advice_key`), and every renderer (labels and colours; the HTML page receives the
registry in its embedded data, so `report.js` draws with the same colours). Adding a cause is: an
entry in `CAUSES` here, the rule that assigns it (diagnosis/attribution.py) and its advice
(diagnosis/advice.py); `tests/test_causes.py` checks that the three agree.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Cause:
    """Why a GPU was idle (or lost time) during a stretch of the window."""

    id: str  # the JSON name
    label: str  # short label for legends and tables
    color: str  # legend / chart colour (CSS hex)
    verdict: str  # the verdict this cause leads to when it loses the most time
    phrase: str  # completes "N% of that idle time is spent ..."


@dataclass(frozen=True)
class Verdict:
    """A primary verdict of a rank or a job."""

    id: str  # the JSON name
    label: str  # short label ("Input bound")
    title: str  # a finding's title
    cause: str  # the cause whose colour the verdict wears ("" for none)
    advice_key: str  # key into diagnosis.advice.ADVICE


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
GPU_UNDERUSED = "gpu_underused"  # nvidia-smi logs alone: GPUs idle for much of the log

CAUSE_LIST: tuple[Cause, ...] = (
    Cause(DATALOADER, "DataLoader wait", "#e4572e", INPUT_BOUND, "waiting for the DataLoader"),
    Cause(MEMCPY, "memcpy", "#b5179e", MEMCPY_BOUND, "in host-device copies"),
    Cause(SYNC, "synchronisation", "#f2a541", SYNC_BOUND, "behind host-device synchronisations"),
    Cause(LAUNCH, "launch overhead", "#17bebb", LAUNCH_BOUND, "launching short kernels one by one"),
    Cause(HOST_COMPUTE, "host compute", "#3a86ff", HOST_BOUND, "in host work between GPU launches"),
    Cause(CHECKPOINT, "checkpointing", "#a1785c", PERIODIC_STALL, "in periodic stalls"),
    Cause(COMMUNICATION, "communication", "#2a9d4f", COMMUNICATION_BOUND, "waiting on communication"),
    Cause(UNKNOWN, "unknown cause", "#6c7a89", UNEXPLAINED, "with no traced host activity"),
    Cause(STARTUP, "start-up / first call", "#8d99ae", STARTUP_DOMINATED,
          "in one-off start-up costs (first calls, context and handle creation, compilation)"),
    Cause(ALLOCATOR, "allocator (cudaMalloc/Free)", "#ef476f", ALLOCATOR_BOUND,
          "in synchronous device-memory allocation and release"),
)

VERDICT_LIST: tuple[Verdict, ...] = (
    Verdict(INPUT_BOUND, "Input bound", "Input-bound: the GPU waits for the next batch", DATALOADER, INPUT_BOUND),
    Verdict(MEMCPY_BOUND, "Memcpy bound", "Host-device copies hold the GPU up", MEMCPY, MEMCPY_BOUND),
    Verdict(LAUNCH_BOUND, "Launch bound", "Launch-bound: short kernels, the host cannot launch them fast enough",
            LAUNCH, LAUNCH_BOUND),
    Verdict(SYNC_BOUND, "Synchronisation bound", "Synchronisations stall the launch queue", SYNC, SYNC_BOUND),
    Verdict(HOST_BOUND, "Host bound", "Host-bound: host work between GPU launches", HOST_COMPUTE, HOST_BOUND),
    Verdict(PERIODIC_STALL, "Periodic stalls", "Periodic stalls (checkpoint / evaluation)", CHECKPOINT,
            PERIODIC_STALL),
    Verdict(COMMUNICATION_BOUND, "Communication bound", "Waiting on communication", COMMUNICATION,
            COMMUNICATION_BOUND),
    Verdict(STARTUP_DOMINATED, "Start-up dominated", "One-off start-up costs dominate this capture", STARTUP,
            STARTUP_DOMINATED),
    Verdict(ALLOCATOR_BOUND, "Allocator bound", "Synchronous cudaMalloc/cudaFree in the training loop", ALLOCATOR,
            ALLOCATOR_BOUND),
    Verdict(GPU_UNDERUSED, "GPU underused", "GPUs sit idle for much of the log", UNKNOWN, GPU_UNDERUSED),
    Verdict(GPU_BOUND, "GPU bound", "GPU-bound: the GPU itself is the bottleneck", "", GPU_BOUND),
    Verdict(UNDETERMINED, "Undetermined", "Undetermined", UNKNOWN, UNEXPLAINED),
    Verdict(UNEXPLAINED, "Unexplained idle", "GPU idle with no traced host activity", UNKNOWN, UNEXPLAINED),
)

CAUSE_BY_ID: dict[str, Cause] = {c.id: c for c in CAUSE_LIST}
VERDICT_BY_ID: dict[str, Verdict] = {v.id: v for v in VERDICT_LIST}
CAUSES: tuple[str, ...] = tuple(c.id for c in CAUSE_LIST)
# Primary verdicts (a finding id such as `unexplained_idle` is not one).
VERDICTS: tuple[str, ...] = tuple(v.id for v in VERDICT_LIST if v.id != UNEXPLAINED)
VERDICT_OF_CAUSE: dict[str, str] = {c.id: c.verdict for c in CAUSE_LIST}

# Colours of drawn things that are not causes (GPU work, idle without a cause, step stripes).
PALETTE: dict[str, str] = {
    "busy": "#2f4b7c", "compute": "#2f4b7c", "memcpy": "#9b5de5", "idle": "#c9ced6",
    "unattributed": "#c9ced6", "step_a": "#e8ecf2", "step_b": "#d5dce6", "ops": "#5f7fa8",
    "communication": "#1b6b36",
}


def cause_label(cause_id: str | None) -> str:
    c = CAUSE_BY_ID.get(cause_id or "")
    return c.label if c else (cause_id or "–")


def verdict_label(verdict_id: str | None) -> str:
    v = VERDICT_BY_ID.get(verdict_id or "")
    return v.label if v else (verdict_id or "–")


def page_registry() -> dict[str, dict[str, dict[str, str]]]:
    """The registry as plain data for the HTML page's scripts (labels and colours)."""
    return {
        "causes": {c.id: {"label": c.label, "color": c.color} for c in CAUSE_LIST},
        "verdicts": {v.id: {"label": v.label, "cause": v.cause} for v in VERDICT_LIST},
    }
