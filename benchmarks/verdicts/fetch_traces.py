"""Extract the verdict benchmark's fetched traces from local git mirrors of their public repositories.

The benchmark table (`TABLE.tsv`) names, for every row outside `../shared/corpus`, a repository, a commit
and a path. The files are never committed here: this script copies them out of bare git mirrors with
`git --git-dir=MIRROR show COMMIT:PATH` into a folder that the tests read.

    python benchmarks/verdicts/fetch_traces.py                     # mirrors under /work/.mirror
    python benchmarks/verdicts/fetch_traces.py --mirrors DIR --out DIR

A mirror of `owner/name` is looked for at `MIRRORS/owner+name/repo` (a bare clone), then
`MIRRORS/owner+name`, then `MIRRORS/name.git`; make one with
`git clone --mirror https://github.com/owner/name MIRRORS/owner+name/repo`. The output folder is
`$TRACEANALYZER_FETCHED`, else `corpus_fetched` beside the corpus folder (`$TRACEANALYZER_CORPUS`,
else `../shared/corpus`); each file lands at `OUT/<row id>/<file name>`, the `file` column of the table.
A file whose blob the mirror lacks (large files may be listed but absent) is reported and skipped.
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
TABLE = HERE / "TABLE.tsv"


def corpus_dir() -> Path:
    return Path(os.environ.get("TRACEANALYZER_CORPUS", ROOT.parent / "shared" / "corpus"))


def fetched_dir() -> Path:
    return Path(os.environ.get("TRACEANALYZER_FETCHED", corpus_dir().parent / "corpus_fetched"))


def rows(table: Path = TABLE) -> list[dict[str, str]]:
    with table.open(newline="") as f:
        return list(csv.DictReader(f, delimiter="\t"))


def mirror_of(repo: str, mirrors: Path) -> Path | None:
    owner, name = repo.split("/", 1)
    for cand in (mirrors / f"{owner}+{name}" / "repo", mirrors / f"{owner}+{name}", mirrors / f"{name}.git"):
        if (cand / "HEAD").is_file():
            return cand
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mirrors", type=Path, default=Path(os.environ.get("TRACEANALYZER_MIRRORS", "/work/.mirror")))
    ap.add_argument("--out", type=Path, default=fetched_dir())
    args = ap.parse_args(argv)
    done = missing = 0
    for row in rows():
        if row["origin"] != "fetched":
            continue
        dest = args.out / row["file"]
        if dest.is_file():
            done += 1
            continue
        mirror = mirror_of(row["source_repo"], args.mirrors)
        if mirror is None:
            print(f"{row['id']}: no mirror of {row['source_repo']} under {args.mirrors}", file=sys.stderr)
            missing += 1
            continue
        spec = f"{row['commit']}:{row['source_path']}"
        got = subprocess.run(["git", f"--git-dir={mirror}", "show", spec], capture_output=True, check=False)
        if got.returncode != 0 or not got.stdout:
            print(f"{row['id']}: {spec} not in the mirror ({got.stderr.decode(errors='replace').strip()[:120]})",
                  file=sys.stderr)
            missing += 1
            continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(got.stdout)
        done += 1
    print(f"{done} file(s) present in {args.out}, {missing} missing")
    return 1 if missing else 0


if __name__ == "__main__":
    raise SystemExit(main())
