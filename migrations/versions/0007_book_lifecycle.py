"""book lifecycle: ingestion in a worker (source, claimed_at, attempts), progress counters on books
and chapters (sentences_done, audio_seconds, started_at, progress_at), last_access_at for the book
TTL, and an index to read a chapter's sentences in order

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("books", schema=None) as batch_op:
        batch_op.add_column(sa.Column("source", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("claimed_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("attempts", sa.Integer(), nullable=False, server_default="0"))
        batch_op.add_column(sa.Column("sentences_done", sa.Integer(), nullable=False, server_default="0"))
        batch_op.add_column(sa.Column("audio_seconds", sa.Float(), nullable=False, server_default="0"))
        batch_op.add_column(sa.Column("started_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("progress_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("last_access_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.create_index(batch_op.f("ix_books_last_access_at"), ["last_access_at"])
    with op.batch_alter_table("book_chapters", schema=None) as batch_op:
        batch_op.add_column(sa.Column("sentences_done", sa.Integer(), nullable=False, server_default="0"))
        batch_op.add_column(sa.Column("audio_seconds", sa.Float(), nullable=False, server_default="0"))
    op.create_index("ix_book_chunks_chapter_order", "book_chunks", ["book_id", "chapter", "index"])
    # Books rendered before this revision: their counters from their rows.
    op.execute(
        "UPDATE book_chapters SET sentences_done = (SELECT count(*) FROM book_chunks c JOIN tasks t "
        "ON t.id = c.task_id WHERE c.book_id = book_chapters.book_id AND c.chapter = book_chapters.number "
        "AND t.status = 'done')")
    op.execute(
        "UPDATE books SET sentences_done = (SELECT coalesce(sum(sentences_done), 0) FROM book_chapters "
        "WHERE book_chapters.book_id = books.id), started_at = created_at, last_access_at = created_at")


def downgrade() -> None:
    op.drop_index("ix_book_chunks_chapter_order", table_name="book_chunks")
    with op.batch_alter_table("book_chapters", schema=None) as batch_op:
        batch_op.drop_column("audio_seconds")
        batch_op.drop_column("sentences_done")
    with op.batch_alter_table("books", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_books_last_access_at"))
        for column in ("last_access_at", "progress_at", "started_at", "audio_seconds", "sentences_done",
                       "attempts", "claimed_at", "source"):
            batch_op.drop_column(column)
