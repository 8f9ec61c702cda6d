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

# Start-up: the first call of a host op or runtime call is a one-off cost when it lasts at least
# STARTUP_FIRST_FACTOR times the median of its later calls and at least STARTUP_MIN_NS (lazy kernel
# loading, first convolution with cuDNN autotuning, first allocation); it needs STARTUP_MIN_CALLS.
STARTUP_FIRST_FACTOR = 10.0
STARTUP_MIN_NS = 1_000_000
STARTUP_MIN_CALLS = 3
# Warm-up steps: leading steps at least this many times the median step (first iterations).
WARMUP_STEP_FACTOR = 2.0
# A host copy call is a wait, not a transfer, when its GPU copy runs less than this share of the
# call (the host blocks until earlier GPU work is done, then copies little).
COPY_WAIT_MAX_GPU_SHARE = 0.1
# ... and the call lasts at least this long.
COPY_WAIT_MIN_NS = 100_000

# --- verdict --------------------------------------------------------------------------------------
# Too little GPU work to judge (tiny test traces, graph capture, GPU left unused): fewer GPU
# activities (kernels, copies, memsets) than MIN_GPU_EVENTS in the window, or GPU busy less than
# MIN_BUSY_SHARE of the window after start-up (unless start-up dominates the capture). Such ranks
# get the host-loop verdict, as CPU-only traces do.
MIN_GPU_EVENTS = 5
MIN_BUSY_SHARE = 0.01
# A cause wins the verdict clearly when its lost time is at least this multiple of the runner-up's.
CLEAR_MARGIN = 1.5
# With at least this many steady steps, a cause's lost time for the verdict is its median per-step
# idle x steps (plus exposed copies / communication), so one long gap cannot decide the verdict.
ROBUST_MIN_STEPS = 4
# A rank whose lost time has mostly no traced cause is still healthy (gpu_bound) when its GPU is busy
# at least this share of the window; below it the verdict is undetermined (nothing to point at).
HEALTHY_BUSY_SHARE = 0.75
# Start-up is the verdict when it loses more than every steady cause and at least this share of all.
STARTUP_DOMINATED_MIN_SHARE = 0.25
# nvidia-smi logs alone: a GPU is underused when at least this share of its samples are at 0% SM.
UNDERUSED_ZERO_SHARE = 0.25
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

# --- stragglers -----------------------------------------------------------------------------------
# A rank is a straggler when it starts its collectives, summed per step, at least this much later
# than the median rank ... (one clock's jitter and launch noise stay far below a millisecond)
STRAGGLER_MIN_LATENESS_NS = 1_000_000
# ... and at least this share of the median step time (a 1 ms lag in a 10 s step is no straggler).
STRAGGLER_MIN_STEP_SHARE = 0.05
# --- memory (profile_memory events; findings, not causes of idle time) ---------------------------------
# High memory pressure: the peak reserved (else allocated) memory is at least this share of the
# device's memory. The caching allocator then retries / frees its cache and an OOM is one batch away.
MEMORY_PRESSURE_FRACTION = 0.90
# ... "high" severity from this share on.
MEMORY_PRESSURE_HIGH_FRACTION = 0.95
# Headroom: the peak reserved (else allocated) memory is at most this share of the device's memory
# (seed 001: fill the GPU; a larger batch often raises throughput). Not said when the verdict is
# already allocator-bound.
MEMORY_HEADROOM_MAX_USED_FRACTION = 0.40
# A leak: the memory allocated at the end of a step grows from every step to the next, over at least
# this many consecutive step-to-step changes ...
MEMORY_LEAK_MIN_STEPS = 3
# ... by at least this many bytes each (any retained tensor: steady training ends every step with
# exactly the same bytes allocated).
MEMORY_LEAK_MIN_GROWTH_BYTES = 1
# A leak is "high" severity when at its median growth the device would be full within this many steps.
MEMORY_LEAK_SOON_STEPS = 10_000
