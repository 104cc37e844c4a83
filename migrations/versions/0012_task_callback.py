"""task callback flag: whether a task has a webhook, so its end needs no lookup (and no write)
to find out, and its status board record is skipped without reading the callbacks table

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("callback", sa.Boolean(), nullable=False, server_default=sa.false()))
    op.execute("UPDATE tasks SET callback = true WHERE id IN (SELECT subject_id FROM callbacks "
               "WHERE kind = 'task')")


def downgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("callback")
