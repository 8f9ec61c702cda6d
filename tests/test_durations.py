"""A slow test cannot hide (issue 45, part 5): the test run records its own durations (`conftest.py`, with
TRACEANALYZER_RECORD_DURATIONS set, as CI does), and a test recorded over `HAND_SLOW_S` must be marked `slow`
where it is written."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import DURATIONS, ROOT
from record_durations import HAND_SLOW_S, RECORD_ENV, function_of, merge, unmarked_slow, written_tests


def test_every_test_recorded_over_two_seconds_is_marked_slow_by_hand():
    recorded = json.loads(DURATIONS.read_text())
    late = unmarked_slow(recorded, written_tests())
    assert not late, f"tests over {HAND_SLOW_S:g} s, not marked @pytest.mark.slow: {late}"


def test_every_recorded_test_is_a_test_that_exists():
    functions = written_tests()
    assert {function_of(k) for k in json.loads(DURATIONS.read_text())} <= set(functions)


def test_the_check_sees_a_hand_mark_a_class_mark_and_a_module_mark(tmp_path):
    (tmp_path / "test_a.py").write_text(
        "import pytest\n\n@pytest.mark.slow\ndef test_marked(): pass\n\ndef test_bare(): pass\n\n"
        "@pytest.mark.slow\nclass TestK:\n    def test_in_class(self): pass\n")
    (tmp_path / "test_b.py").write_text("import pytest\npytestmark = [pytest.mark.slow]\ndef test_all(): pass\n")
    functions = written_tests(tmp_path)
    name = tmp_path.name
    assert functions == {f"{name}/test_a.py::test_marked": True, f"{name}/test_a.py::test_bare": False,
                         f"{name}/test_a.py::TestK::test_in_class": True, f"{name}/test_b.py::test_all": True}
    took = {f"{name}/test_a.py::test_bare[x]": 2.5, f"{name}/test_a.py::test_marked": 9.0,
            f"{name}/test_b.py::test_all": 3.0, f"{name}/test_a.py::TestK::test_in_class": 1.0}
    assert unmarked_slow(took, functions) == [(f"{name}/test_a.py::test_bare[x]", 2.5)]
    out = tmp_path / "durations.json"
    out.write_text(json.dumps({f"{name}/test_gone.py::test_x": 1.0, f"{name}/test_b.py::test_all": 0.5}))
    assert merge({f"{name}/test_a.py::test_bare[x]": 2.504}, out) == {
        f"{name}/test_a.py::test_bare[x]": 2.5, f"{name}/test_b.py::test_all": 0.5}


@pytest.mark.slow
def test_a_run_records_its_own_durations_and_names_an_unmarked_slow_test(tmp_path):
    tests = tmp_path / "tests"
    tests.mkdir()
    for helper in ("conftest.py", "record_durations.py"):
        (tests / helper).write_text((ROOT / "tests" / helper).read_text())
    (tests / "test_new.py").write_text("import time\n\ndef test_new_and_slow():\n    time.sleep(2.1)\n\n"
                                       "def test_quick():\n    pass\n")
    env = {**os.environ, RECORD_ENV: "1"}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:randomly", "-p",
                           "no:cacheprovider", str(tests)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    recorded = json.loads((tests / "durations.json").read_text())
    assert set(recorded) == {"tests/test_new.py::test_new_and_slow", "tests/test_new.py::test_quick"}
    assert recorded["tests/test_new.py::test_new_and_slow"] >= 2.1
    assert "not marked slow" in done.stdout and "tests/test_new.py::test_new_and_slow" in done.stdout
