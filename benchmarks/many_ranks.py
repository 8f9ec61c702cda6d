"""Many ranks and re-runs: `traceanalyzer report` on a 16-rank job with --jobs 1 and --jobs 2, the
same job with an nvidia-smi dmon log (aligned where the ranks meet: peak RSS should stay that of a
few ranks, not the job's), a re-run served by the cache of decoded traces against its first run,
and one big trace's read against a bare `orjson.loads` of the same file, measured in one run.

    python benchmarks/many_ranks.py            # 16 ranks of ~100 MB, one 1 GiB trace
    python benchmarks/many_ranks.py --quick    # 16 ranks of ~10 MB, one 100 MiB trace
    python benchmarks/many_ranks.py --repeat 3 --huge-mb 4096   # as quoted in the README

Rank files are replicas of the corpus' largest Kineto trace (see bench_large.build_replica), one
copy per rank, analysed as one job (--force-job: the copies carry the same rank number). Every
command runs in its own subprocess; wall time and peak RSS (the largest process of the run) are
reported, with ratios to the baseline of the same run (this machine is shared and noisy). What the
script writes goes into a temporary folder that is removed at the end, the cache included.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_large import DEFAULT_CORPUS, MB, ORJSON_LOAD, ROOT, build_replica, largest_kineto_trace, measure  # noqa: E402

Row = tuple[str, str, float, int, float, float]


def best(cmd: list[str], env: dict[str, str] | None, repeat: int,
         before: Callable[[], None] | None = None) -> tuple[float, int, int]:
    """The fastest of `repeat` runs (this machine is shared: the minimum is the least disturbed), the
    largest peak RSS, and the worst exit status; `before` runs ahead of each (e.g. empties the cache)."""
    runs = []
    for _ in range(repeat):
        if before:
            before()
        runs.append(measure(cmd, env=env))
    return min(r[0] for r in runs), max(r[1] for r in runs), max(r[2] for r in runs)


def report(paths: list[Path], out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "traceanalyzer", "report", *map(str, paths), "--force-job", "--format", "json",
            "-o", str(out), "--force", "-q", *extra]


def dmon_log(samples: int, gpus: int = 1) -> str:
    """An `nvidia-smi dmon` log without times (no -o T): its samples are placed by the offset search,
    which is what costs the most of aligning a log. SM utilisation in a slow square wave."""
    lines = ["# gpu    pwr  gtemp  mtemp     sm    mem    enc    dec   mclk   pclk",
             "# Idx      W      C      C      %      %      %      %    MHz    MHz"]
    for i in range(samples):
        sm = 90 if (i // 7) % 2 else 5
        lines += [f"    {g}    250     51      -     {sm:>2}     40      0      0   1593   1410" for g in range(gpus)]
    return "\n".join(lines) + "\n"


def _of(n: int) -> str:
    return f", median of {n}" if n > 1 else ""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--source", type=Path, help="trace to replicate (default: the corpus' largest Kineto trace)")
    ap.add_argument("--ranks", type=int, default=16)
    ap.add_argument("--rank-mb", type=int, default=100, help="size of each rank file, MiB")
    ap.add_argument("--big-mb", type=int, default=1024, help="size of the one big trace, MiB (0: skip)")
    ap.add_argument("--huge-mb", type=int, default=0, help="also one trace of this many MiB, report only (e.g. 4096)")
    ap.add_argument("--quick", action="store_true", help="10 MiB ranks and a 100 MiB big trace")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each job command; the fastest is shown")
    ap.add_argument("--workdir", type=Path, default=None, help="where to write (default: a temp dir in /tmp)")
    args = ap.parse_args()
    if args.quick:
        args.rank_mb, args.big_mb = 10, 100

    source = args.source or largest_kineto_trace(args.corpus)
    base = args.workdir or Path(tempfile.gettempdir())
    need = (args.ranks * args.rank_mb * 2 + max(args.big_mb, args.huge_mb)) * MB  # rank files, their cache entries, the big trace
    free = shutil.disk_usage(base).free
    if free < need + 2 * 1024**3:
        sys.exit(f"not enough free disk in {base}: {free / 1e9:.1f} GB free, about {need / 1e9:.1f} GB needed")
    work = Path(tempfile.mkdtemp(prefix="ta-ranks-", dir=base))
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               TRACEANALYZER_CACHE_DIR=str(work / "cache"), TRACEANALYZER_CACHE_MAX_SIZE="64GiB")
    rows: list[Row] = []
    print(f"source: {source} ({source.stat().st_size / 1e6:.1f} MB on disk)", file=sys.stderr)
    try:
        first = work / "rank00.json"
        copies, nbytes = build_replica(source, first, args.rank_mb * MB)
        ranks = [first]
        for r in range(1, args.ranks):
            ranks.append(work / f"rank{r:02d}.json")
            shutil.copyfile(first, ranks[-1])
        total = sum(p.stat().st_size for p in ranks)
        job = f"{args.ranks} ranks x {nbytes / 1e6:.0f} MB"
        print(f"built {job} ({copies} copies of the source each)", file=sys.stderr)
        out = work / "report.json"

        t, rss, _ = measure([sys.executable, "-c", ORJSON_LOAD, str(first)])
        one_rank = (t, rss)
        rows.append((f"1 rank, {nbytes / 1e6:.0f} MB", "orjson.loads (bare), baseline", t, rss, 1.0, rss / nbytes))
        n = args.repeat
        cache = work / "cache"

        def empty_cache() -> None:
            shutil.rmtree(cache, ignore_errors=True)

        # --jobs 1 and 2 alternate, so that whatever else loads the machine weighs on both alike.
        runs1, runs2 = [], []
        for _ in range(n):
            runs1.append(measure(report(ranks, out, "--jobs", "1", "--no-cache"), env=env))
            runs2.append(measure(report(ranks, out, "--jobs", "2", "--no-cache"), env=env))
        t1, rss1, rc = min(r[0] for r in runs1), max(r[1] for r in runs1), max(r[2] for r in runs1)
        rows.append((job, "report --jobs 1 --no-cache" + (" (FAILED)" if rc else ""), t1, rss1,
                     t1 / one_rank[0], rss1 / nbytes))
        t2, rss2, rc = min(r[0] for r in runs2), max(r[1] for r in runs2), max(r[2] for r in runs2)
        rows.append((job, "report --jobs 2 --no-cache" + (" (FAILED)" if rc else ""), t2, rss2,
                     t2 / one_rank[0], rss2 / nbytes))
        dmon = work / "gpu.dmon.log"
        dmon.write_text(dmon_log(samples=600))
        td, rssd, rc = best(report(ranks, out, "--jobs", "2", "--no-cache", "--dmon", str(dmon)), env, n)
        rows.append((job + " + dmon log", "report --jobs 2 --no-cache --dmon" + (" (FAILED)" if rc else ""), td,
                     rssd, td / one_rank[0], rssd / nbytes))
        tc1, rssc1, rc = best(report(ranks, out, "--jobs", "2"), env, n, before=empty_cache)
        rows.append((job, "report --jobs 2, first run (fills the cache)" + (" (FAILED)" if rc else ""), tc1,
                     rssc1, tc1 / one_rank[0], rssc1 / nbytes))
        tc2, rssc2, rc = best(report(ranks, out, "--jobs", "2"), env, n)
        rows.append((job, "report --jobs 2, re-run (from the cache)" + (" (FAILED)" if rc else ""), tc2,
                     rssc2, tc2 / one_rank[0], rssc2 / nbytes))
        cache_bytes = sum(p.stat().st_size for p in (work / "cache").glob("*.npz"))
        summary = [f"--jobs 2 / --jobs 1: {t2 / t1:.2f}x the time",
                   f"with a dmon log / without (--jobs 2): {td / t2:.2f}x the time, {rssd / rss2:.2f}x the peak RSS",
                   f"cached re-run / first run: {tc2 / tc1:.2f}x the time",
                   f"cache: {cache_bytes / 1e6:.0f} MB for {total / 1e6:.0f} MB of traces"]
        for p in ranks[1:]:
            p.unlink()
        shutil.rmtree(work / "cache", ignore_errors=True)

        if args.big_mb:
            big = work / "big.json"
            copies, bbytes = build_replica(source, big, args.big_mb * MB)
            label = f"1 trace, {bbytes / 1e6:.0f} MB"
            # orjson, --jobs 1 and --jobs 2 in turn, `--repeat` times: each report is compared with the
            # baseline measured just before it (the machine's speed drifts over minutes), the median
            # of those ratios is quoted.
            turns: list[tuple[tuple[float, int, int], ...]] = []
            for _ in range(n):
                turns.append((measure([sys.executable, "-c", ORJSON_LOAD, str(big)]),
                              measure(report([big], out, "--no-cache", "--jobs", "1"), env=env),
                              measure(report([big], out, "--no-cache", "--jobs", "2"), env=env)))
            tb, rssb = statistics.median(t[0][0] for t in turns), max(t[0][1] for t in turns)
            rows.append((label, "orjson.loads (bare), baseline" + _of(n), tb, rssb, 1.0, rssb / bbytes))
            big_runs = {}
            for k, jobs in ((1, "1"), (2, "2")):  # --jobs 2: its ranges decoded by two processes
                t = statistics.median(turn[k][0] for turn in turns)
                rss, rc = max(turn[k][1] for turn in turns), max(turn[k][2] for turn in turns)
                ratio = statistics.median(turn[k][0] / turn[0][0] for turn in turns)
                big_runs[jobs] = t
                rows.append((label, f"report --jobs {jobs} --no-cache" + _of(n) + (" (FAILED)" if rc else ""), t, rss,
                             ratio, rss / bbytes))
                summary.append(f"one big trace, --jobs {jobs}: report / orjson.loads = {ratio:.2f}x the time"
                               + (f" (median of {n} ratios, each to the baseline just before it: "
                                  + ", ".join(f"{turn[k][0] / turn[0][0]:.2f}" for turn in turns) + ")" if n > 1 else "")
                               + f", peak RSS (all processes) {rss / bbytes:.2f}x the file")
            summary.append(f"one big trace: --jobs 2 / --jobs 1 = {big_runs['2'] / big_runs['1']:.2f}x the time")
            big.unlink()
        if args.huge_mb:  # no orjson baseline: it would need several times the machine's memory
            huge = work / "huge.json"
            copies, hbytes = build_replica(source, huge, args.huge_mb * MB)
            label = f"1 trace, {hbytes / 1e6:.0f} MB"
            t, rss, rc = measure(report([huge], out, "--no-cache", "--jobs", "2"), env=env)
            rows.append((label, "report --jobs 2 --no-cache" + (" (FAILED)" if rc else " (completed)"), t, rss,
                         math.nan, rss / hbytes))
            mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") if hasattr(os, "sysconf") else 0
            summary.append(f"huge trace: {'failed' if rc else 'completed'} in {t:.0f} s, peak RSS {rss / 1e9:.1f} GB "
                           f"({rss / hbytes:.2f}x the file) on a machine with {mem / 1e9:.0f} GB of memory")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print_table(rows, summary)


def print_table(rows: list[Row], summary: list[str]) -> None:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else math.nan
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs (load average {load:.1f} at the end); time "
          f"ratios are to the bare orjson.loads of one file in the same run")
    print()
    print("| input | run | wall s | peak RSS GB | time / baseline | peak RSS / one file |")
    print("|---|---|---:|---:|---:|---:|")
    for label, what, t, rss, rt, rf in rows:
        if math.isnan(t):
            print(f"| {label} | {what} | - | - | - | - |")
            continue
        ratio = "-" if math.isnan(rt) else f"{rt:.2f}x"
        print(f"| {label} | {what} | {t:.1f} | {rss / 1e9:.2f} | {ratio} | {rf:.2f}x |")
    print()
    for line in summary:
        print(f"- {line}")


if __name__ == "__main__":
    main()
