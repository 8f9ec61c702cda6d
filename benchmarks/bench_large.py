"""Speed and memory of `traceanalyzer report` on GB-size Kineto traces, next to a bare
`orjson.loads` of the same file (and HTA's load on the smaller file), measured in one run.

    python benchmarks/bench_large.py                     # 250 MB and 1 GB replicas
    python benchmarks/bench_large.py --sizes 250 --gzip  # also a .json.gz copy of each
    TRACEANALYZER_HTA_PYTHON=/work/htavenv/bin/python python benchmarks/bench_large.py
    python benchmarks/bench_large.py --sizes 250 --runs 3 --baseline /tmp/old  # before / after
    python benchmarks/bench_large.py --sizes 100 --pftrace --baseline /tmp/old  # also a .pftrace copy

`--baseline DIR` times a second copy of the package too (DIR holds its `traceanalyzer` folder, e.g.
`git archive <commit> traceanalyzer | tar -x -C DIR`), in the same run, each of its runs next to one
of this checkout's, and prints this checkout's time as a ratio of it: a regression or a speed-up
shows paired, on the same machine and load. `--runs N` repeats every measurement and keeps medians.

The replicas are built from the largest Kineto trace of the shared corpus: its events array is
repeated, every copy's timestamps shifted past the previous copy's end (and its ProfilerStep
numbers renumbered), byte for byte otherwise, so the file keeps the profiler's own formatting.
`--pftrace` also writes each replica as a Perfetto trace (`pftrace_write`, as PyTorch's Perfetto
backend encodes it) and reports it next to the JSON: its time as a ratio of the JSON report's.
Every tool runs in its own subprocess; wall time, CPU time (user + system, the child and what it
waited for) and peak RSS are reported, and ratios to the orjson baseline of the same run, since this
machine is shared and noisy: where other work competes for the cores, the CPU column is the steadier. What the script writes goes into a temporary folder that is removed at the end.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import msgspec

ROOT = Path(__file__).resolve().parent.parent
def _default_corpus() -> Path:
    """TRACEANALYZER_CORPUS, else a `shared/corpus` beside the checkout (or beside its parent,
    for a git worktree one level further down)."""
    if os.environ.get("TRACEANALYZER_CORPUS"):
        return Path(os.environ["TRACEANALYZER_CORPUS"])
    for base in (ROOT.parent, ROOT.parent.parent):
        if (base / "shared" / "corpus").is_dir():
            return base / "shared" / "corpus"
    return ROOT.parent / "shared" / "corpus"


DEFAULT_CORPUS = _default_corpus()
DEFAULT_HTA_PYTHON = os.environ.get("TRACEANALYZER_HTA_PYTHON", "/work/htavenv/bin/python")
MB = 1024 * 1024

_TS = re.compile(rb'"ts": ?(-?\d+)(\.\d+)?')
_STEP = re.compile(rb'"ProfilerStep#(\d+)"')
_ENVELOPE = msgspec.json.Decoder(dict[str, msgspec.Raw])


def largest_kineto_trace(corpus: Path) -> Path:
    """The biggest Kineto trace the corpus manifest lists (by its uncompressed-file bytes column)."""
    manifest = corpus / "MANIFEST.tsv"
    best: tuple[int, Path] | None = None
    if manifest.is_file():
        with open(manifest, newline="") as fh:
            for row in csv.DictReader(fh, delimiter="\t"):
                if row.get("format") != "kineto-json":
                    continue
                path = corpus / row["file"]
                if path.is_file() and (best is None or path.stat().st_size > best[0]):
                    best = (path.stat().st_size, path)
    if best is None:  # no manifest: the biggest .json.gz
        files = [p for p in corpus.rglob("*.json.gz") if p.is_file()]
        if not files:
            sys.exit(f"no Kineto trace found under {corpus} (set --corpus or TRACEANALYZER_CORPUS)")
        return max(files, key=lambda p: p.stat().st_size)
    return best[1]


def build_replica(source: Path, target: Path, target_bytes: int) -> tuple[int, int]:
    """Write a trace of about `target_bytes` made of shifted copies of `source`'s events.

    Returns (copies, file size)."""
    data = source.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    raw = _ENVELOPE.decode(data)["traceEvents"]
    start = data.find(bytes(memoryview(raw)[:64]), data.find(b'"traceEvents"'))
    end = start + len(raw)
    head, body, tail = data[:start], data[start + 1:end - 1].strip(), data[end:]
    events = msgspec.json.decode(data[start:end])
    ts = [float(e["ts"]) for e in events if isinstance(e.get("ts"), (int, float))]
    ends = [float(e["ts"]) + float(e.get("dur") or 0) for e in events
            if isinstance(e.get("ts"), (int, float)) and isinstance(e.get("dur", 0), (int, float))]
    shift_us = math.ceil(max(ends) - min(ts)) + 1000  # 1 ms apart
    steps = [int(m) for m in _STEP.findall(body)]
    step_stride = (max(steps) + 1) if steps else 0
    copies = max(1, round((target_bytes - len(head) - len(tail)) / (len(body) + 2)))
    with open(target, "wb") as out:
        out.write(head)
        out.write(b"[")
        for k in range(copies):
            if k:
                out.write(b", ")
                out.write(_shift(body, k * shift_us, k * step_stride))
            else:
                out.write(body)
        out.write(b"]")
        out.write(tail)
    return copies, target.stat().st_size


def _shift(body: bytes, shift_us: int, step_shift: int) -> bytes:
    """`body` with every "ts" moved by a whole number of microseconds, digits otherwise kept."""
    def ts(m: re.Match[bytes]) -> bytes:
        return b'"ts": %d%s' % (int(m.group(1)) + shift_us, m.group(2) or b"")

    out = _TS.sub(ts, body)
    if step_shift:
        out = _STEP.sub(lambda m: b'"ProfilerStep#%d"' % (int(m.group(1)) + step_shift), out)
    return out


def measure(cmd: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> tuple[float, int, int]:
    """(wall seconds, peak RSS bytes, exit status) of one subprocess (see `measure_cpu`)."""
    wall, rss, rc, _ = measure_cpu(cmd, env, cwd)
    return wall, rss, rc


def measure_cpu(cmd: list[str], env: dict[str, str] | None = None,
                cwd: Path | None = None) -> tuple[float, int, int, float]:
    """(wall seconds, peak RSS bytes, exit status, CPU seconds) of one subprocess. The peak RSS is the
    largest sum over the process and all its descendants (sampled every 20 ms from /proc), or the
    kernel's ru_maxrss of the process when that is larger: work spread over worker processes is counted
    whole. CPU seconds: user + system time of the process and the descendants it waited for.

    The kernel's ru_maxrss of a child starts at this process's own peak (Linux carries the parent's high-water
    mark over fork and exec; `python -c pass` after building a 200 MB replica here read 0.65 GB): it is used
    only when above this process's peak, else the sampled peak stands alone."""
    own_peak = _own_peak_rss()
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=cwd)
    peak = [0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.02):
            peak[0] = max(peak[0], tree_rss(proc.pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    stop.set()
    sampler.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.returncode:
        print(f"  ! {' '.join(cmd[:3])}... exited {proc.returncode}: {err.strip()[-400:]}", file=sys.stderr)
    cpu = usage.ru_utime + usage.ru_stime
    kernel_peak = usage.ru_maxrss * 1024  # KiB on Linux
    return wall, max(kernel_peak if kernel_peak > own_peak else 0, peak[0]), proc.returncode, cpu


def _own_peak_rss() -> int:
    """This process's peak resident bytes (VmHWM; 0 where /proc is absent)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def tree_rss(root: int) -> int:
    """Resident bytes of `root` and every process descending from it (Linux /proc; 0 elsewhere)."""
    parents: dict[int, int] = {}
    rss: dict[int, int] = {}
    page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
    for entry in os.scandir("/proc") if os.path.isdir("/proc") else []:
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        pid = int(entry.name)
        parents[pid] = int(fields[1])
        rss[pid] = int(fields[21]) * page
    total = 0
    for pid in rss:
        p = pid
        while p and p != root:
            p = parents.get(p, 0)
        if p == root:
            total += rss[pid]
    return total


ORJSON_LOAD = "import sys, orjson\nwith open(sys.argv[1], 'rb') as f: data = f.read()\norjson.loads(data)\n"
ORJSON_LOAD_GZ = "import sys, gzip, orjson\nwith open(sys.argv[1], 'rb') as f: data = gzip.decompress(f.read())\norjson.loads(data)\n"
HTA_LOAD = ("import sys\nfrom hta.trace_analysis import TraceAnalysis\n"
            "TraceAnalysis(trace_dir=sys.argv[1])\n")


def report_command(path: Path, out: Path, *extra: str) -> list[str]:
    """`traceanalyzer report PATH` as this script times it: JSON to `out`, quiet, no cache of decoded traces."""
    return [sys.executable, "-m", "traceanalyzer", "report", str(path), "--format", "json", "-o", str(out),
            "--force", "-q", "--no-cache", *extra]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--source", type=Path, help="trace to replicate (default: the corpus' largest Kineto trace)")
    ap.add_argument("--sizes", default="250,1024", help="replica sizes in MiB, comma separated")
    ap.add_argument("--hta-python", default=DEFAULT_HTA_PYTHON,
                    help="python of a venv with holistictraceanalysis (env TRACEANALYZER_HTA_PYTHON); "
                         "HTA is skipped when it does not exist; '' to skip")
    ap.add_argument("--hta-max-mb", type=int, default=300, help="run HTA only on replicas up to this size")
    ap.add_argument("--gzip", action="store_true", help="also measure a .json.gz copy of each replica")
    ap.add_argument("--pftrace", action="store_true", help="also measure a .pftrace copy of each replica")
    ap.add_argument("--baseline", type=Path, default=None,
                    help="folder holding another copy of the traceanalyzer package, timed alongside")
    ap.add_argument("--runs", type=int, default=1, help="runs of each measurement (medians are reported)")
    ap.add_argument("--workdir", type=Path, default=None, help="where to write (default: a temp dir in /tmp)")
    args = ap.parse_args()

    sizes = [int(s) * MB for s in args.sizes.split(",") if s.strip()]
    source = args.source or largest_kineto_trace(args.corpus)
    base = args.workdir or Path(tempfile.gettempdir())
    need = int(sum(sizes) * (1.5 if args.gzip else 1.1)) + sum(sizes) // 10
    free = shutil.disk_usage(base).free
    if free < need + 2 * 1024**3:
        sys.exit(f"not enough free disk in {base}: {free / 1e9:.1f} GB free, about {need / 1e9:.1f} GB needed")
    hta_python = args.hta_python if args.hta_python and Path(args.hta_python).exists() else None
    work = Path(tempfile.mkdtemp(prefix="ta-bench-", dir=base))
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    baseline_env = None
    if args.baseline is not None:
        if not (args.baseline / "traceanalyzer" / "__init__.py").is_file():
            sys.exit(f"--baseline {args.baseline}: no traceanalyzer package folder in it")
        baseline_env = dict(os.environ, PYTHONPATH=str(args.baseline.resolve()))
    rows: list[tuple[str, str, float, int, float, float, float, float]] = []
    paired: list[str] = []
    print(f"source: {source} ({source.stat().st_size / 1e6:.1f} MB on disk)", file=sys.stderr)
    try:
        for size in sizes:
            trace = work / f"replica_{size // MB}MB.json"
            copies, nbytes = build_replica(source, trace, size)
            print(f"built {trace.name}: {copies} copies, {nbytes / 1e6:.0f} MB", file=sys.stderr)
            inputs = [(trace, ORJSON_LOAD, trace)]
            if args.gzip:
                gz = trace.with_suffix(".json.gz")
                with open(trace, "rb") as src, gzip.open(gz, "wb", compresslevel=6) as dst:
                    shutil.copyfileobj(src, dst, 8 * MB)
                inputs.append((gz, ORJSON_LOAD_GZ, gz))
            if args.pftrace:
                pft = trace.with_suffix(".pftrace")
                subprocess.run([sys.executable, "-m", "traceanalyzer.formats.pftrace_write", str(trace), str(pft)],
                               env=env, check=True)
                inputs.append((pft, ORJSON_LOAD, trace))  # its bare baseline: orjson on the same trace's JSON
            json_report: dict[str, tuple[float, float]] = {}  # who -> (wall, CPU) of the plain JSON report
            for path, loader, loaded in inputs:
                label = f"{nbytes / 1e6:.0f} MB" + {".gz": " .gz", ".pftrace": " .pftrace"}.get(path.suffix, "")
                fsize = path.stat().st_size
                report = report_command(path, work / "report.json")
                runs: dict[str, list[tuple[float, int, int, float]]] = {"base": [], "this": [], "old": []}
                for _ in range(max(1, args.runs)):  # interleaved: a load change hits every tool alike
                    runs["base"].append(measure_cpu([sys.executable, "-c", loader, str(loaded)]))
                    if baseline_env is not None:
                        # cwd: not a checkout (`-m` imports from the cwd first)
                        runs["old"].append(measure_cpu(report, env=baseline_env, cwd=work))
                    runs["this"].append(measure_cpu(report, env=env, cwd=work))
                base_t, base_rss, _, base_cpu = median_run(runs["base"])
                rows.append((label, "orjson.loads (bare)", base_t, base_rss, 1.0, 1.0, base_rss / fsize, base_cpu))
                for who, tool in (("old", "traceanalyzer report, baseline"), ("this", "traceanalyzer report")):
                    if not runs[who]:
                        continue
                    t, rss, rc, cpu = median_run(runs[who])
                    rows.append((label, tool + (" (FAILED)" if rc else ""), t, rss, t / base_t, rss / base_rss,
                                 rss / fsize, cpu))
                    if path == trace:
                        json_report[who] = (t, cpu)
                    elif path.suffix == ".pftrace" and who in json_report:
                        jt, jcpu = json_report[who]
                        paired.append(f"{label}: {tool} .pftrace / same trace's JSON = {t / jt:.2f}x time, "
                                      f"{cpu / jcpu:.2f}x CPU")
                if runs["old"]:
                    t, rss, _, cpu = median_run(runs["this"])
                    old_t, old_rss, _, old_cpu = median_run(runs["old"])
                    print(f"{label}: this checkout / baseline: time {t / old_t:.2f}x, peak RSS {rss / old_rss:.2f}x",
                          file=sys.stderr)
                    paired.append(f"{label}: this checkout / baseline = {t / old_t:.2f}x time, "
                                  f"{cpu / old_cpu:.2f}x CPU, {rss / old_rss:.2f}x peak RSS")
                if hta_python and path.suffix == ".json" and size <= args.hta_max_mb * MB:
                    hta_dir = work / "hta"
                    hta_dir.mkdir(exist_ok=True)
                    link = hta_dir / path.name
                    link.unlink(missing_ok=True)
                    link.symlink_to(path)
                    t, rss, rc, cpu = measure_cpu([hta_python, "-c", HTA_LOAD, str(hta_dir)])
                    rows.append((label, "HTA TraceAnalysis load" + (" (FAILED)" if rc else ""), t, rss,
                                 t / base_t, rss / base_rss, rss / fsize, cpu))
                    link.unlink()
                elif path.suffix == ".json" and size <= args.hta_max_mb * MB:
                    rows.append((label, "HTA (skipped: no venv, see --hta-python)", math.nan, 0, math.nan,
                                 math.nan, math.nan, math.nan))
            for p in work.glob("replica_*"):
                p.unlink()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print_table(rows)
    for line in paired:
        print(line)


def median_run(results: list[tuple[float, int, int, float]]) -> tuple[float, int, int, float]:
    """Median wall time, peak RSS and CPU time of repeated runs; the worst exit status."""
    walls = sorted(r[0] for r in results)
    rss = sorted(r[1] for r in results)
    cpu = sorted(r[3] for r in results)
    return walls[len(walls) // 2], rss[len(rss) // 2], max(r[2] for r in results), cpu[len(cpu) // 2]


def print_table(rows: list[tuple[str, str, float, int, float, float, float, float]]) -> None:
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the "
          f"end; ratios are to orjson.loads in the same run (for .pftrace: of the same trace's JSON)")
    print()
    print("| file | tool | wall s | CPU s | peak RSS GB | time / orjson | RSS / orjson | RSS / file size |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for label, tool, t, rss, rt, rr, rf, cpu in rows:
        if math.isnan(t):
            print(f"| {label} | {tool} | - | - | - | - | - | - |")
            continue
        print(f"| {label} | {tool} | {t:.1f} | {cpu:.1f} | {rss / 1e9:.2f} | {rt:.2f}x | {rr:.2f}x | {rf:.2f}x |")


if __name__ == "__main__":
    main()
