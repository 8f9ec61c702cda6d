"""History: each run's figures, extracted once when its analysis finishes (the history page and its
change points read this table, never every run's JSON), and an optional commit order per run."""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "run_metrics",
        sa.Column("run_id", sa.String(16), sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("metric", sa.String(40), primary_key=True),
        sa.Column("value", sa.Float, nullable=True),
    )
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("commit_order", sa.Float, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("commit_order")
    op.drop_table("run_metrics")
