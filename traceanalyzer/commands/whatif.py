"""`traceanalyzer whatif`: replay each step's dependency graph with some durations changed (analyses/
critical_path.py) and print the base and projected median step."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

WHATIF_HELP = """Project what a change would save: replay each step's dependency graph with the work you name
removed (--remove GLOB) or scaled (--scale GLOB=FACTOR), and print the median step before and after.

\b
Examples:
  traceanalyzer whatif trace.json --remove 'ampere_sgemm*'        # a kernel gone
  traceanalyzer whatif trace.json --scale 'aten::mm=0.5'          # an operator (host and GPU work) 2x faster
  traceanalyzer whatif trace.json --scale 'preprocess=0.5' --remove 'cudaMalloc'
  traceanalyzer whatif rank0.json rank1.json --scale 'preprocess=0.5' --format json  # ranks of one job

\b
A GLOB (shell-style: *, ?, [abc]) matches names of operators, kernels, copies, annotations, runtime
calls and Python frames. A matched host event scales the host time inside it and the GPU work
launched from it; a matched kernel or copy scales its own time. Removing a blocking call
(cudaStreamSynchronize, aten::item) removes its wait too. FACTOR is a number >= 0 (0 removes);
where several rules match, the smallest factor wins. Repeat --remove and --scale as needed.

\b
The replay keeps what the trace shows: each launch's latency, each stream's order, each wait on an
event or a blocking call, and (with several ranks) each collective's wait for the last rank. Work
beside the critical path saves nothing; work on it saves up to the next-longest chain. Launch
overheads and queue depth stay as measured; memory is not modelled. Assumptions that stood in for
edges the trace does not hold are listed. With several ranks, a step lasts as long as its slowest rank.
"""


@click.command("whatif", help=WHATIF_HELP, no_args_is_help=True)
@click.argument("traces", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--remove", "removes", multiple=True, metavar="GLOB", help="Remove the matching work (repeatable).")
@click.option("--scale", "scales", multiple=True, metavar="GLOB=FACTOR",
              help="Multiply the matching work's time by FACTOR (repeatable), e.g. 'aten::mm=0.5'.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="text: a few lines; json: base_step_us, projected_step_us, saving_us and every step's values.")
def whatif_command(traces: tuple[Path, ...], removes: tuple[str, ...], scales: tuple[str, ...], fmt: str) -> None:
    """Replay each step with the rules (the help text is WHATIF_HELP)."""
    from ..errors import UsageError

    if not removes and not scales:
        raise UsageError("nothing to change: give --remove GLOB or --scale GLOB=FACTOR (see traceanalyzer whatif "
                         "--help)")
    from ..analyses import critical_path as CP

    try:
        rules = [CP.WhatIfRule.remove(g) for g in removes] + [CP.WhatIfRule.parse_scale(s) for s in scales]
    except CP.RuleError as exc:
        raise UsageError(str(exc)) from None
    result = _replay(traces, rules)
    unmatched = [glob for glob, count in result["rules_matched"].items() if count == 0]
    if unmatched:
        raise UsageError(f"{', '.join(repr(g) for g in unmatched)} matches no operator, kernel, annotation, "
                         f"runtime call or Python frame in the trace (names are matched whole: try '*{unmatched[0]}*')")
    if fmt == "json":
        click.echo(json.dumps(result, indent=1, sort_keys=False))
        return
    click.echo(_text(result))


def _replay(traces: tuple[Path, ...], rules: list[Any]) -> dict[str, Any]:
    """Every rank's steps replayed; the job's step: its slowest rank's, per step number."""
    import numpy as np

    from ..analyses import critical_path as CP
    from ..formats import ReadOptions, read_file
    from ..timeline import Timeline

    parts = [read_file(p, ReadOptions()) for p in traces]
    tl = Timeline.concat(parts) if len(parts) > 1 else parts[0]
    ranks = [r.index for r in tl.ranks]
    results = [CP.what_if(tl, rules, rank=r, peers=tuple(x for x in ranks if x != r)) for r in ranks]
    by_step: dict[Any, tuple[int, int]] = {}
    for w in results:
        for step, b, p in zip(w.steps, w.base_ns, w.projected_ns):
            old = by_step.get(step, (0, 0))
            by_step[step] = (max(old[0], b), max(old[1], p))
    base = [b for b, _ in by_step.values()]
    projected = [p for _, p in by_step.values()]
    base_us = round(float(np.median(base)) / 1000.0, 3) if base else None
    projected_us = round(float(np.median(projected)) / 1000.0, 3) if projected else None
    matched = dict(results[0].matched) if results else {r.glob: 0 for r in rules}  # each replay sees every rank
    assumptions: dict[str, int] = {}
    for w in results:
        for text, count in w.assumptions:
            assumptions[text] = max(assumptions.get(text, 0), count)
    return {
        "traces": [str(p) for p in traces],
        "rules": [{"glob": r.glob, "factor": r.factor} for r in rules],
        "rules_matched": matched,
        "steps": len(by_step),
        "base_step_us": base_us,
        "projected_step_us": projected_us,
        "saving_us": round(base_us - projected_us, 3) if base_us is not None and projected_us is not None else None,
        "per_step": [{"step": s, "base_us": round(b / 1000.0, 3), "projected_us": round(p / 1000.0, 3)}
                     for s, (b, p) in by_step.items()],
        "ranks": [{"rank": tl.ranks[w.rank].rank if tl.ranks[w.rank].rank is not None else w.rank,
                   "input": tl.sources[tl.ranks[w.rank].source].path,
                   "base_step_us": round(w.base_median_ns / 1000.0, 3),
                   "projected_step_us": round(w.projected_median_ns / 1000.0, 3)} for w in results],
        "assumptions": assumptions,
    }


def _text(result: dict[str, Any]) -> str:
    from ..inert import terminal
    from ..units import format_us

    base, projected, saving = result["base_step_us"], result["projected_step_us"], result["saving_us"]
    if base is None:
        return "no step or window with work to replay"
    steps = result["steps"]
    what = "median step" if steps > 1 else "step" if result["per_step"][0]["step"] is not None else "window"
    share = f" ({saving / base:.1%})" if base else ""
    over = f" over {steps} steps" if steps > 1 else ""
    lines = [f"{what}: {format_us(base)} -> {format_us(projected)}, saving {format_us(saving)}{share}{over}"]
    for rule in result["rules"]:
        change = "removed" if rule["factor"] == 0 else f"x{rule['factor']:g}"
        lines.append(f"  {terminal(rule['glob'])}: {change}, {result['rules_matched'][rule['glob']]} event(s) matched")
    if result["assumptions"]:
        lines.append("assumed where the trace holds no edge:")
        lines += [f"  - {text} ({count}x)" for text, count in result["assumptions"].items()]
    return "\n".join(lines)
