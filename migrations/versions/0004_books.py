"""books, book_chapters, book_chunks: audiobooks rendered from ordinary cached tasks

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

STATUS = sa.Enum("queued", "running", "done", "failed", "cancelled", name="taskstatus",
                 native_enum=False, length=16)


def upgrade() -> None:
    op.create_table(
        "books",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("title", sa.String(512), nullable=False),
        sa.Column("author", sa.String(512), nullable=True),
        sa.Column("status", STATUS, nullable=False),
        sa.Column("options", sa.JSON(), nullable=False),
        sa.Column("pool", sa.String(16), nullable=False),
        sa.Column("chapters_total", sa.Integer(), nullable=False),
        sa.Column("sentences_total", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("error_code", sa.String(64), nullable=True),
        sa.Column("error_message", sa.Text(), nullable=True),
        sa.Column("m4b_path", sa.String(512), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_books")),
    )
    op.create_index(op.f("ix_books_status"), "books", ["status"])
    op.create_table(
        "book_chapters",
        sa.Column("book_id", sa.String(36), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("title", sa.String(512), nullable=False),
        sa.Column("status", STATUS, nullable=False),
        sa.Column("sentences_total", sa.Integer(), nullable=False),
        sa.Column("digest", sa.String(64), nullable=True),
        sa.Column("duration_s", sa.Float(), nullable=True),
        sa.Column("error_message", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(["book_id"], ["books.id"], name=op.f("fk_book_chapters_book_id_books"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("book_id", "number", name=op.f("pk_book_chapters")),
    )
    op.create_table(
        "book_chunks",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("book_id", sa.String(36), nullable=False),
        sa.Column("index", sa.Integer(), nullable=False),
        sa.Column("chapter", sa.Integer(), nullable=False),
        sa.Column("paragraph", sa.Integer(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("pause_after", sa.String(16), nullable=False),
        sa.Column("task_id", sa.String(36), nullable=False),
        sa.Column("cache_key", sa.String(64), nullable=False),
        sa.ForeignKeyConstraint(["book_id"], ["books.id"], name=op.f("fk_book_chunks_book_id_books"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_book_chunks")),
        sa.UniqueConstraint("book_id", "index", name=op.f("uq_book_chunks_book_id")),
    )
    op.create_index(op.f("ix_book_chunks_book_id"), "book_chunks", ["book_id"])
    op.create_index(op.f("ix_book_chunks_task_id"), "book_chunks", ["task_id"])


def downgrade() -> None:
    op.drop_table("book_chunks")
    op.drop_table("book_chapters")
    op.drop_table("books")
