"""The tools of `traceanalyzer mcp` over files: plain functions returning the answer's JSON text (so they
are tested without MCP), behind the rules of the command line.

* Paths are confined to the folders the user allows (`roots`): a path is resolved (symbolic links
  followed) and must lie inside one; a relative path is taken from the current directory, else from
  each root in turn. A folder whose links lead outside the roots is refused; a trace whose folder has
  such a link is read without the logs found beside it.
* Inputs obey the command line's limits and errors (`pipeline.Options`: `--max-input-size`, the
  readers' `InputError`s): each failure is one line for the agent (`protocol.call`).
* Nothing is written outside a temporary folder: the decoded-trace cache is off, and each analysis' JSON
  report (the pointer `more.report` for everything the small answers leave out) is saved in this
  session's temporary folder, removed when the server stops. Analyses are kept in memory (the last
  `KEEP`), so the questions that follow `analyze` on one path do not read the trace again.
* `runs` and `history` ask a `traceanalyzer serve` service (URL and token given to the command), with
  the upload command's client.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from ..errors import InputError, UsageError
from ..pipeline import Options, analyze, is_saved_report, load
from ..result import Analysis
from . import answers as A
from .protocol import Param, ToolSpec, analysis_tools, service_tools

KEEP = 4  # analyses kept in memory
MAX_WALK = 100_000  # entries of a folder looked at for links and changes


class OutsideRoots(InputError):
    """A path outside the folders this server may read."""


def _inside(path: Path, roots: Sequence[Path]) -> bool:
    return any(path == r or r in path.parents for r in roots)


def _walk(folder: Path) -> list[Path]:
    """The entries under a folder (links not followed), at most MAX_WALK."""
    out: list[Path] = []
    for top, dirs, files in os.walk(folder):
        for n in (*dirs, *files):
            out.append(Path(top) / n)
            if len(out) >= MAX_WALK:
                return out
    return out


class LocalTools:
    """The tools over files under `roots`, with `options` as the command line gives them."""

    def __init__(self, roots: Sequence[Path], options: Options | None = None, server: str | None = None,
                 token: str | None = None, project: str | None = None, workdir: Path | None = None) -> None:
        if not roots:
            raise UsageError("mcp: at least one --root folder")
        self.roots = [Path(r).resolve() for r in roots]
        for r in self.roots:
            if not r.is_dir():
                raise UsageError(f"--root {r}: not a folder")
        self.options = dataclasses.replace(options or Options(jobs=1), cache=False)
        self._made_workdir = workdir is None
        self.workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="traceanalyzer-mcp-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.server, self.token, self.project = server, token, project
        self._kept: OrderedDict[tuple[Any, ...], tuple[Analysis, dict[str, str]]] = OrderedDict()
        self._lock = threading.Lock()

    def close(self) -> None:
        """Remove the temporary folder this made (one given to it is its owner's to remove)."""
        if self._made_workdir:
            import shutil

            shutil.rmtree(self.workdir, ignore_errors=True)

    # --- the table -------------------------------------------------------------------------------
    def specs(self) -> list[ToolSpec]:
        path = Param("path", "string", "A trace file (.json, .json.gz, .pb, ...), a folder of ranks or a log dir, "
                                       "or a JSON report saved by traceanalyzer; under the allowed folders.",
                     required=True)
        base = Param("base", "string", "The run before the change: a trace, a folder or a saved JSON report.",
                     required=True)
        head = Param("head", "string", "The run after the change, as base.", required=True)
        tools = analysis_tools(path, base, head)
        if self.server and self.token:
            tools += service_tools(project_param=True)
        return tools

    def function(self, name: str) -> Callable[..., str]:
        """The method of a tool of the table (each tool is the method of its name)."""
        if name not in {s.name for s in self.specs()}:
            raise KeyError(name)
        return getattr(self, name)  # type: ignore[no-any-return]

    # --- paths -----------------------------------------------------------------------------------
    def confine(self, text: str) -> Path:
        """The resolved path the agent names, inside the roots; InputError (one line) otherwise."""
        if not text.strip():
            raise InputError(repr(text), "an empty path")
        p = Path(text).expanduser()
        candidates = [p] if p.is_absolute() else [Path.cwd() / p, *(r / p for r in self.roots)]
        resolved = [c.resolve() for c in candidates]
        for r in resolved:
            if r.exists() and _inside(r, self.roots):
                return r
        if any(_inside(r, self.roots) for r in resolved):
            raise InputError(text, "no such file or directory")
        raise OutsideRoots(text, "outside the folders this server may read (" +
                           ", ".join(str(r) for r in self.roots) + ")")

    def _escaping_link(self, entries: Sequence[Path]) -> Path | None:
        return next((e for e in entries if e.is_symlink() and not _inside(e.resolve(), self.roots)), None)

    def _options_for(self, p: Path, run: str | None) -> Options:
        """The options of one input: a folder must not link outside the roots; a file is read without the
        logs beside it when its folder does."""
        options = dataclasses.replace(self.options, run=run)
        if p.is_dir():
            link = self._escaping_link(_walk(p))
            if link is not None:
                raise OutsideRoots(link, "a link to outside the folders this server may read")
        elif self._escaping_link(list(p.parent.iterdir())[:MAX_WALK]) is not None:
            options = dataclasses.replace(options, find_logs_beside=False)
        return options

    @staticmethod
    def _fingerprint(p: Path) -> tuple[Any, ...]:
        entries = [p] if p.is_file() else sorted(_walk(p))
        return tuple((str(e), s.st_size, s.st_mtime_ns) for e in entries for s in (e.lstat(),))

    # --- analyses --------------------------------------------------------------------------------
    def analysis(self, path: str, run: str | None = None) -> tuple[Analysis, dict[str, str]]:
        """The analysis of a path (a saved report is loaded) and where the rest of it is."""
        p = self.confine(path)
        key = (str(p), run, hashlib.sha256(repr(self._fingerprint(p)).encode()).hexdigest())
        with self._lock:
            if key in self._kept:
                self._kept.move_to_end(key)
                return self._kept[key]
        if p.is_file() and is_saved_report(p):
            a, more = load(p), {"report": str(p)}
        else:
            a = analyze(p, self._options_for(p, run))
            stem = p.name.split(".")[0] or "trace"
            report = self.workdir / f"{stem}-{key[2][:10]}.report.json"
            a.save(report, drawing=False)
            more = {"report": str(report)}
        more["tools"] = "explain steps gaps kernels operators"
        with self._lock:
            self._kept[key] = (a, more)
            while len(self._kept) > KEEP:
                self._kept.popitem(last=False)
        return a, more

    def analyze(self, path: str, run: str | None = None, limit: int = A.DEFAULT_LIMIT) -> str:
        a, more = self.analysis(path, run)
        return A.fit(A.analyze_answer(a, more), limit)

    def explain(self, path: str, finding: str | None = None, rank: str | None = None,
                limit: int = A.DEFAULT_LIMIT) -> str:
        a, more = self.analysis(path)
        return A.fit(A.explain_answer(a, finding, rank, more), limit)

    def steps(self, path: str, rank: str | None = None, sort: str = "duration", top: int = A.DEFAULT_TOP,
              limit: int = A.DEFAULT_LIMIT) -> str:
        a, more = self.analysis(path)
        return A.fit(A.steps_answer(a, rank, sort, top, more), limit)

    def gaps(self, path: str, rank: str | None = None, device: str | None = None, cause: str | None = None,
             step: int | None = None, top: int = A.DEFAULT_TOP, limit: int = A.DEFAULT_LIMIT) -> str:
        a, more = self.analysis(path)
        return A.fit(A.gaps_answer(a, rank, device, cause, step, top, more), limit)

    def kernels(self, path: str, rank: str | None = None, device: str | None = None, name: str | None = None,
                top: int = A.DEFAULT_TOP, limit: int = A.DEFAULT_LIMIT) -> str:
        a, more = self.analysis(path)
        return A.fit(A.kernels_answer(a, rank, device, name, top, more), limit)

    def operators(self, path: str, rank: str | None = None, name: str | None = None, sort: str = "total",
                  top: int = A.DEFAULT_TOP, limit: int = A.DEFAULT_LIMIT) -> str:
        a, more = self.analysis(path)
        return A.fit(A.operators_answer(a, rank, name, sort, top, more), limit)

    def compare(self, base: str, head: str, limit: int = A.DEFAULT_LIMIT) -> str:
        from ..compare import compare

        (b, b_more), (h, h_more) = self.analysis(base), self.analysis(head)
        c = compare(b, h, root=str(Path.cwd()))
        return A.fit(A.compare_answer(c, {"base_report": b_more["report"], "head_report": h_more["report"],
                                          "full": "traceanalyzer diff BASE HEAD -o diff.md"}), limit)

    @staticmethod
    def define(figure: str | None = None, limit: int = A.DEFAULT_LIMIT) -> str:
        return A.fit(define_answer(figure), limit)

    # --- the service -----------------------------------------------------------------------------
    def _client(self, project: str | None) -> tuple[Any, str]:
        from ..commands.upload import Client

        if not (self.server and self.token):
            raise UsageError("no service: start traceanalyzer mcp with --server URL and $TRACEANALYZER_TOKEN")
        name = project or self.project
        if not name:
            raise UsageError("no project: pass project, or start traceanalyzer mcp with --project")
        return Client(self.server, self.token), name

    def runs(self, project: str | None = None, branch: str | None = None, status: str | None = None,
             verdict: str | None = None, top: int = A.DEFAULT_TOP, limit: int = A.DEFAULT_LIMIT) -> str:
        client, name = self._client(project)
        query = {k: v for k, v in {"project": name, "branch": branch, "status": status,
                                   "verdict": verdict}.items() if v}
        reply = client.json("GET", "/api/v1/runs?" + urlencode(query))
        rows = list(reply.get("runs", []))[:top]
        more = {"runs": f"{client.server}/runs?{urlencode(query)}"}
        return A.fit(A.runs_answer(name, rows, int(reply.get("total", len(rows))), more), limit)

    def history(self, project: str | None = None, branch: str | None = None, figure: str | None = None,
                limit: int = A.DEFAULT_LIMIT) -> str:
        client, name = self._client(project)
        query = urlencode({"branch": branch}) if branch else ""
        reply = client.json("GET", f"/api/v1/projects/{quote(name, safe='')}/history?{query}")
        more = {"history": f"{client.server}/projects/{quote(name, safe='')}/history?{query}"}
        return A.fit(A.history_answer(reply, figure, more), limit)


def define_answer(figure: str | None) -> dict[str, Any]:
    """A figure's whole definition, or the keys of every figure."""
    from ..result.definitions import COMPARISON_FIGURES, FIGURES

    if not figure:
        return {"figures": sorted([*FIGURES, *COMPARISON_FIGURES]), "more": {"docs": "docs/figures.md"}}
    return {"figure": figure, "definition": A.definition(figure, short=False), "more": {"docs": "docs/figures.md"}}
