"""`traceanalyzer diff BASE HEAD`: did a change make training slower, by how much, and why."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from ..inert import terminal
from ._options import analysis_options, build_options, execution_options, output_format, output_options, stem
from ._output import check_target, option_inputs, say, write
from .report import verdicts_help


def _tolerance(text: str) -> float:
    t = text.strip()
    try:
        value = float(t.rstrip("%")) / (100 if t.endswith("%") else 1)
    except ValueError:
        raise ValueError(f"{text!r} is not a tolerance: write 2% or 0.02") from None
    if not 0 <= value < 1:
        raise ValueError(f"{text!r}: the tolerance must be between 0% and 100%")
    return value


DIFF_HELP = f"""Compare BASE (before a change) with HEAD (after it).

\b
Examples:
  traceanalyzer diff base.report.json head_trace.json.gz -o diff.md
  traceanalyzer diff base/ head/ --fail-on step_time:+5% -o diff.md   # exit 1 when slower by 5%
  traceanalyzer diff base.json head.json -o "$GITHUB_STEP_SUMMARY" --format md   # a CI job summary
  traceanalyzer diff base.json head.json -o - --format json    # the comparison for scripts

\b
Each side is anything `report` takes (a trace, .json.gz, a log dir, a directory of ranks)
or a JSON report saved by `traceanalyzer report --format json` (CI keeps the base
branch's small JSON report, not its trace).

\b
The verdict of the change comes first: regressed, improved, unchanged (the 95% interval
of the median step-time change lies within --tolerance) or inconclusive (too wide, or
fewer than 3 steps on a side). Then where the per-step change comes from (GPU compute,
communication, copies, GPU idle by cause: the parts add up to the change of the mean
step), the kernels that moved, and both sides' verdicts, one of:
{verdicts_help()}

\b
Exit status: 0 ok, 1 a gate failed (the output is written first), 2 bad input or usage,
3 internal error.
More: docs/ci.md (gates, pull-request comments, a GitHub Actions workflow).
"""


@click.command("diff", help=DIFF_HELP)
@click.argument("base", type=click.Path(path_type=Path))
@click.argument("head", type=click.Path(path_type=Path))
@output_options
@click.option("--fail-on", "fail_on", multiple=True, metavar="RULE",
              help="Exit 1 when RULE holds (repeatable): step_time:+5% (slower by more than 5%, "
                   "beyond noise), gpu_idle>0.30, dataloader_wait>10%, memcpy_share>0.2, step_time_ms>120, "
                   "verdict=input_bound (HEAD's figures).")
@click.option("--tolerance", default="2%", show_default=True, metavar="PCT",
              help="A change whose 95% interval lies within +-PCT is 'unchanged'.")
@analysis_options
@execution_options
def diff_command(base: Path, head: Path, output: Path | None, fmt: str | None, force: bool, quiet: bool,
                 fail_on: tuple[str, ...], tolerance: str, **params: Any) -> None:
    """Compare BASE (before a change) with HEAD (after it) (the help text is DIFF_HELP)."""
    from ..compare import compare, with_gates
    from ..errors import GateFailed, UsageError
    from ..gates import evaluate_all, failed_message, parse_rules
    from ..pipeline import analyze, is_saved_report, load
    from ..report.diff import RENDERERS, render_diff_text

    try:
        tol = _tolerance(tolerance)
    except ValueError as exc:
        raise UsageError(f"--tolerance: {exc}") from None
    rules = parse_rules(fail_on)
    fmt = output_format(output, fmt)
    target = output or Path.cwd() / f"{stem(head)}.diff.{fmt}"
    options = build_options(params)
    check_target(target, force, [base, head, *option_inputs(options)])
    sides = [load(p) if is_saved_report(p) else analyze(p, options) for p in (base, head)]
    comparison = compare(sides[0], sides[1], tol, root=str(Path.cwd()))
    comparison = with_gates(comparison, evaluate_all(rules, sides[1], comparison))
    write(target, RENDERERS[fmt](comparison))
    if not quiet:
        say(render_diff_text(comparison), target)
        if str(target) != "-":
            say(f"Comparison ({fmt}) written to {terminal(target)}\n", target)
    message = failed_message(comparison.gates)
    if message:
        raise GateFailed(message)
