"""A run's figures in one place: `runs.step_time_ms` and `runs.gpu_idle` go; `run_metrics` holds them with
the run's other metrics (result/metrics.py), and a run's row reads them from there.

SQLite (3.35 and later) and PostgreSQL drop a plain column in place, so the table is not copied and
the rows that refer to a run stay. An older SQLite keeps the two columns, unused."""

import sqlite3

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

MOVED = ("step_time_ms", "gpu_idle")


def _in_place() -> bool:
    return op.get_bind().dialect.name != "sqlite" or sqlite3.sqlite_version_info >= (3, 35, 0)


def upgrade() -> None:
    if not _in_place():
        return
    runs = sa.table("runs", sa.column("id"), *(sa.column(c) for c in MOVED))
    run_metrics = sa.table("run_metrics", sa.column("run_id"), sa.column("metric"), sa.column("value"))
    for name in MOVED:  # a run whose figures were stored without this one keeps the column's value
        has = (sa.select(run_metrics.c.run_id)
               .where(run_metrics.c.run_id == runs.c.id, run_metrics.c.metric == name).exists())
        some = sa.select(run_metrics.c.run_id).where(run_metrics.c.run_id == runs.c.id).exists()
        op.execute(run_metrics.insert().from_select(
            ["run_id", "metric", "value"],
            sa.select(runs.c.id, sa.literal(name), runs.c[name]).where(some, ~has, runs.c[name].is_not(None))))
    for name in MOVED:
        op.drop_column("runs", name)


def downgrade() -> None:
    if not _in_place():
        return
    for name in MOVED:
        op.add_column("runs", sa.Column(name, sa.Float, nullable=True))
    runs = sa.table("runs", sa.column("id"), *(sa.column(c) for c in MOVED))
    run_metrics = sa.table("run_metrics", sa.column("run_id"), sa.column("metric"), sa.column("value"))
    for name in MOVED:
        value = (sa.select(run_metrics.c.value)
                 .where(run_metrics.c.run_id == runs.c.id, run_metrics.c.metric == name).scalar_subquery())
        op.execute(runs.update().values({name: value}))
