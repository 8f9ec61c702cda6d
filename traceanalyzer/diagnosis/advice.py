"""Concrete next steps per finding, by framework (`RankInfo.framework`). Plain text only.

Sources: seed 002 (bottlenecks of the training pipeline and their cures) and seed 003 (the
PyTorch tuning decision tree: data loader -> memcpy -> GPU -> CPU).
"""

from __future__ import annotations

import re

PYTORCH = "pytorch"
TENSORFLOW = "tensorflow"
GENERIC = ""

ADVICE: dict[str, dict[str, tuple[str, ...]]] = {
    "input_bound": {
        PYTORCH: (
            "Load batches in parallel: DataLoader(num_workers=N) with N up to the CPU cores per GPU, "
            "persistent_workers=True, and a larger prefetch_factor so batches are ready before they are needed.",
            "Pin host memory (pin_memory=True) and copy with .to(device, non_blocking=True).",
            "Make the per-sample work cheaper: move heavy preprocessing (decoding, resizing, augmentation) "
            "offline or onto the GPU; copy the data to fast local storage (NVMe) if reading it is slow.",
        ),
        TENSORFLOW: (
            "End the tf.data pipeline with .prefetch(tf.data.AUTOTUNE) so input overlaps the step.",
            "Parallelise map stages: map(..., num_parallel_calls=tf.data.AUTOTUNE); interleave file reads.",
            "cache() the dataset after expensive, deterministic stages, or move preprocessing offline; "
            "prefer TensorFlow ops over tf.py_function in the pipeline.",
        ),
        GENERIC: (
            "Prepare the next batch while the current step runs (parallel workers, prefetching).",
            "Make per-sample preprocessing cheaper or move it offline; read the data from fast local storage.",
        ),
    },
    "memcpy_bound": {
        PYTORCH: (
            "Create tensors directly on the device (torch.zeros(..., device='cuda'), torch.as_tensor) "
            "instead of building them on the CPU and copying.",
            "Copy from pinned memory (DataLoader(pin_memory=True) or tensor.pin_memory()) with "
            ".to(device, non_blocking=True) so copies overlap compute; pageable copies are staged by the host.",
            "Send less data: cast to wider types (float32, one-hot) on the GPU after the copy, not before.",
        ),
        TENSORFLOW: (
            "Keep data small until it is on the GPU: cast (tf.cast) and expand (tf.one_hot) after the copy.",
            "Prefetch to the device (tf.data.experimental.prefetch_to_device) so copies overlap the step.",
        ),
        GENERIC: (
            "Copy less and overlap copies with compute (pinned memory, asynchronous copies, prefetch to device).",
        ),
    },
    "sync_bound": {
        PYTORCH: (
            "Remove host-device synchronisations from the hot loop: .item(), .cpu(), .numpy(), print(tensor), "
            "`if tensor:` and torch.cuda.synchronize() each stall the launch queue.",
            "Accumulate metrics and losses on the GPU and read them every N steps.",
            "Use non_blocking=True copies; find hidden syncs with torch.cuda.set_sync_debug_mode('warn').",
        ),
        TENSORFLOW: (
            "Avoid reading tensor values (.numpy(), float(tensor)) every step; log every N steps.",
            "Keep control flow in the graph (tf.function, tf.where instead of Python branches on tensors).",
        ),
        GENERIC: (
            "Avoid reading GPU results on the host every step; batch the reads and log every N steps.",
        ),
    },
    "launch_bound": {
        PYTORCH: (
            "Give the GPU more work per launch: a larger batch size (check memory headroom).",
            "Fuse small kernels and cut Python overhead with torch.compile(model); "
            "capture the step with CUDA graphs (torch.compile(mode='reduce-overhead')).",
            "Use fused optimizers (torch.optim.AdamW(fused=True) or foreach=True) and fused layers.",
        ),
        TENSORFLOW: (
            "Increase the batch size; compile the step with tf.function(jit_compile=True) (XLA) to fuse ops.",
            "Run several steps per tf.function call (steps_per_execution in Keras).",
        ),
        GENERIC: (
            "Increase the batch size and fuse small operations (compilers, graph capture).",
        ),
    },
    "host_bound": {
        PYTORCH: (
            "Move post-processing, logging, metric computation and image writing off the hot loop: "
            "run it every N steps, or in a background thread/process.",
            "Keep per-step Python light; vectorise host work; use torch.compile to cut framework overhead.",
        ),
        TENSORFLOW: (
            "Lighten Keras callbacks (on_train_batch_end): combine them, run them every N batches, or move "
            "the work into the graph (custom metrics).",
            "Run heavy host processing in a separate thread.",
        ),
        GENERIC: (
            "Move host-side post-processing and logging off the hot loop, or run it less often.",
        ),
    },
    "periodic_stall": {
        PYTORCH: (
            "Save checkpoints asynchronously (torch.distributed.checkpoint.async_save, or copy the state dict "
            "to CPU and write it in a background thread) and less often.",
            "Run evaluation less often or on a separate process/GPU.",
        ),
        TENSORFLOW: (
            "Save checkpoints less often or asynchronously (tf.train.CheckpointOptions(enable_async=True)).",
            "Write summaries to small, rotated event files instead of one growing file.",
        ),
        GENERIC: (
            "Save checkpoints and run evaluation less often, or asynchronously.",
        ),
    },
    # a communication-bound job whose communication is mostly waiting for a late rank (diagnosis/stragglers.py)
    "straggler": {
        GENERIC: (
            "Balance the work across ranks (equal batch sizes and sequence lengths per rank, balanced pipeline "
            "stages or experts) and give every rank the same input pipeline and hardware; compressing or "
            "overlapping communication will not help while the others wait for one rank.",
        ),
    },
    # periodic stalls whose host events name no checkpoint or evaluation: no advice that assumes either
    "periodic_stall_unnamed": {
        PYTORCH: (
            "Find what the slow steps do: the host events listed above cover the stall; common causes are "
            "checkpoint saving, evaluation, logging or metric flushes, and Python garbage collection "
            "(gc.freeze() after start-up). Run such work every N steps or in the background.",
        ),
        GENERIC: (
            "Find what the slow steps do (the host events listed above) and run that work less often or in "
            "the background.",
        ),
    },
    "communication_bound": {
        PYTORCH: (
            "Overlap gradient communication with backward (DDP bucket_cap_mb, gradient_as_bucket_view=True); "
            "check that no rank is slower than the others (stragglers make the rest wait).",
            "Communicate less: gradient accumulation (no_sync()), lower-precision gradients (DDP comm hooks "
            "fp16/bf16 compression), or a different sharding strategy.",
        ),
        TENSORFLOW: (
            "Check for straggler workers; tune the distribution strategy and the all-reduce implementation.",
            "Reduce gradient precision or communicate less often.",
        ),
        GENERIC: (
            "Balance work across ranks, overlap communication with compute, and communicate less data.",
        ),
    },
    "gpu_bound": {
        # A lower precision, a fused attention kernel or compilation is proposed by diagnosis/serving.py only where
        # the kernels show it material and not already in use (an fp8 or bf16 run is never told to use autocast).
        PYTORCH: (
            "The GPU is the bottleneck: its own kernels set the pace. Speed them up where the kernel mix shows a "
            "lever (a lower precision, fusion, compilation), scale out with DistributedDataParallel, or use a "
            "faster GPU.",
        ),
        TENSORFLOW: (
            "The GPU is the bottleneck: use mixed precision (keras.mixed_precision.set_global_policy("
            "'mixed_float16')) and XLA (jit_compile=True).",
            "Prefer channels-last layouts and tensor-core friendly shapes (multiples of 8).",
        ),
        GENERIC: (
            "The GPU is the bottleneck: lower precision, fuse kernels, or use a faster GPU / more GPUs.",
        ),
    },
    "unexplained_idle": {
        PYTORCH: (
            "The launching thread runs no traced operation during these gaps: profile with Python stacks "
            "(torch.profiler with_stack=True) or a Python sampler (py-spy) to see the code that runs there.",
        ),
        GENERIC: (
            "The host runs no traced operation during these gaps: raise the profiler's host trace level or "
            "use a Python sampler (py-spy) to see the code that runs there.",
        ),
    },
    "startup_dominated": {
        PYTORCH: (
            "Profile steady-state steps, not the start: torch.profiler.profile(schedule=torch.profiler.schedule("
            "wait=1, warmup=2, active=5)) skips the first iterations, where CUDA context and stream creation, "
            "lazy kernel loading, cuDNN/cuBLAS handle creation and autotuning, and torch.compile compilation "
            "happen once.",
            "If start-up itself matters (short jobs, many restarts): warm the model up once before timing, "
            "cache compiled artefacts (TORCHINDUCTOR_FX_GRAPH_CACHE=1), and set torch.backends.cudnn.benchmark "
            "only when input shapes are fixed.",
        ),
        GENERIC: (
            "Profile steady-state steps: skip the first iterations (profiler warm-up), where one-off costs "
            "(context creation, kernel loading, autotuning, compilation) happen.",
        ),
    },
    "allocator_bound": {
        PYTORCH: (
            "Let the caching allocator keep memory: do not call torch.cuda.empty_cache() inside the training "
            "loop; every cudaMalloc/cudaFree synchronises the device.",
            "Reduce fragmentation: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, fixed input shapes (pad "
            "or bucket variable-length batches), and preallocate buffers that are rebuilt every step.",
            "If memory is tight, lower the peak instead (smaller batch, activation checkpointing) so the "
            "allocator does not have to release and re-request blocks.",
        ),
        GENERIC: (
            "Avoid allocating and freeing device memory every step: reuse buffers, keep shapes fixed, use a "
            "caching or pool allocator.",
        ),
    },
    "dependency_bound": {
        PYTORCH: (
            "The host is not what holds the GPU up here: the next work was queued before the GPU went idle. "
            "Look at what it waits on: cross-stream waits (torch.cuda.Stream.wait_stream / wait_event) that "
            "serialise streams, a collective waiting for a slower rank (see the straggler figures), or the "
            "small gaps between a CUDA graph's kernels.",
            "Overlap independent work on separate streams instead of chaining them with events; fuse many tiny "
            "kernels (torch.compile) so fewer inter-kernel bubbles remain.",
        ),
        GENERIC: (
            "The next GPU work was already queued when the GPU went idle: look for cross-stream or cross-device "
            "waits, collectives waiting for a slower rank, and bubbles between many tiny kernels.",
        ),
    },
    "gpu_underused": {
        GENERIC: (
            "GPUs at 0% for long runs of samples are waiting: profile a few steps with torch.profiler (or the "
            "TF profiler) to see whether the input pipeline, host work or synchronisation holds them up.",
            "A GPU idle for the whole log is not used at all: check CUDA_VISIBLE_DEVICES, the launcher's "
            "number of processes per node and the device each rank selects.",
        ),
    },
    "cpu_input_bound": {
        PYTORCH: (
            "The loop waits for data: DataLoader(num_workers=N, persistent_workers=True, prefetch_factor=...).",
            "Make dataset __getitem__ cheaper (decode/resize once, offline) or read from faster storage.",
        ),
        TENSORFLOW: (
            "Add .prefetch(tf.data.AUTOTUNE), map(num_parallel_calls=tf.data.AUTOTUNE) and cache().",
        ),
        GENERIC: ("Prepare batches in parallel with the step and make preprocessing cheaper.",),
    },
    "cpu_compute_bound": {
        PYTORCH: (
            "The loop is busy in the model's own work: profile the top CPU ops; use a larger batch, "
            "torch.compile, and check torch.get_num_threads() matches the cores available.",
        ),
        TENSORFLOW: (
            "The loop is busy in the model's own work: compile with tf.function(jit_compile=True); "
            "check the intra/inter-op thread settings.",
        ),
        GENERIC: ("The loop is busy in its own computation: profile the top host operations.",),
    },
    "cpu_no_gpu": {  # CPU-only captures (no GPU listed) only: never said when GPUs are listed but silent
        PYTORCH: ("If a GPU is available, move the model and batches to it.",),
    },
    "model_on_cpu": {  # a GPU was listed and the runtime traced, and no GPU work was launched
        PYTORCH: ("The GPU sat unused: move the model and every batch to it (model.to('cuda'), "
                  "batch.to('cuda', non_blocking=True) with pin_memory=True in the DataLoader), create new tensors "
                  "on it (device='cuda'), and check that the script picks it (torch.cuda.is_available(), "
                  "CUDA_VISIBLE_DEVICES, a `device` argument left at 'cpu').",),
        TENSORFLOW: ("The GPU sat unused: check tf.config.list_physical_devices('GPU') in the run and that no "
                     "tf.device('/CPU:0') scope holds the model.",),
        GENERIC: ("The GPU sat unused: place the model and its inputs on the GPU.",),
    },
    "cpu_optimizer": {
        PYTORCH: ("The optimizer's step takes a share of every step: use a fused or foreach optimizer "
                  "(torch.optim.AdamW(foreach=True)) and zero_grad(set_to_none=True).",),
        GENERIC: ("The optimizer update takes a share of every step: use a fused implementation.",),
    },
    "cpu_annotation": {
        GENERIC: ("The named range(s) above fill the step: if they are post-processing, logging, metrics or "
                  "checkpointing, run them every N steps or in a background thread; if they are the model, "
                  "profile the ops inside them.",),
    },
    "cpu_elsewhere": {
        PYTORCH: ("Step time outside every traced op is Python between ops or the loop itself: profile with "
                  "with_stack=True (or py-spy) to see the code.",),
        GENERIC: ("Step time outside every traced op is the loop's own code: profile it with a Python sampler.",),
    },
}


# Inference and serving workloads (no backward, no optimizer in the trace: RankCauses.workload): advice that
# replaces the training-loop advice above (no image writing, checkpoints, fused optimizers or
# DistributedDataParallel for a decode loop).
INFERENCE_ADVICE: dict[str, dict[str, tuple[str, ...]]] = {
    # Inference communicates activations (tensor-parallel all-reduces, expert-parallel dispatch/combine) on every
    # layer's critical path; there are no gradients to bucket or compress.
    "communication_bound": {
        PYTORCH: (
            "Tensor- or expert-parallel communication sits on every layer's critical path: use fewer GPUs per "
            "replica where the model fits (more replicas, data parallel, instead of a wider tensor-parallel group), "
            "and the engine's own fused all-reduce (vLLM's custom all-reduce, NCCL symmetric memory) on NVLink.",
            "Overlap communication with compute where the engine supports it (async tensor parallelism, "
            "two-batch overlap for expert parallelism), and check that no rank is slower than the others.",
        ),
        GENERIC: ("Use fewer GPUs per replica where the model fits, and a faster interconnect or fused all-reduce.",),
    },
    "host_bound": {
        PYTORCH: (
            "Move request pre- and post-processing (tokenisation, detokenisation, sampling on the host, image "
            "decoding) off the serving loop: a separate thread or process, or batched with the next step.",
            "Keep per-step Python light: torch.compile the model's forward, and avoid per-request Python loops.",
        ),
        GENERIC: ("Move request pre- and post-processing off the serving loop, or batch it.",),
    },
    "sync_bound": {
        PYTORCH: (
            "Avoid reading results back every token or batch (.item(), .cpu(), .tolist()): keep the generation "
            "loop's state (stop conditions, sampled tokens) on the GPU and read it every N steps.",
            "Use non_blocking=True copies into pinned buffers; find hidden syncs with "
            "torch.cuda.set_sync_debug_mode('warn').",
        ),
        GENERIC: ("Avoid reading GPU results on the host every step of the serving loop; batch the reads.",),
    },
    "launch_bound": {
        PYTORCH: (
            "Batch more requests per forward pass (continuous batching) so each launch does more work.",
            "Capture the decode step with CUDA graphs (torch.compile(mode='reduce-overhead'), or the serving "
            "engine's graph mode) and fuse small kernels with torch.compile.",
        ),
        GENERIC: ("Batch more requests per step and capture the step as a graph (CUDA graphs, XLA).",),
    },
    # A lower precision, a fused attention kernel or compilation is proposed by diagnosis/serving.py only where the
    # kernels show it material and not already in use; what holds whatever the kernels are:
    "gpu_bound": {
        PYTORCH: ("The GPU is the bottleneck: add GPUs (tensor parallelism) or use a faster GPU.",),
        GENERIC: ("The GPU is the bottleneck: add GPUs or use a faster GPU.",),
    },
}


# What a periodic stall's host events must name for the checkpoint / evaluation advice to apply.
CHECKPOINT_OR_EVAL_NAMES = re.compile(r"checkpoint|save|serializ|state_dict|eval|valid", re.IGNORECASE)


def periodic_advice(names: list[str], framework: str) -> tuple[str, ...]:
    """Advice for a periodic stall: checkpoint / evaluation advice only when the stall's host events name
    one (a run that saves nothing gets no checkpoint advice)."""
    if any(CHECKPOINT_OR_EVAL_NAMES.search(n) for n in names):
        return advice_for("periodic_stall", framework)
    return advice_for("periodic_stall_unnamed", framework)


def advice_for(finding_id: str, framework: str, workload: str = "") -> tuple[str, ...]:
    """The advice for a finding, by framework; an inference workload's own where it has one."""
    by_framework = (INFERENCE_ADVICE.get(finding_id) if workload == "inference" else None) or ADVICE.get(finding_id, {})
    family = PYTORCH if framework.lower() in ("pytorch", "torch") else (
        TENSORFLOW if framework.lower() in ("tensorflow", "tf", "keras") else GENERIC)
    return by_framework.get(family) or by_framework.get(GENERIC) or ()


# --- CUDA graphs (launch-bound findings; issue 26) ----------------------------------------------------------
# Where many tiny eager launches leave the GPU idle, launch_bound's own advice above proposes CUDA graphs
# (torch.compile(mode='reduce-overhead')). Where the rank already replays graphs, the launch gaps are
# outside them: this line leads the advice instead.
GRAPH_ADVICE_PARTIAL = (
    "Part of the GPU work already replays CUDA graphs; the launch gaps are outside them: widen the captured "
    "region (fewer graph breaks with torch.compile(mode='reduce-overhead'), static shapes, no host reads "
    "inside the step).")


def graph_advice(has_graphs: bool, framework: str) -> tuple[str, ...]:
    """The CUDA-graph line that leads a launch-bound finding's advice when the rank already replays
    graphs (PyTorch only: the names are torch's); () otherwise."""
    if not has_graphs or framework.lower() not in ("pytorch", "torch"):
        return ()
    return (GRAPH_ADVICE_PARTIAL,)


# --- what the capture already has ---------------------------------------------------------------------------
# Profiler options a line of advice may ask for (torch.profiler's words). A line asking for an option the trace
# shows on (diagnosis/capture_options.py reads that from the trace's own content) is replaced by its line in
# ALREADY_CAPTURED, or left out.
CAPTURE_OPTIONS: dict[str, re.Pattern[str]] = {
    "with_stack": re.compile(r"with_stack\s*=\s*True"),
    "record_shapes": re.compile(r"record_shapes\s*=\s*True"),
    "profile_memory": re.compile(r"profile_memory\s*=\s*True"),
}
ALREADY_CAPTURED: dict[str, str] = {
    ADVICE["unexplained_idle"][PYTORCH][0]: (
        "The launching thread runs no traced operation during these gaps: the trace's Python frames name the code "
        "running there where it is Python (see the evidence and the frames table); a Python sampler (py-spy "
        "record --native) sees what the profiler does not trace."),
    ADVICE["cpu_elsewhere"][PYTORCH][0]: (
        "Step time outside every traced op is Python between ops or the loop itself: the trace's Python frames "
        "(the frames table) name that code; a Python sampler (py-spy) sees what they do not."),
}


def without_captured(advice: tuple[str, ...], has: frozenset[str]) -> tuple[str, ...]:
    """`advice` with every line that asks for a profiler option in `has` (CAPTURE_OPTIONS) replaced by its
    ALREADY_CAPTURED line, or left out."""
    out: list[str] = []
    for line in advice:
        if any(CAPTURE_OPTIONS[o].search(line) for o in has if o in CAPTURE_OPTIONS):
            line = ALREADY_CAPTURED.get(line, "")
        if line and line not in out:
            out.append(line)
    return tuple(out)
