"""a task's claim fence: every claim takes the next number, and a worker's writes for the task
(its end, its cache row, its stream) carry the one it claimed with, so a worker that froze while
its task was run elsewhere has its late results dropped

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A server default: rows of running tasks claimed by the previous release start at 0, and
    # that release's workers (which do not write it) go on during the upgrade.
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("fence", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("fence")
