"""A broad `except` (Exception, BaseException, bare) outside the service (`serve/`, checked by its own tests)
either cleans up and re-raises (it contains nothing), or stands at a process edge, listed here, with a comment
on its line naming what it contains (issue 45, part 5). Anything else names the errors it expects."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "traceanalyzer"
BROAD = {"Exception", "BaseException"}
# (module, function): where a failure of anything inside becomes one line or another process's error
EDGES = {
    ("commands/__init__.py", "invoke"),  # the command line: a bug is one line, exit 3
    ("commands/serve.py", "_store"),  # the database driver's errors (no common base) as one line
    ("agents/protocol.py", "call"),  # an MCP tool call: one line for the agent, never a crash of the server
    ("formats/_io.py", "produce"),  # the inflating thread: its error handed to the reading thread, raised there
    ("formats/chrome_parallel.py", "_accept_ranges"),  # a worker process lost: its range decoded here
    ("analyses/_beside.py", "beside"),  # the second thread's error while the caller's own is raised
}


def _broad(handler: ast.ExceptHandler) -> bool:
    t = handler.type
    names = [t] if t is None or not isinstance(t, ast.Tuple) else list(t.elts)
    return any(n is None or (isinstance(n, ast.Name) and n.id in BROAD) for n in names)


def _reraises(handler: ast.ExceptHandler) -> bool:
    return any(isinstance(s, ast.Raise) and s.exc is None for s in handler.body)


@functools.lru_cache(maxsize=1)
def _handlers() -> list[tuple[str, str, int, bool, str]]:
    """(module, enclosing function, line, re-raises, the except line) of every broad handler outside serve/."""
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith("serve/"):
            continue
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        stack: list[tuple[ast.AST, str]] = [(ast.parse(text), "")]
        while stack:
            node, func = stack.pop()
            for child in ast.iter_child_nodes(node):
                name = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else func
                if isinstance(child, ast.ExceptHandler) and _broad(child):
                    out.append((rel, name, child.lineno, _reraises(child), lines[child.lineno - 1]))
                stack.append((child, name))
    return out


def test_a_broad_except_re_raises_or_is_a_named_process_edge():
    wrong = [(rel, func, line) for rel, func, line, reraises, source in _handlers()
             if not reraises and ((rel, func) not in EDGES or "#" not in source)]
    assert not wrong, f"broad excepts that contain errors away from a process edge, or say nothing of it: {wrong}"


def test_every_listed_edge_is_still_there():
    found = {(rel, func) for rel, func, _, reraises, _ in _handlers() if not reraises}
    assert found == EDGES
