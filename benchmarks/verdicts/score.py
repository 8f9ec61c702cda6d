"""Score today's analyzer against the verdict benchmark (`TABLE.tsv`) and publish the accuracy table.

    python benchmarks/verdicts/score.py              # print the table (Markdown) and the accuracy
    python benchmarks/verdicts/score.py --docs       # also rewrite the section in docs/diagnosis.md

A row is right when the analyzer's primary verdict is the expected one or an acceptable alternative,
and wrong otherwise (a must-not verdict is always wrong; an input refused with an error is wrong too, and
shown as `refused`). Rows whose files are absent are listed as "absent" and left out of the accuracy,
which is given in all and per category (the table's `category` column: training, inference, serving,
micro-benchmark, cpu, multi-rank, logs). The section of `docs/diagnosis.md` between the
`<!-- verdict-accuracy: begin -->` and `<!-- verdict-accuracy: end -->` lines is this script's output.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from fetch_traces import ROOT, corpus_dir, fetched_dir, rows  # noqa: E402

DOC = ROOT / "docs" / "diagnosis.md"
BEGIN, END = "<!-- verdict-accuracy: begin -->", "<!-- verdict-accuracy: end -->"


def row_files(row: dict[str, str]) -> list[Path]:
    base = corpus_dir() if row["origin"] == "corpus" else fetched_dir()
    return [base / f for f in row["file"].split(";")]


def accepted(row: dict[str, str]) -> set[str]:
    return {row["expected"], *(v for v in row["acceptable"].split(",") if v)}


def must_not(row: dict[str, str]) -> set[str]:
    return {v for v in row["must_not"].split(",") if v}


REFUSED = "refused"


def verdict_of(files: list[Path]) -> str:
    """The primary verdict, or REFUSED when the analyzer refuses the input with its one-line error."""
    import traceanalyzer as ta

    inputs = files[0] if len(files) == 1 else files
    try:
        return ta.analyze(inputs).diagnosis.primary
    except ta.TraceAnalyzerError:
        return REFUSED


def _cell(text: str) -> str:
    return re.sub(r"\s+", " ", text).replace("|", "&#124;").strip()


def score() -> tuple[list[tuple[dict[str, str], str | None, bool | None]], str]:
    results = []
    for row in rows():
        files = row_files(row)
        if not all(f.exists() for f in files):
            results.append((row, None, None))
            continue
        got = verdict_of(files)
        results.append((row, got, got in accepted(row) and got not in must_not(row)))
    judged = [r for r in results if r[2] is not None]
    right = sum(1 for r in judged if r[2])
    lines = [f"Today: **{right} of {len(judged)} right** ({right / max(len(judged), 1):.0%}) of "
             f"{len(results)} real traces and logs ({len(results) - len(judged)} absent here).", "",
             "| category | rows | judged | right | accuracy |", "|---|---|---|---|---|"]
    for cat in sorted({r[0]["category"] for r in results}):
        of = [r for r in results if r[0]["category"] == cat]
        j = [r for r in of if r[2] is not None]
        ok = sum(1 for r in j if r[2])
        lines.append(f"| {cat} | {len(of)} | {len(j)} | {ok} | {ok / len(j):.0%} |" if j
                     else f"| {cat} | {len(of)} | 0 | 0 | – |")
    lines += ["", "| id | category | source | truth (from the raw events and the source) | expected (or) | today | |",
              "|---|---|---|---|---|---|---|"]
    for row, got, ok in results:
        alt = ", ".join(v for v in row["acceptable"].split(",") if v)
        exp = f"`{row['expected']}`" + (f" ({_cell(alt)})" if alt else "")
        mark = "absent" if ok is None else ("right" if ok else "**wrong**")
        lines.append(f"| {row['id']} | {row['category']} | {row['source_repo']} | {_cell(row['truth'])} | {exp} | "
                     f"`{got or '-'}` | {mark} |")
    misses = [(row, got) for row, got, ok in results if ok is False]
    if misses:
        lines += ["", "The misses, and why:", ""]
        lines += [f"- **{row['id']}** (`{got}`, expected `{row['expected']}`): "
                  f"{_cell(row['known_miss'] or 'not yet explained')}" for row, got in misses]
    return results, "\n".join(lines) + "\n"


def write_docs(table: str) -> None:
    text = DOC.read_text()
    start, stop = text.index(BEGIN) + len(BEGIN), text.index(END)
    DOC.write_text(text[:start] + "\n" + table + text[stop:])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--docs", action="store_true", help=f"rewrite the section of {DOC.name}")
    args = ap.parse_args(argv)
    _, table = score()
    print(table)
    if args.docs:
        write_docs(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
