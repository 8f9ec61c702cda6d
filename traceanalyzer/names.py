"""Matching event names against a pattern once per distinct name, not once per row."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd


def name_flags(frame: pd.DataFrame, pattern: re.Pattern[str] | str) -> np.ndarray:
    """`pattern.search` on each distinct name of `frame["name"]` (a category) once, spread to rows
    by category code: a trace has millions of events but a few thousand names."""
    regex = re.compile(pattern) if isinstance(pattern, str) else pattern
    names = frame["name"].cat.categories
    hits = np.zeros(len(names) + 1, dtype=bool)  # the last slot: code -1 (missing) -> False
    hits[:-1] = np.fromiter((bool(regex.search(str(n))) for n in names), dtype=bool, count=len(names))
    return hits[frame["name"].cat.codes.to_numpy()]


# Communication kernels, by the names their libraries give them (matched case-insensitively on the kernel
# name without a leading "void "): NCCL and RCCL (`ncclKernel_*`, `ncclDevKernel_*`), MSCCL
# (`mscclKernel_*`) and MSCCL++ (`mscclpp::`), NVSHMEM (`nvshmem*`, `nvshmemi_*`), DeepEP's expert-parallel
# dispatch/combine (`deep_ep::intranode::`, `deep_ep::internode::`, `deep_ep::internode_ll::`), PyTorch's
# symmetric-memory collectives (`c10d::symmetric_memory::`), vLLM's custom all-reduce
# (`vllm::cross_device_reduce_*`) and TensorRT-LLM's all-reduce kernels (`tensorrt_llm::kernels::...AllReduce`).
# DeepEP's kernels keep their `intranode` / `internode` / `internode_ll` namespaces under whatever namespace a
# fork puts them in (`dpsk::ep::internode::combine`).
COMM_KERNEL_NAMES = re.compile(
    r"^(nccl|rccl|msccl|nvshmem)"
    r"|^(deep_ep|mscclpp|c10d::symmetric_memory)::"
    r"|^\w+(::\w+)*::(intra|inter)node(_ll)?::"
    r"|^vllm::cross_device_reduce"
    r"|^tensorrt_llm::kernels::\w*all_?reduce",
    re.IGNORECASE)


def is_comm_kernel(name: str) -> bool:
    """A communication library's kernel, by its name (COMM_KERNEL_NAMES)."""
    return bool(COMM_KERNEL_NAMES.search(name.removeprefix("void ")))
