"""The protobuf wire format decoded many messages at a time, with numpy (`_perfetto_pb` walks one).

`scan_many` reads the fields of N messages of one type (N byte ranges of one buffer) breadth first:
each round decodes the next field of every message not yet finished, as array operations, so the
Python work is per round (as many as the longest message has fields), not per field. It checks what
the one-message walker checks (wire types against the schema, lengths within the message, varints of
at most 10 bytes, no groups) and raises `WireError` on the first damage it meets; that error's offset
is not necessarily the first in file order, so a caller that needs the exact message reruns the
one-message walker (`pftrace` does). A few messages with many more fields than the rest finish with
the one-message walker (`scan`), so a hostile message of a million fields costs no million rounds.
"""

from __future__ import annotations

import dataclasses
import struct

import numpy as np

from ._perfetto_pb import _ALLOWED, LEN, MAX_VARINT_BYTES, VARINT, WireError, scan

I64, I32 = 1, 5
_STRAGGLERS = 32  # messages left when the rounds have gone on a while: finished one by one
_ROUNDS_BEFORE_STRAGGLERS = 64
_U64 = struct.Struct("<Q")
_DOUBLE = struct.Struct("<d")


@dataclasses.dataclass
class Fields:
    """The schema's fields of N messages, grouped by message (`msg`), in file order within each:
    field number, wire type, value (a varint's value, a fixed-width field's raw bits, a length-delimited
    field's first byte) and `stop` (the end of a length-delimited field, else 0), `at` (the tag's offset)."""

    msg: np.ndarray
    num: np.ndarray
    wire: np.ndarray
    val: np.ndarray
    stop: np.ndarray
    at: np.ndarray

    def where(self, mask: np.ndarray) -> Fields:
        return Fields(self.msg[mask], self.num[mask], self.wire[mask], self.val[mask], self.stop[mask], self.at[mask])


def varints(u8: np.ndarray, pos: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(values as uint64, positions after them) of the varints starting at `pos`, each before its `end`."""
    n = len(pos)
    value = np.zeros(n, np.uint64)
    after = np.empty(n, np.int64)
    todo = np.arange(n)
    for k in range(MAX_VARINT_BYTES):
        q = pos[todo] + k
        cut = q >= end[todo]
        if cut.any():
            raise WireError(int(pos[todo[cut.argmax()]]),
                            "a varint cut off by the end of its message or of the file (truncated data)")
        b = u8[q]
        if k == MAX_VARINT_BYTES - 1 and (b[b < 0x80] > 1).any():
            raise WireError(int(pos[todo[0]]), "a varint beyond 64 bits")  # the walker keeps it whole
        value[todo] |= (b & 0x7F).astype(np.uint64) << np.uint64(7 * k)
        done = b < 0x80
        after[todo[done]] = q[done] + 1
        todo = todo[~done]
        if not len(todo):
            return value, after
    raise WireError(int(pos[todo[0]]), f"a varint longer than {MAX_VARINT_BYTES} bytes")


def _allowed_array(message: str) -> np.ndarray:
    table = _ALLOWED[message]
    out = np.zeros(max(table) + 1, np.int64)
    for number, (mask, _) in table.items():
        out[number] = mask
    return out


_ALLOWED_ARRAYS: dict[str, np.ndarray] = {}


def scan_many(buf: bytes, u8: np.ndarray, starts: np.ndarray, ends: np.ndarray, message: str) -> Fields:
    """The fields of `message` in each buf[starts[i]:ends[i]] (see `Fields`); fields not in the schema
    are skipped, their framing checked."""
    allowed = _ALLOWED_ARRAYS.get(message)
    if allowed is None:
        allowed = _ALLOWED_ARRAYS[message] = _allowed_array(message)
    top = len(allowed)
    idx = np.arange(len(starts))
    pos = np.asarray(starts, np.int64).copy()
    end_all = np.asarray(ends, np.int64)
    parts: list[tuple[np.ndarray, ...]] = []
    rounds = 0
    while True:
        live = pos < end_all[idx]
        if not live.all():
            idx, pos = idx[live], pos[live]
        if not len(idx):
            break
        rounds += 1
        if rounds > _ROUNDS_BEFORE_STRAGGLERS and len(idx) <= _STRAGGLERS:
            parts.append(_one_by_one(buf, idx, pos, end_all[idx], message))
            break
        end = end_all[idx]
        tag, p = varints(u8, pos, end)
        num = (tag >> np.uint64(3)).astype(np.int64) if tag.max(initial=0) < 1 << 62 else None
        if num is None:
            raise WireError(int(pos[0]), f"a field tag of {message} beyond any field number")
        wire = (tag & np.uint64(7)).astype(np.int64)
        if (num == 0).any():
            raise WireError(int(pos[(num == 0).argmax()]), f"a field tag of {message} with field number 0")
        if ((wire == 3) | (wire == 4) | (wire > 5)).any():
            raise WireError(int(pos[0]), f"a field of {message} with a group or invalid wire type")
        mask = np.where(num < top, allowed[np.minimum(num, top - 1)], 0)
        known = mask != 0
        if (known & ((mask >> wire) & 1 == 0)).any():
            raise WireError(int(pos[0]), f"a field of {message} with the wrong wire type")
        val = np.zeros(len(idx), np.uint64)
        stop = np.zeros(len(idx), np.int64)
        after = p.copy()
        sel = np.flatnonzero(wire == VARINT)
        if len(sel):
            val[sel], after[sel] = varints(u8, p[sel], end[sel])
        sel = np.flatnonzero(wire == LEN)
        if len(sel):
            length, q = varints(u8, p[sel], end[sel])
            if (length > np.uint64(1 << 62)).any():
                raise WireError(int(pos[sel[0]]), f"a field of {message} longer than its message")
            s = q + length.astype(np.int64)
            if (s > end[sel]).any():
                raise WireError(int(pos[sel[0]]), f"a field of {message} longer than its message")
            val[sel] = q.astype(np.uint64)
            stop[sel] = s
            after[sel] = s
        for w, width in ((I64, 8), (I32, 4)):
            sel = np.flatnonzero(wire == w)
            if len(sel):
                q = p[sel]
                if (q + width > end[sel]).any():
                    raise WireError(int(pos[sel[0]]), f"a fixed-width field of {message} cut off")
                raw = u8[q[:, None] + np.arange(width)]
                val[sel] = raw.view("<u8" if width == 8 else "<u4").ravel()
                after[sel] = q + width
        if known.all():
            parts.append((idx, num, wire, val, stop, pos))
        else:
            parts.append((idx[known], num[known], wire[known], val[known], stop[known], pos[known]))
        pos = after
    if not parts:
        empty = np.zeros(0, np.int64)
        return Fields(empty, empty, empty, np.zeros(0, np.uint64), empty, empty)
    cols = [np.concatenate([part[k] for part in parts]) for k in range(6)]
    order = np.argsort(cols[0], kind="stable")
    return Fields(*(c[order] for c in cols))


def _one_by_one(buf: bytes, idx: np.ndarray, pos: np.ndarray, end: np.ndarray, message: str) -> tuple[np.ndarray, ...]:
    """The rest of a few long messages, by the one-message walker, in `scan_many`'s columns."""
    wires = _ALLOWED[message]
    rows: list[tuple[int, int, int, int, int, int]] = []
    for i, p, e in zip(idx.tolist(), pos.tolist(), end.tolist()):
        for number, value, at in scan(buf, p, e, message):
            if isinstance(value, tuple):
                rows.append((i, number, LEN, value[0], value[1], at))
            elif isinstance(value, float):
                rows.append((i, number, I64, _U64.unpack(_DOUBLE.pack(value))[0], 0, at))
            else:
                wire = VARINT if not wires[number][0] >> I64 & 1 and not wires[number][0] >> I32 & 1 else (
                    I64 if wires[number][0] >> I64 & 1 else I32)
                rows.append((i, number, wire, value & 0xFFFFFFFFFFFFFFFF, 0, at))
    if not rows:
        empty = np.zeros(0, np.int64)
        return empty, empty, empty, np.zeros(0, np.uint64), empty, empty
    cols = list(zip(*rows))
    return (np.array(cols[0], np.int64), np.array(cols[1], np.int64), np.array(cols[2], np.int64),
            np.array(cols[3], np.uint64), np.array(cols[4], np.int64), np.array(cols[5], np.int64))


def last_of(f: Fields, numbers: tuple[int, ...], n: int) -> tuple[np.ndarray, np.ndarray]:
    """(has, index into f) of the last field among `numbers` of each of n messages."""
    sel = np.flatnonzero(np.isin(f.num, numbers))
    has = np.zeros(n, bool)
    where = np.full(n, -1, np.int64)
    if len(sel):
        m = f.msg[sel]
        last = np.ones(len(sel), bool)
        last[:-1] = m[1:] != m[:-1]
        has[m[last]] = True
        where[m[last]] = sel[last]
    return has, where
