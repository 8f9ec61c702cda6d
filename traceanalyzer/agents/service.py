"""The tools over the service's stored results, for one token: its project's runs by id (never a path),
their saved analyses, the comparison of two of them, the project's runs and its branches' history.

The service's rule holds: it reads and writes results, never re-analyses a trace to answer. An analysis
is the run's saved report (`report.json`, through the app's cache of loaded reports); a comparison is the
compare page's (`routes.compare.comparison`); a history is the history page's (cached too). A run of
another project is "no run" (as the API answers 404), a run not analysed yet says its state.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import UsageError
from . import answers as A
from .protocol import Param, ToolSpec, analysis_tools, service_tools


class ServiceTools:
    """The tools of the service for one caller (`who`: the token's Access), links under `base_url`."""

    def __init__(self, ctx: Any, who: Any, base_url: str) -> None:
        self.ctx, self.who, self.base = ctx, who, base_url

    def specs(self) -> list[ToolSpec]:
        run = Param("run", "string", "A run id of the token's project (12 hex digits, from `runs`).", required=True)
        base = Param("base", "string", "The run before the change (a run id).", required=True)
        head = Param("head", "string", "The run after the change (a run id).", required=True)
        return [*analysis_tools(run, base, head), *service_tools(project_param=False)]

    def function(self, name: str) -> Callable[..., str]:
        """The method of a tool of the table (each tool is the method of its name)."""
        if name not in {s.name for s in self.specs()}:
            raise KeyError(name)
        return getattr(self, name)  # type: ignore[no-any-return]

    # --- stored runs -------------------------------------------------------------------------------
    def row(self, run_id: str) -> dict[str, Any]:
        """A run of the token's project that is analysed; UsageError (one line) otherwise."""
        from ..serve.context import RUN_ID_RE

        row = self.ctx.db.run(run_id) if RUN_ID_RE.match(run_id) else None
        if row is None or not self.ctx.may_read(self.who, row["project"]):
            raise UsageError(f"no run {A.line(run_id, 40)!r} in project {self.who.project}")
        if row["status"] != "done":
            raise UsageError(f"run {row['id']} is {row['status']}: no analysis to read"
                             + (f" ({A.line(row['error'], 200)})" if row.get("error") else ""))
        return row

    def analysis(self, run_id: str) -> tuple[Any, dict[str, str]]:
        row = self.row(run_id)
        return self.ctx.reports.load(row["id"]), {"run": f"{self.base}/runs/{row['id']}",
                                                  "report_json": f"{self.base}/api/v1/runs/{row['id']}/report.json"}

    def analyze(self, run: str, limit: int = A.DEFAULT_LIMIT) -> str:
        a, more = self.analysis(run)
        return A.fit(A.analyze_answer(a, more), limit)

    def explain(self, run: str, finding: str | None = None, rank: str | None = None,
                limit: int = A.DEFAULT_LIMIT) -> str:
        a, more = self.analysis(run)
        return A.fit(A.explain_answer(a, finding, rank, more), limit)

    def steps(self, run: str, rank: str | None = None, sort: str = "duration", top: int = A.DEFAULT_TOP,
              limit: int = A.DEFAULT_LIMIT) -> str:
        a, more = self.analysis(run)
        return A.fit(A.steps_answer(a, rank, sort, top, more), limit)

    def gaps(self, run: str, rank: str | None = None, device: str | None = None, cause: str | None = None,
             step: int | None = None, top: int = A.DEFAULT_TOP, limit: int = A.DEFAULT_LIMIT) -> str:
        a, more = self.analysis(run)
        return A.fit(A.gaps_answer(a, rank, device, cause, step, top, more), limit)

    def kernels(self, run: str, rank: str | None = None, device: str | None = None, name: str | None = None,
                top: int = A.DEFAULT_TOP, limit: int = A.DEFAULT_LIMIT) -> str:
        a, more = self.analysis(run)
        return A.fit(A.kernels_answer(a, rank, device, name, top, more), limit)

    def operators(self, run: str, rank: str | None = None, name: str | None = None, sort: str = "total",
                  top: int = A.DEFAULT_TOP, limit: int = A.DEFAULT_LIMIT) -> str:
        a, more = self.analysis(run)
        return A.fit(A.operators_answer(a, rank, name, sort, top, more), limit)

    def compare(self, base: str, head: str, limit: int = A.DEFAULT_LIMIT) -> str:
        from ..serve.routes.compare import comparison

        b, h = self.row(base), self.row(head)
        c = comparison(self.ctx, b, h)
        return A.fit(A.compare_answer(c, {"compare": f"{self.base}/compare?base={b['id']}&head={h['id']}"}), limit)

    @staticmethod
    def define(figure: str | None = None, limit: int = A.DEFAULT_LIMIT) -> str:
        from .tools import define_answer

        return A.fit(define_answer(figure), limit)

    # --- the project -------------------------------------------------------------------------------
    def runs(self, branch: str | None = None, status: str | None = None, verdict: str | None = None,
             top: int = A.DEFAULT_TOP, limit: int = A.DEFAULT_LIMIT) -> str:
        from urllib.parse import urlencode

        project = self.who.project
        rows, total = self.ctx.db.list_runs(project, branch, status, top, 0, verdict=verdict)
        query = urlencode({k: v for k, v in {"project": project, "branch": branch, "status": status,
                                             "verdict": verdict}.items() if v})
        return A.fit(A.runs_answer(project, rows, total, {"runs": f"{self.base}/runs?{query}"}), limit)

    def history(self, branch: str | None = None, figure: str | None = None, limit: int = A.DEFAULT_LIMIT) -> str:
        from urllib.parse import urlencode

        from ..serve import history as hist

        project = self.who.project
        if branch is None:
            branches = self.ctx.db.branches(project)
            branch = "main" if "main" in branches else (branches[0] if branches else None)
        rows = self.ctx.db.history(project, branch, hist.DEFAULT_RUNS)
        data = self.ctx.histories.get(hist.cache_key(project, branch, self.base, rows),
                                      lambda: hist.build(rows, self.ctx.reports, self.base, project, branch))
        query = urlencode({"branch": branch}) if branch else ""
        more = {"history": f"{self.base}/projects/{project}/history?{query}"}
        return A.fit(A.history_answer(data, figure, more), limit)
