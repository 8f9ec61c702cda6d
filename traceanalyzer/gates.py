"""`--fail-on` rules: CI gates on one analysis (`report`) or on a comparison (`diff`).

A rule is `METRIC OP VALUE` or `step_time:+N%`:

* `step_time:+5%` (diff only): follows the verdict of the change: fails when the change is `regressed`
  (the step-time interval excludes zero, or a decisive part made the step slower beyond the tolerance;
  with one capture on a side, also beyond run-to-run variation) and the step time grew by more than 5%
  (its Hodges–Lehmann shift). Noise never trips it. A `likely_slower` change (consistent, but within what
  captures of one setting differ by) fails it only with `fail_on_unconfirmed` (`--fail-on-unconfirmed`).
* `gpu_idle>0.30`, `dataloader_wait>10%`, `memcpy_share>=0.2`, `step_time_ms>120` ... with `>`,
  `>=`, `<`, `<=`: fails when the figure (HEAD's, for diff) satisfies the comparison. The metrics are
  the run's metrics (`result/metrics.py`), the figures every face reads: `step_time_ms` is the report's
  step time (the median job step).
* `verdict=input_bound` / `verdict!=gpu_bound`: fails when the primary verdict (HEAD's) is / is
  not that one.

A rule that cannot be parsed is a usage error listing the metrics. A rule whose figure the run
does not have (e.g. no GPU) passes, and says so. The comparison (`compare.py`) is imported only for a
step_time rule: a report's gates read the run's metrics alone.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .causes import VERDICTS
from .errors import UsageError
from .result import metrics as M

if TYPE_CHECKING:
    from .compare import Comparison
    from .result.types import AnalysisData

# The metrics a rule may name (result/metrics.py). Fractions are in [0, 1]; a value may be written "30%".
METRICS: dict[str, M.Metric] = M.BY_KEY
RULE = re.compile(r"^\s*([a-z_]+)\s*(>=|<=|!=|>|<|=|:)\s*(\S+)\s*$")


@dataclass(frozen=True)
class GateResult:
    """One rule's outcome: the figure it read, whether it passed, and why in words."""

    rule: str
    value: float | str | None
    passed: bool
    detail: str


@dataclass(frozen=True)
class Rule:
    text: str
    metric: str
    op: str
    value: float | str


def _usage(text: str, why: str) -> UsageError:
    names = ", ".join(["step_time:+N%", *(f"{m}" for m in METRICS), "verdict"])
    return UsageError(f"--fail-on {text!r}: {why}; metrics: {names} (e.g. step_time:+5%, gpu_idle>0.30, "
                      f"dataloader_wait>10%, verdict=input_bound)")


def _number(text: str) -> float:
    t = text.strip()
    scale = 0.01 if t.endswith("%") else 1.0
    value = float(t.rstrip("%")) * scale
    if not math.isfinite(value):
        raise ValueError(f"{text!r} is not a finite number")
    return value


def parse_rule(text: str) -> Rule:
    m = RULE.match(text)
    if not m:
        raise _usage(text, "expected METRIC>VALUE, METRIC<VALUE, verdict=NAME or step_time:+N%")
    metric, op, value = m.groups()
    if metric == "step_time":
        if op != ":":
            raise _usage(text, "step_time takes a relative growth, e.g. step_time:+5%")
        try:
            return Rule(text, metric, op, _number(value.lstrip("+")))
        except ValueError:
            raise _usage(text, f"{value!r} is not a percentage") from None
    if metric == "verdict":
        if op not in ("=", "!="):
            raise _usage(text, "verdict takes = or !=")
        if value not in VERDICTS:
            raise _usage(text, f"unknown verdict {value!r} (verdicts: {', '.join(VERDICTS)})")
        return Rule(text, metric, op, value)
    if metric not in METRICS:
        raise _usage(text, f"unknown metric {metric!r}")
    if op in (":", "=", "!="):
        raise _usage(text, f"{metric} takes >, >=, < or <=")
    try:
        return Rule(text, metric, op, _number(value))
    except ValueError:
        raise _usage(text, f"{value!r} is not a number") from None


def parse_rules(texts: tuple[str, ...] | list[str]) -> tuple[Rule, ...]:
    return tuple(parse_rule(t) for t in texts)


def _holds(x: float, op: str, v: float) -> bool:
    return {">": x > v, ">=": x >= v, "<": x < v, "<=": x <= v}[op]


def evaluate(rule: Rule, head: AnalysisData, comparison: Comparison | None = None, *,
             fail_on_unconfirmed: bool = False) -> GateResult:
    """One rule on HEAD (or the one analysis of `report`); `comparison` for step_time rules."""
    if rule.metric == "step_time":
        from .compare import LIKELY_SLOWER, REGRESSED, VERDICT_WORDS

        if comparison is None:
            raise _usage(rule.text, "step_time compares two runs: use it with `traceanalyzer diff`")
        st = comparison.step_time
        if st.change is None or st.ci_low is None:
            return GateResult(rule.text, st.change, True, "not judged: too few steps to measure a change")
        slower = (REGRESSED, LIKELY_SLOWER) if fail_on_unconfirmed else (REGRESSED,)
        failed = comparison.change_verdict in slower and st.change > float(rule.value)
        unconfirmed = ""
        if comparison.change_verdict == LIKELY_SLOWER and not failed and st.change > float(rule.value):
            unconfirmed = " (unconfirmed: not failed without --fail-on-unconfirmed)"
        return GateResult(rule.text, st.change, not failed,
                          f"step time {st.change * 100:+.1f}% (95% CI {st.ci_low * 100:+.1f}% to "
                          f"{(st.ci_high or 0) * 100:+.1f}%; Hodges–Lehmann shift), change "
                          f"{VERDICT_WORDS.get(comparison.change_verdict, comparison.change_verdict)}"
                          f"{_why(comparison)}{unconfirmed}, limit +{float(rule.value) * 100:.1f}%")
    if rule.metric == M.VERDICT.key:
        primary = M.VERDICT.of(head)
        failed = (primary == rule.value) if rule.op == "=" else (primary != rule.value)
        return GateResult(rule.text, primary, not failed, f"verdict {primary}")
    value = M.value(METRICS[rule.metric], head)
    if value is None:
        return GateResult(rule.text, None, True, f"{rule.metric} not available in this run: not judged")
    failed = _holds(value, rule.op, float(rule.value))
    return GateResult(rule.text, round(value, 6), not failed, f"{rule.metric} = {value:.4g}")


def _why(c: Comparison) -> str:
    """What made a regressed / improved verdict: the step time itself or its decisive parts."""
    from .compare import IMPROVED, LIKELY_FASTER, LIKELY_SLOWER, REGRESSED

    if c.change_verdict in (LIKELY_SLOWER, LIKELY_FASTER) and c.run_noise is not None:
        return f" (within run-to-run variation ±{c.run_noise.allowance * 100:.1f}%)"
    if c.change_verdict not in (REGRESSED, IMPROVED):
        return ""
    if c.reason == "parts":
        direction = c.step_time.change or 0.0
        names = [p.label for p in c.attribution if p.decisive and (p.shift_per_step_us or 0.0) * direction > 0]
        return f" by decisive parts ({', '.join(names[:3])})" if names else ""
    return " (the interval excludes zero)"


def evaluate_all(rules: tuple[Rule, ...], head: AnalysisData, comparison: Comparison | None = None, *,
                 fail_on_unconfirmed: bool = False) -> tuple[GateResult, ...]:
    return tuple(evaluate(r, head, comparison, fail_on_unconfirmed=fail_on_unconfirmed) for r in rules)


def failed_message(results: tuple[GateResult, ...]) -> str | None:
    bad = [g for g in results if not g.passed]
    if not bad:
        return None
    return "gate failed: " + "; ".join(f"{g.rule} ({g.detail})" for g in bad)
