"""The result: the typed tree of one analysis (`types`), built once from figures and findings (`build`),
its DataFrame views (`frames`) and the definitions of its figures (`definitions`).

`Analysis` is that tree (`types.AnalysisData`) with its faces: render it (HTML, Markdown, JSON,
terminal text), look at it as pandas DataFrames, save it and load it back. The renderers are imported
when a face is used, so building or loading a result never imports jinja2.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from .frames import (
    devices_frame,
    findings_frame,
    frames_frame,
    gaps_frame,
    iterations_frame,
    kernels_frame,
    ops_frame,
    requests_frame,
    steps_frame,
)
from .types import SCHEMA, AnalysisData, ResultFormatError, from_data, migrate


@dataclass(frozen=True, repr=False)
class Analysis(AnalysisData):
    """The result of `traceanalyzer.analyze`: its data (`AnalysisData`) and its faces."""

    # --- notebook faces: short (the whole tree is `a.to_data()`)
    def __repr__(self) -> str:
        """The verdict, the headline figures, the ranks and how to see more (under 2,000 characters)."""
        from ..report.notebook import render_repr

        return render_repr(self)

    def _repr_html_(self) -> str:
        """The verdict card and the headline figures, for Jupyter (small: under 50 KB)."""
        from ..report.notebook import render_card_html

        return render_card_html(self)

    # --- serialization
    def to_json(self) -> bytes:
        return self._render("json")

    def save(self, path: str | Path, drawing: bool = True) -> Path:
        """Write the JSON report (what `traceanalyzer.load` reads back); `drawing=False` leaves out the
        drawing payloads (timeline blocks, chart series): every figure and finding is kept, the HTML
        page of such a report has no timeline or charts."""
        from ..report import render

        target = Path(path)
        target.write_bytes(render(self if drawing else self.without_drawing(), "json"))
        return target

    # --- renderers (by name from `report.RENDERERS`)
    def _render(self, fmt: str) -> bytes:
        from ..report import render

        return render(self, fmt)

    def to_html(self, path: str | Path | None = None) -> str:
        """The self-contained HTML report; written to `path` when given."""
        data = self._render("html")
        if path is not None:
            Path(path).write_bytes(data)
        return data.decode("utf-8")

    def to_markdown(self) -> str:
        return self._render("md").decode("utf-8")

    def to_text(self) -> str:
        """The short terminal summary."""
        return self._render("text").decode("utf-8")

    # --- DataFrame views (pandas), one row per rank x ...
    def steps(self) -> pd.DataFrame:
        """One row per rank and step: duration, GPU busy, memcpy, DataLoader wait, idle (us)."""
        return steps_frame(self)

    def gaps(self) -> pd.DataFrame:
        """One row per idle gap of at least `min_gap` (each device's gap table): rank, device, start, duration,
        step, cause."""
        return gaps_frame(self)

    def kernels(self, top: int | None = 15) -> pd.DataFrame:
        """One row per rank, device and kernel name: count, total and mean time (us); the `top` kernels
        of each device by time (as the report shows them), or with `top=None` every kernel row the
        result holds (up to 200 per device, the longest); `launched_by`: the host operator that launched
        most of the kernel's time."""
        return kernels_frame(self, top)

    def ops(self) -> pd.DataFrame:
        """One row per rank and host operator or annotation (the top 50 by total time): count, total and
        self time, time per step, share of the steps, time during GPU idle (us), top level or nested."""
        return ops_frame(self)

    def frames(self) -> pd.DataFrame:
        """One row per rank and user Python frame (innermost, `file:line function`; traces recorded with
        `with_stack=True`): its time on the host and during host-compute / unexplained GPU idle (us)."""
        return frames_frame(self)

    def iterations(self) -> pd.DataFrame:
        """One row per rank and serving-engine iteration (`serving.iterations`): phase, batch size, tokens, start,
        duration, GPU busy, bubbles, host gap before (us), graph replays."""
        return iterations_frame(self)

    def requests(self) -> pd.DataFrame:
        """One row per rank and serving request (`serving.requests`, from an OpenTelemetry span export given with
        the trace): queue, prefill, decode, TTFT, end-to-end (us), tokens, and the iterations it overlapped
        (count, first and last index into `iterations()`)."""
        return requests_frame(self)

    def findings(self) -> pd.DataFrame:
        """One row per rank and finding: id, cause, severity, time explained, share, title."""
        return findings_frame(self)

    def devices(self) -> pd.DataFrame:
        """One row per rank and GPU: the device figures."""
        return devices_frame(self)


def analysis_from_data(data: Any) -> Analysis:
    """A saved report's JSON data (this schema, or an older one through `migrate`) -> Analysis;
    ResultFormatError when it is not one."""
    data = migrate(data)
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        found = data.get("schema") if isinstance(data, dict) else None
        raise ResultFormatError(f"not a traceanalyzer report of schema {SCHEMA!r} (schema: {found!r})")
    return from_data(Analysis, data)  # type: ignore[no-any-return]
