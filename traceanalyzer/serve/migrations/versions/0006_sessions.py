"""Browser sessions: the login cookie holds a random session id (stored as its SHA-256), never a token.
A session belongs to the token it logged in with, expires soon, and is revoked at logout, at the next
login from the same browser, or with its token."""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "blob_0006"  # main's head when this was merged (0005 -> blob_0006 -> 0006)
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "sessions",
        sa.Column("id_hash", sa.String(64), primary_key=True),
        sa.Column("token_id", sa.Integer, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("expires_at", sa.Float, nullable=False),
        sa.Column("revoked_at", sa.Float, nullable=True),
        sa.Column("source", sa.String(200), nullable=True),
    )
    op.create_index("ix_sessions_token_id", "sessions", ["token_id"])


def downgrade() -> None:
    op.drop_index("ix_sessions_token_id", "sessions")
    op.drop_table("sessions")
