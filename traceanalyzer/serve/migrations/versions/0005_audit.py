"""The audit of writes: one row per upload, project made, delete or cancel, token made or revoked, with
who (the token's name and id, or the command line's user), when, from where, and what."""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "audit",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("at", sa.Float, nullable=False),
        sa.Column("actor", sa.String(200), nullable=False),
        sa.Column("token_id", sa.Integer, nullable=True),
        sa.Column("source", sa.String(200), nullable=False),
        sa.Column("action", sa.String(40), nullable=False),
        sa.Column("project", sa.String(64), nullable=True),
        sa.Column("target", sa.String(200), nullable=True),
        sa.Column("detail", sa.Text, nullable=True),
    )
    op.create_index("ix_audit_at", "audit", ["at"])
    op.create_index("ix_audit_project", "audit", ["project"])


def downgrade() -> None:
    op.drop_index("ix_audit_project", "audit")
    op.drop_index("ix_audit_at", "audit")
    op.drop_table("audit")
