"""Write the reports of every sample trace, every corpus file and folder and a set of trace + log jobs
to one folder, so that a restructuring can be checked to change no figure, verdict or page.

    python tests/snapshot_reports.py OUT_DIR              # writes OUT_DIR/<case>.{json,md,txt,html}
    python tests/snapshot_reports.py OUT_DIR --against OLD_DIR

With `--against`, JSON reports are compared as data after `OLD_DIR`'s are migrated to the current schema
(`traceanalyzer.result.migrate`, when it exists), Markdown and text byte for byte; HTML pages that differ (other than
in the schema name) are listed apart (their drawing code may change). Exit status 1 when any JSON, Markdown or text differs.
Not a test module: it runs the whole corpus (minutes); the tests check the same paths on samples.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import traceanalyzer as ta  # noqa: E402

SAMPLES = ROOT / "sample_traces"
CORPUS = ROOT.parent / "shared" / "corpus"
SUFFIXES = (".json", ".json.gz", ".pb", ".log", ".csv", ".txt")


def _cases(work: Path) -> list[tuple[str, list[Path], dict]]:
    from dmon_builder import busy_trace, dmon_text, sample_times, utilisation
    from glances_builder import BASE_S, glances4_csv, input_bound_trace

    cases: list[tuple[str, list[Path], dict]] = []
    ZONE = "Asia/Kolkata"  # noqa: N806
    for p in sorted(SAMPLES.iterdir()):
        if p.name.endswith((".json", ".json.gz")) and not p.name.endswith(".expected.json"):
            cases.append((f"sample-{p.name}", [p], {}))
    cases.append(("sample-logdir", [SAMPLES / "torch_cpu_logdir"], {}))
    cases.append(("sample-logdir-jobs2", [SAMPLES / "torch_cpu_logdir"], {"jobs": 2}))
    cases.append(("sample-dmon-only", [SAMPLES / "dmon" / "idle_runs.log"], {}))
    cases.append(("sample-comm-job", [SAMPLES / "comm_rank0.json", SAMPLES / "comm_rank1.json"], {}))
    cases.append(("sample-comm-job-jobs2", [SAMPLES / "comm_rank0.json", SAMPLES / "comm_rank1.json"], {"jobs": 2}))
    for name in ("cpu_aug", "small_files"):
        g = SAMPLES / "glances"
        cases.append((f"sample-glances-{name}", [g / f"{name}.trace.json", g / f"{name}.csv"], {}))
        cases.append((f"sample-glances-{name}-json", [g / f"{name}.trace.json"], {"host_logs": (g / f"{name}.json",)}))
    # trace + nvidia-smi log on another clock (zone and skew), found by the offset search and given
    dm = work / "dmon"
    dm.mkdir(parents=True, exist_ok=True)
    trace = busy_trace(dm / "trace.json", seconds=90)
    ends = sample_times(trace, 30, 30, 90)
    (dm / "gpu.log").write_text(dmon_text(ends, utilisation(trace, ends), ZONE, int(3.4e9)))
    cases.append(("dmon-searched", [trace.path, dm / "gpu.log"], {"dmon_tz": ZONE}))
    cases.append(("dmon-given", [trace.path], {"counter_logs": (dm / "gpu.log",), "dmon_tz": ZONE,
                                               "dmon_offset_ns": -int((5 * 3600 + 1800 + 3.4) * 1e9)}))
    cases.append(("dmon-beside", [trace.path], {}))
    gl = work / "glances"
    gl.mkdir(parents=True, exist_ok=True)
    it = input_bound_trace(gl / "t.json", wait_us=[800_000] * 5 + [0] * 5)
    g4 = glances4_csv(gl / "g4.csv", [BASE_S + k + 0.5 for k in range(10)], [10, 20, 30, 40, 50, 60, 70, 80, 90, 99],
                      [1] * 10, [2] * 10)
    cases.append(("glances-epoch", [it, g4], {"dmon_tz": "Asia/Tokyo"}))
    # many ranks with a log: the job path with logs
    cases.append(("comm-job-with-dmon", [SAMPLES / "comm_rank0.json", SAMPLES / "comm_rank1.json",
                                         SAMPLES / "dmon" / "idle_runs.log"], {}))
    cases.append(("comm-job-with-glances", [SAMPLES / "comm_rank0.json", SAMPLES / "comm_rank1.json",
                                            SAMPLES / "glances" / "cpu_aug.csv"], {}))
    if CORPUS.is_dir():
        for f in sorted(CORPUS.rglob("*")):
            if f.is_file() and f.name.endswith(SUFFIXES):
                cases.append((f"corpus-{f.relative_to(CORPUS)}".replace("/", "~"), [f], {"find_logs_beside": False}))
        for d in sorted(p for p in CORPUS.iterdir() if p.is_dir()):
            cases.append((f"corpus-dir-{d.name}", [d], {}))
        two = sorted((CORPUS / "hta_sampled_2rank").glob("*.json.gz"))
        cases.append(("corpus-2rank-jobs2", two, {"jobs": 2}))
    return cases


def write(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.gettempdir()) / "ta_snapshot_inputs"
    shutil.rmtree(work, ignore_errors=True)
    for name, paths, opts in _cases(work):
        options = ta.Options(cache=False, **{"jobs": 1, **opts})
        try:
            a = ta.analyze(paths if len(paths) > 1 else paths[0], options)
        except ta.InputError as exc:
            (out / f"{name}.error").write_text(str(exc))
            continue
        (out / f"{name}.json").write_bytes(a.to_json())
        (out / f"{name}.md").write_text(a.to_markdown())
        (out / f"{name}.txt").write_text(a.to_text())
        (out / f"{name}.html").write_text(a.to_html())
        print(name, file=sys.stderr)


def _migrated(data: dict) -> dict:
    try:
        from traceanalyzer.result import migrate
    except ImportError:
        return data
    return migrate(data)


def _normalised(data: dict) -> dict:
    """The report's data without what a restructuring may move: the schema name, the tool version, and each
    device's gap table (a /2 report holds only the drawn gaps, which the migration makes into a partial table;
    `_gap_tables_whole` checks the new ones against the gap counts)."""
    data = _causes_present(dict(data))
    data.pop("schema", None)
    data.pop("tool", None)
    if not data.get("implicit_logs"):  # (added with the run's metrics; empty unless logs were picked up)
        data.pop("implicit_logs", None)
    ranks = []
    for r in data.get("ranks") or []:
        r = dict(r, devices=[{k: v for k, v in d.items() if k != "gap_table"} for d in r.get("devices") or []])
        ranks.append(r)
    data["ranks"] = ranks
    return data


def _causes_present(data):  # noqa: ANN001, ANN202
    """The data with maps keyed by cause holding only the causes present (older reports stored zeros too)."""
    if isinstance(data, dict):
        return {k: ({c: t for c, t in v.items() if t} if k == "idle_by_cause_us" and isinstance(v, dict)
                    else _causes_present(v)) for k, v in data.items()}
    if isinstance(data, list):
        return [_causes_present(v) for v in data]
    return data


def _gap_tables_whole(data: dict) -> bool:
    """Every device's gap table holds (or counts as omitted) every gap its gap figures count, by start time."""
    for r in data.get("ranks") or []:
        for d in r.get("devices") or []:
            g = d.get("gap_table")
            if g is None:
                continue
            if len(g["start_us"]) + g["omitted"] != d["gaps"]["count"] or g["start_us"] != sorted(g["start_us"]):
                return False
    return True


def compare(new: Path, old: Path) -> int:
    bad, html = [], []
    names = sorted({p.name for p in old.iterdir()} | {p.name for p in new.iterdir()})
    for n in names:
        a, b = old / n, new / n
        if not a.exists() or not b.exists():
            bad.append(f"{n}: only in {'new' if b.exists() else 'old'}")
            continue
        if n.endswith(".json"):
            new_data = orjson.loads(b.read_bytes())
            if _normalised(_migrated(orjson.loads(a.read_bytes()))) != _normalised(new_data):
                bad.append(f"{n}: JSON data differs")
            elif not _gap_tables_whole(new_data):
                bad.append(f"{n}: a gap table does not hold every gap")
        elif n.endswith(".html"):  # the page names its schema
            if a.read_bytes().replace(b"<code>traceanalyzer/2</code>", b"<code>traceanalyzer/3</code>") != b.read_bytes():
                html.append(n)
        elif a.read_bytes() != b.read_bytes():
            bad.append(f"{n}: differs")
    cases = len({n.rsplit(".", 1)[0] for n in names})
    print(f"{cases} cases, {len(names)} files: {len(bad)} differ in data, Markdown or text; {len(html)} HTML pages "
          f"differ")
    for line in bad + [f"{n}: HTML differs" for n in html]:
        print("  " + line)
    return 1 if bad else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--against", type=Path, help="a folder written by an earlier run, to compare with")
    args = parser.parse_args()
    write(args.out)
    return compare(args.out, args.against) if args.against else 0


if __name__ == "__main__":
    sys.exit(main())
