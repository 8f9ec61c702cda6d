"""How long the command line takes to answer, as ratios to a bare `import numpy` measured in the same run
(issue 45: "--version and --help within 0.25 s of CPU above a bare import numpy; a report of a small trace
within 1.0 s above it").

    python benchmarks/cli_startup.py              # 5 interleaved runs of each command, medians
    python benchmarks/cli_startup.py --runs 9     # steadier
    python benchmarks/cli_startup.py --python /tmp/prev/.venv/bin/python --pythonpath /tmp/prev
                                                  # another checkout (e.g. the previous release), same table

Each command runs in a fresh interpreter (`python -m traceanalyzer ...`, the report with `--no-cache` into a
temporary folder, which is also the working directory, so `--pythonpath` decides which checkout runs). Wall time is the parent's clock around the child; CPU time is the child's user + system
time (`resource.getrusage(RUSAGE_CHILDREN)`, so worker processes count too). The runs are interleaved (each
round runs every command once), so a burst of load on a shared machine falls on all of them alike. The table
gives each command's median wall and CPU time, its ratio to the baseline's, and how much CPU it takes above
the baseline. Nothing is asserted: a test of imports (tests/test_cli_imports.py) guards what `--version` and
`--help` load; this script measures what that costs.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_traces" / "input_bound.json"


def cases(out: Path) -> list[tuple[str, list[str]]]:
    """(label, arguments after `python`) for the baseline and each command."""
    return [
        ("python -c 'import numpy' (baseline)", ["-c", "import numpy"]),
        ("traceanalyzer --version", ["-m", "traceanalyzer", "--version"]),
        ("traceanalyzer --help", ["-m", "traceanalyzer", "--help"]),
        ("traceanalyzer report --help", ["-m", "traceanalyzer", "report", "--help"]),
        ("traceanalyzer report input_bound.json", ["-m", "traceanalyzer", "report", str(SAMPLE), "--no-cache",
                                                  "--quiet", "--force", "-o", str(out / "r.json")]),
    ]


def run_once(python: str, args: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """Wall and CPU seconds of one child process (its children included)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([python, *args], env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed ({done.returncode}): {done.stderr.decode(errors='replace')}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def measure(python: str, pythonpath: str | None, runs: int) -> list[tuple[str, float, float]]:
    """(label, median wall, median CPU) per case, the baseline first; one warm-up round is not counted."""
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    with tempfile.TemporaryDirectory(prefix="ta-cli-startup-") as tmp:
        todo = cases(Path(tmp))
        times: dict[str, list[tuple[float, float]]] = {label: [] for label, _ in todo}
        for round_ in range(runs + 1):
            for label, args in todo:
                wall, cpu = run_once(python, args, env, Path(tmp))
                if round_:  # the first round warms the file cache
                    times[label].append((wall, cpu))
    return [(label, statistics.median(w for w, _ in t), statistics.median(c for _, c in t)) for label, t in times.items()]


def table(rows: list[tuple[str, float, float]]) -> str:
    _, base_wall, base_cpu = rows[0]
    out = ["| command | wall | CPU | wall / baseline | CPU / baseline | CPU above baseline |",
           "|---|---:|---:|---:|---:|---:|"]
    for label, wall, cpu in rows:
        out.append(f"| {label} | {wall:.3f} s | {cpu:.3f} s | {wall / base_wall:.2f}x | {cpu / base_cpu:.2f}x | "
                   f"{cpu - base_cpu:+.3f} s |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=5, help="measured rounds (medians are shown); default 5")
    p.add_argument("--python", default=sys.executable, help="the interpreter to run (default: this one)")
    p.add_argument("--pythonpath", default=str(ROOT), help="PYTHONPATH of the children (default: this checkout)")
    args = p.parse_args(argv)
    rows = measure(args.python, args.pythonpath, max(args.runs, 1))
    print(f"{args.runs} runs each, medians; {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; "
          f"PYTHONPATH={args.pythonpath}")
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
