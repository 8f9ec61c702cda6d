"""What a rank without GPU activity is called on every face: a capture whose GPU events were lost
(cut off before Kineto wrote them) is not a run without a GPU."""

from __future__ import annotations

from ..result.types import RankResult

NO_GPU = "no GPU activity"
GPU_LOST = "GPU events lost"


def no_gpu_text(r: RankResult) -> str:
    """The short label for a rank with no GPU figures: why there are none."""
    return GPU_LOST if r.capture is not None and r.capture.gpu_events_lost else NO_GPU


def no_gpu_line(r: RankResult) -> str:
    """The sentence for a rank with no GPU figures (the capture's own note when its GPU events were lost)."""
    if r.capture is not None and r.capture.gpu_events_lost and r.capture.note:
        return r.capture.note
    return "no GPU activity in this trace"
