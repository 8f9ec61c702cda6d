"""Reading one Kineto JSON file both ways (compiled scanner, pure-Python reader) and comparing every column."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from traceanalyzer.formats import kineto, scanner
from traceanalyzer.formats._base import ReadOptions

needs_scanner = pytest.mark.skipif(scanner._scan is None, reason="the compiled scanner is not built here")


def read_both(path: Path, options: ReadOptions | None = None) -> tuple[Any, Any]:
    """(scanner's, pure-Python reader's) result: a Timeline, or the error raised (its type and message)."""
    out: list[Any] = []
    saved = os.environ.get(scanner.PURE_PYTHON_ENV)
    try:
        for pure in ("0", "1"):
            os.environ[scanner.PURE_PYTHON_ENV] = pure
            try:
                out.append(kineto.read_path(path, options or ReadOptions()))
            except Exception as exc:  # noqa: BLE001 - any error must be the same both ways
                out.append(f"{type(exc).__name__}: {exc}")
    finally:
        if saved is None:
            os.environ.pop(scanner.PURE_PYTHON_ENV, None)
        else:
            os.environ[scanner.PURE_PYTHON_ENV] = saved
    return out[0], out[1]


def was_scanned(path: Path) -> bool:
    """Whether the scanner reads `path` itself (rather than leaving it to the pure-Python reader)."""
    return isinstance(scanner.scan_path(path, 1 << 40), scanner.Scanned)


def assert_same(a: Any, b: Any) -> None:
    """Identical Timelines (every column of every table, with dtypes and category order; sources,
    ranks and devices), or identical errors."""
    if isinstance(a, str) or isinstance(b, str):
        assert a == b
        return
    for table in ("events", "memory", "counters", "host_metrics"):
        fa, fb = getattr(a, table), getattr(b, table)
        assert list(fa.columns) == list(fb.columns), table
        for col in fa.columns:
            sa, sb = fa[col], fb[col]
            assert sa.dtype == sb.dtype, (table, col, sa.dtype, sb.dtype)
            if isinstance(sa.dtype, pd.CategoricalDtype):
                assert list(sa.cat.categories) == list(sb.cat.categories), (table, col)
            pd.testing.assert_series_equal(sa, sb, check_exact=True, obj=f"{table}.{col}")
    for attr in ("sources", "ranks", "devices"):
        assert [dataclasses.asdict(x) for x in getattr(a, attr)] == [dataclasses.asdict(x) for x in getattr(b, attr)]
    assert a.warnings == b.warnings
