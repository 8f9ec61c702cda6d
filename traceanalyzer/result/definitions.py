"""Every figure's definition, in words a user can check by hand. The one place they live.

The README's "Figures" section and the reports show these texts verbatim (a test keeps the
README in step with this module).
"""

from __future__ import annotations

FIGURES: dict[str, str] = {
    "window": (
        "The stretch of time a rank's figures are computed over. With steps: from the start of the "
        "first host step span (PyTorch `ProfilerStep#N`, Keras `Profiled batch`) to the end of the "
        "last. Without steps: per device, from the start of its first GPU activity to the end of its "
        "last (the rank's window then spans all its devices). On a CPU-only trace: from the first to "
        "the last host event; GPU figures then say \"no GPU activity\"."
    ),
    "gpu_busy": (
        "Length of the union of the device's kernel, memcpy and memset intervals, clipped to the "
        "window. Overlapping work (several streams) counts once; annotations on GPU streams (such as "
        "the `gpu_user_annotation` copy of `ProfilerStep#N`) are not work."
    ),
    "gpu_idle_fraction": "1 - GPU busy / window length.",
    "communication": (
        "Communication kernels are kernels whose name starts with `nccl` or `rccl` (after an "
        "optional `void `) or that carry a `Collective name` argument. They count as busy. "
        "Communication time is the union of their intervals; exposed communication is the time when "
        "communication kernels run and no other GPU work does."
    ),
    "idle_gaps": (
        "Maximal intervals of the window in which the device does no kernel, memcpy or memset, "
        "including the stretch from the window start to the first activity and from the last "
        "activity to the window end, kept when at least `--min-gap` long (default 100us). With "
        "`--min-gap 0` the gap total equals window - GPU busy. A gap's step is the host step whose "
        "span holds the gap's start."
    ),
    "memcpy": (
        "Union of memcpy intervals inside the window, overall and by direction (HtoD, DtoH, DtoD, "
        "PtoP, from the event name or the `kind` argument); share of GPU busy time and of the "
        "window; bytes summed over copies that record a size; achieved bandwidth = those bytes / "
        "the summed duration of those copies (GB/s); pageable and pinned copy counts from the "
        "event name. Memset is reported separately the same way."
    ),
    "dataloader_wait": (
        "Union of the host's DataLoader wait ranges inside the window, divided by the window. "
        "PyTorch: the op `enumerate(DataLoader)#..._DataLoaderIter.__next__` (single- and "
        "multi-process); not python stack frames and not anything that merely mentions "
        "\"DataLoader\". TensorFlow: the training thread blocked in `IteratorGetNext`."
    ),
    "per_step": (
        "For each host step span: its duration; GPU busy = union of GPU work on the rank's "
        "devices inside the span; memcpy = union of copies inside the span; DataLoader wait = "
        "union of wait ranges inside the span; idle = duration - GPU busy; communication = union "
        "of communication kernels inside the span; exposed communication = the part of it with no "
        "other GPU work running."
    ),
    "top_kernels": (
        "Kernels that start inside the window, grouped by name: count, summed duration, mean "
        "duration; sorted by summed duration."
    ),
    "summary": (
        "The report's headline figures over all ranks and GPUs: GPU idle = 1 - (sum of GPU busy) / "
        "(sum of the devices' windows); memcpy share = sum of memcpy time / sum of GPU busy; "
        "DataLoader wait = sum of wait time / sum of the ranks' windows; steps = the most steps of "
        "any rank. Per-rank and per-GPU figures are listed beside it."
    ),
    "timeline": (
        "The drawn timeline of a rank, from its window start: GPU busy (kernel, memcpy and memset "
        "union) and copies per device, idle gaps of at least `--min-gap` coloured by their cause "
        "(grey when no cause is given), the host's framework operators and annotations, DataLoader "
        "waits, synchronize calls and copy calls. When a track holds more intervals than it may "
        "draw, neighbouring intervals are merged across the shortest separations first, so the "
        "longest idle stretches stay visible; a merged block is shaded by the share of it that is "
        "really busy. Times are rounded to 0.1 us."
    ),
    "duplicates": (
        "Events identical in name, category, process, thread, device, stream, start and duration "
        "are counted once; the number removed is listed with the input's warnings."
    ),
    "counter_alignment": (
        "nvidia-smi / DCGM log time + `offset_s` = trace time. `given`: `--dmon-offset` added to "
        "what the clocks say; `clock`: the clocks alone (the log's local time minus the UTC offset "
        "of `--dmon-tz`, default this machine's zone; time-only logs take the trace's date; logs "
        "without times start with the trace); `searched`: the offset at which the log's SM "
        "utilisation best matches the trace's GPU busy fraction over the same sample periods "
        "(Pearson r, pooled over GPUs), trying every zone from UTC-12 to UTC+14 in 15-minute steps "
        "(only `--dmon-tz` when given) plus up to 30 s of clock skew. The search is used when r >= "
        "0.5, r beats every offset more than 5 s away by 0.1, at least 10 samples overlap, and it "
        "moves the clock offset by more than one sample period; otherwise the clock offset is kept "
        "and an ambiguous or too-short match is reported."
    ),
    "counter_metrics": (
        "Per GPU and metric over the samples that have a value: mean, min, max; and the mean over "
        "samples inside the trace window (the period a sample describes, [t - period, t), lies in "
        "the window) and outside it (that period lies entirely outside). The period is the median "
        "spacing of the GPU's samples."
    ),
    "zero_util_runs": (
        "Runs of consecutive samples whose SM utilisation is exactly 0 (a missing value, or two "
        "samples more than two periods apart, ends a run): how many runs, total samples and "
        "seconds (samples x period), and the longest run with its first and last sample."
    ),
    "counter_cross_check": (
        "Over the samples inside the trace window: the trace's GPU busy time within their periods "
        "as a percent of those periods, against the mean SM utilisation nvidia-smi reported for "
        "them. They disagree when more than 15 percentage points apart (with at least 5 samples): "
        "another process used the GPU, or the alignment is wrong."
    ),
    "job_clock": (
        "Several ranks are put on one clock, the job's. Ranks of one host share a clock (the host is "
        "a `hostname` key of the trace header, else the host part of torch.profiler's default file "
        "name `<host>_<pid>.<time>.pt.trace.json`; ranks with neither are taken as one host). A "
        "collective ends at nearly the same moment on every rank, so each other host's offset is the "
        "median, over the collectives found on every rank, of (the reference rank's end - this host's "
        "end); the reference is the host of the lowest rank. Ranks taken to share a clock whose own "
        "medians differ by more than 0.5 ms get one offset each. Collectives whose ends still differ "
        "by more than 1 ms once shifted are not the same collective (sampled or trimmed traces) and "
        "are left out, and the offsets are estimated again from the rest. A host's residual is the "
        "median |end - the median rank's end| of its ranks' matched collectives on the job clock. "
        "The timeline draws every rank on the job clock (`job.timeline_shift_us`: where each rank's "
        "window starts, from the earliest), and its ranks zoom and pan together."
    ),
    "collectives": (
        "A collective is a communication kernel on a rank's first device that runs any. It belongs to "
        "the host step whose span holds its launch call (same correlation id; else its own start), "
        "and `seq` is its order among the kernels of its name in that step. Collectives are matched "
        "across ranks by (name, step, seq) and kept when found on every rank that runs collectives "
        "and ending together (see job_clock). Warm-up steps are left out."
    ),
    "rank_communication": (
        "Per rank, per steady-state step. Step time, compute (GPU busy minus exposed communication), "
        "communication, exposed communication and overlapped communication (communication - exposed) "
        "are medians over the steps of the per_step figures. Over the matched collectives on the job "
        "clock, summed and divided by the number of steps they span: waiting in collectives = the "
        "time from the rank's start to the last rank's start (at most its kernel's length); caused "
        "wait = the waiting of all other ranks in the collectives this rank started last; lateness = "
        "the rank's start - the median rank's start; last in = collectives it started last in while "
        "others waited. Bus bandwidth = message bytes (`In/Out msg nelems` x `dtype` size, the "
        "larger) x the collective's factor (all-reduce 2(n-1)/n; all-gather, reduce-scatter, "
        "all-to-all (n-1)/n; others 1; n = ranks analysed) / the time from the last rank's start to "
        "the end, over collectives that record a size (GB/s)."
    ),
    "stragglers": (
        "A straggler is a rank whose lateness per step is at least `STRAGGLER_MIN_LATENESS_NS` (1 ms) "
        "and at least `STRAGGLER_MIN_STEP_SHARE` (5%) of the median step time, and that started last "
        "in at least one matched collective; listed latest first, each with the time the other ranks "
        "waited for it per step and its own largest idle cause per steady-state step (mean over those "
        "steps) as the diagnosis attributed it."
    ),
    "memory": (
        "From torch.profiler's memory events (`profile_memory=True`; the `[memory]` instants), "
        "per GPU and, kept apart, for the host: after each allocation or release, the bytes "
        "allocated to tensors (`Total Allocated`) and reserved by the caching allocator (`Total "
        "Reserved`: allocated plus cached blocks). Peak allocated / peak reserved = the largest "
        "value over the trace. Total = the device's memory from the trace's `deviceProperties` "
        "(`totalGlobalMem`). Peak allocated fraction = peak allocated / total; headroom = 1 - "
        "peak reserved / total (peak allocated when the events carry no reserved total). Only "
        "this process's allocator is seen: the CUDA context and other processes are not. The "
        "series drawn holds every sample, or above 1000 the maximum per equal time bin; times "
        "from the device's window start. A GPU whose events name another index than its kernels "
        "(visible vs physical numbering) is matched when the rank has one of each."
    ),
    "memory_per_step": (
        "For each host step span: peak allocated = the largest allocated value in the span, "
        "including the value carried in from before it; allocated at the end = the last value at "
        "or before the span's end; growth = that minus the previous step's (0 for the first). "
        "Growth per step = the median of the growths after the first step. A leak shows as growth "
        "in every step."
    ),
    "throughput": (
        "Over steady job steps (steps present on every rank, warm-up steps the diagnosis names left "
        "out; none with `--include-warmup`), each lasting as long as its slowest rank: step time "
        "median, p10 and p90 (linear percentiles), steps/s = steps / their summed duration, and with "
        "`--batch-size N` (samples each rank takes per step, as given; never guessed from shapes) "
        "samples/s = N x ranks with steps x steps / their summed duration. Per step: samples/s = N / "
        "the step's duration. `diff` measures step time the same way."
    ),
    "host_metrics": (
        "From a glances export (`--export csv`, or its JSON export, which keeps only the latest "
        "sample), columns matched by name (glances 3 `cpu_user`, glances 4 `cpu.user`): CPU user, "
        "system, iowait, idle and total as % of all cores, load averages, memory and swap used %, "
        "disk read/write bytes/s summed over whole disks (partitions, loop, ram and zram devices, and"
        " device-mapper devices beside physical disks left out), network rx/tx bytes/s summed over "
        "interfaces except loopback. Rates are glances' own, or bytes since the last refresh / the "
        "refresh's length. Per metric: mean, min, max, and the means inside and outside the trace "
        "window as for counter logs. Rows whose number of values differs from the header are dropped "
        "and counted."
    ),
    "host_alignment": (
        "glances 4 writes each sample's time with its UTC offset (`now.iso`): epoch time, placed as "
        "it is. Other exports give local time (`timestamp`), put on the trace clock like nvidia-smi "
        "logs: minus the UTC offset of `--dmon-tz` (default this machine's zone), plus "
        "`--dmon-offset` when given. No search: host figures have nothing to match against the trace."
    ),
    "during_dataloader_wait": (
        "A host sample at time t describes its refresh period [t - period, t). Each metric's mean "
        "over the samples whose period overlaps the trace's DataLoader waits (the union over ranks; "
        "per rank for the input split), weighted by the wait time inside the period. Coverage = wait "
        "time inside sampled periods / all wait time."
    ),
    "input_split": (
        "For an input-bound rank with a host log covering at least half of its DataLoader wait time "
        "(3 samples or more): `cpu` when user + system during the waits is at least 85% of all cores;"
        " `storage` when it is below that and iowait is at least 5% or disks read at least 100 MB/s; "
        "otherwise, or without a host log, `unknown`."
    ),
}
