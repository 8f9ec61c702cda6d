"""A benchmark that guards: the big-input cases of issue 36 in one run, each as a ratio to a baseline
measured in the same run, next to the ratio recorded for the previous release (benchmarks/recorded.json),
so that a regression shows in the table and in the exit status.

    python benchmarks/guard.py               # 1 GiB JSON and its .gz, a 100 MiB .pftrace, 16 ranks x 100 MiB
    python benchmarks/guard.py --quick       # 100 MiB JSON and .gz, the 100 MiB .pftrace, 16 ranks x 10 MiB
    python benchmarks/guard.py --runs 3      # medians of 3 interleaved runs: steadier
    python benchmarks/guard.py --record      # after a release: this run's ratios become the recorded ones
    python benchmarks/guard.py --baseline /tmp/prev   # also the previous release's package, paired in this run

Cases (inputs are replicas of the corpus' largest Kineto trace, bench_large.build_replica; every report is
`traceanalyzer report --format json --no-cache` with the default --jobs, timed by bench_large.measure_cpu):
  json_<size>        the report's wall time / a bare `orjson.loads` of the same file; its peak RSS (all
                     processes) / the file size.
  gzip_<size>        the same file as .json.gz: the report's time / the plain file's report, and / `orjson.loads`
                     of the .gz; its peak RSS / the uncompressed size.
  pftrace_<size>     the file written as .pftrace: the report's wall time, CPU time and peak RSS / those of the
                     same trace's JSON report.
  many_ranks_<R>x<size>  R copies of one file reported as one job: the time per rank / `orjson.loads` of one
                     rank file; the peak RSS / one rank file.
  scanner_<size>     the Kineto reader alone (no analyses) on the plain replica, with the compiled scanner and
                     with the pure-Python reader (TRACEANALYZER_PURE_PYTHON=1, decoding in as many processes as
                     the report uses for one big file): the scanner's wall time, CPU time and peak RSS / the
                     pure-Python reader's; each reader's time / `orjson.loads` of the same file; and the whole
                     report, with the scanner / with the pure-Python reader (time, CPU, peak RSS).

A replica is never smaller than one copy of its source, so a small size may come out larger (the table's
baselines show the file sizes; the recorded file keeps them). The sizes are part of a case's name, so a --quick
run compares only with cases recorded by a --quick run (and says when nothing is recorded). Exit status 1 when
a ratio is worse (larger) than its recorded one by more than --tolerance (default 15%: the machine is shared,
and the wall times of a quiet run move by 10% or so), or when a report failed; a target of the issue not met,
or a ratio with nothing recorded, is said in the table but does not fail. Under load the ratios move far more
(a --quick run at load 4 on 2 cores: the .gz report 2.38x the plain one in one run, 1.22x as the median of 3),
so guard on a quiet machine, with --runs 3, and read the CPU columns of bench_large.py when in doubt. What the
script writes goes into a temporary folder that is removed at the end.

The steadiest guard is `--baseline DIR` (DIR holds the previous release's `traceanalyzer` folder, e.g. from
`git archive <tag> traceanalyzer | tar -x -C DIR`): every report is run again with that package, interleaved
with this one's, and each case gains a paired row (this report's time, CPU and peak memory over the previous
release's, same file, same minute), which fails beyond --tolerance. A bare `orjson.loads` of 1 GB allocates
about 8 GB and its time moved from 16.6 to 32.7 s between runs of one day on this machine (the page cache
held other big files), while the report's own time stayed within 6%: the ratios to orjson.loads say where
the tool stands, the paired rows whether it got slower.
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_large import (  # noqa: E402
    DEFAULT_CORPUS,
    MB,
    ORJSON_LOAD,
    ORJSON_LOAD_GZ,
    ROOT,
    build_replica,
    largest_kineto_trace,
    measure_cpu,
    median_run,
    report_command,
)
from many_ranks import report as job_report_command  # noqa: E402

RECORDED = Path(__file__).resolve().parent / "recorded.json"
FULL_SIZES = {"json_mb": 1024, "pftrace_mb": 100, "ranks": 16, "rank_mb": 100}
QUICK_SIZES = {"json_mb": 100, "pftrace_mb": 100, "ranks": 16, "rank_mb": 10}


@dataclass(frozen=True)
class Figure:
    """One ratio of this run: `value` (the tool's) over `baseline` (measured in the same run), both in `unit`."""
    case: str
    measure: str  # what is divided by what, e.g. "time / orjson.loads"; the key in the recorded file
    value: float
    baseline: float
    unit: str
    file_mb: float  # size of the case's input, MB (1e6 bytes)
    failed: bool = False
    paired: bool = False  # against the previous release's package in this run (--baseline): not recorded

    @property
    def ratio(self) -> float:
        return self.value / self.baseline if self.baseline else float("nan")


@dataclass(frozen=True)
class Row:
    """A figure next to its recorded ratio and target; `regressed`: worse than recorded beyond the tolerance."""
    figure: Figure
    recorded: float | None
    release: str | None
    target: float | None
    regressed: bool

    @property
    def change(self) -> float | None:
        """This run's ratio relative to the recorded one (+0.20: 20% larger, i.e. worse)."""
        return None if not self.recorded else self.figure.ratio / self.recorded - 1


def size_name(mb: int) -> str:
    """`1gb` for 1024 MiB, else `<n>mb`: the size as it appears in a case's name."""
    return f"{mb // 1024}gb" if mb % 1024 == 0 else f"{mb}mb"


def compare(figures: list[Figure], recorded: dict[str, Any], tolerance: float) -> list[Row]:
    """Each figure with the recorded ratio of its case and measure (if any) and its target (if any)."""
    rows = []
    for fig in figures:
        entry = recorded.get("cases", {}).get(fig.case, {})
        past = entry.get("ratios", {}).get(fig.measure, {}).get("ratio")
        target = recorded.get("targets", {}).get(fig.case, {}).get(fig.measure)
        regressed = (past is not None and fig.ratio > past * (1 + tolerance)) or (
            fig.paired and fig.ratio > 1 + tolerance)
        rows.append(Row(fig, past, entry.get("release") if past is not None else None, target, regressed))
    return rows


def _amount(x: float, unit: str) -> str:
    return f"{x:.2f} {unit}" if unit == "GB" else f"{x:.1f} {unit}"


def table(rows: list[Row]) -> str:
    """The Markdown table of this run's ratios against the recorded ones and the targets."""
    lines = ["| case | measure | this run | same-run baseline | ratio | recorded ratio (release) | "
             "change vs recorded | target | met? |",
             "|---|---|---:|---:|---:|---|---:|---:|---|"]
    for row in rows:
        fig = row.figure
        ratio = "FAILED" if fig.failed else f"{fig.ratio:.2f}x"
        recorded = ("paired" if fig.paired else "none recorded") if row.recorded is None else \
            f"{row.recorded:.2f}x ({row.release})"
        change = (f"{fig.ratio - 1 + 0.0:+.0%}".replace("-0%", "+0%") if fig.paired else "-") \
            if row.change is None or fig.failed else f"{row.change + 0.0:+.0%}".replace("-0%", "+0%")
        change += " WORSE" if row.regressed and not fig.failed else ""
        target = "-" if row.target is None else f"<= {row.target:.2f}x"
        met = "-" if row.target is None or fig.failed else ("yes" if fig.ratio <= row.target else "no")
        lines.append(f"| {fig.case} | {fig.measure} | {_amount(fig.value, fig.unit)} | "
                     f"{_amount(fig.baseline, fig.unit)} | {ratio} | {recorded} | {change} | {target} | {met} |")
    return "\n".join(lines)


def verdict(rows: list[Row], recorded: dict[str, Any], tolerance: float, cores: int) -> tuple[int, list[str]]:
    """Exit status (1: a report failed or a ratio regressed beyond the tolerance) and the lines that say why,
    which cases have nothing recorded, and where the recorded figures come from a machine of other cores."""
    lines = []
    failed = sorted({r.figure.case for r in rows if r.figure.failed})
    for case in failed:
        lines.append(f"FAILED: a report of {case} exited with an error (see stderr)")
    for r in rows:
        if r.regressed and not r.figure.failed and r.figure.paired:
            lines.append(f"REGRESSION: {r.figure.case} {r.figure.measure} = {r.figure.ratio:.2f}x "
                         f"(tolerance {tolerance:.0%})")
        elif r.regressed and not r.figure.failed:
            lines.append(f"REGRESSION: {r.figure.case} {r.figure.measure} = {r.figure.ratio:.2f}x against "
                         f"{r.recorded:.2f}x recorded ({r.change:+.0%}; tolerance {tolerance:.0%})")
    missing: dict[str, list[str]] = {}
    for r in rows:
        if r.recorded is None and not r.figure.paired:
            missing.setdefault(r.figure.case, []).append(r.figure.measure)
    for case, measures in missing.items():
        lines.append(f"nothing recorded for {case} ({', '.join(measures)}): not compared"
                     + (" (a --quick run compares only with cases recorded by a --quick run)"
                        if case not in recorded.get("cases", {}) else ""))
    for case in dict.fromkeys(r.figure.case for r in rows):
        entry = recorded.get("cases", {}).get(case)
        if entry and entry.get("cores") not in (None, cores):
            lines.append(f"{case} was recorded on {entry['cores']} cores, this machine has {cores}: its ratios "
                         "may differ for that alone")
    status = 1 if failed or any(r.regressed and not r.figure.failed for r in rows) else 0
    lines.append("guard: " + ("FAIL" if status else "pass") + f" (tolerance {tolerance:.0%})")
    return status, lines


def record(recorded: dict[str, Any], figures: list[Figure], release: str, commit: str, date: str, cores: int,
           machine: str) -> dict[str, Any]:
    """`recorded` with the cases of `figures` replaced by this run's (other cases and the targets kept)."""
    cases = dict(recorded.get("cases", {}))
    for case in dict.fromkeys(f.case for f in figures if not f.paired):
        mine = [f for f in figures if f.case == case and not f.paired]
        cases[case] = {"release": release, "commit": commit, "date": date, "cores": cores, "machine": machine,
                       "file_mb": round(mine[0].file_mb),
                       "ratios": {f.measure: {"ratio": round(f.ratio, 3), "value": round(f.value, 3),
                                              "baseline": round(f.baseline, 3), "unit": f.unit} for f in mine}}
    return {**recorded, "cases": dict(sorted(cases.items()))}


def dump_recorded(recorded: dict[str, Any]) -> str:
    """The recorded figures as JSON text, each innermost object (one ratio, one case's targets) on one line."""
    text = json.dumps(recorded, indent=2)
    return re.sub(r"\{\n([^{}]*?)\n\s*\}", lambda m: "{" + " ".join(p.strip() for p in m.group(1).splitlines()) + "}",
                  text) + "\n"


def paired(case: str, mb: float, this: list[tuple[float, int, int, float]],
           previous: list[tuple[float, int, int, float]]) -> list[Figure]:
    """A case's paired rows: this report's time, CPU and peak RSS over the previous release's (--baseline)."""
    if not previous:
        return []
    t, cpu, rss, failed = _times(this)
    pt, pcpu, prss, pfailed = _times(previous)
    failed = failed or pfailed
    return [Figure(case, "time / previous release", t, pt, "s", mb, failed, paired=True),
            Figure(case, "CPU / previous release", cpu, pcpu, "CPU s", mb, failed, paired=True),
            Figure(case, "peak RSS / previous release", rss, prss, "GB", mb, failed, paired=True)]


def _times(runs: list[tuple[float, int, int, float]]) -> tuple[float, float, float, bool]:
    """(wall s, CPU s, peak RSS GB, failed) of repeated runs: medians, failed if any run failed."""
    wall, rss, rc, cpu = median_run(runs)
    return wall, cpu, rss / 1e9, rc != 0


def json_and_gzip(source: Path, mb: int, work: Path, env: dict[str, str], runs: int,
                  base_env: dict[str, str] | None = None) -> list[Figure]:
    """json_<size> and gzip_<size>: orjson.loads and the report of the plain file and of its .gz, interleaved."""
    trace = work / "replica.json"
    _, nbytes = build_replica(source, trace, mb * MB)
    gz = trace.with_suffix(".json.gz")
    with open(trace, "rb") as src, gzip.open(gz, "wb", compresslevel=6) as dst:
        shutil.copyfileobj(src, dst, 8 * MB)
    out = work / "report.json"
    turns: dict[str, list[tuple[float, int, int, float]]] = {"orjson": [], "report": [], "orjson_gz": [],
                                                             "report_gz": [], "prev": [], "prev_gz": []}
    for _ in range(max(1, runs)):  # interleaved: a change of load weighs on every tool alike
        turns["orjson"].append(measure_cpu([sys.executable, "-c", ORJSON_LOAD, str(trace)]))
        if base_env is not None:
            turns["prev"].append(measure_cpu(report_command(trace, out), env=base_env, cwd=work))
        turns["report"].append(measure_cpu(report_command(trace, out), env=env, cwd=work))
        turns["orjson_gz"].append(measure_cpu([sys.executable, "-c", ORJSON_LOAD_GZ, str(gz)]))
        if base_env is not None:
            turns["prev_gz"].append(measure_cpu(report_command(gz, out), env=base_env, cwd=work))
        turns["report_gz"].append(measure_cpu(report_command(gz, out), env=env, cwd=work))
    trace.unlink()
    gz.unlink()
    orjson_t, _, _, _ = _times(turns["orjson"])
    report_t, _, report_rss, report_failed = _times(turns["report"])
    orjson_gz_t, _, _, _ = _times(turns["orjson_gz"])
    gz_t, _, gz_rss, gz_failed = _times(turns["report_gz"])
    size = nbytes / 1e6
    plain, packed = f"json_{size_name(mb)}", f"gzip_{size_name(mb)}"
    return [Figure(plain, "time / orjson.loads", report_t, orjson_t, "s", size, report_failed),
            Figure(plain, "peak RSS / file size", report_rss, nbytes / 1e9, "GB", size, report_failed),
            Figure(packed, "time / plain report", gz_t, report_t, "s", size, gz_failed or report_failed),
            Figure(packed, "time / orjson.loads of the .gz", gz_t, orjson_gz_t, "s", size, gz_failed),
            Figure(packed, "peak RSS / uncompressed size", gz_rss, nbytes / 1e9, "GB", size, gz_failed),
            *paired(plain, size, turns["report"], turns["prev"]),
            *paired(packed, size, turns["report_gz"], turns["prev_gz"])]


def pftrace(source: Path, mb: int, work: Path, env: dict[str, str], runs: int,
            base_env: dict[str, str] | None = None) -> list[Figure]:
    """pftrace_<size>: the report of the trace written as .pftrace against that of its JSON, interleaved."""
    trace = work / "replica.json"
    _, nbytes = build_replica(source, trace, mb * MB)
    pft = trace.with_suffix(".pftrace")
    subprocess.run([sys.executable, "-m", "traceanalyzer.formats.pftrace_write", str(trace), str(pft)],
                   env=env, check=True)
    out = work / "report.json"
    json_runs, pft_runs, prev_runs = [], [], []
    for _ in range(max(1, runs)):
        json_runs.append(measure_cpu(report_command(trace, out), env=env, cwd=work))
        if base_env is not None:
            prev_runs.append(measure_cpu(report_command(pft, out), env=base_env, cwd=work))
        pft_runs.append(measure_cpu(report_command(pft, out), env=env, cwd=work))
    trace.unlink()
    pft.unlink()
    json_t, json_cpu, json_rss, json_failed = _times(json_runs)
    pft_t, pft_cpu, pft_rss, pft_failed = _times(pft_runs)
    case, size, failed = f"pftrace_{size_name(mb)}", nbytes / 1e6, json_failed or pft_failed
    return [Figure(case, "time / JSON report", pft_t, json_t, "s", size, failed),
            Figure(case, "CPU / JSON report", pft_cpu, json_cpu, "CPU s", size, failed),
            Figure(case, "peak RSS / JSON report", pft_rss, json_rss, "GB", size, failed),
            *paired(case, size, pft_runs, prev_runs)]


def many_ranks(source: Path, ranks: int, mb: int, work: Path, env: dict[str, str], runs: int,
               base_env: dict[str, str] | None = None) -> list[Figure]:
    """many_ranks_<R>x<size>: the job's report against orjson.loads of one rank file, interleaved."""
    first = work / "rank00.json"
    _, nbytes = build_replica(source, first, mb * MB)
    files = [first]
    for r in range(1, ranks):
        files.append(work / f"rank{r:02d}.json")
        shutil.copyfile(first, files[-1])
    out = work / "report.json"
    orjson_runs, job_runs, prev_runs = [], [], []
    for _ in range(max(1, runs)):
        orjson_runs.append(measure_cpu([sys.executable, "-c", ORJSON_LOAD, str(first)]))
        if base_env is not None:
            prev_runs.append(measure_cpu(job_report_command(files, out, "--no-cache"), env=base_env, cwd=work))
        job_runs.append(measure_cpu(job_report_command(files, out, "--no-cache"), env=env, cwd=work))
    for p in files:
        p.unlink()
    orjson_t, _, _, _ = _times(orjson_runs)
    job_t, _, job_rss, failed = _times(job_runs)
    case = f"many_ranks_{ranks}x{size_name(mb)}"
    return [Figure(case, "time per rank / orjson.loads of a rank", job_t / ranks, orjson_t, "s", nbytes / 1e6,
                   failed),
            Figure(case, "peak RSS / a rank file", job_rss, nbytes / 1e9, "GB", nbytes / 1e6, failed),
            *paired(case, nbytes / 1e6, job_runs, prev_runs)]


READ_ONLY = ("import os, sys\nfrom pathlib import Path\nfrom traceanalyzer.formats import kineto\n"
             "from traceanalyzer.formats._base import ReadOptions\n"
             "kineto.read_path(Path(sys.argv[1]), ReadOptions(decode_workers=os.cpu_count() or 1))\n")


def scanner_case(source: Path, mb: int, work: Path, env: dict[str, str], runs: int,
                 base_env: dict[str, str] | None = None) -> list[Figure]:
    """scanner_<size>: the reader with the compiled scanner against the pure-Python reader and orjson.loads."""
    trace = work / "replica.json"
    _, nbytes = build_replica(source, trace, mb * MB)
    pure_env = dict(env, TRACEANALYZER_PURE_PYTHON="1")
    turns: dict[str, list[tuple[float, int, int, float]]] = {
        "orjson": [], "pure": [], "scan": [], "prev": [], "report_pure": [], "report_scan": []}
    read = [sys.executable, "-c", READ_ONLY, str(trace)]
    out = work / "report.json"
    for _ in range(max(1, runs)):  # interleaved
        turns["orjson"].append(measure_cpu([sys.executable, "-c", ORJSON_LOAD, str(trace)]))
        turns["pure"].append(measure_cpu(read, env=pure_env, cwd=work))
        if base_env is not None:
            turns["prev"].append(measure_cpu(read, env=base_env, cwd=work))
        turns["scan"].append(measure_cpu(read, env=env, cwd=work))
        turns["report_pure"].append(measure_cpu(report_command(trace, out), env=pure_env, cwd=work))
        turns["report_scan"].append(measure_cpu(report_command(trace, out), env=env, cwd=work))
    trace.unlink()
    rp_t, rp_cpu, rp_rss, rp_failed = _times(turns["report_pure"])
    rs_t, rs_cpu, rs_rss, rs_failed = _times(turns["report_scan"])
    orjson_t, _, _, _ = _times(turns["orjson"])
    pure_t, pure_cpu, pure_rss, pure_failed = _times(turns["pure"])
    scan_t, scan_cpu, scan_rss, scan_failed = _times(turns["scan"])
    case, size, failed = f"scanner_{size_name(mb)}", nbytes / 1e6, pure_failed or scan_failed
    return [Figure(case, "scanner time / Python reader", scan_t, pure_t, "s", size, failed),
            Figure(case, "scanner CPU / Python reader", scan_cpu, pure_cpu, "CPU s", size, failed),
            Figure(case, "scanner peak RSS / Python reader", scan_rss, pure_rss, "GB", size, failed),
            Figure(case, "scanner time / orjson.loads", scan_t, orjson_t, "s", size, scan_failed),
            Figure(case, "Python reader time / orjson.loads", pure_t, orjson_t, "s", size, pure_failed),
            Figure(case, "report time / report by the Python reader", rs_t, rp_t, "s", size, rs_failed or rp_failed),
            Figure(case, "report CPU / report by the Python reader", rs_cpu, rp_cpu, "CPU s", size,
                   rs_failed or rp_failed),
            Figure(case, "report peak RSS / report by the Python reader", rs_rss, rp_rss, "GB", size,
                   rs_failed or rp_failed),
            Figure(case, "report time / orjson.loads", rs_t, orjson_t, "s", size, rs_failed),
            *paired(case, size, turns["scan"], turns["prev"])]


def release_name() -> tuple[str, str]:
    """(release, commit) of the package measured: its version, the branch, and the last commit that changed
    `traceanalyzer/` (what the figures depend on), marked `+changes` when the package has uncommitted ones."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()

    version = re.search(r'__version__ = "([^"]+)"', (ROOT / "traceanalyzer" / "_version.py").read_text())
    sha = (git("log", "-1", "--format=%h", "--", "traceanalyzer") or "unknown") + (
        "+changes" if git("status", "--porcelain", "--", "traceanalyzer") else "")
    return f"{version.group(1) if version else '?'} ({git('rev-parse', '--abbrev-ref', 'HEAD') or '?'} {sha})", sha


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--source", type=Path, help="trace to replicate (default: the corpus' largest Kineto trace)")
    ap.add_argument("--quick", action="store_true", help="small sizes (100 MiB, ranks of 10 MiB): a few minutes")
    ap.add_argument("--runs", type=int, default=1, help="runs of each measurement (medians are compared)")
    ap.add_argument("--cases", default="json,pftrace,ranks,scanner",
                    help="which cases to measure, comma separated (default: all)")
    ap.add_argument("--json-mb", type=int, default=None, help="size of the json, gzip and scanner cases' replica")
    ap.add_argument("--tolerance", type=float, default=0.15,
                    help="how much worse than recorded a ratio may be before the exit status is 1 (0.15: 15%%)")
    ap.add_argument("--recorded", type=Path, default=RECORDED, help="the recorded figures (JSON)")
    ap.add_argument("--record", action="store_true", help="write this run's ratios into --recorded for its cases")
    ap.add_argument("--release", default=None, help="release name to record (default: version, branch, commit)")
    ap.add_argument("--workdir", type=Path, default=None, help="where to write (default: a temp dir in /tmp)")
    ap.add_argument("--baseline", type=Path, default=None,
                    help="folder holding the previous release's traceanalyzer package: every report paired with it")
    args = ap.parse_args()
    if args.baseline is not None and not (args.baseline / "traceanalyzer" / "__init__.py").is_file():
        sys.exit(f"--baseline {args.baseline}: no traceanalyzer package folder in it")

    sizes = dict(QUICK_SIZES if args.quick else FULL_SIZES)
    if args.json_mb:
        sizes["json_mb"] = args.json_mb
    cases = set(args.cases.split(","))
    source = args.source or largest_kineto_trace(args.corpus)
    base = args.workdir or Path(tempfile.gettempdir())
    try:
        base.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        sys.exit(f"--workdir {base}: cannot make it ({exc.strerror or exc})")
    need = max(int(sizes["json_mb"] * 1.5), sizes["ranks"] * sizes["rank_mb"]) * MB
    free = shutil.disk_usage(base).free
    if free < need + 2 * 1024**3:
        sys.exit(f"not enough free disk in {base}: {free / 1e9:.1f} GB free, about {need / 1e9:.1f} GB needed")
    recorded = json.loads(args.recorded.read_text()) if args.recorded.is_file() else {}
    cores = os.cpu_count() or 0
    load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    work = Path(tempfile.mkdtemp(prefix="ta-guard-", dir=base))
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               TRACEANALYZER_CACHE_DIR=str(work / "cache"))
    base_env = None if args.baseline is None else dict(
        env, PYTHONPATH=str(args.baseline.resolve()), TRACEANALYZER_CACHE_DIR=str(work / "cache-baseline"))
    print(f"source: {source} ({source.stat().st_size / 1e6:.1f} MB on disk)", file=sys.stderr)
    figures: list[Figure] = []
    try:
        for name, step in (("json", lambda: json_and_gzip(source, sizes["json_mb"], work, env, args.runs,
                                                           base_env)),
                           ("pftrace", lambda: pftrace(source, sizes["pftrace_mb"], work, env, args.runs, base_env)),
                           ("ranks", lambda: many_ranks(source, sizes["ranks"], sizes["rank_mb"], work, env,
                                                        args.runs, base_env)),
                           ("scanner", lambda: scanner_case(source, sizes["json_mb"], work, env, args.runs,
                                                            base_env))):
            if name not in cases:
                continue
            print(f"measuring {name}...", file=sys.stderr)
            figures += step()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rows = compare(figures, recorded, args.tolerance)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    machine = (f"{cores} cores, load average {load_before:.1f} at the start and {load:.1f} at the end, {args.runs} "
               "run(s), default --jobs")
    print(f"python {sys.version.split()[0]}, {machine}; ratios are to the baseline measured in this run, "
          f"recorded ones from {args.recorded.name}")
    print()
    print(table(rows))
    print()
    status, lines = verdict(rows, recorded, args.tolerance, cores)
    if max(load_before, load) >= cores / 2:
        lines.insert(0, f"the machine was busy (load average {max(load_before, load):.1f} on {cores} cores): other "
                        "work weighs on the tools unequally, and the wall-time ratios of this run move by 20% and more")
    for line in lines:
        print(f"- {line}")
    if args.record:
        if any(f.failed for f in figures):
            sys.exit("not recorded: a report failed")
        release, commit = release_name()
        updated = record(recorded, figures, args.release or release, commit, datetime.date.today().isoformat(),
                         cores, machine)
        args.recorded.write_text(dump_recorded(updated))
        print(f"- recorded this run's figures in {args.recorded}")
    sys.exit(status)


if __name__ == "__main__":
    main()
