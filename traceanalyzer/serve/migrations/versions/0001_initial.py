"""The first schema: projects, tokens (hashed), runs, the files of a run, and one job per run."""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "projects",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(64), nullable=False, unique=True),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_table(
        "tokens",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("project", sa.String(64), nullable=False, index=True),
        sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("read_only", sa.Boolean, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_table(
        "runs",
        sa.Column("id", sa.String(16), primary_key=True),
        sa.Column("project_id", sa.Integer, sa.ForeignKey("projects.id"), nullable=False, index=True),
        sa.Column("branch", sa.String(200), nullable=True, index=True),
        sa.Column("commit", sa.String(100), nullable=True),
        sa.Column("created_at", sa.Float, nullable=False, index=True),
        sa.Column("size_bytes", sa.BigInteger, nullable=False),
        sa.Column("files", sa.Integer, nullable=False),
        sa.Column("verdict", sa.String(40), nullable=True),
        sa.Column("step_time_ms", sa.Float, nullable=True),
        sa.Column("gpu_idle", sa.Float, nullable=True),
    )
    op.create_table(
        "run_files",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("run_id", sa.String(16), sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False, index=True),
        sa.Column("position", sa.Integer, nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False, index=True),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("size_bytes", sa.BigInteger, nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
    )
    op.create_table(
        "jobs",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("run_id", sa.String(16), sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False,
                  unique=True),
        sa.Column("status", sa.String(16), nullable=False, index=True),
        sa.Column("tries", sa.Integer, nullable=False),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("pid", sa.Integer, nullable=True),
        sa.Column("queued_at", sa.Float, nullable=False),
        sa.Column("started_at", sa.Float, nullable=True),
        sa.Column("finished_at", sa.Float, nullable=True),
    )


def downgrade() -> None:
    for table in ("jobs", "run_files", "runs", "tokens", "projects"):
        op.drop_table(table)
