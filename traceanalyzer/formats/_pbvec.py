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

from ._perfetto_pb import ALLOWED_WIRE_TYPES, LEN, MAX_VARINT_BYTES, VARINT, WireError, scan

I64, I32 = 1, 5
_STRAGGLERS = 32  # messages left when the rounds have gone on a while: finished one by one
_ROUNDS_BEFORE_STRAGGLERS = 64
_U64 = struct.Struct("<Q")
_DOUBLE = struct.Struct("<d")


@dataclasses.dataclass
class Fields:
    """The schema's fields of N messages, grouped by message (`msg`), in file order within each:
    field number, wire type, value (a varint's value, a fixed-width field's raw bits, a length-delimited
    field's first byte) and `stop` (the end of a length-delimited field, else 0)."""

    msg: np.ndarray
    num: np.ndarray
    wire: np.ndarray
    val: np.ndarray
    stop: np.ndarray

    def where(self, mask: np.ndarray) -> Fields:
        return Fields(self.msg[mask], self.num[mask], self.wire[mask], self.val[mask], self.stop[mask])


def varints(u8: np.ndarray, pos: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(values as uint64, positions after them) of the varints starting at `pos`, each before its `end`."""
    if (pos >= end).any():
        raise WireError(int(pos[(pos >= end).argmax()]),
                        "a varint cut off by the end of its message or of the file (truncated data)")
    b = u8[pos]
    value = (b & 0x7F).astype(np.uint64)
    after = pos + 1
    todo = np.flatnonzero(b >= 0x80)  # most varints are one byte: the rest byte by byte
    for k in range(1, MAX_VARINT_BYTES):
        if not len(todo):
            return value, after
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


def member(num: np.ndarray, numbers: tuple[int, ...]) -> np.ndarray:
    """num[i] in numbers, for small non-negative field numbers (a table lookup, not a sort)."""
    if not len(num):
        return np.zeros(0, bool)
    table = np.zeros(max(int(num.max()), *numbers) + 1, bool)
    table[list(numbers)] = True
    return table[num]


def _checks(message: str) -> np.ndarray:
    """(field number, wire type) -> 0: a field of the schema, 1: a field to skip, 2: damage; field numbers
    beyond the schema's count as the last row (not in the schema)."""
    table = ALLOWED_WIRE_TYPES[message]
    top = max(table) + 1
    out = np.full((top + 1, 8), 2, np.int8)
    for number in range(1, top + 1):
        mask = table[number][0] if number in table else 0
        for wire in (VARINT, I64, LEN, I32):
            out[number, wire] = (0 if mask >> wire & 1 else 2) if mask else 1
    return out.ravel()


_CHECKS: dict[str, np.ndarray] = {}


def scan_many(buf: bytes, u8: np.ndarray, starts: np.ndarray, ends: np.ndarray, message: str) -> Fields:
    """The fields of `message` in each buf[starts[i]:ends[i]] (see `Fields`); fields not in the schema
    are skipped, their framing checked."""
    checks = _CHECKS.get(message)
    if checks is None:
        checks = _CHECKS[message] = _checks(message)
    top = len(checks) // 8 - 1
    n = len(starts)
    idx = np.arange(n, dtype=np.int32 if n < 1 << 31 else np.int64)
    pos = np.asarray(starts, np.int64).copy()
    end = np.asarray(ends, np.int64)
    parts: list[tuple[np.ndarray, ...]] = []
    filled = np.zeros(n, np.int32)  # fields kept so far, per message: each field's rank in its own
    rounds = 0
    while True:
        live = pos < end
        if not live.all():
            idx, pos, end = idx[live], pos[live], end[live]
        if not len(idx):
            break
        rounds += 1
        if rounds > _ROUNDS_BEFORE_STRAGGLERS and len(idx) <= _STRAGGLERS:
            rest = _one_by_one(buf, idx, pos, end, message)
            m = rest[0]
            rank = np.zeros(len(m), np.int32)
            if len(m):  # the rows come grouped by message, in order
                first = np.r_[0, np.flatnonzero(m[1:] != m[:-1]) + 1]
                rank = (np.arange(len(m)) - np.repeat(first, np.diff(np.r_[first, len(m)]))).astype(np.int32)
                rank += filled[m]
                np.add.at(filled, m, 1)
            parts.append((*rest, rank))
            break
        tag, p = varints(u8, pos, end)
        if tag.max(initial=0) >= 1 << 62:
            raise WireError(int(pos[0]), f"a field tag of {message} beyond any field number")
        num = (tag >> np.uint64(3)).astype(np.int64)
        wire = (tag & np.uint64(7)).astype(np.int8)
        check = checks[np.minimum(num, top) * 8 + wire]
        if (check == 2).any():
            raise WireError(int(pos[(check == 2).argmax()]), f"a field of {message} with field number 0, a "
                                                              f"group, an invalid or an unexpected wire type")
        val = np.zeros(len(idx), np.uint64)
        stop = np.zeros(len(idx), np.int64)
        after = p
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
            val[sel] = q
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
        known = check == 0
        if known.all():
            parts.append((idx, num.astype(np.int32), wire, val, stop, filled[idx]))
            filled[idx] += 1
        else:
            k_idx = idx[known]
            parts.append((k_idx, num[known].astype(np.int32), wire[known], val[known], stop[known], filled[k_idx]))
            filled[k_idx] += 1
        pos = after
    if not parts:
        empty = np.zeros(0, np.int64)
        return Fields(empty, empty.astype(np.int32), empty.astype(np.int8), np.zeros(0, np.uint64), empty)
    offsets = np.cumsum(filled, dtype=np.int64) - filled
    dest = np.concatenate([offsets[part[0]] + part[5] for part in parts])  # by message, file order within
    out = []
    for k in range(5):
        col = np.concatenate([part[k] for part in parts])
        o = np.empty_like(col)
        o[dest] = col
        del col
        out.append(o)
    return Fields(*out)


def _one_by_one(buf: bytes, idx: np.ndarray, pos: np.ndarray, end: np.ndarray, message: str) -> tuple[np.ndarray, ...]:
    """The rest of a few long messages, by the one-message walker, in `scan_many`'s columns."""
    wires = ALLOWED_WIRE_TYPES[message]
    rows: list[tuple[int, int, int, int, int]] = []
    for i, p, e in zip(idx.tolist(), pos.tolist(), end.tolist()):
        for number, value, _ in scan(buf, p, e, message):
            if isinstance(value, tuple):
                rows.append((i, number, LEN, value[0], value[1]))
            elif isinstance(value, float):
                rows.append((i, number, I64, _U64.unpack(_DOUBLE.pack(value))[0], 0))
            else:
                wire = VARINT if not wires[number][0] >> I64 & 1 and not wires[number][0] >> I32 & 1 else (
                    I64 if wires[number][0] >> I64 & 1 else I32)
                rows.append((i, number, wire, value & 0xFFFFFFFFFFFFFFFF, 0))
    if not rows:
        empty = np.zeros(0, np.int64)
        return empty, empty.astype(np.int32), empty.astype(np.int8), np.zeros(0, np.uint64), empty
    cols = list(zip(*rows))
    return (np.array(cols[0], idx.dtype), np.array(cols[1], np.int32), np.array(cols[2], np.int8),
            np.array(cols[3], np.uint64), np.array(cols[4], np.int64))


def last_of(f: Fields, numbers: tuple[int, ...], n: int) -> tuple[np.ndarray, np.ndarray]:
    """(has, index into f) of the last field among `numbers` of each of n messages."""
    sel = np.flatnonzero(member(f.num, numbers))
    has = np.zeros(n, bool)
    where = np.full(n, -1, np.int64)
    if len(sel):
        m = f.msg[sel]
        last = np.ones(len(sel), bool)
        last[:-1] = m[1:] != m[:-1]
        has[m[last]] = True
        where[m[last]] = sel[last]
    return has, where
