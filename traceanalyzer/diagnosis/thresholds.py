"""Every threshold the rules use, in one place, with where its value comes from (those of the gap
attribution, a figure, are in analyses/thresholds.py).

The README's "Diagnosis" section lists each constant by name (a test keeps it in step).
Times are int64 nanoseconds; shares are fractions in [0, 1].
"""

from __future__ import annotations

# The gap attribution's thresholds (launching threads, host classes, periodic stalls, start-up
# first calls, evidence) are figures' and live in analyses/thresholds.py.

# --- verdict --------------------------------------------------------------------------------------
# Warm-up steps: leading steps at least this many times the median step (first iterations).
WARMUP_STEP_FACTOR = 2.0
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
# CPU-only traces: the host loop is input-bound when at least this share of the step time waits
# for data (XProf's "highly input-bound"), else host-bound.
HOST_INPUT_BOUND_SHARE = 0.20

# --- report size ----------------------------------------------------------------------------------
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
# --- input-bound split (host logs: glances) -------------------------------------------------------
# The CPU is saturated when user + system time during the DataLoader waits is at least this share of
# all cores (glances' own CPU "critical" level is 90% for user time; 85 leaves room for its 1 s means).
INPUT_CPU_SATURATED_PCT = 85.0
# Storage-bound when, with the CPU below that, iowait during the waits is at least this share of all
# cores (a synchronous reader on one of N cores shows at most 100/N %; 5 is a tenth of a core on two) ...
INPUT_IOWAIT_PCT = 5.0
# ... or disks read at least this many bytes/s during the waits.
INPUT_DISK_READ_BYTES_PER_S = 100_000_000
# The host log must cover at least this share of the DataLoader wait time, with this many samples.
INPUT_MIN_WAIT_COVERAGE = 0.5
INPUT_MIN_SAMPLES = 3
