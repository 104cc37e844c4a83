"""bulk window: an index to count a pool's book sentences in flight and pick the next unsent ones

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01
"""

from __future__ import annotations

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_tasks_queue_status_dispatched", "tasks",
                    ["queue", "status", "dispatched_at", "created_at"])


def downgrade() -> None:
    op.drop_index("ix_tasks_queue_status_dispatched", table_name="tasks")
