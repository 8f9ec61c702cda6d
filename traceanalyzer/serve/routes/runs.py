"""Runs: the list (page and API, with search), one run (page, JSON, its report in every form, its trace
files), and deleting one."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import (
    FileResponse,
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)

from ..blobs import blobs_of
from ..context import (
    PAGE_SIZE,
    RUN_ID_RE,
    VERDICT_RE,
    Access,
    Context,
    day_param,
    refuse,
    report_csp,
    uploader,
    with_height_script,
)
from ..jobs import remove_run_files
from ..store import STATUSES
from . import BEARER, FORM, writes


# -- the list
def list_runs(ctx: Context, request: Request, who: Access) -> tuple[list[dict[str, Any]], int, dict[str, str], int]:
    """The runs a request may see, filtered by project, branch, status, commit (or its start),
    verdict, and upload date (`since`, `until`: YYYY-MM-DD in UTC, both days included)."""
    q = request.query_params
    filters = {k: q.get(k, "").strip()[:200] for k in ("project", "branch", "status", "commit", "verdict", "since",
                                                         "until")}
    if filters["status"] and filters["status"] not in STATUSES:
        raise refuse(400, f"bad status: one of {', '.join(STATUSES)}")
    if filters["verdict"] and not VERDICT_RE.match(filters["verdict"]):
        raise refuse(400, "bad verdict: a verdict id such as input_bound")
    days = {k: day_param(filters[k], k) for k in ("since", "until")}
    if who.project is not None:
        if filters["project"] and filters["project"] != who.project:
            return [], 0, filters, 1
        filters["project"] = who.project
    try:
        page_no = max(1, min(int(q.get("page", "1")), 10**6))
    except ValueError:
        raise refuse(400, "bad page number") from None
    rows, total = ctx.db.list_runs(filters["project"] or None, filters["branch"] or None, filters["status"] or None,
                                   PAGE_SIZE, (page_no - 1) * PAGE_SIZE, commit=filters["commit"] or None,
                                   verdict=filters["verdict"] or None, since=days["since"],
                                   until=None if days["until"] is None else days["until"] + 86400)
    return rows, total, filters, page_no


def api_runs(ctx: Context, request: Request) -> Response:
    who = ctx.access(request)
    ctx.need_reader(who)
    rows, total, _, page_no = list_runs(ctx, request, who)
    shas = ctx.db.shas_of([r["id"] for r in rows])
    return JSONResponse({"total": total, "page": page_no, "page_size": PAGE_SIZE,
                         "runs": [ctx.run_json(request, r, shas.get(r["id"], [])) for r in rows]})


def runs_page(ctx: Context, request: Request) -> Response:
    who = ctx.access(request)
    if ctx.settings.private and who.project is None:
        return RedirectResponse("/login", status_code=303)
    rows, total, filters, page_no = list_runs(ctx, request, who)
    pages = max(1, (total + PAGE_SIZE - 1) // PAGE_SIZE)

    def link(n: int) -> str:
        return "/runs?" + urlencode({**{k: v for k, v in filters.items() if v}, "page": n})

    return ctx.page(request, "runs.html.j2", runs=rows, total=total, filters=filters, page_no=page_no, pages=pages,
                    prev=link(page_no - 1) if page_no > 1 else None,
                    next=link(page_no + 1) if page_no < pages else None, statuses=STATUSES,
                    projects=[who.project] if who.project else ctx.db.project_names())


# -- one run
def api_run(ctx: Context, request: Request) -> Response:
    row, _ = ctx.run_or_404(request, request.path_params["run_id"])
    return JSONResponse(ctx.run_json(request, row))


def run_page(ctx: Context, request: Request) -> Response:
    row, _ = ctx.run_or_404(request, request.path_params["run_id"])
    files = ctx.db.files(row["id"])
    perfetto = [i for i, f in enumerate(files) if f.perfetto]  # found by its analysis (facts.py): never read here
    resp = ctx.page(request, "run.html.j2", run=row, files=files, uploaded_by=uploader(row), perfetto=perfetto)
    if perfetto:  # "Open in Perfetto" opens ui.perfetto.dev and talks to it: the opener link must stay
        resp.headers["Cross-Origin-Opener-Policy"] = "same-origin-allow-popups"
    return resp


def report_file(ctx: Context, request: Request, name: str) -> Path:
    row, _ = ctx.run_or_404(request, request.path_params["run_id"])
    if row["status"] != "done":
        raise refuse(409, f"run {row['id']} is {row['status']}: no report yet")
    path = blobs_of(ctx.settings).report(row["id"], name)
    if path is None:
        raise refuse(404, "the report is missing from the store")
    return path


def api_report_json(ctx: Context, request: Request) -> Response:
    return FileResponse(report_file(ctx, request, "report.json"), media_type="application/json")


def report_md(ctx: Context, request: Request) -> Response:
    return FileResponse(report_file(ctx, request, "report.md"), media_type="text/markdown; charset=utf-8")


def report_html(ctx: Context, request: Request) -> Response:
    html = report_file(ctx, request, "report.html").read_text("utf-8")
    html = with_height_script(html, ctx.page_origin(request))
    return HTMLResponse(html, headers={"Content-Security-Policy": report_csp(html)})


def _md_code(text: str) -> str:
    return " ".join(str(text).replace("`", "'").split())[:200]


def comment_md(ctx: Context, request: Request) -> Response:
    row, _ = ctx.run_or_404(request, request.path_params["run_id"])
    base = ctx.base_url(request)
    link = f"{base}/runs/{row['id']}"
    head = f"**traceanalyzer** run [{row['id']}]({link})"
    if row["branch"]:
        head += f" on `{_md_code(row['branch'])}`"
    if row["commit"]:
        head += f" at `{_md_code(row['commit'][:12])}`"
    if row["status"] != "done":
        text = f"{head}: {row['status']}" + (f" ({_md_code(row['error'])})" if row["error"] else "") + "\n"
    else:
        path = blobs_of(ctx.settings).report(row["id"], "report.md")
        if path is None:
            raise refuse(404, "the report is missing from the store")
        body = path.read_text("utf-8")
        text = f"{head}: [full report]({link}) · [JSON]({base}/api/v1/runs/{row['id']}/report.json)\n\n{body}"
    return PlainTextResponse(text, media_type="text/markdown; charset=utf-8")


def download(ctx: Context, request: Request) -> Response:
    """A run's stored trace file, as uploaded (what the page's "Open in Perfetto" hands to the Perfetto UI
    too): readable by whoever may read the run."""
    row, _ = ctx.run_or_404(request, request.path_params["run_id"])
    files = ctx.db.files(row["id"])
    n = request.path_params["n"]
    if not (n.isascii() and n.isdigit() and int(n) < len(files)):
        raise refuse(404, "no such file in this run")
    f = files[int(n)]
    blobs = blobs_of(ctx.settings)
    path = blobs.trace_file(f.sha256)
    if path is not None:
        return FileResponse(path, media_type="application/octet-stream", filename=f.name)
    chunks = blobs.trace_chunks(f.sha256)
    if chunks is None:
        raise refuse(410, "this run's trace was removed (the analysis is kept)")
    return StreamingResponse(chunks, media_type="application/octet-stream",
                             headers={"Content-Disposition": f'attachment; filename="{f.name}"',
                                      "Content-Length": str(f.size_bytes)})


# -- deleting a run (its trace files too, unless another run has the same content)
def remove(ctx: Context, request: Request, row: dict[str, Any], who: Access) -> str:
    """Deletes a run (its report, and its trace files unless another run has the same content); a run
    being analysed is canceled: its worker stops the analysis and removes it."""
    if who.project != row["project"]:
        raise refuse(403, "deleting a run needs a token of its project that is not read-only")
    outcome, shas = ctx.db.delete_run(row["id"], ctx.actor(request, who))
    if outcome == "deleted":
        remove_run_files(ctx.settings, ctx.db, row["id"], shas)
    return outcome


@writes(BEARER)
def api_delete(ctx: Context, request: Request) -> Response:
    row, who = ctx.run_or_404(request, request.path_params["run_id"])
    if remove(ctx, request, row, who) == "canceled":
        return JSONResponse({"id": row["id"], "status": "canceled"}, status_code=202)
    return Response(status_code=204)


@writes(FORM)
def delete_form(ctx: Context, request: Request) -> Response:
    who = ctx.access(request)  # the login cookie's token, checked by the guard with the form's CSRF token
    run_id = request.path_params["run_id"]
    row = ctx.db.run(run_id) if RUN_ID_RE.match(run_id) else None
    if row is None or row["project"] != who.project:
        raise refuse(404, f"no run {run_id[:40]!r}")
    remove(ctx, request, row, who)
    return RedirectResponse("/runs", status_code=303)


ROUTES = [
    ("/runs", runs_page, None),
    ("/api/v1/runs", api_runs, None),
    ("/runs/{run_id}", run_page, None),
    ("/runs/{run_id}/report.html", report_html, None),
    ("/runs/{run_id}/report.md", report_md, None),
    ("/runs/{run_id}/comment.md", comment_md, None),
    ("/runs/{run_id}/files/{n}", download, None),
    ("/api/v1/runs/{run_id}", api_run, ["GET"]),
    ("/api/v1/runs/{run_id}", api_delete, ["DELETE"]),
    ("/runs/{run_id}/delete", delete_form, ["POST"]),
    ("/api/v1/runs/{run_id}/report.json", api_report_json, None),
]
