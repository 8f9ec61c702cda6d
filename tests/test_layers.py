"""The package's layers, checked on its imports: each module imports only its own layer or those below,
no module imports in a circle, and the few rules that keep facts where they are made hold (diagnosis
reads figures, never the Timeline or the result types; analyses never the result types; a renderer
never imports a reader; a comparison or a gate never imports the analyses; the service never imports a
reader or an analysis).

The layers, bottom up (docs/architecture.md draws the same picture):

    model      timeline, intervals, names, causes, advice_patterns, units, errors, inert, progress, _version,
               changepoints, ranktest, heap, processes
    readers    formats/, cache
    align      align
    analyses   analyses/
    diagnosis  diagnosis/
    result     result/ (types, build, frames, definitions)
    run        run/ (map, combine, executors), pipeline
    faces      report/, compare, gates
    commands   commands/, serve/ (the web service), agents/ (the MCP tools), __main__, the package's __init__
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "traceanalyzer"

LAYERS: dict[str, tuple[str, ...]] = {
    "model": ("timeline", "intervals", "names", "causes", "advice_patterns", "units", "errors", "inert", "progress",
              "_version", "changepoints", "ranktest", "heap", "processes"),
    "readers": ("formats", "cache"),
    "align": ("align",),
    "analyses": ("analyses",),
    "diagnosis": ("diagnosis",),
    "result": ("result",),
    "run": ("run", "pipeline"),
    "faces": ("report", "compare", "gates"),
    "commands": ("commands", "serve", "agents", "__main__", "__init__"),
}
ORDER = list(LAYERS)
# Imports that may run up a layer, each for a reason: the result's faces (to_html, ...) import the renderers
# when they are called, in the manner of pyinstrument's Session, so building a result never imports them.
ALLOWED_UP = {("result/__init__.py", "report")}
# Arrows the layer order allows but the design does not: facts are made once, where they are made.
FORBIDDEN = {
    "diagnosis": ("timeline", "result", "formats"),  # findings come from figures alone
    "analyses": ("result", "formats"),  # figures are made from the Timeline, in ns, before any result
    "align": ("analyses",),  # logs go on the trace clock from arrays, before any figure
    "result": ("timeline", "formats"),  # the result is built from figures and findings, never from events
}
# The same, for modules of one layer: a renderer shows a result and never reads an input (what it needs of
# the inputs is in the result); a comparison and a gate read results (and the run's metrics,
# result/metrics.py), never the analyses that made them. The service never reads a trace: its analysis
# process runs the library's `analyze` (the package's public entry), and what a page says of a stored file
# (its format, whether Perfetto opens it) was stored when its analysis finished (serve/facts.py).
FORBIDDEN_FOR = {
    "report": ("formats",),
    "compare": ("analyses",),
    "gates": ("analyses",),
    "serve": ("formats", "analyses"),
}


def top_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE)
    return rel.parts[0].removesuffix(".py")


def layer_of(name: str) -> str:
    return next(layer for layer, names in LAYERS.items() if name in names)


def imported(path: Path) -> list[tuple[str, int, bool]]:
    """(first name inside the package, line, at module level) of every import of a package module."""
    tree = ast.parse(path.read_text())
    rel = path.relative_to(PACKAGE)
    depth = len(rel.parts) - 1  # folders below the package
    out = []
    top_level = {id(n) for n in tree.body}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                up = node.level - 1
                if up > depth:
                    continue
                base = list(rel.parts[: depth - up])
                parts = base + (node.module.split(".") if node.module else [])
            elif node.module and node.module.split(".")[0] == "traceanalyzer":
                parts = node.module.split(".")[1:]
            else:
                continue
            names = [parts[0]] if parts else [a.name for a in node.names]
            out += [(n, node.lineno, id(node) in top_level) for n in names]
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("traceanalyzer."):
                    out.append((a.name.split(".")[1], node.lineno, id(node) in top_level))
    return out


def modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def test_every_module_has_a_layer():
    names = {top_name(p) for p in modules()}
    assert names <= {n for ns in LAYERS.values() for n in ns}, names - {n for ns in LAYERS.values() for n in ns}


def test_imports_run_down_the_layers_only():
    wrong = []
    for p in modules():
        here = layer_of(top_name(p))
        rel = str(p.relative_to(PACKAGE))
        for name, line, _ in imported(p):
            there = layer_of(name)
            if ORDER.index(there) > ORDER.index(here) and (rel, name) not in ALLOWED_UP:
                wrong.append(f"{rel}:{line} ({here}) imports {name} ({there})")
            if name in FORBIDDEN.get(here, ()):
                wrong.append(f"{rel}:{line} ({here}) imports {name}, which its layer must not read")
            if name in FORBIDDEN_FOR.get(top_name(p), ()):
                wrong.append(f"{rel}:{line} imports {name}, which {top_name(p)} must not read")
    assert not wrong, "\n".join(wrong)


def test_no_import_circles_between_modules():
    """Module-level imports between the package's files form no cycle."""
    graph: dict[str, set[str]] = {}
    for p in modules():
        rel = p.relative_to(PACKAGE)
        me = ".".join(rel.with_suffix("").parts)
        tree = ast.parse(p.read_text())
        deps = set()
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.level:
                base = list(rel.parts[: len(rel.parts) - node.level])
                mod = base + (node.module.split(".") if node.module else [])
                for a in node.names:
                    cand = ".".join(mod + [a.name])
                    deps.add(cand if (PACKAGE / Path(*cand.split("."))).with_suffix(".py").exists() else ".".join(mod))
        graph[me] = {d.removesuffix(".__init__") for d in deps if d}
    graph = {k.removesuffix(".__init__"): v for k, v in graph.items()}
    seen: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        seen[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if m == n or m not in graph:
                continue
            if seen.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in seen and (cycle := visit(m)):
                return cycle
        seen[n] = 2
        stack.pop()
        return None

    for n in sorted(graph):
        if n not in seen and (cycle := visit(n)):
            raise AssertionError(" -> ".join(cycle))


def test_no_private_name_is_used_outside_its_module():
    """`from .x import _name` (a private name of another module) is not used; a private module's public
    names are fine, and so is a private module of the importer's own package taken whole (`from . import
    _scan`: the compiled scanner, wrapped by formats/scanner.py)."""
    wrong = []
    for p in modules():
        tree = ast.parse(p.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("traceanalyzer")):
                own_modules = ({q.stem for q in p.parent.iterdir() if q.suffix in (".py", ".c")}
                               if node.level == 1 and not node.module else set())
                wrong += [f"{p.relative_to(PACKAGE)}:{node.lineno} imports {a.name}" for a in node.names
                          if a.name.startswith("_") and not a.name.startswith("__") and a.name not in own_modules]
    assert not wrong, "\n".join(wrong)
