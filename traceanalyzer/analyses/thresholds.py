"""Every threshold the gap attribution uses (analyses/host.py, analyses/gaps.py), with where its value
comes from. The rules' own are in diagnosis/thresholds.py.

The README's "Diagnosis" section lists each constant by name (a test keeps it in step).
Times are int64 nanoseconds; shares are fractions in [0, 1].
"""

from __future__ import annotations

# --- gap attribution ------------------------------------------------------------------------------
# A host thread issuing at least this share of the rank's kernel launches is a launching thread.
LAUNCH_THREAD_MIN_SHARE = 0.10
# A gap shorter than this, with the launching thread busy in ops/launch calls, is launch latency
# (the GPU finished the previous kernel before the host enqueued the next). Same as the default
# --min-gap: shorter idle stretches are the dispatch overhead of eager execution.
LAUNCH_GAP_MAX_NS = 100_000
# The host was blocked in a synchronising call at the gap start if that call covered part of the
# last this-many ns before the gap (host and device timestamps jitter by a few us).
SYNC_TOLERANCE_NS = 5_000
# A device-to-host copy smaller than this is the host reading a result back (.item(), .cpu() of a
# metric): a synchronisation, not a data transfer problem.
READBACK_MAX_BYTES = 1 << 20
# A periodic stall: a step at least this many times the median step duration ...
PERIODIC_STEP_FACTOR = 1.5
# ... and at least this much longer than the median step ...
PERIODIC_MIN_EXCESS_NS = 1_000_000
# ... recurring at least this many times, in at most this share of the steps, at a regular
# step interval (the spacings differ by at most one step), in a trace of at least PERIODIC_MIN_STEPS.
PERIODIC_MIN_OCCURRENCES = 2
PERIODIC_MAX_STEP_SHARE = 0.5
PERIODIC_MIN_STEPS = 4

# Start-up: the first call of a host op or runtime call is a one-off cost when it lasts at least
# STARTUP_FIRST_FACTOR times the median of its later calls and at least STARTUP_MIN_NS (lazy kernel
# loading, first convolution with cuDNN autotuning, first allocation); it needs STARTUP_MIN_CALLS.
STARTUP_FIRST_FACTOR = 10.0
STARTUP_MIN_NS = 1_000_000
STARTUP_MIN_CALLS = 3
# A host copy call is a wait, not a transfer, when its GPU copy runs less than this share of the
# call (the host blocks until earlier GPU work is done, then copies little).
COPY_WAIT_MAX_GPU_SHARE = 0.1
# ... and the call lasts at least this long.
COPY_WAIT_MIN_NS = 100_000

# Kernels shorter than this are "short" (TraceLens' flag): evidence for launch-bound work.
SHORT_KERNEL_NS = 10_000

# --- report size ----------------------------------------------------------------------------------
TOP_GAPS = 10  # longest gaps listed per rank, with evidence
EVIDENCE_NAMES = 3  # host event names listed per gap or finding
