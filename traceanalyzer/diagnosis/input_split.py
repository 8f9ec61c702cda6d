"""Input-bound, split: was the input pipeline short of CPU or of storage while the GPU waited?

Seed 000: glances' HIGH CPU USER and HIGH CPU IO WAITING events during training tell a CPU-bound
input pipeline (heavy augmentation) from a storage-bound one (slow disk, many small files), and the
two have different cures. For each input-bound rank, the host logs' figures during its DataLoader
waits (`analyses.host_logs`, wait-weighted means) decide:

* **cpu**: user + system >= INPUT_CPU_SATURATED_PCT of all cores;
* **storage**: below that, and iowait >= INPUT_IOWAIT_PCT or disk reads >= INPUT_DISK_READ_BYTES_PER_S;
* **unknown**: neither, or the logs cover less than INPUT_MIN_WAIT_COVERAGE of the waits (or fewer
  than INPUT_MIN_SAMPLES samples), or there is no host log (the evidence then names the log to take).

Pure: a rank's diagnosis x host-log figures -> the same with `input_split` set and the input finding's
evidence and advice extended (`split_rank`, called once per rank where the job's ranks and logs meet).
"""

from __future__ import annotations

from dataclasses import replace

from ..analyses.host_logs import HostLogFigures, WaitFigures
from ..causes import CPU_INPUT_BOUND, DATALOADER, INPUT_BOUND, UNDETERMINED
from .rules import Finding, RankDiagnosis
from .thresholds import (
    INPUT_CPU_SATURATED_PCT,
    INPUT_DISK_READ_BYTES_PER_S,
    INPUT_IOWAIT_PCT,
    INPUT_MIN_SAMPLES,
    INPUT_MIN_WAIT_COVERAGE,
)
from .wording import Quoted

CPU, STORAGE, UNKNOWN = "cpu", "storage", "unknown"

ADVICE = {
    CPU: (
        "The input pipeline is CPU-bound: make the per-sample work cheaper (simpler augmentations), or "
        "precompute the expensive part once and store its results (seed: 'perform all the augmentations "
        "and dump them to disk first').",
        "Move decoding and augmentation onto the GPU (NVIDIA DALI, torchvision transforms on CUDA tensors).",
        "More DataLoader workers help only while cores are left: here the CPU is already saturated, so "
        "give the job more cores or fewer other processes first.",
    ),
    STORAGE: (
        "The input pipeline is storage-bound: copy the data set to a local SSD / NVMe before training.",
        "Pack many small files into few large ones read sequentially (HDF5, WebDataset tar shards, "
        "TFRecord) instead of one file per sample.",
        "Store samples uncompressed (or lightly compressed), and cache the data set in memory when it fits.",
        "Overlap reading with the step: DataLoader(num_workers>0, prefetch_factor) / tf.data prefetch.",
    ),
}
NO_LOG = ("Which resource the input pipeline is short of is not known without a host log: record one "
          "during training with `glances --export csv --export-csv-file host.csv --quiet` and pass it "
          "with --host-log (saturated CPU = CPU-bound augmentation; high iowait = storage-bound reading).")


def is_input_bound(r: RankDiagnosis) -> bool:
    return r.primary in (INPUT_BOUND, CPU_INPUT_BOUND) or (r.primary == UNDETERMINED
                                                           and r.host_primary == CPU_INPUT_BOUND)


def classify(w: WaitFigures, q: Quoted | None = None) -> tuple[str, str]:
    """(split, one line of evidence) from the host figures during the waits; the line's shares go into `q`."""
    q = q if q is not None else Quoted()
    coverage = w.covered_fraction
    if w.samples < INPUT_MIN_SAMPLES or coverage is None or coverage < INPUT_MIN_WAIT_COVERAGE:
        got = "none" if coverage is None else _whole(q.fraction(coverage, "host_log_wait_coverage"))
        return UNKNOWN, (f"The host log covers {got} of the DataLoader wait time ({w.samples} samples); at least "
                         f"{_whole(q.fraction(INPUT_MIN_WAIT_COVERAGE, 'min_wait_coverage'))} and "
                         f"{INPUT_MIN_SAMPLES} samples are needed to tell a "
                         f"CPU-bound from a storage-bound input pipeline.")
    m = w.means
    busy = (m["cpu_user_pct"] + m.get("cpu_system_pct", 0.0)) if "cpu_user_pct" in m else m.get("cpu_total_pct")
    iowait = m.get("cpu_iowait_pct")
    read = m.get("disk_read_bytes_per_s")
    parts = []
    if busy is not None:
        parts.append(f"CPU user+system {q.pct(busy, 'cpu_busy_pct')} of all cores")
    if iowait is not None:
        parts.append(f"iowait {q.pct(iowait, 'cpu_iowait_pct', 1)}")
    if read is not None:
        parts.append(f"disk reads {read / 1e6:.1f} MB/s")
    figures = ", ".join(parts) or "no CPU or disk figures"
    cover = Quoted()
    where = (f"During the DataLoader waits ({_whole(cover.fraction(coverage, 'host_log_wait_coverage'))} of them "
             f"covered by {w.samples} host samples): {figures}")
    q.extend(cover, first=True)
    if busy is not None and busy >= INPUT_CPU_SATURATED_PCT:
        return CPU, f"{where}: the CPU is saturated, so the input pipeline is CPU-bound."
    waits_on_disk = iowait is not None and iowait >= INPUT_IOWAIT_PCT
    reads_hard = read is not None and read >= INPUT_DISK_READ_BYTES_PER_S
    if waits_on_disk or reads_hard:
        return STORAGE, (f"{where}: the CPU has headroom while reads wait on storage, so the input pipeline "
                         f"is storage-bound.")
    return UNKNOWN, (f"{where}: neither a saturated CPU nor storage waits; the pipeline may be serial (too few "
                     f"workers) or wait on something glances does not show (network file system, a lock).")


def _best(hosts: tuple[HostLogFigures, ...], index: int) -> WaitFigures | None:
    found = [h.by_rank[index] for h in hosts if index in h.by_rank]
    return max(found, key=lambda w: (w.covered_ns, w.samples)) if found else None


def _whole(text: str) -> str:
    """A percentage as a whole number (coverage is said coarsely)."""
    return f"{float(text.rstrip('%')):.0f}%"


def _extend(findings: tuple[Finding, ...], evidence: str, advice: tuple[str, ...],
            q: Quoted | None = None) -> tuple[Finding, ...]:
    out, done = [], False
    for f in findings:
        if not done and f.cause == DATALOADER:
            # first: the reports that show a few evidence lines show this one
            both = Quoted(dict(f.figures), list(f.shares))
            if q is not None:
                both.extend(q, first=True)
            f = replace(f, evidence=(evidence,) + f.evidence, advice=advice + f.advice, figures=both.figures,
                        shares=tuple(both.shares))
            done = True
        out.append(f)
    return tuple(out)


def split_rank(r: RankDiagnosis, hosts: tuple[HostLogFigures, ...], have_logs: bool) -> RankDiagnosis:
    if not is_input_bound(r):
        return r
    w = _best(hosts, r.index)
    if not have_logs or w is None:
        return replace(r, input_split=UNKNOWN, findings=_extend(r.findings, NO_LOG, ()))
    q = Quoted()
    split, line = classify(w, q)
    return replace(r, input_split=split, findings=_extend(r.findings, line, ADVICE.get(split, ()), q))


__all__ = ["ADVICE", "CPU", "NO_LOG", "STORAGE", "UNKNOWN", "classify", "split_rank"]
