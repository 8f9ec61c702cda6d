"""`traceanalyzer report TRACE...`: analyse one job (or each run of a log dir) and write a report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from ..inert import terminal
from ..report import RENDERERS
from ._options import (
    analysis_options,
    build_options,
    execution_options,
    extension,
    output_format,
    output_options_for,
    stem,
)
from ._output import check_target, option_inputs, say, unique_targets, write


def verdicts_help() -> str:
    """The verdicts, one line each, from the registry (traceanalyzer/causes.py): a new verdict shows
    up in --help without a word typed here."""
    from ..causes import VERDICT_LIST, VERDICTS

    width = max(len(v) for v in VERDICTS) + 2
    return "\n".join(f"  {v.id:<{width}}{v.title}" for v in VERDICT_LIST if v.id in VERDICTS)


REPORT_HELP = f"""Analyse TRACES and write a report: why training is slow, with figures and advice.

\b
Examples:
  traceanalyzer report trace.json                      # writes trace.report.html here
  traceanalyzer report trace.json.gz -o - --format md  # Markdown on standard output
  traceanalyzer report trace.json.gz -o run.bmf.json --format bmf  # Bencher Metric Format, for a tracker
  traceanalyzer report ranks/ --jobs 8 -o job.json     # every rank file of a job, 8 processes
  traceanalyzer report logdir/ --all-runs -o out.json  # each run of a TensorBoard log dir
  traceanalyzer report trace.json --dmon gpu.log --host-log host.csv   # with nvidia-smi, glances
  traceanalyzer report trace.json --fail-on 'gpu_idle>0.30'  # exit 1 when the rule holds (CI)
  traceanalyzer report sample_traces/input_bound.json  # a bundled sample, from a checkout

\b
TRACES are torch.profiler / Kineto Chrome-trace files (.json or .json.gz), TensorFlow/JAX
profiles (.xplane.pb, .trace.json.gz; detected by content), or directories. A TensorBoard
log dir is searched for PyTorch <worker>.<span>.pt.trace.json files and TF/JAX
plugins/profile/<run>/ folders; the newest run is analysed unless --run or --all-runs says
otherwise. Any other directory = every trace or log directly in it, found by content whatever
its name. Several files = several ranks of one job.

\b
The report gives, per rank and GPU: GPU busy and idle time over the window (the host's
ProfilerStep span), idle gaps of at least --min-gap with the step they fall in, memcpy time
by direction, DataLoader wait, per-step breakdown and top kernels. Every figure is defined
in the report and in docs/figures.md.

\b
The verdict names one bottleneck per rank, gives every idle gap a cause from what the host
was doing, and says what to change and how much GPU time that could win at most. Verdicts:
{verdicts_help()}

\b
nvidia-smi logs (dmon text, --query-gpu CSV, DCGM CSV; named with --dmon, given among
TRACES, or found beside the trace) are put on the trace's clock (automatically unless
--dmon-offset is given) and add per-GPU utilisation, power and clock figures, idle runs
and a cross-check with the trace. A log alone is reported on its own clock.

\b
Exit status: 0 ok, 1 a gate failed, 2 bad input or usage, 3 internal error.
More: docs/report.md, docs/diagnosis.md.
"""


@click.command("report", help=REPORT_HELP)
@click.argument("traces", nargs=-1, required=True, type=click.Path(path_type=Path))
@output_options_for(RENDERERS)
@analysis_options
@execution_options
@click.option("--all-runs", is_flag=True,
              help="Log dirs: one report per run, named <output>.<run>.<format>.")
@click.option("--fail-on", "fail_on", multiple=True, metavar="RULE",
              help="Exit 1 (after writing the report) when RULE holds, e.g. gpu_idle>0.30, "
                   "dataloader_wait>10%, memcpy_share>0.2, step_time_ms>120, verdict=input_bound (repeatable).")
def report_command(traces: tuple[Path, ...], output: Path | None, fmt: str | None, force: bool, quiet: bool,
                   all_runs: bool, fail_on: tuple[str, ...], **params: Any) -> None:
    """Analyse TRACES and write a report (the help text is REPORT_HELP)."""
    from ..errors import GateFailed, UsageError
    from ..gates import evaluate_all, failed_message, parse_rules
    from ..pipeline import plan_runs
    from ..progress import Progress
    from ..report import render

    rules = parse_rules(fail_on)
    fmt = output_format(output, fmt, RENDERERS)
    base = output or Path.cwd() / f"{stem(traces[0])}.report.{extension(RENDERERS, fmt)}"
    if all_runs and str(base) == "-":
        raise UsageError("--all-runs writes one file per run; give -o a file name, not '-'")
    progress = Progress(list(traces))
    options = build_options(params, progress=progress.advance, stage=progress.stage)
    failures: list[str] = []
    try:
        runs = plan_runs(list(traces), options, all_runs=all_runs)
        targets = unique_targets([run_target(base, label) if all_runs else base for label, _ in runs])
        inputs = [*traces, *option_inputs(options)]
        for target in targets:  # every output path is checked before the first analysis starts
            check_target(target, force, inputs)
        for (_label, analyse), target in zip(runs, targets):
            analysis = analyse()
            gates = evaluate_all(rules, analysis)
            progress.stage("rendering the report")
            data = render(analysis, fmt)
            progress.done()
            write(target, data)
            if not quiet:
                say(render(analysis, "text").decode("utf-8"), target)
                if str(target) != "-":
                    say(f"Report ({fmt}) written to {terminal(target)}\n", target)
                for g in gates:
                    say(terminal(f"gate {'passed' if g.passed else 'FAILED'}: {g.rule} ({g.detail})") + "\n", target)
            message = failed_message(gates)
            if message:
                failures.append(message if len(runs) == 1 else f"{_label}: {message}")
    finally:
        progress.done()  # clears the progress line before an error message, too
    if failures:
        raise GateFailed("; ".join(failures))


def run_target(base: Path, label: str) -> Path:
    """out.json + run 'train/plugins/profile/2026_11_22' -> out.train_plugins_profile_2026_11_22.json
    (runs whose names map to the same file are told apart by `unique_targets`)."""
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in label).strip("_") or "run"
    return base.with_name(f"{base.stem}.{safe}{base.suffix}")
