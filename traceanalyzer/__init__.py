"""traceanalyzer: why is my training slow? Reads profiler traces into one Timeline, computes
figures a user can check by hand, names the bottleneck, and writes a report that travels.

    import traceanalyzer as ta
    a = ta.analyze("trace.json.gz")        # -> Analysis (typed, frozen)
    a.steps(); a.gaps(); a.kernels(); a.findings()   # pandas DataFrames
    a.to_html("report.html"); a.save("report.json"); ta.load("report.json")

The library's names are imported on first use (PEP 562), so `import traceanalyzer` and the command
line's `--version` / `--help` load neither pandas nor numpy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._version import __version__
from .errors import InputError, TraceAnalyzerError, UsageError

if TYPE_CHECKING:
    from .pipeline import Options, analyze, load
    from .result import Analysis

__all__ = ["Analysis", "InputError", "Options", "TraceAnalyzerError", "UsageError", "__version__", "analyze",
           "load"]

_LAZY = {"Analysis": "result", "Options": "pipeline", "analyze": "pipeline", "load": "pipeline"}


def __getattr__(name: str) -> Any:
    """The pipeline's names, imported when first asked for (they bring pandas and numpy)."""
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module 'traceanalyzer' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{where}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
