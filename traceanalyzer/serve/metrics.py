"""The service's figures for Prometheus (`GET /metrics`), in its text exposition format (version 0.0.4),
written here: a dozen lines do not need a client library.

Every figure comes from the database, so any one server of a service answers for all of it (scrape one,
or each and take the max: they agree): the queue, jobs by status, the wall time of finished analyses (a
histogram over the jobs the database holds: deleting runs lowers it, which Prometheus reads as a reset),
and the counters the writes keep in `counters` (uploads and their bytes, leases that expired).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from .store import STATUSES, Store, counters, jobs

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# Seconds of one analysis: a small trace takes about one, a large job minutes; past an hour is --job-timeout's
# default (the bound of a run that failed that way).
ANALYSIS_BUCKETS_S = (1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0, 3600.0)
COUNTERS = (  # name in `counters`, metric, help
    ("uploads", "traceanalyzer_uploads_total", "Uploads accepted (runs made)."),
    ("upload_bytes", "traceanalyzer_upload_bytes_total", "Bytes of the accepted uploads, as received."),
    ("lease_expiries", "traceanalyzer_lease_expiries_total",
     "Jobs whose worker's lease expired (the worker killed or cut off): taken again, or failed after --max-tries."),
)


def _number(v: float) -> str:
    return repr(float(v)) if v != int(v) else str(int(v))


def figures(store: Store) -> dict[str, Any]:
    """The figures, in one short read of the database."""
    duration = jobs.c.finished_at - jobs.c.started_at
    ended = sa.and_(jobs.c.status.in_(("done", "failed")), jobs.c.started_at.is_not(None),
                    jobs.c.finished_at.is_not(None))
    buckets = [sa.func.coalesce(sa.func.sum(sa.case((duration <= b, 1), else_=0)), 0) for b in ANALYSIS_BUCKETS_S]
    with store.engine.connect() as c:
        by_status: dict[str, int] = {str(s): int(n) for s, n in c.execute(
            sa.select(jobs.c.status, sa.func.count()).group_by(jobs.c.status))}
        row = c.execute(sa.select(sa.func.count(), sa.func.coalesce(sa.func.sum(duration), 0.0), *buckets)
                        .where(ended)).one()
        kept = {r.name: int(r.value) for r in c.execute(sa.select(counters))}
    return {"jobs": {s: int(by_status.get(s, 0)) for s in STATUSES}, "analysis_count": int(row[0]),
            "analysis_sum_s": float(row[1]), "analysis_buckets": [int(v) for v in row[2:]],
            "counters": {name: kept.get(name, 0) for name, _, _ in COUNTERS}}


def exposition(store: Store) -> str:
    """The text Prometheus scrapes."""
    f = figures(store)
    out = ["# HELP traceanalyzer_queue_depth Jobs waiting for a worker.",
           "# TYPE traceanalyzer_queue_depth gauge",
           f"traceanalyzer_queue_depth {f['jobs']['queued']}",
           "# HELP traceanalyzer_jobs Jobs by status.",
           "# TYPE traceanalyzer_jobs gauge"]
    out += [f'traceanalyzer_jobs{{status="{s}"}} {n}' for s, n in f["jobs"].items()]
    out += ["# HELP traceanalyzer_analysis_seconds Wall time of finished analyses (done or failed; their last try).",
            "# TYPE traceanalyzer_analysis_seconds histogram"]
    out += [f'traceanalyzer_analysis_seconds_bucket{{le="{_number(b)}"}} {n}'
            for b, n in zip(ANALYSIS_BUCKETS_S, f["analysis_buckets"], strict=True)]
    out += [f'traceanalyzer_analysis_seconds_bucket{{le="+Inf"}} {f["analysis_count"]}',
            f"traceanalyzer_analysis_seconds_sum {_number(f['analysis_sum_s'])}",
            f"traceanalyzer_analysis_seconds_count {f['analysis_count']}"]
    for name, metric, help_ in COUNTERS:
        out += [f"# HELP {metric} {help_}", f"# TYPE {metric} counter", f"{metric} {f['counters'][name]}"]
    return "\n".join(out) + "\n"
