"""The Perfetto reader's fast path: the packets of a trace decoded with array operations (`_pbvec`).

The packets that change a sequence's state (interned names, cleared state, default tracks, track
descriptors) or hold GPU counters, or whose event is unusual (counters, Chrome's legacy events, category
or flow lists given packed) are few: they go, in file order, through the reader's own packet walker
(`pftrace.PacketDecoder.packet`), which records what each interned and when (of a packet that only
changes state, the walker reads the state and leaves an ordinary track event to this path). The other
track events (slice begin / end, instant) read the state only: those are scanned all together,
level by level (packets, track events, debug annotations and the annotations nested in them), and
their names, categories and annotation names looked up in what was interned on their sequence in
the same generation of state, at or before their packet. Each event's order is its packet's index
(times 2^32, so the packets left to the walker can number what they emit in between), so the
events, slices and flows come out as the walker alone would give them.

Anything the fast path does not cover (compressed packets, damage of any kind) makes `decode` return
False, and the caller decodes the trace with the walker alone: its errors (byte offset, what was
expected) and limits are the reader's, unchanged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ._pbvec import Fields, last_of, member, scan_many
from ._perfetto_pb import (
    SEQ_INCREMENTAL_STATE_CLEARED,
    SEQ_NEEDS_INCREMENTAL_STATE,
    TYPE_INSTANT,
    TYPE_SLICE_BEGIN,
    TYPE_SLICE_END,
    WireError,
)

if TYPE_CHECKING:
    from .pftrace import PacketDecoder

ORDER_SHIFT = 32
CHUNK_PACKETS = 1 << 17  # packets decoded together (memory: a few hundred bytes each)
# TracePacket fields that change a sequence's state: interned data, defaults, track / thread descriptors
# (the walker reads them, the packet's track event is read here, after them); and those that need the
# walker for the whole packet: compressed packets, GPU counters, render stages, zstd packets
_STATEFUL = (12, 59, 60, 44)
_WHOLE_PACKET = (50, 52, 53, 133)
_COMPRESSED = 50
# TrackEvent fields the fast path leaves to the walker: legacy event, category names, counter values,
# varint flow ids (the fixed64 ones, which writers use, are read here)
_EVENT_TO_WALKER = (6, 22, 30, 44, 36, 42)
_NAME_TABLE, _CAT_TABLE, _KEY_TABLE, _STRING_TABLE = 2, 1, 3, 29  # InternedData field numbers
_LEN = 2


_EMPTY_HISTORY = (np.zeros(0, np.int64), np.zeros(0, np.uint64), np.zeros(0, np.int64))


class _Unsupported(Exception):
    """Something the fast path leaves to the walker (for the whole trace)."""


def decode(dec: PacketDecoder, data: bytes, max_nesting: int) -> bool:
    """Decode `data` into `dec` (as `dec.trace` would, before `finish`); False (and `dec` untouched
    but for what a fresh decoder replaces) when the walker must do it."""
    try:
        starts, ends, cut = _frame(data)
        _Vectorized(dec, data, starts, ends, max_nesting).run()
    except (WireError, _Unsupported, RecursionError):
        return False
    if cut is not None:
        dec._truncated(cut, len(data), "")
    return True


def _frame(data: bytes) -> tuple[np.ndarray, np.ndarray, int | None]:
    """(starts, ends) of the top-level packets, and the offset of a packet cut by the end of the file."""
    starts: list[int] = []
    ends: list[int] = []
    append_start, append_end = starts.append, ends.append
    n = len(data)
    pos = 0
    while pos < n:
        if data[pos] != 0x0A:
            raise _Unsupported
        p = pos + 1
        if p >= n:
            return np.array(starts, np.int64), np.array(ends, np.int64), pos
        b = data[p]
        length = b & 0x7F
        shift = 7
        while b >= 0x80:
            p += 1
            if p >= n:
                return np.array(starts, np.int64), np.array(ends, np.int64), pos
            if shift >= 63:
                raise _Unsupported
            b = data[p]
            length |= (b & 0x7F) << shift
            shift += 7
        p += 1
        stop = p + length
        if stop > n:
            return np.array(starts, np.int64), np.array(ends, np.int64), pos
        append_start(p)
        append_end(stop)
        pos = stop
    return np.array(starts, np.int64), np.array(ends, np.int64), None


class _Vectorized:
    def __init__(self, dec: PacketDecoder, data: bytes, starts: np.ndarray, ends: np.ndarray, max_nesting: int) -> None:
        self.dec = dec
        self.data = data
        self.u8 = np.frombuffer(data, np.uint8)
        self.starts = starts
        self.ends = ends
        self.max_nesting = max_nesting
        # per interned table: (rows of dec.interned taken, generations, iids, packets, values)
        self.history: dict[int, tuple[int, np.ndarray, np.ndarray, np.ndarray, list[str]]] = {}

    def run(self) -> None:
        """The packets in chunks of `CHUNK_PACKETS`, in file order: what the walker's packets of a chunk
        intern is known before the chunk's other events are looked up, and memory stays bounded."""
        from .pftrace import SequenceState
        self.new_sequence = SequenceState
        self.initial: dict[int, tuple[int, bool]] = {}  # each sequence's state before any clear
        n = len(self.starts)
        for base in range(0, n, CHUNK_PACKETS):
            self._chunk(base, min(n, base + CHUNK_PACKETS))
        self.dec.packets = n

    def _chunk(self, lo: int, hi: int) -> None:
        dec, data, u8 = self.dec, self.data, self.u8
        n = hi - lo
        pf = scan_many(data, u8, self.starts[lo:hi], self.ends[lo:hi], "TracePacket")
        if (pf.num == _COMPRESSED).any():
            raise _Unsupported
        ts = _last_value(pf, (8,), n)
        seq = _last_value(pf, (10,), n)
        flags = np.zeros(n, np.uint64)
        sel = pf.num == 13
        np.bitwise_or.at(flags, pf.msg[sel], pf.val[sel])
        sel = (pf.num == 41) & (pf.val != 0)
        flags[pf.msg[sel]] |= np.uint64(SEQ_INCREMENTAL_STATE_CLEARED)
        has_event, ev_at = last_of(pf, (11,), n)
        walker = np.zeros(n, bool)  # packets the walker reads all of
        walker[pf.msg[member(pf.num, _WHOLE_PACKET)]] = True
        state = np.zeros(n, bool)  # packets whose state the walker reads (their track event is read here)
        state[pf.msg[member(pf.num, _STATEFUL)]] = True
        state |= (flags & np.uint64(SEQ_INCREMENTAL_STATE_CLEARED)) != 0

        # the track events of every packet: those the fast path does not read go to the walker
        ev_pkt = np.flatnonzero(has_event)
        ef = scan_many(data, u8, pf.val[ev_at[ev_pkt]].astype(np.int64), pf.stop[ev_at[ev_pkt]], "TrackEvent")
        del pf
        typ = _last_value(ef, (9,), len(ev_pkt))
        odd = np.zeros(len(ev_pkt), bool)
        odd[ef.msg[member(ef.num, _EVENT_TO_WALKER) | ((ef.wire == _LEN) & member(ef.num, (3, 47, 48)))]] = True
        odd |= (typ != TYPE_SLICE_BEGIN) & (typ != TYPE_SLICE_END) & (typ != TYPE_INSTANT)
        walker[ev_pkt[odd]] = True

        # sequences, first met first (as the walker creates them), and their state before any clear
        seq_ids, first = np.unique(seq, return_index=True)
        for s in seq_ids[np.argsort(first)].tolist():
            if s not in dec.sequences:
                dec.sequences[s] = self.new_sequence()
                self.initial[s] = (dec.sequences[s].generation, dec.sequences[s].valid)

        # the walker's packets, in file order
        dec.recording = True
        for k, whole in zip((np.flatnonzero(walker | state) + lo).tolist(), walker[walker | state].tolist()):
            dec.at_packet = k
            dec.order = k << ORDER_SHIFT
            dec.packet(data, int(self.starts[k]), int(self.ends[k]), with_event=whole)
        dec.recording = False

        # the generation of state each remaining event's packet sees, and whether it is valid
        keep = ~walker[ev_pkt]
        ev_pkt, typ = ev_pkt[keep], typ[keep]
        ef = _renumber(ef.where(keep[ef.msg]), keep)
        gen, valid = self._generations(seq[ev_pkt], ev_pkt + lo, self.initial)
        lost = ((flags[ev_pkt] & np.uint64(SEQ_NEEDS_INCREMENTAL_STATE)) != 0) & ~valid
        if lost.any():
            dec.not_kept["incremental_state_lost"] += int(lost.sum())
            keep = ~lost
            ev_pkt, typ, gen = ev_pkt[keep], typ[keep], gen[keep]
            ef = _renumber(ef.where(keep[ef.msg]), keep)
        self._events(ef, ev_pkt + lo, typ, gen, ts[ev_pkt], seq[ev_pkt])

    def _generations(self, seq: np.ndarray, pkt: np.ndarray, initial: dict[int, tuple[int, bool]]
                     ) -> tuple[np.ndarray, np.ndarray]:
        """Per event: the generation of its sequence's state at its packet, and whether that state is valid."""
        gen = np.empty(len(seq), np.int64)
        valid = np.empty(len(seq), bool)
        uniq, inv = np.unique(seq, return_inverse=True)
        gen[:] = np.array([initial[s][0] for s in uniq.tolist()], np.int64)[inv] if len(uniq) else 0
        valid[:] = np.array([initial[s][1] for s in uniq.tolist()], bool)[inv] if len(uniq) else False
        if self.dec.cleared:
            c_seq = np.array([c[0] for c in self.dec.cleared], np.uint64)
            c_pkt = np.array([c[1] for c in self.dec.cleared], np.int64)
            c_gen = np.array([c[2] for c in self.dec.cleared], np.int64)
            found = _latest(c_seq, c_pkt, seq, pkt)
            hit = found >= 0
            gen[hit] = c_gen[found[hit]]
            valid[hit] = True
        return gen, valid

    def _lookup(self, table: int, gen: np.ndarray, iid: np.ndarray, pkt: np.ndarray) -> tuple[np.ndarray, list[str]]:
        """Indices into the returned values (-1: not interned) of what `table` held for (gen, iid) at `pkt`."""
        seen, h_gen, h_iid, h_pkt, values = self.history.get(table) or (0, *_EMPTY_HISTORY, [])
        interned = self.dec.interned
        if seen < len(interned):  # what the walker interned since the last look: added once
            rows = [r for r in interned[seen:] if r[0] == table]
            if rows:
                h_gen = np.concatenate([h_gen, np.array([r[1] for r in rows], np.int64)])
                h_iid = np.concatenate([h_iid, np.array([r[2] & 0xFFFFFFFFFFFFFFFF for r in rows], np.uint64)])
                h_pkt = np.concatenate([h_pkt, np.array([r[3] for r in rows], np.int64)])
                values = values + [r[4] for r in rows]
            self.history[table] = (len(interned), h_gen, h_iid, h_pkt, values)
        if not len(values) or not len(iid):
            return np.full(len(iid), -1, np.int64), values
        return _latest2(h_gen, h_iid, h_pkt, gen, iid, pkt), values

    def _events(self, ef: Fields, pkt: np.ndarray, typ: np.ndarray, gen: np.ndarray, ts: np.ndarray,
                seq: np.ndarray) -> None:
        dec, data = self.dec, self.data
        n = len(pkt)
        not_kept = dec.not_kept
        # track: its own, else the sequence's default at the time, else the sequence's
        has_track, track_at = last_of(ef, (11,), n)
        track_codes = np.empty(n, np.int64)
        if has_track.any():
            uniq, inverse = np.unique(ef.val[track_at[has_track]], return_inverse=True)
            track_codes[has_track] = np.array([dec.track_code(t) for t in uniq.tolist()], np.int64)[inverse]
        if not has_track.all():
            missing = np.flatnonzero(~has_track)
            default = np.full(len(missing), -1, np.int64)
            if dec.defaults:
                d_gen = np.array([d[0] for d in dec.defaults], np.int64)
                d_pkt = np.array([d[1] for d in dec.defaults], np.int64)
                default = _latest(d_gen.astype(np.uint64), d_pkt, gen[missing].astype(np.uint64), pkt[missing])
            seq_list = seq[missing].tolist()
            for j, (i, d) in enumerate(zip(missing.tolist(), default.tolist())):
                track_codes[i] = dec.track_code(dec.defaults[d][2] if d >= 0 else ("sequence", seq_list[j]))
        # name: the last of an inline name and an interned one (every unknown iid counted)
        names = np.full(n, "", object)
        name_iid = ef.num == 10
        if name_iid.any():
            rows = np.flatnonzero(name_iid)
            found, values = self._lookup(_NAME_TABLE, gen[ef.msg[rows]], ef.val[rows], pkt[ef.msg[rows]])
            if (found < 0).any():
                not_kept["unknown_interned_name"] += int((found < 0).sum())
        has_name, name_at = last_of(ef, (10, 23), n)
        if has_name.any():
            sel = np.flatnonzero(has_name)
            at = name_at[sel]
            inline = ef.num[at] == 23
            if inline.any():
                names[sel[inline]] = object_array([data[a:b].decode("utf-8", "replace") for a, b in
                                                   zip(ef.val[at[inline]].tolist(), ef.stop[at[inline]].tolist())])
            if not inline.all():
                by_field = np.full(len(ef.num), -1, np.int64)
                by_field[rows] = found
                names[sel[~inline]] = object_array(values + [""])[by_field[at[~inline]]]  # -1: not interned
        # categories: interned ids, in order, joined
        cats = np.full(n, None, object)
        cat_rows = np.flatnonzero(ef.num == 3)
        if len(cat_rows):
            found, values = self._lookup(_CAT_TABLE, gen[ef.msg[cat_rows]], ef.val[cat_rows], pkt[ef.msg[cat_rows]])
            if (found < 0).any():
                not_kept["unknown_interned_category"] += int((found < 0).sum())
            hit = found >= 0
            on, found = ef.msg[cat_rows[hit]], found[hit]
            single = np.r_[True, on[1:] != on[:-1]] & np.r_[on[1:] != on[:-1], True]  # an event's only category
            cats[on[single]] = object_array(values)[found[single]]
            for i, c in zip(on[~single].tolist(), found[~single].tolist()):
                cats[i] = values[c] if cats[i] is None else f"{cats[i]},{values[c]}"
        # args: the debug annotations, decoded all together
        ann = np.flatnonzero(ef.num == 4)
        args: list[dict[str, Any] | None] = [None] * n
        if len(ann):
            a_msg = ef.msg[ann]
            instant = typ[a_msg] == TYPE_INSTANT
            keys, vals, slice_key = self._annotations(ef.val[ann].astype(np.int64), ef.stop[ann], gen[a_msg],
                                                      pkt[a_msg], 0, whole=instant)
            # a slice keeps only the annotations the document or its category looks at: most keep none
            kept = np.flatnonzero(instant | slice_key)
            keys = keys[kept].tolist()
            vals = vals[kept].tolist()
            a_msg = a_msg[kept]
            bounds = np.flatnonzero(np.r_[True, a_msg[1:] != a_msg[:-1], True]) if len(kept) else np.zeros(1, np.intp)
            from .pftrace import CORRELATION_ANNOTATION, METADATA_ANNOTATION
            special = (METADATA_ANNOTATION, CORRELATION_ANNOTATION)
            for i, a, b in zip(a_msg[bounds[:-1]].tolist(), bounds[:-1].tolist(), bounds[1:].tolist()):
                d = dict(zip(keys[a:b], vals[a:b]))
                args[i] = _args(d) if special[0] in d or special[1] in d else d
        has_corr, corr_at = last_of(ef, (52,), n)
        if has_corr.any():
            for i, c in zip(np.flatnonzero(has_corr).tolist(), ef.val[corr_at[has_corr]].tolist()):
                if typ[i] != TYPE_SLICE_END:
                    a = args[i]
                    if a is None:
                        a = args[i] = {}
                    a.setdefault("correlation", c)
        # flows: fixed64 ids on the events that are not slice ends
        flow_rows = np.flatnonzero(member(ef.num, (47, 48)) & (typ[ef.msg] != TYPE_SLICE_END))
        orders = pkt.astype(np.int64) << ORDER_SHIFT
        from .pftrace import DEVICE_PROPERTIES_EVENT, METADATA_EVENT, FlowColumns, SliceColumns
        metadata = (METADATA_EVENT, DEVICE_PROPERTIES_EVENT)
        track_keys = dec.track_keys
        header_event = np.zeros(n, bool)  # instants that carry header keys: no event, their flows dropped
        for i in np.flatnonzero(typ == TYPE_INSTANT).tolist():
            if names[i] in metadata and args[i]:
                header_event[i] = True
                dec.header_items.append((int(orders[i]), names[i], args[i]))  # type: ignore[arg-type]
            else:
                dec.others.append((int(orders[i]), "i", names[i], cats[i], track_keys[track_codes[i]], int(ts[i]), 0,
                                   args[i], 0))
        if len(flow_rows):
            on = ef.msg[flow_rows]
            kept = ~header_event[on]
            on = on[kept]
            dec.flow_chunks.append(FlowColumns(orders[on], (ef.num[flow_rows] == 48)[kept], track_codes[on], ts[on],
                                               ef.val[flow_rows][kept]))
        # slices: kept as columns, paired in `finish` (an end's name and category count for nothing)
        is_begin = typ == TYPE_SLICE_BEGIN
        rows = np.flatnonzero(is_begin | (typ == TYPE_SLICE_END))
        if len(rows):
            begins = is_begin[rows]
            slice_names, slice_cats = names[rows], cats[rows]
            slice_names[~begins] = ""
            slice_cats[~begins] = None
            dec.slice_chunks.append(SliceColumns.of(begins, ts[rows], orders[rows], track_codes[rows], slice_names,
                                                    slice_cats, object_array(args)[rows]))

    def _annotations(self, starts: np.ndarray, stops: np.ndarray, gen: np.ndarray, pkt: np.ndarray,
                     depth: int, whole: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(key, value) of each DebugAnnotation in data[starts[i]:stops[i]] (object arrays), as
        `PacketDecoder._annotation`, and whether each key is one a slice keeps (`pftrace.SLICE_ARGS`; only
        with `whole`). With `whole` (a slice's annotations: False), a value is decoded only where `whole`
        says so or the Kineto document keeps it (`pftrace.VALUE_ARGS`); the others are None, their key kept."""
        from .pftrace import SLICE_ARGS, VALUE_ARGS, json_value

        if depth > self.max_nesting:
            raise _Unsupported
        data = self.data
        n = len(starts)
        f = scan_many(data, self.u8, starts, stops, "DebugAnnotation")
        keys = np.full(n, "", object)
        value_key = np.zeros(n, bool)  # keys the document keeps the value of, and those a slice keeps
        slice_key = np.zeros(n, bool)
        has_key, key_at = last_of(f, (1, 10), n)
        sel = np.flatnonzero(has_key)
        if len(sel):
            at = key_at[sel]
            is_text = f.num[at] == 10
            if is_text.any():
                texts = [data[a:b].decode("utf-8", "replace")
                         for a, b in zip(f.val[at[is_text]].tolist(), f.stop[at[is_text]].tolist())]
                keys[sel[is_text]] = texts
                if whole is not None:
                    value_key[sel[is_text]] = [k in VALUE_ARGS for k in texts]
                    slice_key[sel[is_text]] = [k in SLICE_ARGS for k in texts]
            iid = sel[~is_text]
            if len(iid):
                rows = at[~is_text]
                found, key_values = self._lookup(_KEY_TABLE, gen[iid], f.val[rows], pkt[iid])
                table = key_values + [""]  # -1: not interned
                keys[iid] = np.array(table, object)[found]
                if whole is not None:  # membership looked up once per interned name
                    value_key[iid] = np.array([k in VALUE_ARGS for k in table], bool)[found]
                    slice_key[iid] = np.array([k in SLICE_ARGS for k in table], bool)[found]
        if whole is not None:
            wanted = whole | value_key
            if not wanted.all():
                f = f.where(wanted[f.msg] | (f.num == 1) | (f.num == 10))
        vals = np.full(n, None, object)
        has_val, val_at = last_of(f, (2, 3, 4, 5, 6, 7, 9, 17), n)
        sel = np.flatnonzero(has_val)
        if len(sel):
            at = val_at[sel]
            num = f.num[at]
            raw = f.val[at]
            for kinds, convert in (((2,), lambda r: (r != 0).tolist()), ((3, 7), lambda r: r.tolist()),
                                   ((4,), lambda r: r.view(np.int64).tolist()),
                                   ((5,), lambda r: r.view(np.float64).tolist())):
                m = member(num, kinds)
                if m.any():
                    vals[sel[m]] = convert(raw[m].copy())
            m = num == 6
            if m.any():
                vals[sel[m]] = [data[a:b].decode("utf-8", "replace")
                                for a, b in zip(raw[m].tolist(), f.stop[at[m]].tolist())]
            m = num == 17
            if m.any():
                idx = sel[m]
                found, values = self._lookup(_STRING_TABLE, gen[idx], raw[m], pkt[idx])
                table = values + [""]
                vals[idx] = [table[k] for k in found.tolist()]
            m = num == 9
            if m.any():
                cache: dict[bytes, Any] = {}  # the same JSON texts recur ("[]"): decoded once, shared
                out = []
                for a, b in zip(raw[m].tolist(), f.stop[at[m]].tolist()):
                    text = data[a:b]
                    value = cache.get(text, cache)
                    if value is cache:
                        value = cache[text] = json_value(text.decode("utf-8", "replace"))
                    out.append(value)
                vals[sel[m]] = out
        nested = np.flatnonzero(member(f.num, (11, 12)))
        if len(nested):
            parents = f.msg[nested]
            child_keys, child_values, _ = self._annotations(f.val[nested].astype(np.int64), f.stop[nested],
                                                            gen[parents], pkt[parents], depth + 1)
            ck, cv = child_keys.tolist(), child_values.tolist()
            is_entry = f.num[nested] == 11
            bounds = np.flatnonzero(np.r_[True, parents[1:] != parents[:-1], True])
            with_entries = (np.add.reduceat(is_entry, bounds[:-1]) > 0).tolist()
            entry = is_entry.tolist()
            for p, a, b, dict_like in zip(parents[bounds[:-1]].tolist(), bounds[:-1].tolist(), bounds[1:].tolist(),
                                          with_entries):
                # an annotation's entries make it a dict (its array values then count for nothing), else a list
                vals[p] = {ck[j]: cv[j] for j in range(a, b) if entry[j]} if dict_like else cv[a:b]
        return keys, vals, slice_key


def object_array(values: Any) -> np.ndarray:
    """`values` (a sequence) as a one-dimensional object array, whatever its items are (lists, dicts)."""
    return np.fromiter(values, object, count=len(values))


def _args(args: dict[str, Any]) -> dict[str, Any]:
    """An event's annotations as its args, as `PacketDecoder._args` makes them."""
    from .pftrace import kineto_args

    return kineto_args(args)


def _last_value(f: Fields, numbers: tuple[int, ...], n: int) -> np.ndarray:
    """The value of the last field among `numbers` of each of n messages (0 where none)."""
    has, at = last_of(f, numbers, n)
    return np.where(has, f.val[np.maximum(at, 0)], np.uint64(0)) if len(f.val) else np.zeros(n, np.uint64)


def _renumber(f: Fields, keep: np.ndarray) -> Fields:
    """`f` with its message numbers counted among the kept messages only."""
    new = np.cumsum(keep) - 1
    f.msg = new[f.msg]
    return f


def _latest(h_key: np.ndarray, h_pkt: np.ndarray, q_key: np.ndarray, q_pkt: np.ndarray) -> np.ndarray:
    """Per query: the index of the history row with the same key and the latest packet at or before the
    query's (-1: none)."""
    return _latest2(np.zeros(len(h_key), np.int64), h_key.astype(np.uint64), h_pkt,
                    np.zeros(len(q_key), np.int64), q_key.astype(np.uint64), q_pkt)


def _latest2(h_a: np.ndarray, h_b: np.ndarray, h_pkt: np.ndarray, q_a: np.ndarray, q_b: np.ndarray,
             q_pkt: np.ndarray) -> np.ndarray:
    """`_latest` for keys of two parts (a generation, an interned id)."""
    out = np.full(len(q_a), -1, np.int64)
    if not len(h_a) or not len(q_a):
        return out
    # both parts numbered densely over the history (short: what was interned), the queries looked up in
    # it (a part the history never holds finds nothing), then one key per pair
    a_uniq = np.unique(h_a)
    b_uniq = np.unique(h_b)
    if len(a_uniq) * len(b_uniq) >= 1 << 62:
        raise _Unsupported
    q_a_rank = np.minimum(np.searchsorted(a_uniq, q_a), len(a_uniq) - 1)
    q_b_rank = np.minimum(np.searchsorted(b_uniq, q_b), len(b_uniq) - 1)
    known = (a_uniq[q_a_rank] == q_a) & (b_uniq[q_b_rank] == q_b)
    h_pair = np.searchsorted(a_uniq, h_a).astype(np.int64) * len(b_uniq) + np.searchsorted(b_uniq, h_b)
    q_pair = q_a_rank.astype(np.int64) * len(b_uniq) + q_b_rank
    pairs = np.unique(h_pair)
    pos = np.searchsorted(pairs, q_pair)
    hit = known & (pos < len(pairs))
    hit[hit] = pairs[pos[hit]] == q_pair[hit]
    if not hit.any():
        return out
    span = int(max(h_pkt.max(initial=0), q_pkt.max(initial=0))) + 1
    if len(pairs) * span >= 1 << 62:
        raise _Unsupported
    h_dense = np.searchsorted(pairs, h_pair)
    h_key = h_dense.astype(np.int64) * span + h_pkt
    order = np.argsort(h_key, kind="stable")
    h_sorted = h_key[order]
    q_key = pos[hit].astype(np.int64) * span + q_pkt[hit]
    k = np.searchsorted(h_sorted, q_key, side="right") - 1
    ok = (k >= 0) & (h_dense[order][np.maximum(k, 0)] == pos[hit])
    res = np.full(len(k), -1, np.int64)
    res[ok] = order[k[ok]]
    out[hit] = res
    return out
