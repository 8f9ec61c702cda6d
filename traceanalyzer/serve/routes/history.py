"""A project's history: each figure's series over a branch's runs, with its change points (page and API).
In a public service it needs no token; with a token it shows that token's project only."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response

from .. import history as hist
from ..context import Access, Context, refuse, text_param
from ..uploads import PROJECT_RE


def project_or_404(ctx: Context, request: Request) -> tuple[str, Access]:
    who = ctx.access(request)
    ctx.need_reader(who)
    name = request.path_params["project"]
    if not PROJECT_RE.match(name) or not ctx.may_read(who, name) or name not in ctx.db.project_names():
        raise refuse(404, f"no project {name[:64]!r}")
    return name, who


def history_branch(ctx: Context, request: Request, project: str) -> tuple[str | None, list[str]]:
    branches = ctx.db.branches(project)
    branch = text_param(request.query_params.get("branch"), "branch", 200)
    if branch is None:
        branch = "main" if "main" in branches else (branches[0] if branches else None)
    return branch, branches


def history_of(ctx: Context, request: Request, project: str, branch: str | None) -> dict[str, Any]:
    try:
        limit = int(request.query_params.get("runs", str(hist.DEFAULT_RUNS)))
    except ValueError:
        raise refuse(400, "bad runs: a number of runs") from None
    if not 2 <= limit <= hist.MAX_RUNS:
        raise refuse(400, f"bad runs: between 2 and {hist.MAX_RUNS}")
    rows = ctx.db.history(project, branch, limit)
    base = ctx.base_url(request)
    return ctx.histories.get(hist.cache_key(project, branch, base, rows),
                             lambda: hist.build(rows, ctx.reports, base, project, branch))


def api_history(ctx: Context, request: Request) -> Response:
    project, _ = project_or_404(ctx, request)
    branch, _ = history_branch(ctx, request, project)
    return JSONResponse(history_of(ctx, request, project, branch))


def history_page(ctx: Context, request: Request) -> Response:
    who = ctx.access(request)
    if ctx.settings.private and who.project is None:
        return RedirectResponse("/login", status_code=303)
    project, _ = project_or_404(ctx, request)
    branch, branches = history_branch(ctx, request, project)
    data = history_of(ctx, request, project, branch)
    return ctx.page(request, "history.html.j2", project=project, branch=branch, branches=branches, history=data,
                    charts=hist.charts(data), labels=hist.LABELS)


ROUTES = [
    ("/projects/{project}/history", history_page, None),
    ("/api/v1/projects/{project}/history", api_history, None),
]
