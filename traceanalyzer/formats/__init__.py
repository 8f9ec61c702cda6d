"""Readers: one module per input format, in one registry (`registry`: each reader's KIND, sniff and
read); what the inputs stand for (`inputs`: input sets, log dirs, traces vs logs); a job's ranks
(`ranks`: metas for the job checks, numbering)."""

from __future__ import annotations

from ._base import ReadOptions
from .inputs import (
    InputSet,
    JobInputs,
    classify_inputs,
    input_sets,
    is_counter_log,
    load_counter_logs,
    load_host_logs,
    load_request_logs,
    same_files,
)
from .ranks import RankMeta, metas_mismatch, number_ranks, rank_metas
from .registry import (
    COUNTER_LOG_SUFFIXES,
    COUNTERS,
    HOST,
    KINDS,
    REQUESTS,
    TRACE,
    TRACE_SUFFIXES,
    file_kind,
    read_file,
    read_host_log,
    read_request_log,
    reader_modules,
    readers,
)

__all__ = ["COUNTERS", "COUNTER_LOG_SUFFIXES", "HOST", "KINDS", "REQUESTS", "TRACE", "TRACE_SUFFIXES", "InputSet",
           "JobInputs", "RankMeta", "ReadOptions", "classify_inputs", "file_kind", "input_sets", "is_counter_log",
           "load_counter_logs", "load_host_logs", "load_request_logs", "metas_mismatch", "number_ranks", "rank_metas",
           "read_file", "read_host_log", "read_request_log", "reader_modules", "readers", "same_files"]
