"""History: per project, branch and figure, a series over the branch's runs, its change points, and the
comparison of a run with a branch's latest run and the runs of its setting (what `traceanalyzer upload` gates on).

* Each run's figures, the run's metrics (`result/metrics.py`), are extracted once, when its analysis
  is done (`metrics_of`, stored in the `run_metrics` table); a history never parses the runs' JSON.
* Order: by the commit order the uploads gave (`?order=N`, e.g. the commit's time) when every run of
  the series has one, else by upload time.
* Change points: `traceanalyzer.changepoints.e_divisive` on each numeric series (runs without the
  figure are left out of that series): a shift that separates the runs before from the runs after is
  found whatever the alternation within each side, the noise is estimated within segments, and a change
  below the figure's resolution (`resolution`: what the page's figures can show) is never one. The
  verdict (a category) changes where a new verdict holds for at least `VERDICT_HOLD` runs in a row.
  Each change point carries the commit range (the last run before, the first after), the medians of
  the segments on either side, and the attribution: the comparison of the runs before with the runs
  after (`compare_runs`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from threading import Lock
from typing import Any

import numpy as np

from ..changepoints import e_divisive
from ..result import metrics as M
from ..result.metrics import Metric
from ..result.types import AnalysisData

VERDICT = M.VERDICT.key
VERDICT_HOLD = 2  # runs in a row a new verdict must hold to be a change
SIDE_RUNS = 5  # runs on each side of a change point compared for its attribution
DEFAULT_RUNS = 100  # runs in a history, newest kept (a 100-run history takes a few seconds, then is cached)
MAX_RUNS = 500
LAST_BASES = 5  # runs of the base branch a run is compared with (upload)
RELATIVE_RESOLUTION = 0.001  # a change under 0.1% of a figure is not shown as one ("+0.0%")
UNIT_RESOLUTION = {"fraction": 0.0005, "ms": 0.001, "bytes": 1024.0**2}  # the pages' last digit (0.1%, 1 µs, 1 MiB)


# The history's figures are the run's metrics (result/metrics.py): the ones every face reads.
METRICS: tuple[Metric, ...] = M.METRICS
METRIC_KEYS = tuple(m.key for m in METRICS)
LABELS = {**{m.key: m.label for m in METRICS}, VERDICT: M.VERDICT.label}


def metrics_of(a: AnalysisData) -> dict[str, float | None]:
    """The run's figures the history keeps (None: the run does not have it, e.g. no GPU or no batch size)."""
    return M.values(a)


# --- comparing runs ----------------------------------------------------------------------------------
def compare_runs(bases: Sequence[AnalysisData], heads: Sequence[AnalysisData], tolerance: float | None = None) -> Any:
    """The comparison of several runs before with several after (`traceanalyzer.compare.compare_runs`: with
    several runs on both sides the interval is taken across runs)."""
    from ..compare import DEFAULT_TOLERANCE
    from ..compare import compare_runs as several

    return several(list(bases), list(heads), tolerance=DEFAULT_TOLERANCE if tolerance is None else tolerance)


class Reports:
    """The saved analyses of runs, loaded on demand and a few kept (a history's attributions reuse them)."""

    def __init__(self, path_of: Callable[[str], Path | None], keep: int = 24) -> None:
        self.path_of = path_of  # a run's report.json (blobs.py), None when missing
        self.keep = keep
        self._cache: OrderedDict[str, AnalysisData] = OrderedDict()
        self._lock = Lock()

    def load(self, run_id: str) -> AnalysisData:
        from ..pipeline import load

        with self._lock:
            if run_id in self._cache:
                self._cache.move_to_end(run_id)
                return self._cache[run_id]
        path = self.path_of(run_id)
        if path is None:
            raise FileNotFoundError(f"the report of run {run_id} is missing from the store")
        a = load(path)
        with self._lock:
            self._cache[run_id] = a
            while len(self._cache) > self.keep:
                self._cache.popitem(last=False)
        return a


def _attribution(c: Any) -> dict[str, Any]:
    parts = sorted(c.attribution, key=lambda p: -abs(p.delta_per_step_us))[:3]
    return {"change_verdict": c.change_verdict, "headline": c.headline,
            "parts": [{"cause": p.cause, "label": p.label, "delta_per_step_us": p.delta_per_step_us}
                      for p in parts]}


# --- the history -------------------------------------------------------------------------------------
def ordered(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], str]:
    """The runs in commit order when every one has it, else in upload order (as they come)."""
    if rows and all(r.get("commit_order") is not None for r in rows):
        return sorted(rows, key=lambda r: (r["commit_order"], r["created_at"], r["id"])), "commit"
    return rows, "upload"


def _verdict_changes(values: list[str | None]) -> list[tuple[int, str | None, str | None]]:
    """(index, before, after) where a new verdict holds for VERDICT_HOLD runs in a row."""
    out = []
    current = values[0] if values else None
    for i in range(1, len(values)):
        new = values[i]
        if new != current and len(values) - i >= VERDICT_HOLD and all(v == new for v in values[i:i + VERDICT_HOLD]):
            out.append((i, current, new))
            current = new
    return out


def resolution(values: Sequence[float], unit: str) -> float:
    """The smallest change of a series the history shows: 0.1% of its typical value, and at least the last
    digit of its unit as the pages write it."""
    typical = float(np.median(np.abs(values))) if len(values) else 0.0
    return max(RELATIVE_RESOLUTION * typical, UNIT_RESOLUTION.get(unit, 0.0))


def _round(x: float) -> float:
    return float(f"{x:.6g}")


def build(rows: list[dict[str, Any]], reports: Reports | None, base_url: str, project: str,
          branch: str | None) -> dict[str, Any]:
    """The history of `rows` (Store.history): series per figure, change points with their attribution."""
    runs, order = ordered(rows)
    series: dict[str, dict[str, Any]] = {}
    points: list[dict[str, Any]] = []
    compared: dict[tuple[tuple[str, ...], tuple[str, ...]], dict[str, Any] | None] = {}

    def link(base: str, head: str) -> str:
        return f"{base_url}/compare?base={base}&head={head}"

    def attribution(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> dict[str, Any] | None:
        key = (tuple(r["id"] for r in before[-SIDE_RUNS:]), tuple(r["id"] for r in after[:SIDE_RUNS]))
        if key not in compared:
            compared[key] = None
            if reports is not None:
                try:
                    bases = [reports.load(r["id"]) for r in before[-SIDE_RUNS:]]
                    heads = [reports.load(r["id"]) for r in after[:SIDE_RUNS]]
                    compared[key] = _attribution(compare_runs(bases, heads))
                except Exception as exc:  # a report removed or unreadable: the change point stays
                    compared[key] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
        return compared[key]

    def change_point(metric: str, kept: list[dict[str, Any]], edges: list[int], j: int, before: Any, after: Any,
                     extra: dict[str, Any]) -> dict[str, Any]:
        """The j-th change point of a series cut at `edges` (0, the change points' indices, len)."""
        i = edges[j + 1]
        prev, first = kept[i - 1], kept[i]
        seg_before = kept[edges[j]:i]
        seg_after = kept[i:edges[j + 2]]
        return {"metric": metric, "label": LABELS[metric], "run": first["id"], "commit": first["commit"],
                "previous_run": prev["id"], "previous_commit": prev["commit"], "before": before, "after": after,
                **extra, "compare": link(prev["id"], first["id"]),
                "attribution": attribution(seg_before, seg_after)}

    for m in METRICS:
        kept = [r for r in runs if r["metrics"].get(m.key) is not None]
        values = [float(r["metrics"][m.key]) for r in kept]
        series[m.key] = {"label": m.label, "unit": m.unit, "higher_is_worse": m.higher_is_worse,
                         "points": [{"run": r["id"], "commit": r["commit"], "created_at": r["created_at"],
                                     "value": v} for r, v in zip(kept, values, strict=True)]}
        found = e_divisive(values, resolution=resolution(values, m.unit)) if len(values) >= 6 else []
        edges = [0, *(c.index for c in found), len(kept)]
        for j, c in enumerate(found):
            size = c.after - c.before
            extra = {"change": _round(size / abs(c.before)) if c.before else None, "difference": _round(size),
                     "p_value": c.p_value,
                     "direction": "worse" if (size > 0) == m.higher_is_worse else "better"}
            points.append(change_point(m.key, kept, edges, j, _round(c.before), _round(c.after), extra))
    verdicts = [r["verdict"] for r in runs]
    series[VERDICT] = {"label": "verdict", "unit": "", "higher_is_worse": None,
                       "points": [{"run": r["id"], "commit": r["commit"], "created_at": r["created_at"],
                                   "value": r["verdict"]} for r in runs]}
    changes = _verdict_changes(verdicts)
    edges = [0, *(i for i, _, _ in changes), len(runs)]
    for j, (_, before, after) in enumerate(changes):
        points.append(change_point(VERDICT, runs, edges, j, before, after, {}))
    index = {r["id"]: n for n, r in enumerate(runs)}
    points.sort(key=lambda p: (index[p["run"]], list(LABELS).index(p["metric"])))
    return {"project": project, "branch": branch, "order": order, "runs": len(runs), "series": series,
            "change_points": points}


class HistoryCache:
    """Histories already computed, by project, branch and the exact runs and figures they were made of."""

    def __init__(self, keep: int = 32) -> None:
        self._cache: OrderedDict[Any, dict[str, Any]] = OrderedDict()
        self._lock = Lock()
        self.keep = keep

    def get(self, key: Any, make: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
        value = make()
        with self._lock:
            self._cache[key] = value
            while len(self._cache) > self.keep:
                self._cache.popitem(last=False)
        return value


def cache_key(project: str, branch: str | None, base_url: str, rows: list[dict[str, Any]]) -> Any:
    return (project, branch, base_url, tuple((r["id"], r["commit_order"], r["verdict"],
                                              tuple(sorted(r["metrics"].items()))) for r in rows))


# --- the page's charts (drawn on the server as SVG; the page's script only handles clicks) -----------
WIDTH, HEIGHT, PAD_X, PAD_Y = 900, 150, 100, 16  # PAD_X: room for the axis labels


def _fmt(value: float, unit: str) -> str:
    from ..units import format_bytes

    if isinstance(value, str) or value is None:
        return str(value)
    if unit == "fraction":
        return f"{value * 100:.1f}%"
    if unit == "bytes":
        return format_bytes(int(value))
    if unit == "ms":
        return f"{value:.3g} ms"
    if unit == "1/s":
        return f"{value:.4g}/s"
    return f"{value:.4g}"


def figure(value: Any, unit: str) -> str:
    """A figure as the page shows it (a verdict as it is)."""
    return _fmt(value, unit)


def charts(history: dict[str, Any]) -> list[dict[str, Any]]:
    """Per figure: its points and change-point marks in SVG coordinates (x by run, shared by every chart)."""
    order: list[str] = [p["run"] for p in history["series"][VERDICT]["points"]]
    x_of = {run: PAD_X + (WIDTH - 2 * PAD_X) * (i / max(len(order) - 1, 1)) for i, run in enumerate(order)}
    step = (WIDTH - 2 * PAD_X) / max(len(order) - 1, 1)
    out = []
    for key, s in history["series"].items():
        pts = s["points"]
        categorical = key == VERDICT
        cats = sorted({str(p["value"]) for p in pts}) if categorical else []
        vals = [] if categorical else [float(p["value"]) for p in pts]
        lo, hi = (min(vals), max(vals)) if vals else (0.0, 1.0)
        if hi == lo:  # a flat series: a band around it (a fraction stays within 0..1)
            pad = abs(lo) * 0.05 or (0.01 if s["unit"] == "fraction" else 1.0)
            lo, hi = lo - pad, hi + pad
            if s["unit"] == "fraction":
                lo, hi = max(lo, 0.0), min(hi, 1.0)

        def y_of(v: Any, cats: list[str] = cats, lo: float = lo, hi: float = hi) -> float:
            if cats:
                return PAD_Y + (HEIGHT - 2 * PAD_Y) * (cats.index(str(v)) + 0.5) / len(cats)
            return HEIGHT - PAD_Y - (HEIGHT - 2 * PAD_Y) * (float(v) - lo) / (hi - lo)

        ticks = ([(y_of(c), c) for c in cats] if categorical else
                 [(y_of(hi), _fmt(hi, s["unit"])), (y_of(lo), _fmt(lo, s["unit"]))])
        circles = [{"x": round(x_of[p["run"]], 1), "y": round(y_of(p["value"]), 1), "run": p["run"],
                    "commit": p["commit"] or "",
                    "text": str(p["value"]) if categorical else _fmt(p["value"], s["unit"])} for p in pts]
        marks = [{"x": round(x_of[c["run"]] - step / 2, 1), "run": c["run"], "previous_run": c["previous_run"],
                  "commit": c["commit"] or "", "title": _mark_title(c, s["unit"])}
                 for c in history["change_points"] if c["metric"] == key]
        line = " ".join(f"{c['x']},{c['y']}" for c in circles) if not categorical else ""
        out.append({"key": key, "label": s["label"], "points": circles, "marks": marks, "line": line,
                    "ticks": [{"y": round(y, 1), "text": t} for y, t in ticks], "width": WIDTH, "height": HEIGHT,
                    "axis": PAD_X - 8})
    return out


def _mark_title(c: dict[str, Any], unit: str) -> str:
    if c["metric"] == VERDICT:
        return f"verdict {c['before']} → {c['after']} at {(c['commit'] or c['run'])[:12]}"
    change = "" if c.get("change") is None else f" ({c['change'] * 100:+.1f}%)"
    return (f"{_fmt(c['before'], unit)} → {_fmt(c['after'], unit)}{change} at "
            f"{(c['commit'] or c['run'])[:12]}")


# --- the comparison with a branch's last runs, and the pull-request comment ---------------------------
def comment(base_url: str, project: str, head: dict[str, Any], base_branch: str, bases: list[dict[str, Any]],
            comparison: Any | None, markdown: str | None) -> str:
    """The PR comment: the sticky marker, links to the served report, the compare page and the history,
    then the diff's Markdown (without its own marker)."""
    from urllib.parse import urlencode

    from ..report.diff import STICKY_MARKER, render_diff_markdown
    from ..report.markdown import MAX_CHARS

    def code(text: str | None) -> str:
        return " ".join(str(text or "").replace("`", "'").split())[:200]

    run_link = f"{base_url}/runs/{head['id']}"
    history = f"{base_url}/projects/{project}/history?" + urlencode({"branch": base_branch})
    lines = [STICKY_MARKER]
    what = f"run [{head['id']}]({run_link})"
    if head.get("commit"):
        what += f" at `{code(head['commit'][:12])}`"
    links = [f"[report]({run_link})"]
    if bases:
        links.append(f"[compare]({base_url}/compare?base={bases[-1]['id']}&head={head['id']})")
    links.append(f"[history of `{code(base_branch)}`]({history})")
    lines.append(f"**traceanalyzer** {what}: " + " · ".join(links))
    lines.append("")
    if comparison is None or markdown is None:
        lines.append(f"No analysed run of `{code(base_branch)}` yet: nothing to compare with. "
                     f"Verdict of this run: `{code(head.get('verdict') or 'none')}`.")
        return "\n".join(lines) + "\n"
    latest = bases[-1]
    what = f"Compared with the latest run of `{code(base_branch)}`, [{latest['id']}]({base_url}/runs/{latest['id']})"
    if len(bases) > 1:  # runs of its setting: run-to-run variation measured, not assumed
        what += (f", and {len(bases) - 1} run(s) of its setting: "
                 + ", ".join(f"[{b['id']}]({base_url}/runs/{b['id']})" for b in bases[:-1]))
    else:
        what += " (one run of its setting: run-to-run variation allowed for, not measured)"
    lines.append(what + ".")
    lines.append("")
    head_text = "\n".join(lines) + "\n"
    if len(head_text) + len(markdown) > MAX_CHARS:  # the whole comment stays under GitHub's limit
        markdown = render_diff_markdown(comparison, MAX_CHARS - len(head_text))
    return head_text + markdown.replace(STICKY_MARKER, "", 1).lstrip("\n")


__all__ = ["LAST_BASES", "METRICS", "METRIC_KEYS", "Reports", "build", "charts", "comment", "compare_runs",
           "figure", "metrics_of"]
