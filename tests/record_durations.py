"""Record how long each test took, for the fast set's choice (`conftest.py`: a test recorded at
`SLOW_S` seconds or more is marked `slow`, so `pytest -m "not slow"` runs in about a minute).

The test run records itself: with TRACEANALYZER_RECORD_DURATIONS=1 (CI sets it, `.ci/run`), `conftest.py`
merges the run's durations into `tests/durations.json` when the session ends and lists the tests over
`HAND_SLOW_S` not marked `slow` by hand; `tests/test_durations.py` fails on any such recorded test. So a new
slow test is recorded by the first run that runs it, and cannot hide. From a junit XML, as before:

    .venv/bin/python -m pytest -q --junitxml=/tmp/tests.xml
    .venv/bin/python tests/record_durations.py /tmp/tests.xml

`tests/durations.json` maps a test id to seconds (setup + call + teardown, rounded to 0.01); a run of
some files updates those; tests whose function is gone are dropped.
"""

from __future__ import annotations

import ast
import functools
import json
import re
import sys
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "durations.json"
RECORD_ENV = "TRACEANALYZER_RECORD_DURATIONS"
HAND_SLOW_S = 2.0  # a test that takes longer is marked `slow` by hand, where it is written (not only recorded)
_SLOW = re.compile(r"\bmark\.slow\b")


def node_id(classname: str, name: str) -> str:
    """pytest's id of a junit test case (`tests.test_x` + `test_y[p]` -> `tests/test_x.py::test_y[p]`)."""
    return f"{classname.replace('.', '/')}.py::{name}"


def function_of(test_id: str) -> str:
    """A test id without its parameters: `tests/test_x.py::test_y[p]` -> `tests/test_x.py::test_y`."""
    return test_id.split("[", 1)[0]


@functools.lru_cache(maxsize=8)
def written_tests(folder: Path = HERE) -> dict[str, bool]:
    """Every test function of the test files (`tests/test_x.py::[TestClass::]test_y`), and whether it is
    marked `slow` where it is written (its decorators, its class's, or the module's `pytestmark`)."""
    out: dict[str, bool] = {}
    for path in sorted(folder.glob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        module_slow = any(isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "pytestmark" for t in n.targets)
                          and _SLOW.search(ast.unparse(n.value)) for n in tree.body)
        prefix = f"{path.parent.name}/{path.name}::"

        def walk(body: list[ast.stmt], where: str, slow: bool) -> None:
            for node in body:
                marked = slow or any(_SLOW.search(ast.unparse(d)) for d in getattr(node, "decorator_list", ()))
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
                    out[where + node.name] = bool(marked)
                elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
                    walk(node.body, f"{where}{node.name}::", bool(marked))

        walk(tree.body, prefix, bool(module_slow))
    return out


def unmarked_slow(durations: Mapping[str, float], functions: Mapping[str, bool]) -> list[tuple[str, float]]:
    """The tests recorded over HAND_SLOW_S whose function is not marked `slow` by hand, slowest first."""
    return sorted(((k, v) for k, v in durations.items() if v > HAND_SLOW_S
                   and functions.get(function_of(k)) is False), key=lambda kv: (-kv[1], kv[0]))


def merge(durations: Mapping[str, float], out: Path = OUT) -> dict[str, float]:
    """`durations` (test id -> seconds) merged into `out`: updated, tests whose function is gone dropped."""
    recorded: dict[str, float] = json.loads(out.read_text()) if out.is_file() else {}
    recorded.update({k: round(float(v), 2) for k, v in durations.items()})
    functions = written_tests(out.parent)
    recorded = {k: v for k, v in recorded.items() if function_of(k) in functions}
    out.write_text(json.dumps(dict(sorted(recorded.items())), indent=0) + "\n")
    return recorded


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    cases = ET.parse(argv[1]).getroot().iter("testcase")
    durations = {node_id(c.get("classname", ""), c.get("name", "")): float(c.get("time", 0)) for c in cases}
    recorded = merge(durations)
    print(f"{len(durations)} tests recorded in {OUT} ({len(recorded)} in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
