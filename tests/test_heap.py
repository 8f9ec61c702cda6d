"""Freed heap handed back to the system between stages (traceanalyzer/heap.py): after many chunk-sized
arrays are freed, glibc keeps their pages until `return_freed_memory` trims them."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from traceanalyzer.heap import return_freed_memory


def _rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * 4096


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim: Linux only")
def test_freed_chunks_are_handed_back():
    if not return_freed_memory():
        pytest.skip("no malloc_trim (not glibc)")
    # chunk-sized arrays below the allocator's mmap threshold live in the heap, as a reader's chunks do
    chunks = [np.ones(8192, dtype=np.int64) for _ in range(4000)]  # 64 KiB each, 256 MiB
    keep = np.ones(8192, dtype=np.int64)  # the heap's top stays in use: only a trim returns what lies below
    before = _rss_bytes()
    del chunks
    freed = _rss_bytes()
    assert return_freed_memory()
    after = _rss_bytes()
    assert before - after > 128 * 1024**2, (before, freed, after)
    assert keep.sum() == 8192
