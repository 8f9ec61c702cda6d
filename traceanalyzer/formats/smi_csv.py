"""Reader for `nvidia-smi --query-gpu=... --format=csv[,nounits] [-l N | -lms N]` logs, and the CSV logs
scripts write with the same readings under their own header.

The header row names the queried fields, with units in brackets (`utilization.gpu [%]`) or in the name
(`utilization_gpu_percent`, `power_draw_w`); values carry units (`92 %`, `25073 MiB`) unless `nounits` was
given; `[N/A]` / `[Not Supported]` mean no value. Each column is read by what its header MEANS
(`_log_columns.meaning`: quantity, part and unit words, whoever wrote the header), in any order; values are
scaled to the metric's unit (`2.5 GiB` -> 2560 MiB); a header may repeat or change mid-file (logs appended
to). Columns the rule does not map are kept as `smi_<name>` when their values are numbers.

* Time: the column named for it (`timestamp`, `time`, `date`, ...) or else one of dates: nvidia-smi's
  `YYYY/MM/DD HH:MM:SS.mmm` or ISO-8601, every fraction kept (no sample is merged with another). Without
  a zone it is the local time of the logging machine (CLOCK_WALL); with one (`Z`, `+02:00`) it is made UTC
  once (CLOCK_EPOCH); epoch numbers (seconds, ms, us, ns) are UTC. Without a time column, rows are
  numbered into samples like dmon's, `--dmon-interval` apart (1 s assumed, warned).
* GPU: multi-GPU logs hold one row per GPU per sample, so the GPU id column is the one whose values
  come back round-robin: each sample lists every GPU once (no value twice in a row, and the same
  value again one sample later). Candidates are the columns whose header only names a GPU (`index`,
  `pci.bus_id`, `uuid`, `gpu`, `gpu_id`, `gpu_index`, `device`, ...); of those that repeat round-robin
  the one with most distinct values wins (ties: nvidia-smi's own id fields, in NVIDIA_GPU_IDS order,
  then the header's order). A column that never repeats (a row number) or repeats row after row (a sample
  number) is no GPU id, whatever its name; an `index` numbered that way is said in a warning. A log of one
  sample (every value once) takes nvidia-smi's own id fields as ids; no id column: one GPU.

`noheader` logs cannot be read by name: the error says the rows look like `--format=csv,noheader`
output (values with units, no field names) and which field-list line to add.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import InputError
from ..timeline import Source, Timeline
from ._base import MAX_DEVICES, ReadOptions
from ._counters import (
    check_columns,
    check_device_count,
    check_log_times,
    counters_timeline,
    device_indices,
    drop_cut_last_row,
    drop_wrong_rows,
    number_samples,
    numbered_times,
    parse_numbers,
    read_segments,
)
from ._log_columns import (
    DATE_VALUE,
    Meaning,
    Times,
    common_value_unit,
    meaning,
    parse_times,
    scale,
    time_unit_ns,
)
from ._smi_noheader import name_columns, round_robin

FORMAT = "nvidia-smi-csv"

TIMESTAMP = "timestamp"
INDEX = "index"
# nvidia-smi's text fields that identify the GPU or the host: never counters (some hold numbers).
TEXT_FIELDS = {"timestamp", "index", "name", "gpu_name", "uuid", "gpu_uuid", "pci.bus_id",
               "gpu_bus_id", "serial", "gpu_serial", "driver_version", "vbios_version", "compute_mode",
               "persistence_mode", "display_mode", "display_active", "pci.domain", "pci.bus",
               "pci.device", "pci.device_id", "pci.sub_device_id", "mig.mode.current", "count",
               "minor_number", "module_id"}
# nvidia-smi's own GPU id fields, preferred in this order on a tie (`_gpu_column`); other columns whose header
# only names a GPU (`gpu`, `gpu_id`, `device`) come after them, in the header's order.
NVIDIA_GPU_IDS = ("index", "pci.bus_id", "gpu_bus_id", "uuid", "gpu_uuid", "serial", "gpu_serial",
                  "minor_number", "module_id")
# nvidia-smi's units in values (`2 %`, `588 MiB`, `70.50 W`, `1410 MHz`): what a noheader row shows.
_UNIT_VALUE = re.compile(r"^[-+]?\d+(?:\.\d+)?\s?(%|MiB|W|MHz|KiB/s|MB/s)$")
_DATE_VALUE = DATE_VALUE

# A header's field: a name starting with a letter, then an optional unit in brackets or a trailing `%`.
_FIELD_NAME = re.compile(r"^([a-z][a-z0-9_.]*(?:[ /-]+[a-z0-9_.]+)*)\s*(?:[\[(]([^\])]*)[\])]|%)?$")
_SMI_UNITS = {"%", "MiB", "W", "MHz"}
_PSTATE = re.compile(r"^\s*P(\d+)\s*$")
_SHAPE = re.compile(r"[0-9]")
_STAMP_ROW = re.compile(r"^\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2}(\.\d+)?\s*,")
# nvidia-smi's default table: its date line ("Mon Jan 15 09:12:03 2024"), rules ("+----+", "|====|")
# and boxed rows ("| 0  NVIDIA A100 ... |"). A log may hold it before its CSV rows, or between them.
_TABLE_START = re.compile(r"^(?:[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d{2}:\d{2}:\d{2} \d{4}|\+[-=+]+\+)$")
_TABLE_LINE = re.compile(r"^(?:[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d{2}:\d{2}:\d{2} \d{4}|[+|][-=+| ]*[+|]|\|.*\|)$")


KIND = "counters"  # registry.KINDS: what its files are in a job


def sniff(head: bytes) -> bool:
    """First non-blank line (NUL padding ignored) is a CSV header of --query-gpu field names, with
    `timestamp` or a known counter among them, or begins nvidia-smi's default table (printed before the
    CSV rows by a script that logs both: read() then finds the header after it), or is a noheader row
    (read() then says what to add)."""
    for raw in head.replace(b"\x00", b"").split(b"\n", 20)[:20]:
        line = raw.strip()
        if line:
            text = line.decode("utf-8", errors="replace")
            # a header, or a headerless log's first row (read() then says what to add)
            return (_header_names(text) is not None or bool(_STAMP_ROW.match(text)) or _noheader_row(text)
                    or (bool(_TABLE_START.match(text)) and b"NVIDIA-SMI" in head))
    return False


def _header_names(line: str) -> list[str] | None:
    """Field names of a header row (units dropped, lower case, inner spaces as `_`), or None when the row
    is not a header: every part a name, and either one of them read as a GPU reading (`_log_columns.meaning`)
    beside a time column or another reading, or `timestamp` among them, or a unit nvidia-smi writes in
    brackets (`util [%]`). A lone reading among other names (`epoch, loss, gpu_mem_mb`) is no GPU log."""
    names = []
    unit = False
    for part in line.split(","):
        m = _FIELD_NAME.match(part.strip().lower())
        if not m:
            return None
        names.append(re.sub(r"[ -]+", "_", m.group(1)))
        unit = unit or (m.group(2) is not None and part.strip()[m.start(2):m.end(2)] in _SMI_UNITS)
    meanings = [meaning(p) for p in line.split(",")]
    readings = sum(m.metric is not None for m in meanings)
    timed = any(m.is_time for m in meanings)
    if not (unit or TIMESTAMP in names or readings >= 2 or (readings and timed)):
        return None
    return names


def _noheader_row(line: str) -> bool:
    """A row of `--format=csv,noheader` output: two or more values, each a number, a date, a P-state,
    a missing marker or text, and at least one with an nvidia-smi unit (`2 %`, `588 MiB`) or a date."""
    fields = [f.strip() for f in line.split(",")]
    if len(fields) < 2:
        return False
    return any(_UNIT_VALUE.match(f) or _DATE_VALUE.match(f) for f in fields)


def _noheader_hint(line: str) -> str:
    """A field-list line for a noheader row, guessed from its values' units (only a hint: the user
    knows which fields were queried)."""
    guess: list[str] = []
    for f in (f.strip() for f in line.split(",")):
        m = _UNIT_VALUE.match(f)
        unit = m.group(1) if m else ""
        if _DATE_VALUE.match(f):
            name = "timestamp"
        elif unit == "%":
            name = "utilization.gpu [%]" if "utilization.gpu [%]" not in guess else "utilization.memory [%]"
        elif unit == "MiB":
            name = "memory.used [MiB]" if "memory.used [MiB]" not in guess else "memory.total [MiB]"
        else:
            name = {"W": "power.draw [W]", "MHz": "clocks.sm [MHz]"}.get(unit, "")
            if not name:
                name = "index" if f.isdigit() and "index" not in guess else ("pstate" if _PSTATE.match(f) else "...")
        guess.append(name)
    return ", ".join(guess)


@dataclass
class _Segment:
    names: list[str]
    headers: list[str] = field(default_factory=list)  # the header's fields as written (case kept)
    rows: list[list[str]] = field(default_factory=list)
    line_nos: list[int] = field(default_factory=list)
    headerless: bool = False  # rows before any header: named by their values (`_smi_noheader`)


def read(path: Path, data: bytes, options: ReadOptions) -> Timeline:
    source, segments = read_segments(path, data, FORMAT, _segments,
                                     "no data rows under the CSV header: expected rows such as "
                                     "'2024/01/16 14:44:16.977, 0 %, 21 MiB'")
    tables = [_Table(_one_row_per_gpu(seg, source)) for seg in segments]
    if len({t.time is not None for t in tables}) > 1:
        raise InputError(path, "the timestamp field comes and goes between headers; "
                               "split the log where the header changes")

    metric_parts: dict[str, list[tuple[int, np.ndarray]]] = {}
    unknown: list[str] = []
    text_skipped: set[str] = set()
    bad_values = 0
    offset = 0
    for table in tables:
        used: set[str] = set()
        for name, header in zip(table.seg.names, table.seg.headers):
            if name in TEXT_FIELDS or name in table.ids or name == table.time:  # ids and times: no counters
                continue
            values = table.col[name]
            if name == "pstate":
                values = pd.Series(values, dtype=object).str.extract(_PSTATE)[0].fillna("-").to_numpy()
            parsed, bad = parse_numbers(values)
            found = meaning(header, common_value_unit(values))
            metric = found.metric
            if metric is None or metric in used:
                if bad.all():  # a text field we do not know: not a counter
                    text_skipped.add(name)
                    continue
                metric = "smi_" + name.replace(".", "_")
                if name not in unknown and found.metric is None:
                    unknown.append(name)
            else:
                parsed = scale(parsed, values, metric, found.unit)
            used.add(metric)
            bad_values += int(bad.sum())
            metric_parts.setdefault(metric, []).append((offset, parsed))
        offset += len(table.seg.rows)

    n = offset
    line_nos = [ln for s in segments for ln in s.line_nos]
    device = _device_numbers(path, np.concatenate([t.gpu_ids() for t in tables]), line_nos)
    if tables[0].time is not None:
        stamps = pd.concat([pd.Series(t.col[t.time], dtype=object) for t in tables if t.time], ignore_index=True)
        header = tables[0].headers[tables[0].time]
        ts_ns, source.clock = _parse_stamps(path, stamps, header, line_nos, source)
    else:
        ts_ns, source.clock = numbered_times(number_samples(device), options, source)

    for note in dict.fromkeys(note for t in tables for note in t.notes):
        source.warnings.append(note)
    if bad_values:
        source.warnings.append(f"{bad_values} values that are not numbers read as missing")
    if text_skipped:
        source.not_kept["text_field_values"] = n * len(text_skipped)
    return counters_timeline(source, ts_ns, device, metric_parts, unknown, "smi_")


class _Table:
    """One header's rows as columns, with the column that gives the time and the one that names the
    GPU, decided by their values (see the module docstring)."""

    def __init__(self, seg: _Segment) -> None:
        self.seg = seg
        table = np.array(seg.rows, dtype=object)
        self.col = {name: table[:, i] for i, name in enumerate(seg.names)}
        meanings = {name: meaning(h) for name, h in zip(seg.names, seg.headers)}
        self.notes: list[str] = []
        self.headers = dict(zip(seg.names, seg.headers))
        self.time = _time_column(self.col, meanings, self.headers)
        self.ids = [name for name in seg.names if meanings[name].is_gpu_id or name in NVIDIA_GPU_IDS]
        stamps = (self.col[self.time], self.headers[self.time]) if self.time else None
        self.gpu = _gpu_column(self.col, self.ids, stamps, self.notes)

    def gpu_ids(self) -> np.ndarray:
        if self.gpu is None:
            return np.full(len(self.seg.rows), "0", dtype=object)
        return np.asarray(self.col[self.gpu], dtype=object)


def _time_column(col: dict[str, np.ndarray], meanings: dict[str, Meaning], headers: dict[str, str]) -> str | None:
    """The column of sample times: `timestamp`, else the first named for the time (`time`, `date`, `ts`,
    `elapsed_sec`) whose values are dates, epoch numbers or counts from the logger's start, else the first column
    of dates."""
    if TIMESTAMP in col:
        return TIMESTAMP
    for name, m in meanings.items():
        if m.is_time and not isinstance(_times(col[name], headers[name]), str):
            return name
    return next((name for name, m in meanings.items() if m.metric is None and not m.is_gpu_id
                 and pd.Series(col[name], dtype=object).astype(str).str.strip().str.match(_DATE_VALUE).all()), None)


def _times(values: np.ndarray | pd.Series, header: str) -> Times | str:
    """A time column's values read (`_log_columns.parse_times`); numbers below the epoch range count the unit its
    header names (`elapsed_sec`, `time_ms`; seconds when none) from the logger's start."""
    text = pd.Series(values, dtype=object).astype(str).str.strip()
    return parse_times(text, time_unit_ns(header))


def _segments(path: Path, lines: list[str], cut: bool, source: Source) -> list[_Segment]:
    segments: list[_Segment] = []
    wrong: list[int] = []
    table = 0
    last = max((i for i, ln in enumerate(lines) if ln.strip()), default=-1)
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        if _TABLE_LINE.match(line.strip()):  # nvidia-smi's default table, printed before or between samples
            table += 1
            continue
        names = _header_names(line.strip())
        if names is not None:
            check_columns(path, len(names), i + 1)
            segments.append(_Segment(names=names, headers=[p.strip() for p in line.split(",")]))
            continue
        if not segments:
            if _noheader_row(line):
                n = len(line.split(","))
                check_columns(path, n, i + 1)
                segments.append(_Segment(names=[f"field{j + 1}" for j in range(n)],
                                         headers=[f"field{j + 1}" for j in range(n)], headerless=True))
            else:
                raise InputError(path, f"line {i + 1}: no header row naming the fields; expected a first "
                                       "line such as 'timestamp, index, utilization.gpu [%]' (logs written "
                                       "with --format=csv,noheader need that line added)")
        seg = segments[-1]
        fields = [f.strip() for f in line.split(",")]
        if i == last and cut and not _complete_last_row(fields, seg):
            drop_cut_last_row(source, i + 1, sum(len(s.rows) for s in segments))
            continue
        if len(fields) != len(seg.names):
            wrong.append(i + 1)
            continue
        seg.rows.append(fields)
        seg.line_nos.append(i + 1)
    if table:
        source.not_kept["table_line"] = table
        source.warnings.append(f"{table} lines of the nvidia-smi table (printed with the log) skipped; "
                               f"the CSV rows are read")
    if not segments and table:
        raise InputError(path, "an nvidia-smi table without --query-gpu CSV rows: expected a header such as "
                               "'timestamp, index, utilization.gpu [%]' and rows under it "
                               "(nvidia-smi --query-gpu=... --format=csv -l 1)")
    drop_wrong_rows(source, wrong)
    for seg in segments:
        if seg.headerless and seg.rows:
            _name_headerless(path, seg, source)
    return [s for s in segments if s.rows]


def _name_headerless(path: Path, seg: _Segment, source: Source) -> None:
    """A headerless segment's columns named by their values (`_smi_noheader.name_columns`), said in a warning;
    refused, naming the first row and the field list to add, when the values cannot tell utilization.gpu."""
    named = name_columns(seg.rows)
    if isinstance(named, str):
        row = ", ".join(seg.rows[0])
        raise InputError(path, f"line {seg.line_nos[0]}: {row[:60]!r} looks like nvidia-smi --format=csv,noheader "
                               f"output (no header naming the fields) and {named}; add the field list given to "
                               f"--query-gpu as a first line, e.g. '{_noheader_hint(row)[:200]}', or log with "
                               f"--format=csv")
    seg.headers = named.headers
    seg.names = [re.sub(r"\s*\[.*\]$", "", h) for h in named.headers]
    source.warnings.append(named.note)


# a header naming one GPU by number (`gpu0_util`, `GPU 1 mem`, `util_gpu2`): a log of one column per GPU
_GPU_NUMBER = re.compile(r"(?<![a-z0-9])gpu[ _.-]?(\d{1,3})(?![0-9])", re.IGNORECASE)


def _one_row_per_gpu(seg: _Segment, source: Source) -> _Segment:
    """A segment of one column per GPU and reading (`gpu0_util, gpu1_util, gpu0_mem_mb, ...`) as one row per GPU
    per sample, like nvidia-smi's own logs: the columns of the other GPUs' readings under the reading's name
    without the number (`gpu_util`), an `index` column of the GPU numbers, the other columns repeated. Unchanged
    when no header names a GPU by number, or a column already names each row's GPU."""
    found = [_GPU_NUMBER.search(h) for h in seg.headers]
    if not any(found) or any(meaning(h).is_gpu_id or n in NVIDIA_GPU_IDS for n, h in zip(seg.names, seg.headers)):
        return seg
    shared = [j for j, m in enumerate(found) if m is None]
    readings: dict[str, dict[int, int]] = {}  # reading's header without the number -> GPU -> column
    for j, m in enumerate(found):
        if m is not None:
            readings.setdefault(_GPU_NUMBER.sub("gpu", seg.headers[j], count=1), {})[int(m.group(1))] = j
    gpus = sorted({g for cols in readings.values() for g in cols})
    headers = [seg.headers[j] for j in shared] + list(readings) + [INDEX]
    out = _Segment(names=[_field_name(h) for h in headers], headers=headers)
    for row, line_no in zip(seg.rows, seg.line_nos):
        for g in gpus:
            out.rows.append([row[j] for j in shared] + [row[c[g]] if g in c else "" for c in readings.values()]
                            + [str(g)])
            out.line_nos.append(line_no)
    source.warnings.append(f"one column per GPU ({', '.join(seg.headers[j] for j, m in enumerate(found) if m)}): "
                           f"read as {len(gpus)} GPUs ({', '.join(map(str, gpus))}), their number from the header")
    return out


def _field_name(header: str) -> str:
    """A header's field name as `_header_names` gives it (lower case, unit dropped, inner spaces as `_`)."""
    m = _FIELD_NAME.match(header.strip().lower())
    return re.sub(r"[ -]+", "_", m.group(1)) if m else header.strip().lower()


def _complete_last_row(fields: list[str], seg: _Segment) -> bool:
    """A last row without a newline is kept only if each field has the shape of the row
    before it (digits aside): a cut row loses fields, units or timestamp parts."""
    if len(fields) != len(seg.names):
        return False
    if not seg.rows:
        return all(fields)
    shape = [_SHAPE.sub("", f) for f in fields]
    previous = [_SHAPE.sub("", f) for f in seg.rows[-1]]
    return shape == previous and all(fields)


def _gpu_column(col: dict[str, np.ndarray], ids: list[str], stamps: tuple[np.ndarray, str] | None,
                notes: list[str]) -> str | None:
    """The column naming each row's GPU: of the candidates (`ids`) whose values repeat round-robin, the one with
    most distinct values (ties: nvidia-smi's id fields in NVIDIA_GPU_IDS order, then the header's order).
    Without any, a log of one sample (every value once, within one second when timed) takes nvidia-smi's own
    id field; else one GPU."""
    order = sorted(ids, key=lambda n: (NVIDIA_GPU_IDS.index(n) if n in NVIDIA_GPU_IDS else len(NVIDIA_GPU_IDS),
                                       ids.index(n)))
    found: list[tuple[int, int, str]] = []
    single: list[str] = []
    for rank, name in enumerate(order):
        codes, uniques = pd.factorize(pd.Series(col[name], dtype=object).astype(str).str.strip())
        k, n = len(uniques), len(codes)
        if round_robin(codes, k):
            found.append((-k, rank, name))
        elif k == n and name in NVIDIA_GPU_IDS and k <= MAX_DEVICES and _one_sample(stamps):
            single.append(name)
    chosen = min(found)[2] if found else (single[0] if single else None)
    if INDEX in col and chosen != INDEX:
        notes.append(f"column '{INDEX}' is not the GPU index here (its values do not list each GPU once per "
                     f"sample: a row or sample number?); "
                     + (f"GPUs from column '{chosen}'" if chosen else "read as one GPU"))
    return chosen


def _one_sample(stamps: tuple[np.ndarray, str] | None) -> bool:
    """Rows that could all be one sample: no times, or times within one second."""
    if stamps is None:
        return True
    parsed = _times(*stamps)
    return not isinstance(parsed, str) and int(parsed.ns.max() - parsed.ns.min()) <= 10**9


def _device_numbers(path: Path, ids: np.ndarray, line_nos: list[int]) -> np.ndarray:
    """`index` values as they are; bus ids / uuids numbered in order of first appearance."""
    parsed, bad = parse_numbers(ids)
    if not bad.any() and not np.isnan(parsed).any():
        return device_indices(path, parsed, line_nos, "GPU index")
    codes, _ = pd.factorize(pd.Series(ids, dtype=object))
    check_device_count(path, codes)
    return codes.astype(np.int32)


def _parse_stamps(path: Path, stamps: pd.Series, header: str, line_nos: list[int],
                  source: Source) -> tuple[np.ndarray, str]:
    """Sample times to the nanosecond (`_times`), on the clock they name; what must be said of them (a relative
    clock, the order of day and month) in `source`'s warnings."""
    text = stamps.astype(str).str.strip()
    parsed = _times(text, header)
    if parsed == "zone":
        raise InputError(path, "some timestamps give a time zone and some do not; their times cannot be put "
                               "on one clock: log them all with their zone (or all without)")
    if isinstance(parsed, str):
        k = int(parsed.split()[1])
        raise InputError(path, f"line {line_nos[k]}: timestamp {text.iloc[k]!r} is not a date and time; "
                               "expected YYYY/MM/DD HH:MM:SS.mmm, ISO-8601 (2025-03-01T12:00:00.123Z), "
                               "MM-DD-YYYY / DD-MM-YYYY HH:MM:SS, epoch seconds or seconds since the start")
    if parsed.note:
        source.warnings.append(parsed.note)
    check_log_times(path, parsed.ns, line_nos, text.to_numpy())
    return parsed.ns, parsed.clock
