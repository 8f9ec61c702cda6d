"""Comparing runs: one run against another (page, diff, JSON), and a run against a branch's last runs
with gates (what CI posts as a pull-request comment)."""

from __future__ import annotations

import dataclasses
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from .. import history as hist
from ..context import Context, refuse, report_csp, text_param


def compare_sides(ctx: Context, request: Request) -> tuple[dict[str, Any], dict[str, Any]] | None:
    q = request.query_params
    if not q.get("base") or not q.get("head"):
        return None
    sides = []
    for key in ("base", "head"):
        row, _ = ctx.run_or_404(request, q[key])
        if row["status"] != "done":
            raise refuse(409, f"run {row['id']} is {row['status']}: nothing to compare yet")
        sides.append(row)
    return sides[0], sides[1]


def comparison(ctx: Context, base: dict[str, Any], head: dict[str, Any]) -> Any:
    """One run against one: run-to-run variation from the runs of the base's setting (`Store.repeats`:
    the same commit and setting label, or runs marked as repeats of it), when there are enough; else the
    default allowance, as `diff` (`--run-noise`). Never from a branch's runs of other commits."""
    from traceanalyzer.compare import compare

    a, b = (ctx.reports.load(r["id"]) for r in (base, head))
    history = []
    for run_id in ctx.db.repeats(base, exclude=[head["id"]]):
        try:
            history.append(ctx.reports.load(run_id))
        except Exception:  # a report removed or unreadable: left out
            continue
    return compare(a, b, history=[a, *history] if history else ())


def compare_page(ctx: Context, request: Request) -> Response:
    who = ctx.access(request)
    if ctx.settings.private and who.project is None:
        return RedirectResponse("/login", status_code=303)
    sides = compare_sides(ctx, request)
    return ctx.page(request, "compare.html.j2", base=sides[0] if sides else None, head=sides[1] if sides else None,
                    q={k: request.query_params.get(k, "")[:40] for k in ("base", "head")})


def compare_html(ctx: Context, request: Request) -> Response:
    sides = compare_sides(ctx, request)
    if sides is None:
        raise refuse(400, "compare needs ?base=RUN&head=RUN")
    from traceanalyzer.report.diff import render_diff_html

    html = render_diff_html(comparison(ctx, *sides))
    return HTMLResponse(html, headers={"Content-Security-Policy": report_csp(html)})


def api_compare(ctx: Context, request: Request) -> Response:
    sides = compare_sides(ctx, request)
    if sides is None:
        raise refuse(400, "compare needs ?base=RUN&head=RUN")
    from traceanalyzer.report.diff import render_diff_json

    return Response(render_diff_json(comparison(ctx, *sides)), media_type="application/json")


def base_runs(ctx: Context, row: dict[str, Any], branch: str, last: int) -> list[dict[str, Any]]:
    """What a run is compared with in CI: the branch's latest analysed run before it and, up to `last` runs
    in all, the runs of that run's setting (`Store.repeats`: same commit and setting label, or marked as its
    repeats), oldest first. Never the branch's runs of other commits: they mix code changes with run-to-run
    variation, so pooled they would hide a change (or make one up)."""
    latest = ctx.db.history(row["project"], branch, 1, exclude=row["id"],
                            before=row["created_at"] if row["branch"] == branch else None)
    if not latest:
        return []
    full = ctx.db.run(latest[-1]["id"]) or {}  # its project, commit, setting and repeat_of
    same = ctx.db.repeats(full, exclude=[row["id"]], limit=last - 1) if last > 1 and full else []
    return [{"id": run_id} for run_id in reversed(same)] + [latest[-1]]


def api_run_compare(ctx: Context, request: Request) -> Response:
    """The run against the branch's latest run and the runs of its setting (`base_runs`;
    `?branch=main&last=5&fail_on=RULE...`): the diff, the gates evaluated as `diff --fail-on` does, and the
    pull-request comment."""
    from ...compare import with_gates
    from ...errors import UsageError
    from ...gates import evaluate_all, parse_rules
    from ...report.diff import render_diff_markdown

    row, _ = ctx.run_or_404(request, request.path_params["run_id"])
    if row["status"] != "done":
        raise refuse(409, f"run {row['id']} is {row['status']}: nothing to compare yet")
    q = request.query_params
    branch = text_param(q.get("branch"), "branch", 200) or "main"
    try:
        last = int(q.get("last", str(hist.LAST_BASES)))
    except ValueError:
        raise refuse(400, "bad last: a number of runs") from None
    if not 1 <= last <= 50:
        raise refuse(400, "bad last: between 1 and 50")
    texts = q.getlist("fail_on")
    if len(texts) > 20 or any(len(t) > 200 for t in texts):
        raise refuse(400, "too many or too long fail_on rules")
    try:
        rules = parse_rules(texts)
    except UsageError as exc:
        raise refuse(400, str(exc)) from None
    bases = base_runs(ctx, row, branch, last)
    base = ctx.base_url(request)
    result = markdown = None
    gates: list[dict[str, Any]] = []
    if bases:
        head = ctx.reports.load(row["id"])
        result = hist.compare_runs([ctx.reports.load(b["id"]) for b in bases], [head])
        unconfirmed = q.get("fail_on_unconfirmed", "") in ("1", "true")
        result = with_gates(result, evaluate_all(rules, head, result, fail_on_unconfirmed=unconfirmed))
        markdown = render_diff_markdown(result)
        gates = [dataclasses.asdict(g) for g in result.gates]
    text = hist.comment(base, row["project"], row, branch, bases, result, markdown)
    failed = [g for g in gates if not g["passed"]]
    return JSONResponse({
        "run": row["id"], "branch": branch, "bases": [b["id"] for b in bases],
        "change_verdict": result.change_verdict if result else None,
        "headline": result.headline if result else None,
        "comparison": result.to_data() if result else None, "gates": gates,
        "failed": "gate failed: " + "; ".join(f"{g['rule']} ({g['detail']})" for g in failed) if failed else None,
        "comment": text,
        "links": {"run": f"{base}/runs/{row['id']}",
                  "compare": f"{base}/compare?base={bases[-1]['id']}&head={row['id']}" if bases else None,
                  "history": f"{base}/projects/{row['project']}/history?" + urlencode({"branch": branch})}})


ROUTES = [
    ("/compare", compare_page, None),
    ("/compare/diff.html", compare_html, None),
    ("/api/v1/compare", api_compare, None),
    ("/api/v1/runs/{run_id}/compare", api_run_compare, None),
]
