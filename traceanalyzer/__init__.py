"""traceanalyzer: why is my training slow? Reads profiler traces into one Timeline, computes
figures a user can check by hand, names the bottleneck, and writes a report that travels.

    import traceanalyzer as ta
    a = ta.analyze("trace.json.gz")        # -> Analysis (typed, frozen)
    a.steps(); a.gaps(); a.kernels(); a.findings()   # pandas DataFrames
    a.to_html("report.html"); a.save("report.json"); ta.load("report.json")
"""

from ._version import __version__
from .errors import InputError, TraceAnalyzerError, UsageError
from .pipeline import Options, analyze, load
from .result import Analysis

__all__ = ["Analysis", "InputError", "Options", "TraceAnalyzerError", "UsageError", "__version__", "analyze",
           "load"]
