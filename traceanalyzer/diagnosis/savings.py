"""What removing each cause would save: the projected shortening of the median step.

A first version of a what-if replay, from the causal gap attribution (analyses/gaps.py): a gap is the
host's only when the work that ends it was queued after it began, so a host cause's idle time is time
the GPU had nothing queued, on the step's critical path. Removing the cause removes that idle time
from the step and nothing else (the basis); the limits: work does not move into the freed time (a
shorter wait for data is not refilled by something else), and time the GPU spent waiting with work
already queued (`device_dependency`) is no host cause's, so removing a host cause never saves it.

Per steady step (warm-up steps left out) and cause: its lost time x in the step (idle of that cause,
plus exposed copies for memcpy and exposed communication for communication), averaged over the rank's
devices. The saving is median(step) - median(step - x): a step with a DataLoader wait of W in every
step saves exactly W, and no cause saves more than its largest per-step time. Stalls that recur in some
steps only (`recurring`: a DataLoader that stalls every Nth step, a checkpoint every 100) cost their mean,
not the median step's nothing, and are counted on the mean step (their total / the steps); a single long
stall in one step stays on the median, so it cannot decide alone. So is every cause with fewer than
ROBUST_MIN_STEPS steady steps (a median of two or three steps would ignore a step that holds most of the
capture, as the rest of the diagnosis does not). Without steps, the capture window stands for one step.

Where the rank's median step was replayed without the cause (analyses/cause_removal.py: its dependency graph,
analyses/critical_path.py, with the host time inside the cause's idle stretches removed, and copies or
collectives for memcpy and communication), the saving is the replayed one instead, when the projection is of the
median step or the window (a cause that stalls some steps only costs its mean, which one step's replay cannot
see): the replay drops the projection's limits (work that runs beside the freed time, on another stream or
device, still holds the step) and states its own (launch overheads kept, queue depth unchanged, memory not
modelled). `replayed` says which one a saving is; bounded by the step it shortens. The verdict ranks causes by
the projection (`projected_ns`), so the call made on the benchmark's traces holds; the findings show the replay.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import causes as C
from ..analyses.figures import Steps
from ..analyses.gaps import StepCauses
from .thresholds import RECURRING_MIN_STEPS, RECURRING_SKEW, ROBUST_MIN_STEPS

MEDIAN_STEP = "median_step"
MEAN_STEP = "mean_step"
WINDOW = "window"


@dataclass(frozen=True)
class Replay:
    """What removing a cause saves the rank's median step, replayed (analyses/cause_removal.py)."""

    saving_ns: int
    step_ns: int  # the replayed step's duration
    window: bool  # the step is the capture window (no steps)


@dataclass(frozen=True)
class Saving:
    cause: str
    saving_ns: int  # projected shortening of the median step (mean step, or window: see `basis`)
    step_ns: int  # the median step (mean step, or the window per device) it shortens
    basis: str  # MEDIAN_STEP | MEAN_STEP | WINDOW
    steps: int  # steady steps it is measured on (0: the window)
    replayed: bool = False  # the median step (window) replayed without the cause, not the projection
    projected_ns: int | None = None  # the projection, when `saving_ns` is replayed (else `saving_ns`)
    projected_step_ns: int | None = None  # the step the projection shortens, when replayed (else `step_ns`)

    @property
    def projection_ns(self) -> int:
        """The projected saving (what the verdict ranks causes by)."""
        return self.saving_ns if self.projected_ns is None else self.projected_ns

    @property
    def share(self) -> float:
        return self.saving_ns / self.step_ns if self.step_ns > 0 else 0.0


def savings(per_step: tuple[StepCauses, ...], st: Steps, warmup: np.ndarray, lost_by_cause: dict[str, int],
            window_ns: int, n_devices: int, replays: dict[str, Replay] | None = None) -> dict[str, Saving]:
    """Each cause's saving (see the module's words); `lost_by_cause` and `window_ns` summed over the rank's
    `n_devices` devices, as `per_step` is; `replays`: the causes replayed."""
    n = min(len(st), len(per_step))
    out = {}
    for c in C.CAUSES:
        x = np.array([per_step[i].idle_by_cause.get(c, 0) + per_step[i].exposed_by_cause.get(c, 0)
                      for i in range(n)], dtype=np.float64)
        keep = np.setdiff1d(np.arange(n), warmup)
        out[c] = replayed(saving_of(c, x, st, warmup, lost_by_cause.get(c, 0), window_ns, n_devices,
                                    mean=c == C.CHECKPOINT or recurring(x[keep])), (replays or {}).get(c))
    return out


def replayed(projected: Saving, replay: Replay | None) -> Saving:
    """The replayed saving in place of the projection, when it is of what the projection is of (the median step,
    or the window without steps); bounded by the replayed step."""
    if replay is None or projected.basis == MEAN_STEP or (projected.basis == WINDOW) != replay.window:
        return projected
    saving_ns, step_ns = replay.saving_ns, replay.step_ns
    return Saving(projected.cause, min(max(saving_ns, 0), max(step_ns, 0)), step_ns, projected.basis,
                  projected.steps, True, projected.saving_ns, projected.step_ns)


def recurring(per_step: np.ndarray) -> bool:
    """Whether a cause's per-step time is a stall that recurs in some steps only: its mean is at least
    RECURRING_SKEW x its median (the median step does not show it) and at least RECURRING_MIN_STEPS steps
    hold half its largest value or more (not one long stall). Such a cause costs its mean per step."""
    x = np.asarray(per_step, dtype=np.float64)
    if len(x) < ROBUST_MIN_STEPS or not x.any():
        return False
    large = int((x >= 0.5 * x.max()).sum())
    return float(x.mean()) >= RECURRING_SKEW * float(np.median(x)) and large >= RECURRING_MIN_STEPS


def saving_of(what: str, per_step: np.ndarray, st: Steps, warmup: np.ndarray, total_ns: int, window_ns: int,
              n_devices: int, mean: bool = False) -> Saving:
    """The projected saving of removing `what`, whose time on the critical path is `per_step` (one value per
    step, summed over the rank's devices; `total_ns` over the window): median(step) - median(step - x) over
    the steady steps, x averaged over the devices, at most its largest x; the mean step when `mean` or with
    fewer than ROBUST_MIN_STEPS steady steps; without steps, its total over the window."""
    n_dev = max(n_devices, 1)
    keep = np.setdiff1d(np.arange(min(len(st), len(per_step))), warmup)
    if not len(keep):
        return Saving(what, int(total_ns // n_dev), window_ns // n_dev, WINDOW, 0)
    dur = (st.end_ns[keep] - st.start_ns[keep]).astype(np.float64)
    x = np.asarray(per_step, dtype=np.float64)[keep] / n_dev
    if mean or len(keep) < ROBUST_MIN_STEPS:
        return Saving(what, int(round(float(x.mean()))), int(round(float(dur.mean()))), MEAN_STEP, len(keep))
    median = float(np.median(dur))
    saving = median - float(np.median(dur - x))
    return Saving(what, int(round(min(max(saving, 0.0), float(x.max(initial=0.0))))), int(round(median)),
                  MEDIAN_STEP, len(keep))


def projection(s: Saving) -> Saving:
    """The projected saving alone (a replayed one's projection)."""
    if not s.replayed:
        return s
    return Saving(s.cause, s.projection_ns, s.projected_step_ns or s.step_ns, s.basis, s.steps)


def basis_words(s: Saving) -> str:
    """What a saving is of, in words."""
    if s.basis == WINDOW:
        return "the captured window (no steps)"
    if s.replayed:
        return "the median step"
    steps = f"{s.steps} steady step{'s' if s.steps != 1 else ''}"
    if s.basis == MEAN_STEP:
        return f"the mean step (over {steps})"
    return f"the median step (over {steps})"
