"""traceanalyzer: why is my training slow? Reads profiler traces into one Timeline, computes
figures a user can check by hand, names the bottleneck, and writes a report that travels."""

__version__ = "0.1.0"
