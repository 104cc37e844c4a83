"""retention: cache_entries.expired_at (two-phase deletion), keep on tasks and books (pinning),
maintenance_locks (one cleaner at a time) and cleanup_runs (reports)

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("cache_entries", schema=None) as batch_op:
        batch_op.add_column(sa.Column("expired_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.create_index(batch_op.f("ix_cache_entries_expired_at"), ["expired_at"])
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.add_column(sa.Column("keep", sa.Boolean(), nullable=False, server_default=sa.false()))
    with op.batch_alter_table("books", schema=None) as batch_op:
        batch_op.add_column(sa.Column("keep", sa.Boolean(), nullable=False, server_default=sa.false()))
    op.create_table(
        "maintenance_locks",
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("holder", sa.String(255), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_maintenance_locks")),
    )
    op.create_table(
        "cleanup_runs",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("report", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_cleanup_runs")),
    )
    op.create_index(op.f("ix_cleanup_runs_started_at"), "cleanup_runs", ["started_at"])


def downgrade() -> None:
    op.drop_table("cleanup_runs")
    op.drop_table("maintenance_locks")
    with op.batch_alter_table("books", schema=None) as batch_op:
        batch_op.drop_column("keep")
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.drop_column("keep")
    with op.batch_alter_table("cache_entries", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_cache_entries_expired_at"))
        batch_op.drop_column("expired_at")
