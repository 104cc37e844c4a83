"""a task's client address with auth off: whose fair share of a worker's threads and model it
runs in (every local client was one tenant)

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable: rows admitted before it, with auth off, share as one tenant, as they did.
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("address", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("address")
