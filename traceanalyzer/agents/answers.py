"""An Analysis (or a Comparison, a history, a list of runs) -> a small answer an agent reads: the numbers
with their units, the definitions of the figures it quotes, and a pointer to the rest.

Durations are written as the reports write them (`units.format_us`: 850 us, 12.3 ms, 4.56 s) and shares
as percentages; a table is `columns` (units in the names: `_ms`, `_pct`) and `rows`. Names from a trace
(kernels, operators, files) are cut to `NAME_CHARS` with invisible characters shown (`inert.visible`).
Every answer fits a byte budget (`fit`): rows, then definitions, then long texts are cut, and the
answer says what was left out and where the rest is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import orjson

from .. import inert
from ..causes import VERDICT_BY_ID
from ..result.definitions import COMPARISON_FIGURES, FIGURES
from ..result.frames import gaps_frame, kernels_frame, ops_frame, rank_name, steps_frame
from ..result.types import AnalysisData, FindingResult
from ..units import format_bytes, format_us

DEFAULT_LIMIT = 2048  # bytes of one answer (its JSON text)
MIN_LIMIT, MAX_LIMIT = 512, 65536
DEFAULT_TOP, MAX_TOP = 10, 200
NAME_CHARS = 80  # a kernel, operator or file name
TEXT_CHARS = 300  # an evidence or advice line
DEFINITION_CHARS = 200  # a definition's first sentence
TOP_FINDINGS = 3
# lists an answer may cut, first cut first: tables (down to one row before the definitions go), then prose
# (down to one line before long texts are cut)
TABLES = ("rows", "kernels", "parts", "change_points", "findings")
PROSE = ("warnings", "advice", "host_ops", "evidence")


class AnswerError(ValueError):
    """A question the answer cannot be made for (an unknown finding, a bad filter): one line for the agent."""


# --- formatting ----------------------------------------------------------------------------------
def line(text: object, limit: int = TEXT_CHARS) -> str:
    """One line of visible characters, cut to `limit`."""
    return inert.shorten(" ".join(inert.visible(text).split()), limit)


def name(text: object) -> str:
    return line(text, NAME_CHARS)


def dur(us: float | None) -> str | None:
    return None if us is None else format_us(us)


def pct(x: float | None) -> str | None:
    return None if x is None else f"{100 * x:.1f}%"


def pct_change(x: float | None) -> str | None:
    return None if x is None else f"{100 * x:+.1f}%"


def ms(us: float | None) -> float | None:
    """A duration in microseconds as milliseconds to the microsecond (a table cell)."""
    return None if us is None or us != us else round(us / 1000, 3)


def figure(key: str, value: float) -> tuple[str, str | float]:
    """A finding's or headline's figure (its unit in its key) -> (key without the unit, value with it)."""
    if key.endswith("_us"):
        return key[:-3], format_us(value)
    if key.endswith("_bytes"):
        return key[:-6], format_bytes(value)
    if key.endswith("_pct"):
        return key[:-4], f"{value:.1f}%"
    if key.endswith(("_fraction", "_share")) or key.startswith("share"):
        return key, f"{100 * value:.1f}%"
    return key, round(value, 6) if isinstance(value, float) else value


def figures(values: dict[str, float]) -> dict[str, str | float]:
    return dict(figure(k, v) for k, v in values.items())


def definition(key: str, short: bool = True) -> str:
    """The figure's definition (result/definitions.py); `short`: its first sentence."""
    text = FIGURES.get(key) or COMPARISON_FIGURES.get(key)
    if text is None:
        raise AnswerError(f"no figure {key!r}: one of {', '.join(sorted([*FIGURES, *COMPARISON_FIGURES]))}")
    if not short:
        return text
    end = text.find(". ")
    return inert.shorten(text if end < 0 else text[:end + 1], DEFINITION_CHARS)


def definitions(*keys: str) -> dict[str, str]:
    return {k: definition(k) for k in keys}


# --- the budget ----------------------------------------------------------------------------------
def dumps(answer: dict[str, Any]) -> str:
    return orjson.dumps(answer).decode()


def _shorten_texts(value: Any, limit: int) -> Any:
    if isinstance(value, str):
        return inert.shorten(value, limit)
    if isinstance(value, list):
        return [_shorten_texts(v, limit) for v in value]
    if isinstance(value, dict):
        return {k: _shorten_texts(v, limit) for k, v in value.items()}
    return value


def fit(answer: dict[str, Any], limit: int = DEFAULT_LIMIT) -> str:
    """The answer as compact JSON of at most `limit` bytes. Past it, cut in this order: the rows of its
    tables (`TABLES`, one at a time from the end, down to one), its definitions (`define` gives them
    whole), its lines of prose (`PROSE`, down to one), long texts (to 160, then 80 characters), the last
    rows, then its last fields (an answer's fields come most telling first); each cut is counted under
    `cut`, and `more` (where the rest is) is never cut."""
    out = dict(answer)
    text = dumps(out)
    if len(text.encode()) <= limit:
        return text
    cut: dict[str, int] = {}

    def note() -> None:
        out["cut"] = {**cut, "why": f"budget {limit} B: pass a larger limit{', or see more' if 'more' in out else ''}"}

    def size() -> int:
        note()
        return len(dumps(out).encode())

    def trim(keys: tuple[str, ...], keep: int) -> bool:
        for key in keys:
            rows = out.get(key)
            if isinstance(rows, list) and len(rows) > keep:
                out[key] = rows[:-1]
                cut[key] = cut.get(key, 0) + 1
                return True
        return False

    while size() > limit and trim(TABLES, 1):
        pass
    while size() > limit and out.get("definitions"):
        defs = dict(out["definitions"])
        defs.popitem()
        out["definitions"] = defs
        cut["definitions"] = cut.get("definitions", 0) + 1
    while size() > limit and trim(PROSE, 1):
        pass
    for chars in (160, 80):
        if size() > limit:
            out = {k: v if k in ("cut", "more") else _shorten_texts(v, chars) for k, v in out.items()}
    while size() > limit and trim(TABLES + PROSE, 0):
        pass
    while size() > limit:  # the last fields go (an answer's fields come most telling first)
        rest = [k for k in out if k not in ("cut", "more")]
        if len(rest) <= 1:
            break
        del out[rest[-1]]
        cut["fields"] = cut.get("fields", 0) + 1
    text = dumps(out)
    if len(text.encode()) > limit:  # scalars alone over the budget: the pointer is what fits
        text = dumps({"cut": "everything: the answer's budget is too small", "more": out.get("more")})
    return text


# --- one analysis ----------------------------------------------------------------------------------
def _ranks(a: AnalysisData, rank: str | None) -> list[Any]:
    if rank is None or rank == "":
        return list(a.ranks)
    found = [r for r in a.ranks if str(rank_name(r)) == str(rank)]
    if not found:
        names = ", ".join(str(rank_name(r)) for r in a.ranks[:20])
        raise AnswerError(f"no rank {line(rank, 40)!r}: the ranks are {names}")
    return found


def _top(top: int | None) -> int:
    n = DEFAULT_TOP if top is None else int(top)
    if not 1 <= n <= MAX_TOP:
        raise AnswerError(f"top must be 1 to {MAX_TOP}")
    return n


def _verdict_finding(a: AnalysisData) -> FindingResult | None:
    from ..report.verdict import verdict_finding

    return verdict_finding(a.diagnosis)


def _saving(f: FindingResult) -> str | None:
    """What removing the finding's cause would save, as its evidence says it (without basis and limits)."""
    said = next((e for e in f.evidence if "would shorten" in e), None)
    return None if said is None else line(said.split(";", 1)[0])


def finding_brief(f: FindingResult) -> dict[str, Any]:
    brief = {"id": f.id, "cause": f.cause, "severity": f.severity, "title": line(f.title),
             "lost": format_us(f.explains_us), "share_of_window": pct(f.share_of_window),
             "share_of_lost": pct(f.share_of_idle), "saving": _saving(f)}
    return {k: v for k, v in brief.items() if v is not None}


def analyze_answer(a: AnalysisData, more: dict[str, str]) -> dict[str, Any]:
    """The verdict, its headline with the figures it quotes, the top findings with what removing each
    would save, the headline figures of the job, and where the rest is."""
    from ..report.verdict import top_advice

    d, s = a.diagnosis, a.summary
    answer: dict[str, Any] = {}
    if d is not None:
        v = VERDICT_BY_ID.get(d.primary)
        answer.update(verdict=d.primary, verdict_label=v.label if v else d.primary, headline=line(d.headline, 400),
                      headline_figures=figures(d.headline_figures))
        quoted = _verdict_finding(a)
        if quoted is not None:
            answer["lost"] = format_us(quoted.explains_us)
        speaking = a.speaking_rank
        rd = speaking.diagnosis if speaking is not None else None
        if rd is not None and rd.confidence:
            answer["confidence"] = rd.confidence
            if rd.runner_up:
                answer["runner_up"] = rd.runner_up
        advice = top_advice(d)
        if advice:
            answer["try_first"] = line(advice)
        answer["findings"] = [finding_brief(f) for f in d.findings[:TOP_FINDINGS]]
        if d.stragglers:
            answer["straggler"] = line(d.stragglers[0].text)
    else:
        answer["verdict"] = None
    answer["figures"] = {k: v for k, v in {
        "ranks": s.ranks, "gpus": s.devices, "steps": s.steps, "median_step": dur(s.step_time_median_us),
        "window": dur(s.window_us), "gpu_idle": pct(s.gpu_idle_fraction),
        "dataloader_wait": pct(s.dataloader_wait_fraction), "memcpy_share_of_busy": pct(s.memcpy_share_of_busy),
        "samples_per_s": None if s.samples_per_s is None else round(s.samples_per_s, 1)}.items() if v is not None}
    if a.warnings:
        answer["warnings"] = [line(w, 160) for w in a.warnings[:3]]
    answer["definitions"] = definitions("quoted_shares", "summary")
    answer["more"] = more
    return answer


def _pick_finding(a: AnalysisData, finding: str | None, rank: str | None) -> tuple[FindingResult, str | None]:
    if rank:
        r = _ranks(a, rank)[0]
        pool = list(r.diagnosis.findings) if r.diagnosis else []
        where: str | None = str(rank_name(r))
    else:
        pool = list(a.diagnosis.findings) if a.diagnosis else []
        where = None
    if not pool:
        raise AnswerError("no finding: the analysis was not diagnosed or found nothing")
    if not finding:
        quoted = None if rank else _verdict_finding(a)
        return quoted or pool[0], where
    for f in pool:
        if finding in (f.id, f.cause):
            return f, where
    raise AnswerError(f"no finding {line(finding, 40)!r}: the findings are {', '.join(f.id for f in pool)}")


def explain_answer(a: AnalysisData, finding: str | None, rank: str | None, more: dict[str, str]) -> dict[str, Any]:
    """One finding whole: its evidence and advice as the report writes them, every figure it quotes (with
    its unit), and the host operations behind its idle time."""
    f, where = _pick_finding(a, finding, rank)
    answer: dict[str, Any] = {**finding_brief(f)}
    if where is not None:
        answer["rank"] = where
    if f.gaps is not None:
        answer["gaps"] = f.gaps
    answer.update(figures=figures(f.figures), evidence=[line(e) for e in f.evidence],
                  advice=[line(x) for x in f.advice],
                  host_ops=[{"name": name(h.name), "share": pct(h.share), **({"time": format_us(h.time_us)}
                                                                            if h.time_us is not None else {})}
                            for h in f.host_ops[:5]],
                  definitions=definitions("quoted_shares"), more=more)
    return answer


def _table(frame: Any, columns: Sequence[tuple[str, str, Callable[[Any], Any]]], top: int) -> dict[str, Any]:
    """The first `top` rows of a DataFrame as `columns` (answer name, frame column, cell format) and `rows`."""
    head = frame.head(top)
    rows = [[fmt(getattr(r, col)) for _, col, fmt in columns] for r in head.itertuples(index=False)]
    return {"columns": [c for c, _, _ in columns], "rows": rows}


def _cell(x: Any) -> Any:
    if x is None or (isinstance(x, float) and x != x):
        return None
    return x.item() if hasattr(x, "item") else x


def _ms_cell(x: Any) -> float | None:
    x = _cell(x)
    return None if x is None else ms(float(x))


def _pct_cell(x: Any) -> float | None:
    x = _cell(x)
    return None if x is None else round(100 * float(x), 1)


def _name_cell(x: Any) -> str | None:
    x = _cell(x)
    return None if x is None else name(x)


def _filter_ranks(frame: Any, a: AnalysisData, rank: str | None) -> Any:
    if rank:
        keep = {str(rank_name(r)) for r in _ranks(a, rank)}
        frame = frame[frame["rank"].astype(str).isin(keep)]
    return frame


def _contains(frame: Any, column: str, text: str | None) -> Any:
    if text:
        frame = frame[frame[column].astype(str).str.contains(text, case=False, regex=False)]
    return frame


def steps_answer(a: AnalysisData, rank: str | None, sort: str, top: int | None,
                 more: dict[str, str]) -> dict[str, Any]:
    """The steps, slowest first (or in order), with the median and spread of all of them."""
    n = _top(top)
    frame = _filter_ranks(steps_frame(a), a, rank)
    if sort not in ("duration", "step"):
        raise AnswerError("sort must be duration (slowest first) or step (in order)")
    total = len(frame)
    answer: dict[str, Any] = {"steps": total}
    if total:
        d = frame["duration_us"]
        answer.update(median_step=format_us(float(d.median())), p10=format_us(float(d.quantile(0.1))),
                      p90=format_us(float(d.quantile(0.9))), slowest=format_us(float(d.max())))
    kinds = sorted({r.step_source.kind for r in _ranks(a, rank) if r.step_source is not None})
    if kinds:
        answer["step_source"] = ",".join(kinds)
    frame = frame.sort_values(["duration_us", "step"], ascending=[False, True]) if sort == "duration" else frame
    answer["order"] = "slowest first" if sort == "duration" else "by step"
    answer.update(_table(frame, [("rank", "rank", _cell), ("step", "step", _cell),
                                 ("duration_ms", "duration_us", _ms_cell), ("gpu_busy_ms", "gpu_busy_us", _ms_cell),
                                 ("idle_ms", "idle_us", _ms_cell),
                                 ("dataloader_wait_ms", "dataloader_wait_us", _ms_cell),
                                 ("memcpy_ms", "memcpy_us", _ms_cell)], n))
    answer.update(definitions=definitions("per_step", "step_source"), more=more)
    return answer


def gaps_answer(a: AnalysisData, rank: str | None, device: str | None, cause: str | None, step: int | None,
                top: int | None, more: dict[str, str]) -> dict[str, Any]:
    """The idle gaps (at least the analysis' min gap), longest first, filtered; their total by cause."""
    import warnings

    n = _top(top)
    with warnings.catch_warnings():  # a bounded gap table says so in `omitted`, read below
        warnings.simplefilter("ignore")
        frame = _filter_ranks(gaps_frame(a), a, rank)
    if device:
        frame = frame[frame["device"] == device]
    if cause:
        frame = frame[(frame["cause"] == cause) | (frame["cause_label"].astype(str).str.lower() == cause.lower())]
    if step is not None:
        frame = frame[frame["step"] == step]
    by_cause = frame.groupby(frame["cause"].fillna("none"))["duration_us"].sum().sort_values(ascending=False)
    omitted = sum(d.gap_table.omitted for r in _ranks(a, rank) for d in r.devices if d.gap_table is not None)
    answer: dict[str, Any] = {"gaps": len(frame), "total": format_us(float(frame["duration_us"].sum())),
                              "by_cause": {str(c): format_us(float(v)) for c, v in by_cause.head(6).items()},
                              "min_gap": format_us(a.options.min_gap_us), "order": "longest first"}
    if omitted:
        answer["not_kept"] = f"{omitted} shorter gaps are not in the result (it keeps each device's longest)"
    frame = frame.sort_values("duration_us", ascending=False)
    answer.update(_table(frame, [("rank", "rank", _cell), ("device", "device", _cell), ("step", "step", _cell),
                                 ("start_ms", "start_us", _ms_cell), ("duration_ms", "duration_us", _ms_cell),
                                 ("cause", "cause", _cell)], n))
    answer.update(definitions=definitions("idle_gaps"), more=more)
    return answer


def kernels_answer(a: AnalysisData, rank: str | None, device: str | None, contains: str | None, top: int | None,
                   more: dict[str, str]) -> dict[str, Any]:
    """The kernels by total time (every kernel row the result keeps), filtered by name."""
    n = _top(top)
    frame = _filter_ranks(kernels_frame(a, None), a, rank)
    if device:
        frame = frame[frame["device"] == device]
    frame = _contains(frame, "name", contains).sort_values("total_us", ascending=False)
    answer: dict[str, Any] = {"kernels": len(frame), "total": format_us(float(frame["total_us"].sum())),
                              "order": "by total time"}
    answer.update(_table(frame, [("rank", "rank", _cell), ("device", "device", _cell), ("name", "name", _name_cell),
                                 ("count", "count", _cell), ("total_ms", "total_us", _ms_cell),
                                 ("mean_ms", "mean_us", _ms_cell), ("launched_by", "launched_by", _name_cell)], n))
    answer.update(definitions=definitions("top_kernels", "kernel_launchers"), more=more)
    return answer


def operators_answer(a: AnalysisData, rank: str | None, contains: str | None, sort: str, top: int | None,
                     more: dict[str, str]) -> dict[str, Any]:
    """The host operators and annotations the result keeps, by total, self or GPU-idle time."""
    n = _top(top)
    column = {"total": "total_us", "self": "self_us", "idle": "idle_us"}.get(sort)
    if column is None:
        raise AnswerError("sort must be total, self or idle")
    frame = _contains(_filter_ranks(ops_frame(a), a, rank), "name", contains)
    frame = frame.sort_values(column, ascending=False, na_position="last")
    answer: dict[str, Any] = {"operators": len(frame), "order": f"by {sort} time"}
    answer.update(_table(frame, [("rank", "rank", _cell), ("name", "name", _name_cell), ("kind", "kind", _cell),
                                 ("count", "count", _cell), ("total_ms", "total_us", _ms_cell),
                                 ("self_ms", "self_us", _ms_cell), ("per_step_ms", "per_step_us", _ms_cell),
                                 ("idle_ms", "idle_us", _ms_cell), ("share_of_steps_pct", "share_of_steps", _pct_cell)],
                         n))
    answer.update(definitions=definitions("operators"), more=more)
    return answer


# --- two runs --------------------------------------------------------------------------------------
def compare_answer(c: Any, more: dict[str, str]) -> dict[str, Any]:
    """The change verdict, its step-time statistic with its interval, the parts that moved (per step),
    the kernels that moved most, and both sides' verdicts."""
    st = c.step_time
    answer: dict[str, Any] = {
        "change": c.change_verdict, "headline": line(c.headline, 400), "reason": c.reason,
        "step_time": {k: v for k, v in {
            "base_median": dur(st.base_median_us), "head_median": dur(st.head_median_us),
            "shift": pct_change(st.change),
            "interval_95": None if st.ci_low is None or st.ci_high is None
            else f"{pct_change(st.ci_low)} to {pct_change(st.ci_high)}",
            "p_value": None if st.p_value is None else round(st.p_value, 4),
            "steps": f"{st.base_steps} base, {st.head_steps} head",
            "runs": f"{st.base_runs} base, {st.head_runs} head"}.items() if v is not None},
        "mean_step_change": dur(c.mean_step_change_us),
        "verdicts": {"base": c.base.primary, "head": c.head.primary},
        "parts": [{k: v for k, v in {
            "part": p.label, "base_per_step": format_us(p.base_per_step_us),
            "head_per_step": format_us(p.head_per_step_us), "change_per_step": format_us(p.delta_per_step_us),
            "share_of_change": pct(p.share_of_change), "decisive": p.decisive}.items() if v is not None}
            for p in c.attribution[:5]],
        "kernels": [{"name": name(k.name), "status": k.status, "change_per_step": format_us(k.delta_per_step_us)}
                    for k in c.kernels[:5]],
    }
    if c.run_noise is not None:
        answer["run_noise"] = f"{pct(c.run_noise.allowance)} ({c.run_noise.basis})"
    if c.warnings:
        answer["warnings"] = [line(w, 160) for w in c.warnings[:3]]
    answer.update(definitions=definitions("diff_verdict", "diff_step_time", "diff_parts"), more=more)
    return answer


# --- the service: runs and history -----------------------------------------------------------------
def _utc(t: float | None) -> str | None:
    from datetime import datetime, timezone

    return None if t is None else datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%d %H:%M")


def runs_answer(project: str, rows: Sequence[dict[str, Any]], total: int, more: dict[str, str]) -> dict[str, Any]:
    """A project's runs, newest first: id, branch, commit, status, verdict, median step, GPU idle, when."""
    return {"project": project, "runs": total, "order": "newest first",
            "columns": ["id", "branch", "commit", "status", "verdict", "step_time_ms", "gpu_idle_pct",
                        "uploaded_utc"],
            "rows": [[r["id"], r.get("branch") and line(r["branch"], 60), (r.get("commit") or "")[:12] or None,
                      r.get("status"), r.get("verdict"),
                      None if r.get("step_time_ms") is None else round(float(r["step_time_ms"]), 3),
                      None if r.get("gpu_idle") is None else round(100 * float(r["gpu_idle"]), 1),
                      _utc(r.get("created_at"))] for r in rows],
            "definitions": definitions("history"), "more": more}


def history_answer(history: dict[str, Any], metric: str | None, more: dict[str, str]) -> dict[str, Any]:
    """A branch's history: each figure's latest value and its change points (newest first), each with the
    commit range, the medians before and after, and what the comparison of the two sides blames."""
    from ..serve.history import figure as shown

    series = history.get("series", {})
    if metric and metric not in series:
        raise AnswerError(f"no figure {line(metric, 40)!r} in the history: one of {', '.join(series)}")
    latest = {}
    for key, s in series.items():
        if (not metric or key == metric) and s.get("points"):
            latest[key] = shown(s["points"][-1]["value"], s.get("unit", ""))
    points = []
    for p in reversed(history.get("change_points", [])):
        if metric and p["metric"] != metric:
            continue
        unit = series.get(p["metric"], {}).get("unit", "")
        att = p.get("attribution") or {}
        points.append({k: v for k, v in {
            "figure": p["metric"], "before": shown(p["before"], unit), "after": shown(p["after"], unit),
            "change": pct_change(p.get("change")), "direction": p.get("direction"), "run": p["run"],
            "commit": (p.get("commit") or "")[:12] or None, "previous_commit": (p.get("previous_commit") or "")[:12]
            or None, "compare": p.get("compare"), "blamed": line(att["headline"], 200) if att.get("headline")
            else None}.items() if v is not None})
    return {"project": history.get("project"), "branch": history.get("branch"), "runs": history.get("runs"),
            "order": history.get("order"), "latest": latest, "change_points": points,
            "definitions": definitions("history", "change_points"), "more": more}
