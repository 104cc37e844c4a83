"""task timings: where a task's time went (queue, text, inference, encode, store, total), in ms;
an index for a caller's recent tasks (``GET /v1/tasks``)

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("timings", sa.JSON(), nullable=True))
    op.create_index("ix_tasks_owner_created", "tasks", ["owner", "created_at"])


def downgrade() -> None:
    op.drop_index("ix_tasks_owner_created", table_name="tasks")
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("timings")
