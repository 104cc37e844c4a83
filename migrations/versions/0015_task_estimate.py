"""a task's estimated audio seconds, stored when it is admitted: the backlog (waiting and running
work per pool and lane, ``tts_backlog_audio_seconds``) sums it from the rows

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable and without a default: rows admitted before it count as tasks, with no seconds.
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("estimate_s", sa.Float(), nullable=True))
        # the backlog's query reads this index alone (no table rows): 100,000 rows measured in
        # the backlog benchmark
        batch.create_index("ix_tasks_status_queue_estimate", ["status", "queue", "estimate_s"])


def downgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.drop_index("ix_tasks_status_queue_estimate")
        batch.drop_column("estimate_s")
