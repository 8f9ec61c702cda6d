"""Every threshold the diagnosis uses, in one place, with where its value comes from.

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

# --- verdict --------------------------------------------------------------------------------------
# Too little GPU work to judge (tiny test traces, graph capture, GPU left unused): fewer GPU
# activities (kernels, copies, memsets) than MIN_GPU_EVENTS in the window, or GPU busy less than
# MIN_BUSY_SHARE of it. Such ranks get the host-loop verdict, as CPU-only traces do.
MIN_GPU_EVENTS = 5
MIN_BUSY_SHARE = 0.01
# GPU time lost (idle + exposed host<->device copies + exposed communication) below this share of
# the window: the GPU is the bottleneck (gpu_bound). Seed 002: anything under ~90% busy is waste.
GPU_BOUND_MAX_LOST_SHARE = 0.10
# Finding severity by the share of the window it explains. XProf: input time >= 20% of the step is
# "highly", >= 5% "moderately" input-bound; the TensorBoard plugin flagged DataLoader > 5% of the
# step; TraceLens flags memcpy > 5% of the time.
SEVERITY_HIGH_SHARE = 0.20
SEVERITY_MEDIUM_SHARE = 0.05
# A cause becomes a finding when it explains at least this share of the window.
FINDING_MIN_SHARE = 0.02
# Kernels shorter than this are "short" (TraceLens' flag): evidence for launch-bound work.
SHORT_KERNEL_NS = 10_000
# CPU-only traces: the host loop is input-bound when at least this share of the step time waits
# for data (XProf's "highly input-bound"), else host-bound.
HOST_INPUT_BOUND_SHARE = 0.20

# --- report size ----------------------------------------------------------------------------------
TOP_GAPS = 10  # longest gaps listed per rank, with evidence
EVIDENCE_NAMES = 3  # host event names listed per gap or finding
TOP_KERNELS_NAMED = 3  # kernels named in a gpu_bound finding
