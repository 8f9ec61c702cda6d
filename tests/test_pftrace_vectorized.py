"""The Perfetto reader's vectorized path (`pftrace_vec`, `_pbvec`) gives what the one-packet walker gives:
the same Kineto document, counts of what was not kept, warnings and header, on the samples converted to
.pftrace and on built traces whose state changes mid-stream (interned ids redefined or cleared, a second
sequence, default tracks, packets that need state they lost, nested annotations, legacy events, counters,
flows, a cut at the end), also when the packets are taken a few at a time (chunk boundaries anywhere).
Damage makes the vectorized path give way: the error is the walker's, offset and all."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import SAMPLES

from traceanalyzer.errors import InputError
from traceanalyzer.formats import _pbvec, pftrace_vec
from traceanalyzer.formats import pftrace as pf
from traceanalyzer.formats._perfetto_pb import WireError, f_bytes, f_double, f_fixed64, f_string, f_varint, scan
from traceanalyzer.formats.pftrace_write import pftrace_bytes

PATH = Path("x.pftrace")


def _both(data: bytes) -> tuple[tuple, tuple]:
    out = []
    for vectorized in (False, True):
        dec = pf.decode(data, PATH, 1 << 30, vectorized=vectorized)
        out.append((pf.kineto_document(dec), dict(dec.not_kept), dec.warnings, dec.header, dec.packets))
    return out[0], out[1]


def _fast_path_taken(data: bytes) -> bool:
    return pftrace_vec.decode(pf.PacketDecoder(PATH, 1 << 30), data, pf.MAX_NESTING)


def _packet(*fields: bytes, ts: int | None = None, seq: int = 7) -> bytes:
    return f_bytes(1, (f_varint(8, ts) if ts is not None else b"") + f_varint(10, seq) + b"".join(fields))


def _interned(names=None, cats=None, keys=None, strings=None) -> bytes:
    body = b""
    for number, table in ((1, cats), (2, names), (3, keys), (29, strings)):
        for iid, value in (table or {}).items():
            body += f_bytes(number, f_varint(1, iid) + f_string(2, value))
    return f_bytes(12, body)


def _event(typ: int, *fields: bytes, track: int | None = 2) -> bytes:
    return f_bytes(11, f_varint(9, typ) + (f_varint(11, track) if track is not None else b"") + b"".join(fields))


def _ann(*fields: bytes) -> bytes:
    return f_bytes(4, b"".join(fields))


def _stateful_trace() -> bytes:
    thread = f_bytes(60, f_varint(1, 2) + f_varint(5, 1) + f_bytes(4, f_varint(1, 10) + f_varint(2, 11)))
    process = f_bytes(60, f_varint(1, 1) + f_bytes(3, f_varint(1, 10)))
    nested = _ann(f_varint(1, 2), f_bytes(12, f_varint(4, 4)), f_bytes(12, f_varint(4, 1)))  # a list [4, 1]
    as_dict = _ann(f_string(10, "shape"), f_bytes(11, f_string(10, "x") + f_double(5, 1.5)),
                   f_bytes(11, f_string(10, "y") + f_bytes(12, f_string(6, "deep"))), f_bytes(12, f_varint(4, 9)))
    out = [_packet(process), _packet(thread)]
    out.append(_packet(_interned({1: "first", 2: "second"}, {1: "cpu_op"}, {1: "External id", 2: "dims"},
                                 {1: "interned text"}), f_varint(13, 3), ts=900))
    for k in range(6):  # plain packets: begins and ends with annotations of every kind
        t0 = 1000 + k * 100
        anns = [_ann(f_varint(1, 1), f_varint(4, k)), nested, as_dict,
                _ann(f_string(10, "flag"), f_varint(2, 1)), _ann(f_string(10, "big"), f_varint(3, 2**63 + k)),
                _ann(f_string(10, "neg"), f_varint(4, -5)), _ann(f_string(10, "ptr"), f_varint(7, 77)),
                _ann(f_string(10, "s"), f_varint(17, 1)), _ann(f_string(10, "missing"), f_varint(17, 9)),
                _ann(f_string(10, "json"), f_string(9, '{"a": [1, 2]}')), _ann(f_string(10, "bad"), f_string(9, "[")),
                _ann(f_varint(1, 99), f_string(6, "unknown key"))]
        out.append(_packet(_event(1, f_varint(10, 1 + k % 2), f_varint(3, 1), f_varint(52, 500 + k), *anns,
                                  f_fixed64(47, 40 + k)), ts=t0))
        out.append(_packet(_event(2, _ann(f_string(10, "at end"), f_varint(4, k)), f_fixed64(47, 90)), ts=t0 + 50))
    # the state is cleared: iid 1 now names another event; an unknown iid counts
    out.append(_packet(_interned({1: "third"}, {1: "user_annotation"}), f_varint(13, 3), ts=1700))
    out.append(_packet(_event(3, f_varint(10, 1), f_varint(3, 1), f_varint(3, 5)), f_varint(13, 2), ts=1710))
    out.append(_packet(_event(3, f_varint(10, 7), f_fixed64(48, 40)), f_varint(13, 2), ts=1720))
    # an iid redefined without a clear: events after it see the new name, those before the old
    out.append(_packet(_event(3, f_varint(10, 1)), ts=1730))
    out.append(_packet(_interned({1: "redefined"}), ts=1740))
    out.append(_packet(_event(3, f_varint(10, 1)), ts=1750))
    # a second sequence: its state needed before it is ever cleared (dropped), then a default track
    out.append(_packet(_event(3, f_varint(10, 1)), f_varint(13, 2), ts=1760, seq=9))
    defaults = f_bytes(59, f_bytes(11, f_varint(11, 2)))
    out.append(_packet(_interned({1: "on nine"}), defaults, f_varint(13, 1), ts=1770, seq=9))
    out.append(_packet(_event(1, f_varint(10, 1), track=None), ts=1780, seq=9))
    out.append(_packet(_event(2, track=None), ts=1790, seq=9))
    out.append(_packet(_event(3, f_string(23, "no track, no default")), ts=1795, seq=11))
    # header instants (their flows dropped), a legacy event, a counter, a category given by name
    out.append(_packet(_event(3, f_string(23, "trace_metadata"), _ann(f_string(10, "k"), f_string(6, '"v"')),
                              f_fixed64(47, 5)), ts=1800))
    out.append(_packet(_event(0, f_bytes(6, f_varint(1, 1) + f_varint(2, ord("X")) + f_varint(3, 7))), ts=1810))
    out.append(_packet(_event(4, f_varint(30, 12)), ts=1820))
    out.append(_packet(_event(3, f_string(23, "named cat"), f_string(22, "kernel")), ts=1830))
    out.append(_packet(_event(99, f_string(23, "unknown type")), ts=1840))
    out.append(_packet(_event(1, f_string(23, "never ended")), ts=1850))
    return b"".join(out)


def test_built_trace_with_state_changes_same_as_the_walker():
    data = _stateful_trace()
    assert _fast_path_taken(data)
    walker, vectorized = _both(data)
    assert vectorized == walker
    dec = pf.decode(data, PATH, 1 << 30)
    assert dec.not_kept["incremental_state_lost"] == 1 and dec.not_kept["unknown_interned_name"] == 1
    names = [e[2] for e in sorted(dec.events) if e[1] in "iX"]
    assert names[:6] == ["first", "second"] * 3 and "third" in names and "redefined" in names
    assert names.index("third") < names.index("redefined") and "on nine" in names


@pytest.mark.parametrize("chunk", [1, 3, 7])
def test_chunk_boundaries_anywhere_give_the_same(monkeypatch, chunk):
    data = _stateful_trace()
    walker, _ = _both(data)
    monkeypatch.setattr(pftrace_vec, "CHUNK_PACKETS", chunk)
    assert _both(data)[1] == walker


def test_truncated_trace_same_warning():
    data = _stateful_trace()
    cut = data[:-5]
    assert _fast_path_taken(cut)
    walker, vectorized = _both(cut)
    assert vectorized == walker and vectorized[2][0].startswith("TRUNCATED")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["basic.json", "comm_rank0.json", "launch_bound.json.gz", "hostile_names.json",
                                  "torch_cpu_zero_grad_item.json.gz", "torch_memory_leak.json.gz"])
def test_sample_traces_same_as_the_walker(name, monkeypatch):
    import gzip

    import msgspec

    raw = (SAMPLES / name).read_bytes()
    data = pftrace_bytes(msgspec.json.decode(gzip.decompress(raw) if name.endswith(".gz") else raw))
    assert _fast_path_taken(data)
    walker, vectorized = _both(data)
    assert vectorized == walker
    monkeypatch.setattr(pftrace_vec, "CHUNK_PACKETS", 5)
    assert _both(data)[1] == walker


@pytest.mark.parametrize("damage", [
    _packet(_event(1, f_varint(10, 1)), f_bytes(11, b"\x48"), ts=5),  # a varint cut by its message's end
    _packet(_event(1, f_fixed64(9, 1)), ts=5),  # a wire type the schema does not allow
    _packet(_event(1, f_bytes(4, f_varint(1, 1) + b"\x0a\x7f")), ts=5),  # an annotation field past its end
    _packet(_event(1, b"\x00\x01"), ts=5),  # field number 0
    f_bytes(2, b"x"),  # not a TracePacket at the top level
])
def test_damage_gives_the_walkers_error(damage):
    data = _stateful_trace() + damage + _packet(_event(3, f_string(23, "after")), ts=9)
    assert not _fast_path_taken(data)
    with pytest.raises(InputError) as vec:
        pf.decode(data, PATH, 1 << 30)
    with pytest.raises(InputError) as walk:
        pf.decode(data, PATH, 1 << 30, vectorized=False)
    assert str(vec.value) == str(walk.value) and "at byte" in str(vec.value)


def test_nesting_limit_is_the_walkers():
    value = f_varint(4, 1)
    for _ in range(pf.MAX_NESTING + 2):
        value = f_bytes(12, value)
    data = _packet(_event(3, f_string(23, "deep"), _ann(f_string(10, "k"), value)), ts=5)
    with pytest.raises(InputError, match="nested deeper than 32 levels"):
        pf.decode(data, PATH, 1 << 30)


def test_compressed_packets_go_to_the_walker():
    import zlib

    inner = _packet(_event(3, f_string(23, "inside")), ts=5)
    data = _packet(f_bytes(50, zlib.compress(inner)))
    assert not _fast_path_taken(data)
    dec = pf.decode(data, PATH, 1 << 30)
    assert [e[2] for e in dec.events] == ["inside"]


def test_scan_many_matches_the_one_message_walker():
    """Messages of a few fields and one of many (finished one by one): the same fields as `scan`."""
    rng = np.random.default_rng(3)
    msgs = []
    for k in range(40):
        fields = [f_varint(9, int(rng.integers(0, 5))), f_varint(11, int(rng.integers(0, 2**63))),
                  f_string(23, "n" * int(rng.integers(0, 200))), f_double(44, float(k)), f_fixed64(47, 2**64 - 1 - k),
                  f_varint(1000, 5)]  # a field not in the schema: skipped
        msgs.append(b"".join(fields[: 1 + k % 6]))
    msgs.append(b"".join(f_varint(11, i) for i in range(300)))  # many more rounds than the rest
    buf = b"".join(msgs)
    starts = np.cumsum([0] + [len(m) for m in msgs[:-1]])
    ends = starts + np.array([len(m) for m in msgs])
    got = _pbvec.scan_many(buf, np.frombuffer(buf, np.uint8), starts, ends, "TrackEvent")
    want = [(i, n, v) for i, (s, e) in enumerate(zip(starts.tolist(), ends.tolist())) for n, v, _ in
            scan(buf, s, e, "TrackEvent")]
    as_rows = []
    for i, n, w, v, stop in zip(got.msg.tolist(), got.num.tolist(), got.wire.tolist(), got.val.tolist(),
                                got.stop.tolist()):
        if w == 2:
            as_rows.append((i, n, (v, stop)))
        elif n == 44:
            as_rows.append((i, n, float(np.array([v], np.uint64).view(np.float64)[0])))
        else:
            as_rows.append((i, n, v))
    assert as_rows == want


def test_varints_bounds():
    u8 = np.frombuffer(b"\x80\x80\x01\xff", np.uint8)
    values, after = _pbvec.varints(u8, np.array([0, 2]), np.array([3, 3]))
    assert values.tolist() == [1 << 14, 1] and after.tolist() == [3, 3]
    with pytest.raises(WireError, match="cut off"):
        _pbvec.varints(u8, np.array([3]), np.array([4]))
