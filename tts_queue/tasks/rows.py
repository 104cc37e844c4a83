"""The one owner of a task row's life: every status change goes through ``TaskRows``.

Each change is a single guarded ``UPDATE ... WHERE status IN (allowed sources)``, with the allowed
sources read from ``tts_queue.enums.TRANSITIONS``, so a late or duplicate message can never move a
finished row, and two processes racing on one row agree on who won (the one whose update matched).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from tts_queue.db import Database, utcnow
from tts_queue.enums import TaskStatus, sources
from tts_queue.tables import TaskRow

log = logging.getLogger(__name__)


class TaskRows:
    """Creates task rows and moves them between statuses, only along allowed transitions."""

    def __init__(self, db: Database, clock: Callable[[], datetime] = utcnow,
                 lease: timedelta = timedelta(seconds=30)) -> None:
        self.db = db
        self.clock = clock
        self.lease = lease

    def add(self, session: Session, row: TaskRow, cache_hit: bool) -> None:
        """Insert a new row in the caller's transaction: ``done`` at once on a cache hit, else ``queued``."""
        now = self.clock()
        row.created_at = row.created_at or now
        row.attempts = 0
        row.keep = bool(row.keep)
        row.cache_hit = cache_hit
        if cache_hit:
            row.status, row.started_at, row.finished_at = TaskStatus.DONE, now, now
        else:
            row.status = TaskStatus.QUEUED
        session.add(row)

    def attempts(self, task_id: str) -> int:
        """Attempts counted so far (0 for an unknown task)."""
        with self.db.read() as session:
            return int(session.scalar(select(TaskRow.attempts).where(TaskRow.id == task_id)) or 0)

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
            if (row.status is TaskStatus.RUNNING and row.worker not in (None, worker)
                    and row.claimed_at is not None and row.claimed_at > now - self.lease):
                log.info("task %s is running on %s (lease held); skipping this delivery", task_id, row.worker)
                return None
            row.status = TaskStatus.RUNNING
            row.started_at = row.started_at or now
            row.claimed_at = now
            row.attempts += 1
            row.worker = worker
            return row

    def finish(self, task_id: str, batch_size: int | None, cache_hit: bool = False,
               timings: dict[str, float | None] | None = None) -> bool:
        """``running -> done``; whether the row moved. ``timings``: where the time went (ms)."""
        return self._move(task_id, TaskStatus.DONE, finished_at=self.clock(), batch_size=batch_size,
                          cache_hit=cache_hit, timings=timings)

    def fail(self, task_id: str, code: str, message: str) -> bool:
        """``queued|running -> failed`` with an error code and message; whether the row moved."""
        return self._move(task_id, TaskStatus.FAILED, finished_at=self.clock(), error_code=code,
                          error_message=message)

    def cancel(self, task_id: str) -> bool:
        """``queued -> cancelled``; whether the row moved."""
        return self._move(task_id, TaskStatus.CANCELLED, finished_at=self.clock())

    def placement(self, task_id: str) -> tuple[str, str]:
        """A task's pool and queue (``("unknown", "unknown")`` for a deleted row)."""
        with self.db.read() as session:
            found = session.execute(select(TaskRow.pool, TaskRow.queue).where(TaskRow.id == task_id)).first()
        return (found[0], found[1]) if found is not None else ("unknown", "unknown")

    def uncount_attempt(self, task_id: str) -> None:
        """Take back the attempt of a claim that could not store its result for want of space."""
        with self.db.write() as session:
            session.execute(update(TaskRow).where(TaskRow.id == task_id, TaskRow.attempts > 0)
                            .values(attempts=TaskRow.attempts - 1))

    def set_keep(self, task_id: str, keep: bool) -> None:
        """Pin (or release) a task's audio against retention (not a status change)."""
        with self.db.write() as session:
            session.execute(update(TaskRow).where(TaskRow.id == task_id).values(keep=keep))

    def cancel_book(self, book_id: str) -> int:
        """``queued -> cancelled`` for every queued task of a book; how many moved."""
        with self.db.write() as session:
            result = session.execute(
                update(TaskRow).where(TaskRow.book_id == book_id,
                                      TaskRow.status.in_(sources(TaskStatus.CANCELLED)))
                .values(status=TaskStatus.CANCELLED, finished_at=self.clock())
            )
        return int(result.rowcount)  # type: ignore[attr-defined]

    def reserve(self, task_id: str, worker: str) -> bool:
        """A worker received the task's message: it holds the row (status unchanged) under a lease."""
        with self.db.write() as session:
            result = session.execute(
                update(TaskRow).where(TaskRow.id == task_id, TaskRow.status == TaskStatus.QUEUED)
                .values(worker=worker, claimed_at=self.clock())
            )
        return bool(result.rowcount)  # type: ignore[attr-defined]

    def renew(self, task_ids: Collection[str], worker: str) -> int:
        """Renew the lease of the rows ``worker`` holds (received or running); how many."""
        if not task_ids:
            return 0
        with self.db.write() as session:
            result = session.execute(
                update(TaskRow).where(TaskRow.id.in_(list(task_ids)), TaskRow.worker == worker,
                                      TaskRow.status.in_((TaskStatus.QUEUED, TaskStatus.RUNNING)))
                .values(claimed_at=self.clock())
            )
        return int(result.rowcount)  # type: ignore[attr-defined]

    def mark_dispatched(self, task_ids: Collection[str]) -> None:
        """Record that the messages of ``task_ids`` were handed to the broker (the outbox), 500 ids
        per statement (SQLite and psycopg bound the parameters of one statement)."""
        ids = list(task_ids)
        for start in range(0, len(ids), 500):
            with self.db.write() as session:
                session.execute(update(TaskRow).where(TaskRow.id.in_(ids[start:start + 500]))
                                .values(dispatched_at=self.clock()))

    def reclaim_stale(self) -> list[tuple[str, str]]:
        """Rows a worker held (received or running) whose lease expired: that worker is gone.

        They are released back to ``queued`` (``running -> queued``; ``worker`` cleared, dispatch
        time bumped, so the next sweep does not send them again, and every rule for queued rows,
        such as a message lost again, applies to them) and returned as ``(id, queue)`` to dispatch
        again. The attempts stay counted, so a task that keeps killing workers reaches the cap.
        """
        now = self.clock()
        with self.db.write() as session:
            rows = session.execute(
                update(TaskRow)
                .where(TaskRow.status.in_((TaskStatus.QUEUED, *sources(TaskStatus.QUEUED))),
                       TaskRow.worker.is_not(None), TaskRow.claimed_at < now - self.lease)
                .values(status=TaskStatus.QUEUED, worker=None, claimed_at=now, dispatched_at=now)
                .returning(TaskRow.id, TaskRow.queue)
            ).all()
        return [(task_id, queue) for task_id, queue in rows]

    def stranded(self, messages: Mapping[str, float | None]) -> list[tuple[str, str]]:
        """Queued rows, sent more than a lease ago and held by no worker, whose message is gone:
        not in the broker at all (a worker popped it and died before the broker recorded the
        delivery), delivered only before the last send (the broker holds an older message of the
        task, from a worker that died with it; the one sent since vanished), or delivered more than
        a lease ago to a receiver that never recorded it (it died at once). ``messages`` maps the
        task ids the broker holds to their latest delivery time (epoch seconds; ``None`` while
        still waiting in a queue). The rows are marked as sent now."""
        now = self.clock()
        cutoff = now - self.lease
        with self.db.read() as session:
            candidates = session.execute(
                select(TaskRow.id, TaskRow.queue, TaskRow.dispatched_at)
                .where(TaskRow.status == TaskStatus.QUEUED, TaskRow.worker.is_(None),
                       TaskRow.dispatched_at < cutoff)
            ).all()
        lost = []
        for task_id, queue, sent in candidates:
            if task_id not in messages:
                lost.append((task_id, queue))
                continue
            delivered = messages[task_id]
            if delivered is not None and sent is not None and delivered < cutoff.timestamp():
                lost.append((task_id, queue))  # before the last send, or unrecorded for a lease
        ids = [task_id for task_id, _ in lost]
        for start in range(0, len(ids), 500):
            with self.db.write() as session:
                session.execute(update(TaskRow).where(
                    TaskRow.id.in_(ids[start:start + 500]), TaskRow.status == TaskStatus.QUEUED,
                    TaskRow.worker.is_(None)).values(dispatched_at=now))
        return lost

    def unsent(self, grace: timedelta) -> list[tuple[str, str]]:
        """Queued rows committed more than ``grace`` ago whose message was never sent (the API
        died, or the broker was down, between commit and dispatch); marked as sent now. Book
        sentences are not: they wait to be fed a few at a time (``BookService.feed``)."""
        now = self.clock()
        with self.db.write() as session:
            rows = session.execute(
                update(TaskRow)
                .where(TaskRow.status == TaskStatus.QUEUED, TaskRow.worker.is_(None),
                       TaskRow.dispatched_at.is_(None), TaskRow.created_at < now - grace,
                       TaskRow.book_id.is_(None))
                .values(dispatched_at=now)
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
