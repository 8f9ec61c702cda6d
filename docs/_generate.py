"""Write the tables of the docs that are copies of the code's registries.

    python docs/_generate.py           # rewrite the generated blocks in docs/*.md
    python docs/_generate.py --check   # exit 1 when a committed page differs from what it would write

A page holds hand-written prose and generated blocks. A block starts with a line
`<!-- generated: NAME -->` and ends with `<!-- end generated -->`; only what lies between is
rewritten, from:

- `figures`: every figure's definition (`traceanalyzer/result/definitions.py` `FIGURES`);
- `causes`, `cause_patterns`, `verdicts`: the registry of gap causes and verdicts (`traceanalyzer/causes.py`);
- `advice_patterns`: the catalogue of patterns and their fixes (`traceanalyzer/advice_patterns.py`);
- `thresholds`: every constant of `traceanalyzer/analyses/thresholds.py` and
  `traceanalyzer/diagnosis/thresholds.py`, with its value and the comment above it in the code;
- `counter_metrics`, `host_metrics`: `traceanalyzer/timeline.py` `COUNTER_METRICS` and `HOST_METRICS`;
- `run_metrics`, `bmf_measures`: the run's metrics (`traceanalyzer/result/metrics.py` `METRICS`), what
  `--fail-on`, `--format bmf`, `diff` and the service read.

So adding a cause, a threshold or a figure is a registry entry and `python docs/_generate.py`;
`tests/test_docs.py` fails while a page is out of step.
"""

from __future__ import annotations

import ast
import inspect
import re
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
if str(ROOT) not in sys.path:  # run from a checkout without installing
    sys.path.insert(0, str(ROOT))

BLOCK = re.compile(r"(<!-- generated: (\w+) -->\n)(.*?)(<!-- end generated -->)", re.DOTALL)


def _cell(text: str) -> str:
    """Text for one Markdown table cell (one line; a pipe would end the cell)."""
    return re.sub(r"\s+", " ", text).replace("|", "&#124;").strip()


def figures() -> str:
    from traceanalyzer.result.definitions import COMPARISON_FIGURES, FIGURES

    figures = {**FIGURES, **COMPARISON_FIGURES}
    return "".join(f"- **{name}**: {' '.join(text.split())}\n" for name, text in figures.items())


def _metric_table(metrics: dict[str, str]) -> str:
    rows = ["| metric | meaning |", "|---|---|"]
    rows += [f"| `{name}` | {_cell(text)} |" for name, text in metrics.items()]
    return "\n".join(rows) + "\n"


def counter_metrics() -> str:
    from traceanalyzer.timeline import COUNTER_METRICS

    return _metric_table(COUNTER_METRICS)


def host_metrics() -> str:
    from traceanalyzer.timeline import HOST_METRICS

    return _metric_table(HOST_METRICS)


_UNITS = {"ms": "ms", "fraction": "fraction, 0–1", "bytes": "bytes", "1/s": "per second"}


def run_metrics() -> str:
    from traceanalyzer.result import metrics as M

    rows = ["| metric (`--fail-on`, the service) | BMF measure | unit | worse when | definition |",
            "|---|---|---|---|---|"]
    rows += [f"| `{m.key}` | `{m.bmf}` | {_UNITS[m.unit]} | {'higher' if m.higher_is_worse else 'lower'} | "
             f"{_cell(m.definition)} |" for m in M.METRICS]
    rows.append(f"| `{M.VERDICT.key}` | – | a verdict id | – | {_cell(M.VERDICT.definition)} |")
    return "\n".join(rows) + "\n"


def bmf_measures() -> str:
    from traceanalyzer.result import metrics as M

    rows = ["| measure | value (bounds) |", "|---|---|"]
    rows += [f"| `{m.bmf}` | {_cell(m.label)}, {_UNITS[m.unit]}: {_cell(m.definition)} (metric `{m.key}`) |"
             for m in M.METRICS]
    return "\n".join(rows) + "\n"


def causes() -> str:
    from traceanalyzer import causes as C

    rows = ["| cause | label | verdict it leads to | N% of the idle time is spent ... | recognised by |",
            "|---|---|---|---|---|"]
    for c in C.CAUSE_LIST:
        if c.host_kind is not None:
            how = f"host events of kind `{c.host_kind}` (priority {c.priority})"
        elif c.host_pattern is not None:
            how = f"host event names, pattern below (priority {c.priority})"
        else:
            how = "a rule of the gap attribution (`analyses/gaps.py`)"
        rows.append(f"| `{c.id}` | {_cell(c.label)} | `{c.verdict}` | {_cell(c.phrase)} | {how} |")
    return "\n".join(rows) + "\n"


def cause_patterns() -> str:
    from traceanalyzer import causes as C

    out = []
    for c in C.host_causes():
        if c.host_pattern is None:
            continue
        flags = " (case-insensitive)" if c.host_pattern.flags & re.IGNORECASE else ""
        out += [f"`{c.id}`{flags}, matched with `re.search` on the event name:", "",
                "```text", c.host_pattern.pattern, "```", ""]
    return "\n".join(out)


def advice_patterns() -> str:
    from traceanalyzer import advice_patterns as AP

    rows = ["| pattern | what it is | recognised by (`re.search` on op, annotation or Python-frame names) | fix |",
            "|---|---|---|---|"]
    for p in AP.PATTERNS:
        every = " (named when it runs every step)" if p.every_step else ""
        rows.append(f"| `{p.id}` | {_cell(p.label)}{every} | `{_cell(p.names.pattern)}` | {_cell(p.advice)} |")
    return "\n".join(rows) + "\n"


def verdicts() -> str:
    from traceanalyzer import causes as C

    rows = ["| verdict | label | title of its finding | cause (colour) |", "|---|---|---|---|"]
    for v in C.VERDICT_LIST:
        kind = " (a finding, never a primary verdict)" if v.id not in C.VERDICTS else ""
        rows.append(f"| `{v.id}`{kind} | {_cell(v.label)} | {_cell(v.title)} | "
                    f"{f'`{v.cause}`' if v.cause else '–'} |")
    return "\n".join(rows) + "\n"


def _value(name: str, value: object) -> str:
    """A constant's value as a reader wants it: times and sizes with a unit."""
    if name.endswith("_NS") and isinstance(value, int):
        for unit, ns in (("s", 10**9), ("ms", 10**6), ("us", 10**3)):
            if value >= ns and value % ns == 0:
                return f"{value // ns} {unit}"
        return f"{value} ns"
    if name.endswith("_BYTES_PER_S") and isinstance(value, int) and value % 10**6 == 0:
        return f"{value // 10**6} MB/s"
    if name.endswith("_BYTES") and isinstance(value, int):
        for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
            if value >= size and value % size == 0:
                return f"{value // size} {unit}"
        return f"{value} B"
    if isinstance(value, int):
        return f"{value:,}"
    return repr(value)


def _comments(module: ModuleType) -> dict[str, str]:
    """Each upper-case constant's explanation: the comment lines right above it (or above the run of
    constants it belongs to), and its own trailing comment."""
    lines = inspect.getsource(module).splitlines()
    found: dict[str, str] = {}
    for node in ast.parse("\n".join(lines)).body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
            continue
        name = node.targets[0].id
        if not name.isupper():
            continue
        i = node.lineno - 2
        while i >= 0 and re.match(r"^[A-Z_0-9]+ = ", lines[i]):  # a run of constants shares one comment
            i -= 1
        above: list[str] = []
        while i >= 0 and lines[i].startswith("#") and not lines[i].startswith("# ---"):
            above.insert(0, lines[i].lstrip("# ").rstrip())
            i -= 1
        own = lines[node.lineno - 1].split("#", 1)[1].strip() if "#" in lines[node.lineno - 1] else ""
        found[name] = " ".join(p for p in (" ".join(above), own) if p)
    return found


def thresholds() -> str:
    from traceanalyzer.analyses import thresholds as attribution
    from traceanalyzer.diagnosis import thresholds as rules

    rows = ["| constant | value | where | why (the comment in the code) |", "|---|---|---|---|"]
    for module, where in ((attribution, "`analyses/thresholds.py`"), (rules, "`diagnosis/thresholds.py`")):
        first, previous = "", ""
        for name, why in _comments(module).items():
            if why != previous:  # constants under one comment: the comment once, then a pointer to it
                first, previous, text = name, why, _cell(why)
            else:
                text = f"see `{first}`"
            rows.append(f"| `{name}` | {_value(name, getattr(module, name))} | {where} | {text} |")
    return "\n".join(rows) + "\n"


GENERATORS: dict[str, Callable[[], str]] = {
    "figures": figures, "counter_metrics": counter_metrics, "host_metrics": host_metrics,
    "causes": causes, "cause_patterns": cause_patterns, "verdicts": verdicts, "thresholds": thresholds,
    "advice_patterns": advice_patterns, "run_metrics": run_metrics, "bmf_measures": bmf_measures,
}


def generated(text: str) -> str:
    """The page with every generated block rewritten from the code."""
    def fill(m: re.Match[str]) -> str:
        if m.group(2) not in GENERATORS:
            raise SystemExit(f"unknown generated block {m.group(2)!r}")
        return m.group(1) + GENERATORS[m.group(2)]() + m.group(4)

    return BLOCK.sub(fill, text)


def pages() -> list[Path]:
    return sorted(p for p in DOCS.glob("*.md") if BLOCK.search(p.read_text(encoding="utf-8")))


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for page in pages():
        text = page.read_text(encoding="utf-8")
        new = generated(text)
        if new != text:
            stale.append(page.relative_to(ROOT))
            if not check:
                page.write_text(new, encoding="utf-8")
    if check and stale:
        print("out of step with the code (run python docs/_generate.py):", *stale, sep="\n  ")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
