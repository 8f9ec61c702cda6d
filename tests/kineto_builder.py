"""Builds small Kineto (torch.profiler) Chrome traces in tests, with times in integer us."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

HOST_PID, HOST_TID = 4242, 4243


class KinetoTrace:
    def __init__(self, rank: int | None = None, base_ns: int | None = None) -> None:
        self.events: list[dict[str, Any]] = []
        self.header: dict[str, Any] = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "Test GPU"}]}
        if rank is not None:
            self.header["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": 2}
        if base_ns is not None:
            self.header["baseTimeNanoseconds"] = base_ns
        self._corr = 0

    def host(self, name: str, ts: float, dur: float, cat: str = "cpu_op", tid: int = HOST_TID) -> KinetoTrace:
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": HOST_PID, "tid": tid,
                            "ts": ts, "dur": dur, "args": {}})
        return self

    def step(self, n: int, ts: float, dur: float, gpu_copy: bool = True) -> KinetoTrace:
        self.host(f"ProfilerStep#{n}", ts, dur, cat="user_annotation")
        if gpu_copy:  # the trap: a gpu_user_annotation copy spanning the step on the GPU stream
            self.events.append({"ph": "X", "cat": "gpu_user_annotation", "name": f"ProfilerStep#{n}",
                                "pid": 0, "tid": 7, "ts": ts, "dur": dur, "args": {}})
        return self

    def dataloader(self, ts: float, dur: float) -> KinetoTrace:
        return self.host("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", ts, dur, "user_annotation")

    def gpu(self, name: str, ts: float, dur: float, cat: str = "kernel", device: int = 0, stream: int = 7,
            **args: Any) -> KinetoTrace:
        self._corr += 1
        a = {"device": device, "stream": stream, "correlation": self._corr, "External id": self._corr}
        a.update({k.replace("_", " ") if k == "Collective_name" else k: v for k, v in args.items()})
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": device, "tid": stream,
                            "ts": ts, "dur": dur, "args": a})
        return self

    def runtime(self, name: str, ts: float, dur: float, correlation: int = -1) -> KinetoTrace:
        """A CUDA runtime call on the host thread (cudaLaunchKernel, cudaStreamSynchronize, ...)."""
        self.events.append({"ph": "X", "cat": "cuda_runtime", "name": name, "pid": HOST_PID, "tid": HOST_TID,
                            "ts": ts, "dur": dur, "args": {"correlation": correlation}})
        return self

    def launched(self, launch_ts: float, launch_dur: float, ts: float, dur: float, name: str = "gemm_kernel",
                 op: str | None = None, **kw: Any) -> KinetoTrace:
        """A kernel with its cudaLaunchKernel call (same correlation), optionally inside a host op."""
        if op:
            self.host(op, launch_ts - 1, launch_dur + 2)
        self.kernel(ts, dur, name, **kw)
        return self.runtime("cudaLaunchKernel", launch_ts, launch_dur, self._corr)

    def copy(self, call_ts: float, call_dur: float, ts: float, dur: float,
             name: str = "Memcpy HtoD (Pageable -> Device)", nbytes: int = 1000, api: str = "cudaMemcpyAsync",
             **kw: Any) -> KinetoTrace:
        """A GPU copy with the runtime copy call that issued it (same correlation)."""
        self.memcpy(ts, dur, name, nbytes, **kw)
        return self.runtime(api, call_ts, call_dur, self._corr)

    def kernel(self, ts: float, dur: float, name: str = "gemm_kernel", **kw: Any) -> KinetoTrace:
        return self.gpu(name, ts, dur, **kw)

    def memcpy(self, ts: float, dur: float, name: str = "Memcpy HtoD (Pageable -> Device)", nbytes: int = 1000,
               **kw: Any) -> KinetoTrace:
        return self.gpu(name, ts, dur, cat="gpu_memcpy", bytes=nbytes, **kw)

    def document(self) -> dict[str, Any]:
        return {**self.header, "traceEvents": self.events}

    def write(self, path: Path) -> Path:
        data = json.dumps(self.document()).encode()
        path.write_bytes(gzip.compress(data, mtime=0) if path.name.endswith(".gz") else data)
        return path
