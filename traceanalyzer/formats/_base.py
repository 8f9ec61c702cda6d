"""What every reader shares: the options it reads with and the limits it checks."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ._io import DEFAULT_MAX_INPUT_BYTES

# No machine has more GPUs than this: a file naming more distinct devices is refused with a
# clear message instead of making every per-device figure crawl.
MAX_DEVICES = 128
# Device indices are int32 in the Timeline; larger ones would wrap onto another device.
MAX_DEVICE_INDEX = 2**31 - 1
# nvidia-smi's default sampling interval (-l / -d): what a log without times is assumed to use.
DEFAULT_LOG_INTERVAL_NS = 1_000_000_000


@dataclass
class ReadOptions:
    max_input_bytes: int = DEFAULT_MAX_INPUT_BYTES
    # Called with a number of bytes just processed (for progress display); may be None.
    progress: Callable[[int], None] | None = None
    # Log dirs: the run (TF run folder name, PyTorch "span<k>" or span number) to analyse;
    # None = the newest.
    run: str | None = None
    # Receives the lines saying what a log dir holds and what was picked; None = the `traceanalyzer`
    # logger (the command line passes one that writes to stderr).
    notify: Callable[[str], None] | None = None
    # Counter logs without times (dmon without -o T/-o DT): samples are this far apart (None: not
    # given, DEFAULT_LOG_INTERVAL_NS assumed with a warning) ...
    dmon_interval_ns: int | None = None
    # ... starting here: (ns, clock) with clock CLOCK_WALL (local time) or CLOCK_EPOCH; see
    # `units.parse_start`. Also gives the date to time-of-day-only logs.
    dmon_start: tuple[int, str] | None = None
    # Decoded columns of big traces kept in (and taken from) the user's cache directory (`cache`).
    cache: bool = False
    # Processes (this one included) that decode one big uncompressed trace file in ranges
    # (`chrome_parallel`); 1 streams it in this process alone.
    decode_workers: int = 1

