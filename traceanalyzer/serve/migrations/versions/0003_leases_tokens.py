"""Jobs with owners (a worker id, a lease and its heartbeat), tokens that say who and what they are for
(name, creator, last use, expiry, revocation), the token that uploaded each run, and one `blobs` row per
stored trace file (the lock uploads and deletes of the same content take)."""

import time

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("worker_id", sa.String(100), nullable=True))
        batch.add_column(sa.Column("lease_until", sa.Float, nullable=True))
        batch.add_column(sa.Column("heartbeat_at", sa.Float, nullable=True))
    # a job left running by a server of the previous version has no lease: it has expired
    op.execute("UPDATE jobs SET lease_until = 0 WHERE status = 'running'")
    with op.batch_alter_table("tokens") as batch:
        batch.add_column(sa.Column("name", sa.String(100), nullable=True))
        batch.add_column(sa.Column("created_by", sa.String(100), nullable=True))
        batch.add_column(sa.Column("last_used_at", sa.Float, nullable=True))
        batch.add_column(sa.Column("expires_at", sa.Float, nullable=True))
        batch.add_column(sa.Column("revoked_at", sa.Float, nullable=True))
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("token_id", sa.Integer, nullable=True))
    op.create_table(
        "blobs",
        sa.Column("sha256", sa.String(64), primary_key=True),
        sa.Column("touched_at", sa.Float, nullable=False),
    )
    op.execute(sa.text("INSERT INTO blobs (sha256, touched_at) SELECT DISTINCT sha256, :now FROM run_files")
               .bindparams(now=time.time()))


def downgrade() -> None:
    op.drop_table("blobs")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("token_id")
    with op.batch_alter_table("tokens") as batch:
        for name in ("revoked_at", "expires_at", "last_used_at", "created_by", "name"):
            batch.drop_column(name)
    with op.batch_alter_table("jobs") as batch:
        for name in ("heartbeat_at", "lease_until", "worker_id"):
            batch.drop_column(name)
