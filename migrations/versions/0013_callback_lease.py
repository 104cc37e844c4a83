"""callback lease: when the delivery in flight last renewed its hold on a callback row, so neither
a duplicate message nor the recovery sweep sends it a second time while it runs

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-08
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("callbacks") as batch:
        batch.add_column(sa.Column("leased_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("callbacks") as batch:
        batch.drop_column("leased_at")
