"""The advice catalogue (advice_patterns.py): which names show each pattern, and that a finding whose
evidence shows one quotes the name and carries the pattern's fix first."""

from __future__ import annotations

import pytest
from kineto_builder import KinetoTrace

import traceanalyzer as ta
from traceanalyzer import advice_patterns as AP


@pytest.mark.parametrize("name,pattern", [
    ("Optimizer.zero_grad#SGD.zero_grad", "zero_grad"),
    ("torch/optim/optimizer.py:1023 zero_grad", "zero_grad"),
    ("aten::item", "scalar_read"),
    ("aten::_local_scalar_dense", "scalar_read"),
    ("<built-in method tolist of Tensor object>", "scalar_read"),
    ("<built-in method cpu of Tensor object at 0x1>", "scalar_read"),
    ("aten::tensor", "tensor_from_host"),
    ("hipMemcpyWithStream", "tensor_from_host"),
    ("cudaMemcpy", "tensor_from_host"),
    ("train.py:40 log_metrics", "logging"),
    ("logging/__init__.py:1 info", "logging"),
    ("train.py:77 save_checkpoint", "checkpoint"),
    ("torch/serialization.py(12): save", "checkpoint"),
    ("Optimizer.step#AdamW.step", "optimizer_step"),
    ("aten::log_softmax", None),
    ("aten::zero_", None),
    ("aten::copy_", None),
    ("postprocess_callback", None),
    ("cudaMemcpyAsync", None),
])
def test_catalogue_matches(name, pattern):
    p = AP.match(name)
    assert (p.id if p else None) == pattern


def test_catalogue_ids_unique_and_every_fix_specific():
    assert len({p.id for p in AP.PATTERNS}) == len(AP.PATTERNS)
    for p in AP.PATTERNS:
        assert p.advice and p.label and p.id in AP.PATTERN_BY_ID


def _idle_under(name: str, cat: str = "user_annotation") -> KinetoTrace:
    """Three 1000 us steps: two short kernels at the start, then `name` holding the host 300..900 us."""
    t = KinetoTrace()
    for k in range(3):
        b = 1000 * k
        t.step(k + 1, b, 1000)
        for j in range(2):
            t.kernel(b + 50 + 100 * j, 100)
            t.runtime("cudaLaunchKernel", b + 10 + 10 * j, 5, t._corr)
        t.host(name, b + 300, 600, cat=cat)
    return t


def test_zero_grad_in_host_compute_idle_gets_set_to_none_first(tmp_path):
    a = ta.analyze(_idle_under("Optimizer.zero_grad#SGD.zero_grad").write(tmp_path / "zg.json"))
    findings = a.ranks[0].diagnosis.findings
    host = next(f for f in findings if f.cause == "host_compute")
    assert host.host_ops[0].name == "Optimizer.zero_grad#SGD.zero_grad"
    assert "set_to_none=True" in host.advice[0]
    assert "Optimizer.zero_grad#SGD.zero_grad is gradients zeroed with memsets" in host.evidence
    named = next(f for f in findings if f.id == "named_range")  # 1.8 ms of the 2.4 ms idle
    assert named.title == "Optimizer.zero_grad#SGD.zero_grad runs during 75% of the GPU idle time"
    assert "set_to_none=True" in named.advice[0]


def test_scalar_read_in_a_sync_gets_keep_on_device_first(tmp_path):
    t = KinetoTrace()
    for k in range(3):
        b = 1000 * k
        t.step(k + 1, b, 1000)
        for j in range(2):
            t.kernel(b + 50 + 200 * j, 200)
            t.runtime("cudaLaunchKernel", b + 10 + 10 * j, 5, t._corr)
        t.host("aten::item", b + 30, 430)  # blocks until the GPU is done at 450
        t.host("aten::_local_scalar_dense", b + 31, 428)
        t.host("aten::add", b + 600, 300)  # host work afterwards
    a = ta.analyze(t.write(tmp_path / "sync.json"))
    found = {f.id: f for f in a.ranks[0].diagnosis.findings}
    assert "sync_bound" in found
    sync = found["sync_bound"]
    assert {e.name for e in sync.host_ops} & {"aten::item", "aten::_local_scalar_dense"}
    assert sync.advice[0] == AP.PATTERN_BY_ID["scalar_read"].advice
    assert sync.advice[1:] and "synchronisations" in " ".join(sync.advice[1:])  # the cause's own advice stays


def test_pageable_copy_from_tensor_list_gets_pinned_buffers(tmp_path):
    t = KinetoTrace()
    for k in range(3):
        b = 1000 * k
        t.step(k + 1, b, 1000)
        t.host("aten::tensor", b + 5, 700)
        t.copy(b + 10, 690, b + 600, 100, api="hipMemcpyWithStream")  # the host is held in the copy call
        for j in range(4):
            t.kernel(b + 720 + 60 * j, 60)
            t.runtime("cudaLaunchKernel", b + 710 + j, 1, t._corr)
    a = ta.analyze(t.write(tmp_path / "copy.json"))
    f = next(f for f in a.ranks[0].diagnosis.findings if f.cause == "memcpy")
    assert f.host_ops and f.host_ops[0].name == "hipMemcpyWithStream"
    assert f.advice[0] == AP.PATTERN_BY_ID["tensor_from_host"].advice
    assert "non_blocking=True" in f.advice[0] and "pin_memory=True" in f.advice[0]


def test_pattern_finding_quotes_the_name_and_its_share(tmp_path):
    a = ta.analyze(_idle_under("train.py(40): log_metrics", cat="python_function").write(tmp_path / "log.json"))
    o = a.ranks[0].operators
    assert o.has_stacks and o.frames[0].frame == "train.py:40 log_metrics"
    f = next(f for f in a.ranks[0].diagnosis.findings if f.id == "pattern_logging")
    assert f.title == "Per-step logging: train.py:40 log_metrics"
    assert f.figures["op_us"] == 1800 and f.figures["basis_us"] == 2400 and f.figures["share"] == 0.75
    assert "1.8 ms of the 2.4 ms of GPU idle time (75%)" in f.evidence[0]
    assert f.advice == (AP.PATTERN_BY_ID["logging"].advice,)


def test_no_pattern_finding_below_its_share(tmp_path):
    t = _idle_under("postprocess_callback")
    for k in range(3):  # a 10 us zero_grad per step: 30 us of 2.4 ms idle, under 5%
        t.host("Optimizer.zero_grad#SGD.zero_grad", 1000 * k + 920, 10, cat="user_annotation")
    a = ta.analyze(t.write(tmp_path / "small.json"))
    assert "pattern_zero_grad" not in {f.id for f in a.ranks[0].diagnosis.findings}
