"""`traceanalyzer diff BASE HEAD`: did a change make training slower, by how much, and why."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from ..inert import terminal
from ..report import DIFF_RENDERERS
from ._options import (
    analysis_options,
    build_options,
    execution_options,
    extension,
    output_format,
    output_options_for,
    stem,
)
from ._output import check_target, option_inputs, say, write
from .report import verdicts_help

# The option defaults as `diff --help` shows them, written here so that the help loads no analysis code
# (pandas, numpy); tests/test_cli_imports.py checks they are compare.DEFAULT_TOLERANCE and compare.RUN_NOISE.
TOLERANCE_DEFAULT = "2%"
RUN_NOISE_DEFAULT = "25%"


def _tolerance(text: str) -> float:
    t = text.strip()
    try:
        value = float(t.rstrip("%")) / (100 if t.endswith("%") else 1)
    except ValueError:
        raise ValueError(f"{text!r} is not a tolerance: write 2% or 0.02") from None
    if not 0 <= value < 1:
        raise ValueError(f"{text!r}: the tolerance must be between 0% and 100%")
    return value


DIFF_HELP = f"""Compare BASE (before a change) with HEAD (after it), or several runs a side.

\b
Examples:
  traceanalyzer diff base.report.json head_trace.json.gz -o diff.md
  traceanalyzer diff --base base.json --base base.report.json --head head.json  # several runs a side
  traceanalyzer diff base/ head/ --fail-on step_time:+5% -o diff.md   # exit 1 when slower by 5%
  traceanalyzer diff base.json head.json -o "$GITHUB_STEP_SUMMARY" --format md   # a CI job summary
  traceanalyzer diff base.json head.json -o - --format json    # the comparison for scripts

\b
Each side is anything `report` takes (a trace, .json.gz, a log dir, a directory of ranks)
or a JSON report saved by `traceanalyzer report --format json` (CI keeps the base
branch's small JSON report, not its trace). With --base/--head (repeatable) each names
one run, or a directory of saved JSON reports (one run each); the interval is then taken
across runs, so run-to-run variation is measured.

\b
The verdict of the change comes first. Step time: the Hodges-Lehmann shift (median of all
pairwise head-base step differences) with a 95% interval. Each part of the step (GPU
compute, communication, copies, GPU idle by cause) gets its own evidence; a part whose
per-step values separate the sides beyond chance and their spread is "decisive".
regressed/improved: the interval excludes zero and the shift is beyond --tolerance, or
decisive parts move the step beyond it; unchanged: the interval lies within --tolerance;
inconclusive: anything else, or fewer than 3 steps on a side. With one capture on a side
the steps cannot show what captures of one setting differ by: a change must also exceed
that (from the runs' medians with 3 or more --base runs, else --run-noise); a smaller,
consistent shift is likely_slower/likely_faster ("unconfirmed"), which --fail-on does
not fail on unless --fail-on-unconfirmed. Then the parts (means per
step, adding up to the change of the mean step), the kernels that moved, and both sides'
verdicts, one of:
{verdicts_help()}

\b
Exit status: 0 ok, 1 a gate failed (the output is written first), 2 bad input or usage,
3 internal error.
More: docs/ci.md (gates, pull-request comments, a GitHub Actions workflow).
"""


@click.command("diff", help=DIFF_HELP)
@click.argument("sides", nargs=-1, type=click.Path(path_type=Path), metavar="[BASE HEAD]")
@click.option("--base", "bases", multiple=True, type=click.Path(path_type=Path), metavar="RUN",
              help="A base run (repeatable): a trace, a log dir, a saved JSON report or a directory of them.")
@click.option("--head", "heads", multiple=True, type=click.Path(path_type=Path), metavar="RUN",
              help="A head run (repeatable), as --base.")
@output_options_for(DIFF_RENDERERS)
@click.option("--fail-on", "fail_on", multiple=True, metavar="RULE",
              help="Exit 1 when RULE holds (repeatable): step_time:+5% (slower by more than 5%, "
                   "beyond noise), gpu_idle>0.30, dataloader_wait>10%, memcpy_share>0.2, step_time_ms>120, "
                   "verdict=input_bound (HEAD's figures).")
@click.option("--tolerance", default=TOLERANCE_DEFAULT, show_default=True, metavar="PCT",
              help="A change whose 95% interval lies within +-PCT is 'unchanged'; a change must exceed it "
                   "to be regressed or improved.")
@click.option("--run-noise", "run_noise", default=RUN_NOISE_DEFAULT, show_default=True, metavar="PCT",
              help="With one capture on a side and no history (fewer than 3 runs): how far two captures of "
                   "one setting differ in step time; a change within it is only likely_slower/likely_faster.")
@click.option("--fail-on-unconfirmed", is_flag=True,
              help="step_time gates also fail on a likely_slower change (within run-to-run variation).")
@analysis_options
@execution_options
def diff_command(sides: tuple[Path, ...], bases: tuple[Path, ...], heads: tuple[Path, ...], output: Path | None,
                 fmt: str | None, force: bool, quiet: bool, fail_on: tuple[str, ...], tolerance: str,
                 run_noise: str, fail_on_unconfirmed: bool, **params: Any) -> None:
    """Compare BASE (before a change) with HEAD (after it) (the help text is DIFF_HELP)."""
    from ..compare import compare_runs, with_gates
    from ..errors import GateFailed, UsageError
    from ..gates import evaluate_all, failed_message, parse_rules
    from ..pipeline import analyze, is_saved_report, load
    from ..report.diff import render_diff_text

    if sides and (bases or heads):
        raise click.UsageError("give BASE HEAD, or --base RUN ... --head RUN ..., not both")
    if len(sides) == 1:
        raise click.UsageError("Missing argument 'HEAD': diff takes BASE HEAD, or --base RUN ... --head RUN ...")
    if len(sides) > 2:
        raise click.UsageError(f"diff takes BASE and HEAD ({len(sides)} paths given); several runs a side: "
                               f"--base RUN --base RUN --head RUN")
    if sides:
        bases, heads = (sides[0],), (sides[1],)
    if not bases or not heads:
        raise click.UsageError(f"Missing {'--head' if bases else '--base'}: diff needs a base and a head: BASE HEAD, "
                               f"or --base RUN ... --head RUN ...")
    try:
        tol = _tolerance(tolerance)
    except ValueError as exc:
        raise UsageError(f"--tolerance: {exc}") from None
    try:
        noise = _tolerance(run_noise)
    except ValueError as exc:
        raise UsageError(f"--run-noise: {str(exc).replace('tolerance', 'run noise')}") from None
    rules = parse_rules(fail_on)
    fmt = output_format(output, fmt, DIFF_RENDERERS)
    base_runs, head_runs = _runs(bases, is_saved_report), _runs(heads, is_saved_report)
    target = output or Path.cwd() / f"{stem(heads[0])}.diff.{extension(DIFF_RENDERERS, fmt)}"
    options = build_options(params)
    check_target(target, force, [*bases, *heads, *base_runs, *head_runs, *option_inputs(options)])
    base_data = [load(p) if is_saved_report(p) else analyze(p, options) for p in base_runs]
    head_data = [load(p) if is_saved_report(p) else analyze(p, options) for p in head_runs]
    named: list[str | None] = [str(p) if is_saved_report(p) else None for p in [*base_runs, *head_runs]]
    reports = (named[:len(base_runs)], named[len(base_runs):])
    comparison = compare_runs(base_data, head_data, tol, root=str(Path.cwd()), reports=reports, default_noise=noise)
    comparison = with_gates(comparison, evaluate_all(rules, head_data[-1], comparison,
                                                     fail_on_unconfirmed=fail_on_unconfirmed))
    write(target, DIFF_RENDERERS[fmt](comparison))
    if not quiet:
        say(render_diff_text(comparison), target)
        if str(target) != "-":
            say(f"Comparison ({fmt}) written to {terminal(target)}\n", target)
    message = failed_message(comparison.gates)
    if message:
        raise GateFailed(message)


def _runs(paths: tuple[Path, ...], saved: Callable[[Path], bool]) -> list[Path]:
    """The runs a side names: each path is one run, except a directory holding saved JSON reports (and no
    trace), which is one run per report, in name order."""
    out: list[Path] = []
    for p in paths:
        if p.is_dir():
            files = sorted(f for f in p.iterdir() if f.is_file())
            reports = [f for f in files if f.suffix == ".json" and saved(f)]
            if reports and len(reports) == len([f for f in files if f.name.endswith((".json", ".json.gz", ".pb"))]):
                out += reports
                continue
        out.append(p)
    return out
