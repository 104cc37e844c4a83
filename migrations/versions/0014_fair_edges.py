"""fair edges: a callback's owner (deliveries are shared per key, and a key's deliveries due are
capped), a key's own webhook secret (opt-in), and a pinned task's estimated bytes while it is in
flight (the pin cap counts work not yet stored)

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("callbacks") as batch:
        batch.add_column(sa.Column("owner", sa.String(36), nullable=True))
        batch.create_index("ix_callbacks_owner_state", ["owner", "state"])
    # the owner of each existing callback: its task's or its book's
    op.execute("UPDATE callbacks SET owner = (SELECT owner FROM tasks WHERE tasks.id = callbacks.subject_id) "
               "WHERE kind = 'task'")
    op.execute("UPDATE callbacks SET owner = (SELECT owner FROM books WHERE books.id = callbacks.subject_id) "
               "WHERE kind = 'book'")
    with op.batch_alter_table("api_keys") as batch:
        batch.add_column(sa.Column("webhook_secret", sa.String(128), nullable=True))
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("pin_bytes", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("pin_bytes")
    with op.batch_alter_table("api_keys") as batch:
        batch.drop_column("webhook_secret")
    with op.batch_alter_table("callbacks") as batch:
        batch.drop_index("ix_callbacks_owner_state")
        batch.drop_column("owner")
