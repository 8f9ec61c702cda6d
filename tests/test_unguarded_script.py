"""A script that calls traceanalyzer at its top level (no `if __name__ == "__main__":`) gets its answer
in one process with a warning saying how to use the cores, instead of a traceback from workers that ran
the script again; a guarded script still uses processes. Real scripts, run by a real interpreter: the
splitting thresholds are lowered inside the scripts so that small samples take the parallel paths."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from traceanalyzer.processes import _guarded_lines, _is_main_test

COPIES = 8
SAMPLES = Path(__file__).resolve().parent.parent / "sample_traces"

# Lowered thresholds (set at the script's top level: a worker that imports the script sets them too),
# and a counter of the ranges decoded in worker processes.
PRELUDE = """\
import json, sys
import traceanalyzer as ta
from traceanalyzer.formats import chrome_parallel
chrome_parallel.PARALLEL_MIN_BYTES = 0
chrome_parallel.TAIL_BYTES = 1024
chrome_parallel.RANGE_BYTES = 4096
used = []
real_run_ranges = chrome_parallel._run_ranges
def counting_run_ranges(*args, **kwargs):
    used.append(len(args[0]))
    return real_run_ranges(*args, **kwargs)
chrome_parallel._run_ranges = counting_run_ranges

def figures(path):
    a = ta.analyze(path, ta.Options(jobs=2, cache=False))
    r = a.ranks[0]
    return {"busy": [d.gpu_busy_us for d in r.devices], "steps": r.steps, "ranges": sum(used),
            "kept": [i.events_kept for i in a.inputs]}
"""


def run_script(tmp_path: Path, body: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "user_script.py"
    script.write_text(PRELUDE + textwrap.dedent(body))
    # The pure-Python reader: its ranges go to worker processes (the compiled scanner reads in threads).
    env = dict(os.environ, PYTHONWARNINGS="default", TRACEANALYZER_PURE_PYTHON="1")
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path, env=env,
                          timeout=300)


def big_trace(tmp_path: Path) -> Path:
    """A sample trace with its events repeated until it is split into several ranges (4 KB each)."""
    doc = json.loads((SAMPLES / "input_bound.json").read_text())
    events = doc["traceEvents"]
    timed = [e for e in events if isinstance(e.get("ts"), (int, float))]
    shift = max(e["ts"] + e.get("dur", 0) for e in timed) - min(e["ts"] for e in timed) + 1000
    copies = []
    for k in range(COPIES):
        for e in events:
            if isinstance(e.get("ts"), (int, float)):
                e = dict(e, ts=e["ts"] + k * shift)
                if str(e.get("name", "")).startswith("ProfilerStep#"):
                    e["name"] = f"ProfilerStep#{k * 100 + int(e['name'][13:])}"
            copies.append(e)
    doc["traceEvents"] = copies
    path = tmp_path / "big.json"
    path.write_text(json.dumps(doc, indent=1))
    assert path.stat().st_size > 40 * 4096
    return path


def steps_in_sample() -> int:
    import traceanalyzer as ta

    return ta.analyze(SAMPLES / "input_bound.json").ranks[0].steps


def test_an_unguarded_script_gets_its_answer_in_one_process(tmp_path):
    path = big_trace(tmp_path)
    unguarded = run_script(tmp_path, f"print(json.dumps(figures({str(path)!r})))\n")
    assert unguarded.returncode == 0, unguarded.stderr
    assert "Traceback" not in unguarded.stderr
    line = PRELUDE.count("\n") + 1
    assert f"user_script.py, line {line}, calls it at the script's top level" in unguarded.stderr
    assert 'put the call under `if __name__ == "__main__":` to use 2 processes' in unguarded.stderr
    assert unguarded.stderr.count("RuntimeWarning") == 1  # said once, though both the pool and the decoder asked

    guarded = run_script(tmp_path, f"""\
        if __name__ == "__main__":
            print(json.dumps(figures({str(path)!r})))
        """)
    assert guarded.returncode == 0, guarded.stderr
    assert "RuntimeWarning" not in guarded.stderr
    one, two = json.loads(unguarded.stdout), json.loads(guarded.stdout)
    assert one["ranges"] == 0 and two["ranges"] > 10  # the guarded script's file was decoded in ranges
    assert one["busy"] == two["busy"] and one["kept"] == two["kept"]
    assert one["steps"] == two["steps"] == COPIES * steps_in_sample()


def test_a_package_run_with_dash_m_keeps_its_processes(tmp_path):
    """`python -m pkg` runs pkg/__main__.py, which a spawned worker never runs again (multiprocessing skips
    `*.__main__`): its top-level call keeps the cores, as `python -m traceanalyzer report` does."""
    path = big_trace(tmp_path)
    package = tmp_path / "userpkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "__main__.py").write_text(PRELUDE + f"print(json.dumps(figures({str(path)!r})))\n")
    # The pure-Python reader: its ranges go to worker processes (the compiled scanner reads in threads).
    env = dict(os.environ, PYTHONWARNINGS="default", TRACEANALYZER_PURE_PYTHON="1")
    run = subprocess.run([sys.executable, "-m", "userpkg"], capture_output=True, text=True, cwd=tmp_path, env=env,
                         timeout=300)
    assert run.returncode == 0, run.stderr
    assert "RuntimeWarning" not in run.stderr
    assert json.loads(run.stdout)["ranges"] > 10


@pytest.mark.parametrize(("spec_name", "file_name", "source", "want_unguarded"), [
    (None, "script.py", "found = check()\n", True),
    (None, "script.py", "if __name__ == '__main__':\n    found = check()\n", False),
    ("traceanalyzer.__main__", "__main__.py", "found = check()\n", False),  # `python -m traceanalyzer`
    ("tool.cli", "cli.py", "found = check()\n", True),  # `python -m tool.cli`: a worker runs it again
    (None, "ipython.py", "found = check()\n", False)])
def test_which_main_modules_a_worker_runs_again(tmp_path, monkeypatch, spec_name, file_name, source, want_unguarded):
    """The decision mirrors multiprocessing's spawn: the main module's top-level code runs in a worker unless
    it is a package's `__main__` run with -m (or IPython's launcher)."""
    import importlib.machinery
    import types

    from traceanalyzer.processes import unguarded_main_call

    path = tmp_path / file_name
    path.write_text(source)
    main = types.ModuleType("__main__")
    main.__file__ = str(path)
    main.__spec__ = importlib.machinery.ModuleSpec(spec_name, None) if spec_name else None
    main.check = unguarded_main_call
    monkeypatch.setitem(sys.modules, "__main__", main)
    exec(compile(source, str(path), "exec"), vars(main))
    assert (vars(main).get("found") == (str(path), 1)) is want_unguarded
    if not want_unguarded:
        assert vars(main).get("found", None) is None


def test_a_job_of_ranks_in_an_unguarded_script(tmp_path):
    """Two rank files (the rank pool's path): the same figures in one process, no 'ended abruptly' error."""
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    for name in ("comm_rank0.json", "comm_rank1.json"):
        (ranks / name).write_bytes((SAMPLES / name).read_bytes())
    body = f"""\
        a = ta.analyze({str(ranks)!r}, ta.Options(jobs=2, cache=False))
        print(json.dumps([[d.gpu_busy_us for d in r.devices] for r in a.ranks]))
        """
    unguarded = run_script(tmp_path, body)
    assert unguarded.returncode == 0, unguarded.stderr
    assert "calls it at the script's top level" in unguarded.stderr and "Traceback" not in unguarded.stderr
    guarded = run_script(tmp_path, "if __name__ == '__main__':\n" + textwrap.indent(textwrap.dedent(body), "    "))
    assert guarded.returncode == 0, guarded.stderr
    assert "RuntimeWarning" not in guarded.stderr
    assert json.loads(unguarded.stdout) == json.loads(guarded.stdout)
    assert len(json.loads(guarded.stdout)) == 2


def test_a_call_from_a_function_the_guarded_block_calls_is_guarded(tmp_path):
    script = tmp_path / "s.py"
    script.write_text("import x\n\ndef main():\n    x.run()\n\n\nif '__main__' == __name__:\n    main()\n"
                      "    print('done')\nelse:\n    main()\n")
    spans = _guarded_lines(str(script))
    assert spans == ((8, 9),)  # the else branch (run by a worker) is not guarded


@pytest.mark.parametrize(("test", "want"), [
    ("__name__ == '__main__'", True), ("'__main__' == __name__", True), ("__name__ != '__main__'", False),
    ("__name__ == 'main'", False), ("name == '__main__'", False), ("__name__ == '__main__' == x", False)])
def test_which_tests_guard(test, want):
    import ast

    assert _is_main_test(ast.parse(f"if {test}:\n    pass\n").body[0].test) is want
