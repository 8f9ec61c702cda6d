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
A row of several rank files lists them with `;` in both `file` and `source_path`; a `source_path` of the
form `ARCHIVE.tar.gz!MEMBER` is a member of a (gzip) tar archive committed in the repository.
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import subprocess
import sys
import tarfile
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


def blob(mirror: Path, commit: str, path: str) -> bytes | None:
    """The bytes of PATH at COMMIT in a bare mirror; a tar member when PATH is `ARCHIVE!MEMBER`."""
    archive, _, member = path.partition("!")
    got = subprocess.run(["git", f"--git-dir={mirror}", "show", f"{commit}:{archive}"], capture_output=True,
                         check=False)
    if got.returncode != 0 or not got.stdout:
        return None
    if not member:
        return got.stdout
    with tarfile.open(fileobj=io.BytesIO(got.stdout)) as tar:
        f = tar.extractfile(member)
        return f.read() if f is not None else None


def extract(row: dict[str, str], file: str, source_path: str, out: Path, mirrors: Path) -> bool:
    """Copy one file of a row to OUT/FILE; False (and a line on stderr) when it cannot be had."""
    dest = out / file
    if dest.is_file():
        return True
    mirror = mirror_of(row["source_repo"], mirrors)
    if mirror is None:
        print(f"{row['id']}: no mirror of {row['source_repo']} under {mirrors}", file=sys.stderr)
        return False
    data = blob(mirror, row["commit"], source_path)
    if not data:
        print(f"{row['id']}: {row['commit']}:{source_path} not in the mirror", file=sys.stderr)
        return False
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(data)
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mirrors", type=Path, default=Path(os.environ.get("TRACEANALYZER_MIRRORS", "/work/.mirror")))
    ap.add_argument("--out", type=Path, default=fetched_dir())
    ap.add_argument("--table", type=Path, default=TABLE, help="the rows to extract (default: TABLE.tsv)")
    args = ap.parse_args(argv)
    done = missing = 0
    for row in rows(args.table):
        if row["origin"] != "fetched":
            continue
        for file, source_path in zip(row["file"].split(";"), row["source_path"].split(";"), strict=True):
            got = extract(row, file, source_path, args.out, args.mirrors)
            done += got
            missing += not got
    print(f"{done} file(s) present in {args.out}, {missing} missing")
    return 1 if missing else 0


if __name__ == "__main__":
    raise SystemExit(main())
