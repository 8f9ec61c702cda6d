"""CI without stored secrets: a project's OIDC policies. A CI job's OIDC token (a JWT signed by its
issuer) is exchanged for a short-lived token of the project when it comes from the policy's issuer, for
its audience, with the claims it requires (e.g. the repository), verified with the keys of the policy's
JWKS URL (the only address the service fetches keys from)."""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "oidc_policies",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("project", sa.String(64), nullable=False),
        sa.Column("issuer", sa.String(500), nullable=False),
        sa.Column("audience", sa.String(500), nullable=False),
        sa.Column("jwks_url", sa.String(1000), nullable=False),
        sa.Column("claims", sa.Text, nullable=False),
        sa.Column("read_only", sa.Boolean, nullable=False),
        sa.Column("ttl_s", sa.Float, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("created_by", sa.String(100), nullable=True),
    )
    op.create_index("ix_oidc_policies_project", "oidc_policies", ["project"])


def downgrade() -> None:
    op.drop_index("ix_oidc_policies_project", "oidc_policies")
    op.drop_table("oidc_policies")
