"""String codes and id columns built per chunk (formats/_columns.Interner, kineto._ids): values
seen before, new ones, repeated new ones and non-strings in one call get the codes and ids the
one-value-at-a-time definitions give."""

from __future__ import annotations

from operator import attrgetter

import numpy as np

from traceanalyzer.formats._columns import CUT_MARK, MAX_NAME_CHARS, Interner, to_int_id
from traceanalyzer.formats.kineto import _ids


def test_codes_mix_seen_and_new_values_in_first_appearance_order() -> None:
    interner = Interner()
    assert interner.codes(["b", "a"]).tolist() == [0, 1]
    long = "x" * (MAX_NAME_CHARS + 5)
    codes = interner.codes(["a", "c", None, "c", "b", 7, long, "d", long])
    assert codes.tolist() == [1, 2, 3, 2, 0, 4, 5, 6, 5]
    assert interner.values == ["b", "a", "c", "", "7", "x" * MAX_NAME_CHARS + CUT_MARK, "d"]
    assert interner.cut == 1
    assert interner.codes([]).tolist() == []


class _Event:
    def __init__(self, pid: object) -> None:
        self.pid = pid


def test_ids_with_a_few_strings_equal_the_loose_parse() -> None:
    values: list[object] = [3, "Spans", 5, "stream 7", *range(20), None]
    for column in (values, [*values, 2**63 + 5]):  # an int beyond int64 too: marked, or kept as uint64 bits
        for unsigned in (False, True):
            got = _ids([_Event(v) for v in column], attrgetter("pid"), unsigned64=unsigned)
            want = to_int_id(column, unsigned64=unsigned)
            assert got.dtype == np.int64
            assert got.tolist() == want.tolist()
    assert _ids([_Event(v) for v in values], attrgetter("pid"))[:4].tolist() == [3, -1, 5, 7]
