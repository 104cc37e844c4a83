"""The one owner of a task row's life: every status change goes through ``TaskRows``.

Each change is a single guarded ``UPDATE ... WHERE status IN (allowed sources)``, with the allowed
sources read from ``tts_queue.status.TRANSITIONS``, so a late or duplicate message can never move a
finished row, and two processes racing on one row agree on who won (the one whose update matched).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from tts_queue.db import Database, TaskRow, utcnow
from tts_queue.status import TaskStatus, sources

log = logging.getLogger(__name__)


class TaskRows:
    """Creates task rows and moves them between statuses, only along allowed transitions."""

    def __init__(self, db: Database, clock: Callable[[], datetime] = utcnow) -> None:
        self.db = db
        self.clock = clock

    def add(self, session: Session, row: TaskRow, cache_hit: bool) -> None:
        """Insert a new row in the caller's transaction: ``done`` at once on a cache hit, else ``queued``."""
        now = self.clock()
        row.created_at = row.created_at or now
        row.attempts = 0
        row.cache_hit = cache_hit
        if cache_hit:
            row.status, row.started_at, row.finished_at = TaskStatus.DONE, now, now
        else:
            row.status = TaskStatus.QUEUED
        session.add(row)

    def claim(self, task_id: str, worker: str) -> TaskRow | None:
        """``queued|running -> running``, counting the attempt; ``None`` if finished or unknown."""
        now = self.clock()
        with self.db.write() as session:
            # FOR UPDATE: a cancel or a second delivery waits for this claim (PostgreSQL);
            # SQLite's BEGIN IMMEDIATE already serializes writers.
            row = session.get(TaskRow, task_id, with_for_update=True)
            if row is None:
                log.warning("task %s is not in the database; dropping the message", task_id)
                return None
            if row.status not in sources(TaskStatus.RUNNING):
                return None
            row.status = TaskStatus.RUNNING
            row.started_at = row.started_at or now
            row.claimed_at = now
            row.attempts += 1
            row.worker = worker
            return row

    def finish(self, task_id: str, batch_size: int | None, cache_hit: bool = False) -> bool:
        """``running -> done``; whether the row moved."""
        return self._move(task_id, TaskStatus.DONE, finished_at=self.clock(), batch_size=batch_size,
                          cache_hit=cache_hit)

    def fail(self, task_id: str, code: str, message: str) -> bool:
        """``queued|running -> failed`` with an error code and message; whether the row moved."""
        return self._move(task_id, TaskStatus.FAILED, finished_at=self.clock(), error_code=code,
                          error_message=message)

    def cancel(self, task_id: str) -> bool:
        """``queued -> cancelled``; whether the row moved."""
        return self._move(task_id, TaskStatus.CANCELLED, finished_at=self.clock())

    def cancel_book(self, book_id: str) -> int:
        """``queued -> cancelled`` for every queued task of a book; how many moved."""
        with self.db.write() as session:
            result = session.execute(
                update(TaskRow).where(TaskRow.book_id == book_id,
                                      TaskRow.status.in_(sources(TaskStatus.CANCELLED)))
                .values(status=TaskStatus.CANCELLED, finished_at=self.clock())
            )
        return int(result.rowcount)  # type: ignore[attr-defined]

    def reclaim_stale(self, claimed_before: datetime) -> list[tuple[str, str]]:
        """``running -> running`` for rows claimed before ``claimed_before`` (their worker is gone):
        the claim time is bumped so the next sweep does not send them again; ``(id, queue)`` pairs."""
        with self.db.write() as session:
            rows = session.execute(
                update(TaskRow)
                .where(TaskRow.status == TaskStatus.RUNNING, TaskRow.claimed_at < claimed_before)
                .values(claimed_at=self.clock())
                .returning(TaskRow.id, TaskRow.queue)
            ).all()
        return [(task_id, queue) for task_id, queue in rows]

    def queued(self) -> list[tuple[str, str]]:
        """``(id, queue)`` of every queued row, oldest first."""
        with self.db.read() as session:
            return [(task_id, queue) for task_id, queue in session.execute(
                select(TaskRow.id, TaskRow.queue).where(TaskRow.status == TaskStatus.QUEUED)
                .order_by(TaskRow.created_at)
            )]

    def _move(self, task_id: str, target: TaskStatus, **values: Any) -> bool:
        with self.db.write() as session:
            result = session.execute(
                update(TaskRow).where(TaskRow.id == task_id, TaskRow.status.in_(sources(target)))
                .values(status=target, **values)
            )
        return bool(result.rowcount)  # type: ignore[attr-defined]
