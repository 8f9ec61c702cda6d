"""Record how long each test took, for the fast set's choice (`conftest.py`: a test recorded at
`SLOW_S` seconds or more is marked `slow`, so `pytest -m "not slow"` runs in about a minute).

    .venv/bin/python -m pytest -q --junitxml=/tmp/tests.xml
    .venv/bin/python tests/record_durations.py /tmp/tests.xml

Updates `tests/durations.json` (test id -> seconds, rounded to 0.01) with the tests of that run (a run
of some files records those; tests no longer collected are dropped). A test not recorded yet counts
as fast until it is; record again after adding tests that read real traces, start servers or
browsers (or mark them `slow` by hand).
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "durations.json"


def node_id(classname: str, name: str) -> str:
    """pytest's id of a junit test case (`tests.test_x` + `test_y[p]` -> `tests/test_x.py::test_y[p]`)."""
    return f"{classname.replace('.', '/')}.py::{name}"


def _collected() -> set[str]:
    """The ids of every test pytest collects now (empty when collecting fails)."""
    import subprocess

    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "--collect-only", "-p", "no:cacheprovider"],
                         cwd=HERE.parent, capture_output=True, text=True)
    return {line.strip() for line in run.stdout.splitlines() if "::" in line} if run.returncode == 0 else set()


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    cases = ET.parse(argv[1]).getroot().iter("testcase")
    durations = {node_id(c.get("classname", ""), c.get("name", "")): round(float(c.get("time", 0)), 2)
                 for c in cases}
    recorded = json.loads(OUT.read_text()) if OUT.is_file() else {}
    recorded.update(durations)
    collected = _collected()
    if collected:
        recorded = {k: v for k, v in recorded.items() if k in collected}
    OUT.write_text(json.dumps(dict(sorted(recorded.items())), indent=0) + "\n")
    print(f"{len(durations)} tests recorded in {OUT} ({len(recorded)} in all)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
