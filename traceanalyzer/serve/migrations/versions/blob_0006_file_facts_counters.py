"""What the run page shows of each stored file without reading it (`run_files.format`: the reader the
analysis used; `run_files.perfetto`: whether the Perfetto UI opens it as stored), written when the
analysis finishes; and `counters`: the service's counters for /metrics (upload bytes, lease expiries),
kept in the database so every server of one service reports the same totals."""

import sqlalchemy as sa
from alembic import op

revision = "blob_0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("run_files") as batch:
        batch.add_column(sa.Column("format", sa.String(32), nullable=True))
        batch.add_column(sa.Column("perfetto", sa.Boolean, nullable=True))
    op.create_table(
        "counters",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("value", sa.BigInteger, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("counters")
    with op.batch_alter_table("run_files") as batch:
        batch.drop_column("perfetto")
        batch.drop_column("format")
