"""A book's progress, read from its rows: status, counts, audio seconds so far, speed and ETA."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import func, select

from tts_queue.db import Database
from tts_queue.enums import BookStatus, TaskStatus
from tts_queue.tables import BookRow, CacheEntry, ChapterRow, SentenceRow, TaskRow


def book_progress(
    db: Database, row: BookRow, chapters: Sequence[ChapterRow], now: datetime
) -> dict[str, Any]:
    """The status document of a book (the API's ``GET /v1/books/<id>`` body, without links)."""
    with db.read() as session:
        counts = dict(session.execute(
            select(TaskRow.status, func.count()).join(SentenceRow, SentenceRow.task_id == TaskRow.id)
            .where(SentenceRow.book_id == row.id).group_by(TaskRow.status)
        ).all())
        audio_seconds = session.scalar(
            select(func.coalesce(func.sum(CacheEntry.duration_s), 0.0))
            .select_from(SentenceRow).join(TaskRow, TaskRow.id == SentenceRow.task_id)
            .join(CacheEntry, CacheEntry.key == SentenceRow.cache_key)
            .where(SentenceRow.book_id == row.id, TaskRow.status == TaskStatus.DONE)
        ) or 0.0
        first_start = session.scalar(
            select(func.min(TaskRow.started_at)).join(SentenceRow, SentenceRow.task_id == TaskRow.id)
            .where(SentenceRow.book_id == row.id, TaskRow.cache_hit.is_(False))
        )
    done = int(counts.get(TaskStatus.DONE, 0))
    status = row.status
    if status is BookStatus.QUEUED and (done or counts.get(TaskStatus.RUNNING)):
        status = BookStatus.RUNNING
    elapsed = (now - first_start).total_seconds() if first_start else 0.0
    remaining = row.sentences_total - done
    eta = None
    if status is BookStatus.RUNNING and done and elapsed > 0:
        eta = round(remaining * elapsed / done, 1)
    elif status is BookStatus.DONE:
        eta = 0.0
    return {
        "book_id": row.id, "title": row.title, "author": row.author, "status": status.value,
        "format": row.options.get("format"), "voice": row.options.get("voice"),
        "chapters_total": row.chapters_total,
        "chapters_done": sum(1 for c in chapters if c.status is BookStatus.DONE),
        "sentences_total": row.sentences_total, "sentences_done": done,
        "audio_seconds": round(float(audio_seconds), 3),
        "speed_x_realtime": round(float(audio_seconds) / elapsed, 2) if elapsed > 0 and done else None,
        "eta_s": eta,
        "created_at": row.created_at.isoformat(),
        "finished_at": row.finished_at.isoformat() if row.finished_at else None,
        "error": {"code": row.error_code, "message": row.error_message} if row.error_code else None,
        "chapters": [
            {"number": c.number, "title": c.title, "status": c.status.value,
             "sentences_total": c.sentences_total, "duration_s": c.duration_s}
            for c in chapters
        ],
    }
