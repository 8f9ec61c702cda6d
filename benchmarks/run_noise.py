#!/usr/bin/env python3
"""How far captures of one setting differ in step time: the basis of `diff --run-noise` (docs/ci.md).

    python benchmarks/run_noise.py CAPTURE CAPTURE ... [--group NAME]  (repeat: --group starts a new setting)

Every capture is analysed as `report` does; within each group (captures of one setting, e.g. the ten
`same_*` captures of sample_traces/make_torch_repeats.py), every ordered pair (base, head) is compared
as `diff` compares one capture a side, and the step-time change (Hodges–Lehmann shift / base median),
the verdict the steps alone give, and the verdict with the run-to-run allowance are printed, then the
largest |change| and its 90th and 95th percentiles over all pairs. Nothing is written.
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import numpy as np

import traceanalyzer as ta
from traceanalyzer.compare import compare


def groups(argv: list[str]) -> dict[str, list[Path]]:
    out: dict[str, list[Path]] = {}
    name = "captures"
    it = iter(argv)
    for arg in it:
        if arg == "--group":
            name = next(it)
            continue
        out.setdefault(name, []).append(Path(arg))
    return out


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    opts = ta.Options(cache=False, jobs=1)
    for name, paths in groups(argv).items():
        changes: list[float] = []
        verdicts: dict[str, int] = {}
        runs = [(p.name, ta.analyze(p, opts)) for p in paths]
        print(f"== {name}: {len(runs)} captures")
        for (bn, b), (hn, h) in itertools.permutations(runs, 2):
            c = compare(b, h)
            st = c.step_time
            if st.change is None:
                continue
            changes.append(abs(st.change))
            verdicts[c.change_verdict] = verdicts.get(c.change_verdict, 0) + 1
            print(f"{bn:>28} -> {hn:<28} change {st.change * 100:+7.1f}%  median {st.median_change * 100:+7.1f}%  "
                  f"{c.change_verdict}")
        if changes:
            a = np.asarray(changes)
            print(f"{name}: {len(a)} pairs: |change| max {a.max() * 100:.1f}%, p95 {np.quantile(a, 0.95) * 100:.1f}%, "
                  f"p90 {np.quantile(a, 0.90) * 100:.1f}%, median {np.median(a) * 100:.1f}%; verdicts {verdicts}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
