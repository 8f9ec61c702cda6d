"""A trace analysed whole against the same trace analysed in parts: the figures that are sums or
per-step values must agree (issue 36: "its figures equal those of the same trace analysed in parts
where that is well-defined").

    python benchmarks/in_parts.py WHOLE.json PART.json [PART.json ...]

Each file is a `report --format json` of one rank. The replicas of `bench_large.build_replica` are
copies of one capture laid end to end, so a replica of N copies is N parts of one copy each:
every step of the whole is a step of a part (the same duration, GPU busy time, idle time, copies,
waits), the step-time statistics are equal, sums over steps (GPU busy, copies, idle time in steps) are
the parts' sums, and the verdict is the same. Shares of the window (idle, copy share) and the verdict also count the
seams between copies (the stretch between one copy's last GPU work and the next copy's first, whose
work was queued before it): they are compared within `--share-tolerance` points, and agree where the
seams are a small part of the window (a real capture of seconds, not a built one of milliseconds). Prints a table and
exits 1 on a disagreement.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

import orjson

STEP_FIELDS = ("duration_us", "gpu_busy_us", "memcpy_us", "dataloader_wait_us", "idle_us", "comm_us",
               "exposed_comm_us")
EQUAL = ("step_time_median_us", "step_time_p10_us", "step_time_p90_us")
SUMMED = ("steps", "gpu_busy_us", "memcpy_us")  # the gap count and total also hold the stretches between copies
SHARES = ("gpu_idle_fraction", "memcpy_share_of_busy", "dataloader_wait_fraction")


def steps_of(report: dict) -> Counter:
    """The per-step rows of every rank, without their start (a multiset of figure tuples)."""
    return Counter(tuple(row[f] for f in STEP_FIELDS) for r in report["ranks"] for row in r["per_step"])


def compare(whole: dict, parts: list[dict], share_tolerance: float) -> list[tuple[str, str, str, bool]]:
    rows: list[tuple[str, str, str, bool]] = []
    w_steps = steps_of(whole)
    p_steps: Counter = Counter()
    for p in parts:
        p_steps += steps_of(p)
    # every distinct step of the whole is a step of a part, and no part holds a step the whole lacks
    rows.append(("distinct per-step rows", str(len(w_steps)), str(len(p_steps)), set(w_steps) == set(p_steps)))
    ws, ps = whole["summary"], [p["summary"] for p in parts]
    for key in EQUAL:
        vals = {p[key] for p in ps}
        rows.append((key, str(ws[key]), ", ".join(map(str, sorted(vals, key=str))), vals == {ws[key]}))
    scale = ws["steps"] / sum(p["steps"] for p in ps)  # the whole may hold the parts several times over
    for key in SUMMED:
        total = sum(p[key] for p in ps) * scale
        ok = abs(ws[key] - total) <= 1e-6 * max(1.0, abs(total)) + 0.01
        rows.append((f"{key} (parts x {scale:g})", f"{ws[key]:g}", f"{total:g}", ok))
    for key in ("idle_us", "exposed_comm_us"):  # summed over the steps (the window's edges left out)
        w_sum = sum(row[key] for r in whole["ranks"] for row in r["per_step"])
        total = sum(row[key] for p in parts for r in p["ranks"] for row in r["per_step"]) * scale
        rows.append((f"{key} in steps (parts x {scale:g})", f"{w_sum:g}", f"{total:g}",
                     abs(w_sum - total) <= 1e-6 * max(1.0, abs(total)) + 0.01))
    for key in SHARES:
        vals = [p[key] for p in ps if p[key] is not None]
        ok = all(abs(ws[key] - v) <= share_tolerance for v in vals) if ws[key] is not None else not vals
        rows.append((key, str(ws[key]), ", ".join(map(str, vals)), ok))
    verdicts = {p["diagnosis"]["primary"] for p in parts}
    rows.append(("verdict", whole["diagnosis"]["primary"], ", ".join(sorted(verdicts)),
                 verdicts == {whole["diagnosis"]["primary"]}))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("whole", type=Path)
    ap.add_argument("parts", type=Path, nargs="+")
    ap.add_argument("--share-tolerance", type=float, default=0.005, help="shares of the window: points (0-1)")
    args = ap.parse_args()
    whole = orjson.loads(args.whole.read_bytes())
    parts = [orjson.loads(p.read_bytes()) for p in args.parts]
    rows = compare(whole, parts, args.share_tolerance)
    print("| figure | whole | parts | agree |")
    print("|---|---|---|---|")
    for name, w, p, ok in rows:
        print(f"| {name} | {w} | {p} | {'yes' if ok else 'NO'} |")
    sys.exit(0 if all(ok for *_, ok in rows) else 1)


if __name__ == "__main__":
    main()
