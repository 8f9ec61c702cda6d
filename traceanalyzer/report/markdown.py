"""Analysis -> GitHub-flavoured Markdown for a pull-request comment or a CI job summary.

Always within GitHub's comment limit (`MAX_CHARS`), however large the trace: tables are cut to a
number of rows with a note saying how many were left out, and the row limits shrink until the
whole text fits. Every string from an input goes through `md` (`inert.markdown`): Markdown
punctuation and HTML escaped, mentions, issue references and autolinks broken, control and bidi
characters dropped, so a kernel name can neither format the comment, notify anyone, link
anything nor hide what it says.
"""

from __future__ import annotations

from collections.abc import Iterable

from .. import inert
from ..causes import CAUSE_LIST, VERDICT_LIST
from ..result.types import AnalysisData, DiagnosisResult, RankResult, ServingRequests
from ._format import (
    WHOLE_LOG,
    critical_path_text,
    fmt_ns,
    fmt_pct,
    fmt_pct_points,
    fmt_s,
    fmt_us,
    md,
    rank_name,
    requests_line,
    serving_line,
    step_source_text,
    table,
)
from .capture import no_gpu_text
from .host import host_markdown, throughput_figures
from .memory import markdown_lines as memory_markdown
from .ranks import markdown_lines as ranks_markdown
from .verdict import finding_parts, share_basis, top_advice

MAX_CHARS = 65_536
# Row limits of the first attempt; each retry halves them until the text fits.
ROWS = {"findings": 6, "ranks": 40, "gaps": 15, "steps": 40, "kernels": 15, "inputs": 30, "warnings": 20}
VERDICT_LABELS = {v.id: v.label for v in VERDICT_LIST}
COUNTER_GPUS_SHOWN = 8  # GPUs whose log utilisation the summary line names

CAUSE_LABELS = {c.id: c.label for c in CAUSE_LIST}


def who(r: RankResult) -> str:
    """The rank number, or the input's file name when the trace records none (`rank_name`, Markdown-safe)."""
    return md(rank_name(r), 60)


def render_markdown(analysis: AnalysisData) -> str:
    rows = dict(ROWS)
    while True:
        text = _render(analysis, rows)
        if len(text) <= MAX_CHARS or all(v <= 1 for v in rows.values()):
            break
        rows = {k: max(v // 2, 1) for k, v in rows.items()}
    if len(text) > MAX_CHARS:  # only a pathological report (e.g. thousands of inputs) gets here
        note = "\n\n_Cut to fit a GitHub comment; see the HTML or JSON report._\n"
        text = text[: MAX_CHARS - len(note)].rsplit("\n", 1)[0] + note
    return text


def _render(a: AnalysisData, rows: dict[str, int]) -> str:
    diag = a.diagnosis
    out = _verdict(a, diag)
    out += _findings(diag, rows["findings"], share_basis(a))
    out += ranks_markdown(a, rows["ranks"])
    if a.ranks and _cpu_only(a):  # no GPU listed or active: the host loop's parts, not empty GPU tables
        out += _host_loop(a, rows["steps"])
        out += memory_markdown(a, who)
    elif a.ranks:  # nvidia-smi logs alone have no trace figures: their own section says it all
        out += _headline_table(a, diag, rows["ranks"])
        out += _gaps(a, rows["gaps"])
        out += _critical_path(a, rows["ranks"])
        out += memory_markdown(a, who)
    out += _counters(a)
    out += host_markdown(a)
    more = _details(a, rows)
    if more:
        what = "per-step host loop, inputs" if _cpu_only(a) else "per-step breakdown, top kernels, memcpy, inputs"
        out += [f"<details><summary>More: {what}</summary>", ""]
        out += more
        out += ["</details>", ""]
    s = a.summary
    out.append(f"<sub>traceanalyzer {md(a.tool.version)} · minimum gap "
               f"{fmt_us(a.options.min_gap_us)} · {s.ranks} rank(s), {s.devices} GPU(s) · "
               f"every figure is defined in the HTML and JSON reports</sub>")
    return "\n".join(out) + "\n"


def _verdict(a: AnalysisData, diag: DiagnosisResult | None) -> list[str]:
    s = a.summary
    if diag:
        label = VERDICT_LABELS.get(diag.primary or "", md(diag.primary or "Undetermined"))
        host = diag.host_primary
        if host and host != diag.primary:  # no GPU verdict: lead with the host loop's
            label += f" · host loop: {VERDICT_LABELS.get(host, md(host)).lower()}"
        out = [f"## traceanalyzer: {label}", ""]
        if diag.headline:
            out += [f"**{md(diag.headline, 600)}**", ""]
        advice = top_advice(diag)
        if advice:
            out += [f"**Try first:** {md(advice, 600)}", ""]
        if diag.verdict_note:
            out += [md(diag.verdict_note, 600), ""]
        if diag.headline_detail:
            out += ["<details><summary>How this was computed</summary>", "", md(diag.headline_detail, 1200), "",
                    "</details>", ""]
    else:
        out = ["## traceanalyzer report", ""]
    out += [f"> [!WARNING]\n> {md(w, 400)}\n" for w in a.warnings if "TRUNCATED" in w]
    if not a.ranks and a.counters:
        means = [f"GPU {md(d.device)} **{fmt_pct_points(m.mean)}**" for d in a.counters[:COUNTER_GPUS_SHOWN]
                 if (m := d.metrics.get("sm_util_pct")) is not None and m.mean is not None]
        more = " …" if len(a.counters) > COUNTER_GPUS_SHOWN else ""
        util = f" · SM utilisation mean {WHOLE_LOG}: {', '.join(means)}{more}" if means else ""
        return out + [f"**{s.devices}** GPU(s) in nvidia-smi logs{util}", ""]
    figures = [f"GPU idle **{fmt_pct(s.gpu_idle_fraction)}**",
               f"memcpy **{fmt_pct(s.memcpy_share_of_busy)}** of GPU busy",
               f"host DataLoader wait **{fmt_pct(s.dataloader_wait_fraction)}**",
               f"**{s.steps}** step(s)"]
    if s.samples_per_s is not None:
        figures.append(f"**{s.samples_per_s:.1f}** samples/s")
    figures += throughput_figures(s)
    if not s.devices:
        figures[0] = no_gpu_text(a.ranks[0]) if len(a.ranks) == 1 else "no GPU activity"
    if _cpu_only(a):  # no GPU to speak of: no GPU figures
        figures = ["CPU-only capture"] + figures[2:]
    return out + [" · ".join(figures), ""]


def _cpu_only(a: AnalysisData) -> bool:
    """No rank has GPU activity (the host loop's breakdown is the report)."""
    return bool(a.ranks) and not any(r.devices for r in a.ranks)


def _host_loop(a: AnalysisData, limit: int) -> list[str]:
    """Each rank's host-loop parts (definitions `host_loop`): totals, shares of step time, per step."""
    out = ["### Host loop", ""]
    for r in a.ranks:
        hs = r.diagnosis.host_shares if r.diagnosis else None
        if hs is None or not hs.total_us:
            continue
        n = hs.steps
        parts = [("DataLoader wait", hs.data_wait_us), ("optimizer", hs.optimizer_us),
                 ("named annotations", hs.annotations_us), ("model ops", hs.model_ops_us),
                 ("elsewhere", hs.other_us)]
        out += [f"Rank {who(r)}: step time {fmt_us(hs.total_us)}" + (f" over {n} step(s)" if n else ""), "",
                "| part | time | share of step time | per step (mean) |", "|---|---:|---:|---:|"]
        for label, v in parts:
            out.append(f"| {label} | {fmt_us(v)} | {fmt_pct(v / hs.total_us)} | {fmt_us(v / n) if n else 'n/a'} |")
        for ann in hs.top_annotations[:5]:
            out.append(f"| · {inert.markdown_code(ann.name[:80])} | {fmt_us(ann.time_us)} | {fmt_pct(ann.share)} | |")
        out.append("")
    return out if len(out) > 2 else []


def _findings(diag: DiagnosisResult | None, limit: int, share_of: str = "idle") -> list[str]:
    if not diag:
        return []
    findings = diag.findings
    if not findings:
        return ["No finding explains a significant share of GPU idle time.", ""]
    out = ["### Findings", ""]
    for i, f in enumerate(findings[:limit], 1):
        explains = finding_parts(f, share_of)  # the time the cause lost, its share of the window
        tail = f" ({', '.join(explains)})" if explains else ""
        out.append(f"{i}. **{md(f.title or f.id or 'finding', 300)}** "
                   f"{inert.markdown_code(f.severity or '–')}{tail}")
        for advice in f.advice:
            out.append(f"   - {md(advice, 400)}")
        for e in f.evidence[:3]:
            out.append(f"   - _evidence:_ {md(e, 300)}")
    if len(findings) > limit:
        out.append(f"\n_{len(findings) - limit} more finding(s) in the HTML report._")
    return out + [""]


def _headline_table(a: AnalysisData, diag: DiagnosisResult | None, limit: int) -> list[str]:
    header = ["rank", "device", "window", "steps", "GPU busy", "GPU idle", "memcpy / busy", "DataLoader wait",
              f"idle gaps ≥ {fmt_us(a.options.min_gap_us)}", "largest gap"]
    if diag:
        header += ["verdict", "GPU time lost"]

    def rows() -> Iterable[list[str]]:
        for r in a.ranks:
            dr = r.diagnosis
            extra = ([VERDICT_LABELS.get(dr.primary if dr else "", "–"), fmt_us(dr.lost_us if dr else None)]
                     if diag else [])
            if not r.devices:
                yield [who(r), no_gpu_text(r), fmt_us(r.window_us), str(r.steps), "n/a", "n/a", "n/a",
                       fmt_pct(r.dataloader_wait_fraction), "n/a", "n/a"] + extra
            for d in r.devices:
                yield [who(r), md(d.device), fmt_us(d.window_us), str(r.steps), fmt_us(d.gpu_busy_us),
                       fmt_pct(d.gpu_idle_fraction), fmt_pct(d.memcpy_share_of_busy),
                       fmt_pct(r.dataloader_wait_fraction),
                       f"{d.gaps.count} ({fmt_us(d.gaps.total_us)})",
                       fmt_us(d.gaps.largest_us)] + extra

    total = sum(max(len(r.devices), 1) for r in a.ranks)
    return ["### Headline figures per rank", ""] + table(header, rows(), limit, total, "rows")


def _gaps(a: AnalysisData, limit: int) -> list[str]:
    diagnosed = [(r, r.diagnosis) for r in a.ranks if r.diagnosis]
    found: list[tuple[float, list[str]]] = []
    if diagnosed:
        for r, dr in diagnosed:
            rank = who(r)
            for g in dr.gaps:
                ev = "; ".join(f"{md(e.name, 80)} {fmt_pct(e.share)}" for e in g.evidence[:2])
                found.append((float(g.duration_us or 0.0), [
                    rank, md(g.device or ""), fmt_us(g.start_us), fmt_us(g.duration_us),
                    "–" if g.step is None else str(g.step),
                    CAUSE_LABELS.get(g.cause or "", md(g.cause or "–")), ev or "–"]))
        header = ["rank", "device", "start", "length", "step", "cause", "evidence"]
    else:
        for r in a.ranks:
            for d in r.devices:
                for t in d.gaps.top:
                    found.append((float(t.duration_us or 0.0), [
                        who(r), md(d.device), fmt_us(t.start_us), fmt_us(t.duration_us),
                        "–" if t.step is None else str(t.step)]))
        header = ["rank", "device", "start", "length", "step"]
    if not found:
        return []
    found.sort(key=lambda x: -x[0])  # presentation order: longest first
    return (["### Longest idle gaps", "", "_Start is measured from the rank's window start._", ""]
            + table(header, (row for _, row in found), limit, len(found), "gaps"))


def _critical_path(a: AnalysisData, limit: int) -> list[str]:
    """One line per rank: what its median step's critical path is made of (definitions `critical_path`)."""
    lines = []
    for r in a.ranks[:limit]:
        text = critical_path_text(r.critical_path) if r.critical_path is not None else None
        if text:
            lines.append(f"- rank {who(r)}: {md(text, 400)}")
    return ["#### Critical path", ""] + lines + [""] if lines else []


def _details(a: AnalysisData, rows: dict[str, int]) -> list[str]:
    out: list[str] = []
    for r in a.ranks[: rows["ranks"]]:
        hs = r.diagnosis.host_shares if r.diagnosis else None
        if not r.devices and hs is not None and hs.per_step:  # CPU-only: the host loop's parts per step
            out += [f"#### Host loop per step, rank {who(r)}", ""]
            out += table(["step", "DataLoader wait", "optimizer", "named annotations", "model ops", "elsewhere"],
                         ([str(p.step), fmt_us(p.data_wait_us), fmt_us(p.optimizer_us), fmt_us(p.annotations_us),
                           fmt_us(p.model_ops_us), fmt_us(p.other_us)] for p in hs.per_step),
                         rows["steps"], len(hs.per_step), "steps")
        elif r.per_step:
            out += [f"#### Per-step breakdown, rank {who(r)}", ""]
            detected = step_source_text(r.step_source)
            out += [f"_{md(detected, 240)}._", ""] if detected else []
            out += table(["step", "duration", "GPU busy", "memcpy", "DataLoader wait", "idle"],
                         ([str(s.step), fmt_us(s.duration_us), fmt_us(s.gpu_busy_us),
                           fmt_us(s.memcpy_us), fmt_us(s.dataloader_wait_us), fmt_us(s.idle_us)]
                          for s in r.per_step), rows["steps"], len(r.per_step), "steps")
        out += _serving(r, rows["steps"])
        out += _operators(r, rows["kernels"])
        for d in r.devices:
            if d.top_kernels:
                out += [f"#### Top kernels, rank {who(r)} {md(d.device)}", ""]
                out += table(["kernel", "count", "total", "mean"],
                             ([md(k.name), str(k.count), fmt_ns(k.total_ns), fmt_ns(k.mean_ns)]
                              for k in d.top_kernels), rows["kernels"], len(d.top_kernels), "kernels")
            if d.graphs is not None:
                g = d.graphs
                out += [f"#### CUDA graphs, rank {who(r)} {md(d.device)}", "",
                        f"{fmt_us(g.gpu_us)} of GPU work in {g.replays} replays (one launch each)"
                        + (f"; {g.captures} capture(s), {fmt_us(g.capture_us)} on the host (one-off)"
                           if g.captures else "") + ".", ""]
                out += table(["graph id", "replays", "kernels per replay", "replay time", "GPU time"],
                             ([str(x.graph_id) if x.graph_id else "not recorded", str(x.replays),
                               f"{x.kernels_per_replay:g}", fmt_us(x.replay_us), fmt_us(x.gpu_us)] for x in g.graphs),
                             rows["kernels"], len(g.graphs), "graphs")
            if d.trace_counters:
                out += [f"#### Counters recorded in the trace, rank {who(r)} {md(d.device)}", ""]
                out += table(["counter", "samples", "mean", "min", "max"],
                             ([md(c.metric), str(c.samples)] + ["n/a" if v is None else f"{v:.6g}"
                                                                for v in (c.mean, c.min, c.max)]
                              for c in d.trace_counters), rows["kernels"], len(d.trace_counters), "counters")
            if d.memcpy.by_direction:
                out += [f"#### Memcpy by direction, rank {who(r)} {md(d.device)}", ""]
                out += table(["direction", "copies", "time", "bytes", "bandwidth", "pageable", "pinned"],
                             ([md(c.direction), str(c.count), fmt_ns(c.union_ns),
                               str(c.bytes) if c.bytes_known else "n/a",
                               "n/a" if c.bandwidth_gbps is None else f"{c.bandwidth_gbps:.1f} GB/s",
                               str(c.pageable), str(c.pinned)] for c in d.memcpy.by_direction),
                             rows["kernels"], len(d.memcpy.by_direction), "directions")
    if len(a.ranks) > rows["ranks"]:
        out += [f"_Details of {len(a.ranks) - rows['ranks']} more rank(s) are in the HTML report._", ""]
    inputs = a.inputs
    out += ["#### Inputs", ""]
    out += table(["file", "format", "events read", "kept", "warnings"],
                 ([md(i.path), md(i.format), str(i.events_read), str(i.events_kept),
                   "; ".join(md(w, 200) for w in i.warnings[: rows["warnings"]]) or "–"] for i in inputs),
                 rows["inputs"], len(inputs), "inputs")
    if a.warnings:
        out += [f"- {md(w, 300)}" for w in a.warnings[: rows["warnings"]]] + [""]
    return out


def _serving(r: RankResult, limit: int) -> list[str]:
    """A serving engine's iterations: one line per phase, then the iterations (definitions: serving_iterations)."""
    sv = r.serving
    if sv is None:
        return []
    out = [f"#### Serving iterations, rank {who(r)}", ""] + [f"- {md(serving_line(p), 400)}" for p in sv.phases] + [""]
    if not sv.iterations:
        return out + _requests(sv.requests, limit)
    out += table(["#", "phase", "batch", "tokens", "start", "duration", "GPU busy", "host gap before", "graph replays"],
                 ([str(i), md(x.phase), "–" if x.batch_size is None else str(x.batch_size),
                   "–" if x.tokens is None else str(x.tokens), fmt_us(x.start_us), fmt_us(x.duration_us),
                   fmt_us(x.gpu_busy_us), "–" if x.host_gap_before_us is None else fmt_us(x.host_gap_before_us),
                   str(x.graph_replays)] for i, x in enumerate(sv.iterations)),
                 limit, len(sv.iterations) + sv.iterations_omitted, "iterations")
    return out + _requests(sv.requests, limit)


def _requests(q: ServingRequests | None, limit: int) -> list[str]:
    """The requests joined to the iterations: the one line, then a row each (definitions: serving_requests)."""
    if q is None:
        return []

    def d(x: float | None) -> str:
        return "–" if x is None else fmt_us(x)

    out = [f"- {md(requests_line(q), 400)}", ""]
    out += table(["request", "arrival", "queue", "prefill", "decode", "TTFT", "end-to-end", "iterations"],
                 ([md(x.request_id, 60), fmt_us(x.start_us), d(x.queue_us), d(x.prefill_us), d(x.decode_us),
                   d(x.ttft_us), fmt_us(x.e2e_us),
                   "–" if x.first_iteration is None else f"{x.iterations} (#{x.first_iteration}–#{x.last_iteration})"]
                  for x in q.rows), limit, q.requests, "requests")
    return out


def _operators(r: RankResult, limit: int) -> list[str]:
    """The rank's top host operators and annotations, and its user Python frames (or what would name them)."""
    o = r.operators
    if o is None or not o.ops:
        return []
    gpu = bool(r.devices)  # a CPU-only capture's tables have no GPU column
    out = [f"#### Top host operators and annotations, rank {who(r)}", ""]
    out += table(["operator / annotation", "kind", "calls", "total", "self", "per step", "share of steps"]
                 + (["during GPU idle"] if gpu else []),
                 ([md(x.name), md(x.kind), str(x.count), fmt_us(x.total_us), fmt_us(x.self_us),
                   fmt_us(x.per_step_us) if x.per_step_us is not None else "n/a", fmt_pct(x.share_of_steps)]
                  + ([fmt_us(x.idle_us) if x.idle_us is not None else "n/a"] if gpu else []) for x in o.ops),
                 limit, len(o.ops) + o.ops_omitted, "operators")
    if o.frames:
        out += [f"#### User Python frames (innermost), rank {who(r)}", ""]
        out += table(["frame", "host time"] + (["during host-compute / unexplained GPU idle"] if gpu else []),
                     ([md(f.frame), fmt_us(f.host_us)] + ([fmt_us(f.idle_us)] if gpu else []) for f in o.frames),
                     limit, len(o.frames) + o.frames_omitted, "frames")
    elif not o.has_stacks:
        out += ["_No Python stacks in this trace: `torch.profiler.profile(with_stack=True)` would name the lines "
                f"of your code behind {'host time and unexplained GPU idle time' if gpu else 'the host time'}._", ""]
    return out


def _counters(a: AnalysisData) -> list[str]:
    """nvidia-smi logs: alignment per log and utilisation per GPU (one row each: small)."""
    if not a.counter_logs:
        return []
    out = ["### nvidia-smi logs", "", "| log | clock | offset | found by | fit r | ambiguous |",
           "|---|---|---|---|---|---|"]
    for log in a.counter_logs:
        offset = "own clock" if log.offset_s is None else f"{log.offset_s:+.3f} s"
        r = log.fit.correlation if log.fit else None
        ambiguous = log.fit.ambiguous if log.fit else "n/a"
        out.append(f"| {md(log.path)} | {md(log.clock)} | {offset} | {md(log.offset_method or 'n/a')} | "
                   f"{'n/a' if r is None else f'{r:.2f}'} | {ambiguous} |")
    out += ["", f"_Utilisation and zero-utilisation runs {WHOLE_LOG}._", "",
            "| GPU | SM util mean | in trace window | zero-util runs | longest zero run | trace busy vs log |",
            "|---|---|---|---|---|---|"]
    for d in a.counters:
        sm = d.metrics.get("sm_util_pct")
        z = d.zero_util_runs
        cc = d.cross_check
        check = "n/a" if not cc else (f"{fmt_pct_points(cc.trace_busy_pct)} vs {fmt_pct_points(cc.log_util_pct)}"
                                      + (" (disagree)" if cc.disagrees else ""))
        longest = "n/a" if not (z and z.runs) else f"{fmt_s(z.longest_s)} from +{fmt_s(z.longest_start_s)}"
        mean, inside = (sm.mean, sm.window_mean) if sm else (None, None)
        out.append(f"| {md(d.device)} | {fmt_pct_points(mean)} | {fmt_pct_points(inside)} | "
                   f"{z.runs if z else 'n/a'} | {longest} | {check} |")
    return out + [""]
