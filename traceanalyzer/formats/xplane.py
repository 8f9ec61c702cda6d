"""Reader for XSpace protobufs (`<host>.xplane.pb`), what the TensorFlow 2.x and JAX profilers write.

Decoding is the protobuf package's, from our own message definitions (`_xplane_pb`). Times are
picoseconds: an event starts at its line's `timestamp_ns` plus its `offset_ps` and lasts
`duration_ps`. Post-processed spaces (TF 2.x, JAX) store line timestamps relative to the capture
start, which the `Task Environment` plane records as `profile_start_time` (epoch ns); with it the
times become epoch nanoseconds. What each event is (kernel, copy, step, input wait...) is decided
in `_tf_mapping`, shared with the trace-viewer JSON reader.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError
from ..timeline import DeviceInfo, RankInfo, Source, Timeline
from ._base import ReadOptions
from ._columns import int_or_none
from ._counters import check_device_count
from ._tf_mapping import (
    DATALOADER_NAME,
    GPU_PLANE,
    PROFILED_BATCH,
    RUNTIME_NAME,
    STEPS_LINE,
    RawEvents,
    framework_of,
    number_gpu_planes,
    to_events,
)

FORMAT = "xplane"

# Plane names a profiler writes first; an XSpace starts with field 1 (planes, tag byte 0x0a) and
# the first plane's name follows within a few bytes.
_PLANE_MARKERS = (b"/host:", b"/device:", b"Task Environment")
TASK_ENVIRONMENT = "Task Environment"
# Line timestamps at or above this are already epoch nanoseconds (after 1973); below it they are
# offsets from the capture start.
_EPOCH_NS_FLOOR = 10**17
# Per-event stats the mapping needs, by XStatMetadata name.
_STAT_STEP = "step_num"
_STAT_CORRELATION = "correlation_id"
_STAT_DETAILS = ("memcpy_details", "memset_details")
_PS_PER_NS = 1000
_MAX_ABS_TIME_NS = 7.3e18  # the year 2200 in epoch nanoseconds
_MAX_DURATION_NS = 1e14  # about 28 hours
_UTF8_REPLACEMENT = b"\xef\xbf\xbd"


KIND = "trace"  # registry.KINDS: what its files are in a job


def sniff(head: bytes) -> bool:
    return head[:1] == b"\x0a" and any(m in head[:96] for m in _PLANE_MARKERS)


def read(path: Path, data: bytes, options: ReadOptions) -> Timeline:
    # protobuf is imported here, not with the module: the registry imports every reader to sniff a file
    from google.protobuf.message import DecodeError

    from ._xplane_pb import XSpace

    space = XSpace()
    try:
        space.ParseFromString(data)
    except DecodeError:
        raise InputError(path, _damage_description(data)) from None
    if not any(p.name.startswith(("/host:", "/device:")) for p in space.planes):
        raise InputError(path, "protobuf without /host: or /device: planes: not an XSpace profile "
                               "(expected the profiler's <host>.xplane.pb)")
    return timeline_from_space(space, path)


def _damage_description(data: bytes) -> str:
    """Why a file that starts like an XSpace does not decode, as specifically as the bytes tell."""
    replacements = data.count(_UTF8_REPLACEMENT)
    if replacements:
        return (f"not a valid XSpace protobuf: the wire format is corrupt and the file holds {replacements} "
                f"U+FFFD replacement sequences (EF BF BD), i.e. the binary was once decoded as UTF-8 text "
                f"and re-encoded; use an unmodified copy of the .xplane.pb")
    return ("not a valid XSpace protobuf: the wire format is corrupt (truncated or damaged file); "
            "expected the profiler's binary <host>.xplane.pb")


def timeline_from_space(space: Any, path: Path) -> Timeline:
    source = Source(path=str(path), format=FORMAT)
    base_ns, epoch = _time_base(space)
    raw = RawEvents()
    aggregated = 0
    no_metadata = 0
    implausible: list[int] = []
    device_props: dict[int, dict[str, Any]] = {}
    gpu_numbers = number_gpu_planes([plane.name for plane in space.planes], source.warnings)
    for plane in space.planes:
        gpu = GPU_PLANE.match(plane.name)
        if gpu:
            device_props[gpu_numbers[plane.name]] = _plane_stats(plane)
        if not plane.lines:
            continue
        counts = _read_plane(plane, raw, base_ns, bool(gpu), implausible)
        source.events_read += counts[0]
        aggregated += counts[1]
        no_metadata += counts[2]
    if implausible:
        source.not_kept["time_out_of_range"] = len(implausible)
        source.warnings.append(f"{len(implausible)} events dropped: time or duration out of range "
                               f"(beyond the year 2200, or longer than about 28 hours)")
    if aggregated:
        source.not_kept["aggregated"] = aggregated
        source.warnings.append(f"{aggregated} aggregated events (num_occurrences, no time) not kept")
    mapped = to_events(raw, gpu_numbers)
    events = mapped.events
    for reason, n in mapped.not_kept.items():
        source.not_kept[reason] = source.not_kept.get(reason, 0) + n
    source.warnings.extend(mapped.warnings)
    if no_metadata:
        source.warnings.append(f"{no_metadata} events refer to event metadata the plane lacks; kept unnamed")
    for message in list(space.errors)[:5]:
        source.warnings.append(f"profiler error recorded in the XSpace: {message}")
    source.events_kept = len(events)
    check_device_count(path, np.asarray(sorted(set(mapped.devices) | set(device_props)), dtype=np.int64))
    hosts = [h for h in space.hostnames if h]
    tl = Timeline(events=events, sources=[source],
                  ranks=[RankInfo(index=0, rank=None, source=0,
                                  clock="epoch" if epoch else "relative",
                                  framework=framework_of(raw.names.values))])
    tl.devices = [DeviceInfo(rank=0, index=d, name=str(device_props.get(d, {}).get("device_vendor", "")),
                             properties={**device_props.get(d, {}), **({"host": hosts[0]} if hosts else {})})
                  for d in sorted(set(mapped.devices) | set(device_props))]  # idle GPUs too
    return tl.validate()


def _time_base(space: Any) -> tuple[int, bool]:
    """(ns to add to line timestamps, whether the result is epoch time)."""
    start = 0
    for plane in space.planes:
        if plane.name == TASK_ENVIRONMENT:
            ids = {sid: sm.name for sid, sm in plane.stat_metadata.items()}
            for stat in plane.stats:
                if ids.get(stat.metadata_id) == "profile_start_time":
                    start = int_or_none(_stat_value(stat, {})) or 0
    line_ts = [line.timestamp_ns for plane in space.planes for line in plane.lines]
    if line_ts and min(line_ts) >= _EPOCH_NS_FLOOR:
        return 0, True
    if start >= _EPOCH_NS_FLOOR:
        return start, True
    return 0, False


def _read_plane(plane: Any, raw: RawEvents, base_ns: int, is_gpu: bool,
                implausible: list[int]) -> tuple[int, int, int]:
    """Append one plane's events to `raw`; returns (events read, aggregated, without metadata)."""
    md_ids = np.fromiter(plane.event_metadata.keys(), dtype=np.int64, count=len(plane.event_metadata))
    md_names = [md.display_name or md.name for md in plane.event_metadata.values()]
    md_codes = raw.names.codes(md_names) if md_names else np.zeros(0, np.int32)
    order = np.argsort(md_ids)
    md_ids, md_codes = md_ids[order], md_codes[order]
    empty_code = raw.names.code("")
    stat_ids = {sm.name: sid for sid, sm in plane.stat_metadata.items()}
    ref_names = {sid: sm.name for sid, sm in plane.stat_metadata.items()}
    want_step = stat_ids.get(_STAT_STEP)
    want_corr = stat_ids.get(_STAT_CORRELATION)
    want_details = {stat_ids[s] for s in _STAT_DETAILS if s in stat_ids}
    # Event kinds whose stats the mapping uses; on the host only those, not every event's stats.
    needs_stats = {mid for mid, md in plane.event_metadata.items()
                   if is_gpu or md.name == PROFILED_BATCH or RUNTIME_NAME.match(md.name)
                   or DATALOADER_NAME.search(md.name)}
    plane_code = raw.planes.code(plane.name)
    totals = [0, 0, 0]
    for line in plane.lines:
        events = line.events
        n = len(events)
        if n == 0:
            continue
        totals[0] += n
        # One pass over the messages (the only per-event Python work besides the stats below).
        fields = np.array([(e.metadata_id, e.offset_ps, e.duration_ps, e.num_occurrences) for e in events],
                          dtype=np.int64).reshape(n, 4)
        mids, offset_ps, dur_ps, occurrences = fields.T
        timed = occurrences == 0
        totals[1] += int((~timed).sum())
        pos = np.searchsorted(md_ids, mids)
        pos_ok = pos < len(md_ids)
        known = pos_ok & (md_ids[np.where(pos_ok, pos, 0)] == mids) if len(md_ids) else np.zeros(n, bool)
        totals[2] += int((~known & timed).sum())
        name = np.where(known, md_codes[np.where(pos_ok, pos, 0)] if len(md_codes) else empty_code, empty_code)

        step_num = np.full(n, -1, dtype=np.int64)
        correlation = np.full(n, -1, dtype=np.int64)
        details = np.full(n, raw.details.code(""), dtype=np.int64)
        if (line.display_name or line.name) == STEPS_LINE:
            with_stats = np.arange(n)
        else:
            with_stats = np.flatnonzero(np.isin(mids, np.fromiter(needs_stats, np.int64, len(needs_stats))))
        for i in with_stats:
            for stat in events[int(i)].stats:
                sid = stat.metadata_id
                if sid == want_step:
                    step_num[i] = _as_int(_stat_value(stat, ref_names))
                elif sid == want_corr:
                    correlation[i] = _as_int(_stat_value(stat, ref_names))
                elif sid in want_details:
                    details[i] = raw.details.code(str(_stat_value(stat, ref_names)))

        # Times beyond the year 2200 or durations beyond a day are dropped and counted (the
        # int64 sums below would wrap on them); checked in float first.
        far = (np.abs(float(base_ns) + float(line.timestamp_ns) + offset_ps / 1000.0) > _MAX_ABS_TIME_NS) | \
            (np.abs(dur_ps / 1000.0) > _MAX_DURATION_NS)
        if far.any():
            implausible.extend(np.flatnonzero(far & timed).tolist())
            timed = timed & ~far
            offset_ps = np.where(far, 0, offset_ps)
            dur_ps = np.where(far, 0, dur_ps)
        # Offsets are rounded to ns before adding the epoch base: epoch ps overflow int64.
        if abs(float(base_ns) + float(line.timestamp_ns)) > _MAX_ABS_TIME_NS:
            line_ns = np.int64(0)
        else:
            line_ns = np.int64(base_ns) + np.int64(line.timestamp_ns)
        start_ns = line_ns + _ps_to_ns(offset_ps)
        end_ns = line_ns + _ps_to_ns(offset_ps + dur_ps)
        kept = int(timed.sum())
        raw.add(ts_ns=start_ns[timed], dur_ns=(end_ns - start_ns)[timed], name=name[timed],
                plane=np.full(kept, plane_code), line=np.full(kept, raw.lines.code(line.display_name or line.name)),
                line_id=np.full(kept, line.id, dtype=np.int64), step_num=step_num[timed],
                correlation=correlation[timed], details=details[timed])
    return totals[0], totals[1], totals[2]


def _ps_to_ns(ps: np.ndarray) -> np.ndarray:
    """Picoseconds to nanoseconds, rounded half up (ends are rounded too, so durations stay exact sums)."""
    return (ps + _PS_PER_NS // 2) // _PS_PER_NS


def _plane_stats(plane: Any) -> dict[str, Any]:
    """A device plane's own stats (vendor, clock, cores, memory) as plain values."""
    ref_names = {sid: sm.name for sid, sm in plane.stat_metadata.items()}
    out: dict[str, Any] = {}
    for stat in plane.stats:
        value = _stat_value(stat, ref_names)
        if isinstance(value, (int, float, str)) and stat.metadata_id in ref_names:
            out[ref_names[stat.metadata_id]] = value
    return out


def _stat_value(stat: Any, ref_names: dict[int, str]) -> Any:
    which = stat.WhichOneof("value")
    if which is None:
        return None
    if which == "ref_value":
        return ref_names.get(stat.ref_value, "")
    if which == "bytes_value":
        return None
    return getattr(stat, which)


def _as_int(value: Any) -> int:
    found = int_or_none(value)
    return -1 if found is None or not 0 <= found < 2**62 else found
