"""Runs of one setting: an optional `setting` label given at upload (e.g. a config's hash) and
`repeat_of`, the first run of the setting this run repeats (a capture repeated to measure run-to-run
variation). The compare page takes its allowance only from such runs."""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("setting", sa.String(100), nullable=True))
        batch.add_column(sa.Column("repeat_of", sa.String(16), nullable=True))
    op.create_index("ix_runs_repeat_of", "runs", ["repeat_of"])


def downgrade() -> None:
    op.drop_index("ix_runs_repeat_of", "runs")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("repeat_of")
        batch.drop_column("setting")
