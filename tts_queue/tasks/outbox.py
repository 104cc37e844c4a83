"""Task rows as the recovery sweep and the bulk window see them: the leases under which workers
hold rows, and the outbox (whether and when each row's message was handed to the broker).

A worker holds a row under a lease it renews (``reserve_many``, ``renew``); a row held by a worker
whose heartbeat stopped lost it (``release``), and so did a row whose lease expired
(``reclaim_stale``: a worker that never beat, or was forgotten); a queued row whose message the
broker no longer holds was lost with it (``stranded``); a committed row never sent was lost between
commit and dispatch (``unsent``). Each is marked sent when it is sent again, so the next sweep
leaves it alone. The bulk window feeds a book's sentences a few at a time (``take_unsent``,
``in_flight``). Part of ``TaskRows`` (``tts_queue.tasks.rows``), the one owner of a task row's
life.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from datetime import datetime, timedelta

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from tts_queue.db import Database
from tts_queue.enums import TaskStatus, sources
from tts_queue.tables import TaskRow

BATCH_IDS = 500  # ids per statement (SQLite and psycopg bound the parameters of one statement)


class OutboxRows:
    """Leases and the outbox of task rows (a part of ``TaskRows``, which sets its fields)."""

    db: Database
    clock: Callable[[], datetime]
    lease: timedelta

    def reserve_many(self, task_ids: Collection[str], worker: str) -> int:
        """A worker holds these tasks' messages (received, no thread yet): it holds their queued
        rows (status unchanged) under a lease, ``BATCH_IDS`` ids per statement; how many."""
        ids = list(task_ids)
        held = 0
        for start in range(0, len(ids), BATCH_IDS):
            with self.db.write() as session:
                held += len(session.scalars(
                    update(TaskRow).where(TaskRow.id.in_(ids[start:start + BATCH_IDS]),
                                          TaskRow.status == TaskStatus.QUEUED)
                    .values(worker=worker, claimed_at=self.clock()).returning(TaskRow.id)
                ).all())
        return held

    def let_go(self, task_ids: Collection[str], worker: str) -> int:
        """``worker`` no longer holds these queued rows it had recorded (their messages went back
        to the broker): held by nobody now, so the stranded rule watches their messages; how many."""
        if not task_ids:
            return 0
        with self.db.write() as session:
            return len(session.scalars(
                update(TaskRow).where(TaskRow.id.in_(list(task_ids)), TaskRow.worker == worker,
                                      TaskRow.status == TaskStatus.QUEUED)
                .values(worker=None).returning(TaskRow.id)).all())

    def renew(self, task_ids: Collection[str], worker: str) -> int:
        """Renew the lease of the rows ``worker`` holds (received or running); how many."""
        if not task_ids:
            return 0
        with self.db.write() as session:
            renewed = session.scalars(
                update(TaskRow).where(TaskRow.id.in_(list(task_ids)), TaskRow.worker == worker,
                                      TaskRow.status.in_((TaskStatus.QUEUED, TaskStatus.RUNNING)))
                .values(claimed_at=self.clock()).returning(TaskRow.id)
            ).all()
        return len(renewed)

    def mark_dispatched(self, task_ids: Iterable[str]) -> None:
        """Record that the messages of ``task_ids`` were handed to the broker (the outbox),
        ``BATCH_IDS`` ids per statement."""
        ids = list(task_ids)
        for start in range(0, len(ids), BATCH_IDS):
            with self.db.write() as session:
                session.execute(update(TaskRow).where(TaskRow.id.in_(ids[start:start + BATCH_IDS]))
                                .values(dispatched_at=self.clock()))

    def take_unsent(self, session: Session, queue: str, limit: int) -> list[str]:
        """In the caller's transaction: mark the oldest ``limit`` queued, never-sent rows of
        ``queue`` as sent now (the bulk window feeds a book's sentences in reading order); their
        ids, to dispatch. On PostgreSQL, rows another feeder is taking are skipped."""
        unsent = (TaskRow.queue == queue, TaskRow.status == TaskStatus.QUEUED,
                  TaskRow.dispatched_at.is_(None))
        pick = select(TaskRow.id).where(*unsent).order_by(TaskRow.created_at).limit(limit)
        if self.db.engine.dialect.name == "postgresql":
            pick = pick.with_for_update(skip_locked=True)  # two feeders never take the same rows
        picked = list(session.scalars(pick))
        if not picked:
            return []
        taken = set(session.scalars(update(TaskRow).where(TaskRow.id.in_(picked), *unsent)
                                    .values(dispatched_at=self.clock()).returning(TaskRow.id)))
        return [task_id for task_id in picked if task_id in taken]  # RETURNING has no order: the pick's

    def in_flight(self, session: Session, queue: str) -> int:
        """Rows of ``queue`` sent to the broker and not finished (queued there, or running)."""
        return int(session.scalar(select(func.count()).select_from(TaskRow).where(
            TaskRow.queue == queue, TaskRow.status.in_((TaskStatus.QUEUED, TaskStatus.RUNNING)),
            TaskRow.dispatched_at.is_not(None))) or 0)

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

    def release(self, workers: Collection[str]) -> list[tuple[str, str]]:
        """Rows ``workers`` held (received or running), released at once: their heartbeats
        stopped, so they are dead (or frozen: their claims' fences make anything they write later
        void). As ``reclaim_stale`` does for an expired lease: back to ``queued``, ``worker``
        cleared, dispatch time bumped, attempts kept; returned as ``(id, queue)`` to dispatch again."""
        if not workers:
            return []
        now = self.clock()
        with self.db.write() as session:
            rows = session.execute(
                update(TaskRow)
                .where(TaskRow.status.in_((TaskStatus.QUEUED, *sources(TaskStatus.QUEUED))),
                       TaskRow.worker.in_(list(workers)))
                .values(status=TaskStatus.QUEUED, worker=None, claimed_at=now, dispatched_at=now)
                .returning(TaskRow.id, TaskRow.queue)
            ).all()
        return [(task_id, queue) for task_id, queue in rows]

    def hand_back(self, worker: str) -> list[tuple[str, str]]:
        """A worker stopping past its shutdown budget gives back the rows it holds at once,
        instead of letting their leases lapse: those it runs go back to ``queued`` as the sweep
        releases them, their attempt taken back (a scale-in is not the task's fault, so it does not
        count towards the cap), and are returned as ``(id, queue)`` to dispatch again; those it
        received and did not start are only let go: one that starts before the worker exits goes
        back to the broker unclaimed (``WorkerStopping``), one that does not is sent again by the
        sweep once its lease lapses (sending it now as well would deliver it twice). A row that
        ended meanwhile, or that another worker holds, is left."""
        now = self.clock()
        with self.db.write() as session:
            handed = [(task_id, queue) for task_id, queue in session.execute(
                update(TaskRow).where(TaskRow.status == TaskStatus.RUNNING, TaskRow.worker == worker)
                .values(status=TaskStatus.QUEUED, worker=None, claimed_at=now, dispatched_at=now,
                        attempts=TaskRow.attempts - 1)
                .returning(TaskRow.id, TaskRow.queue))]
            session.execute(update(TaskRow).values(worker=None)
                            .where(TaskRow.status == TaskStatus.QUEUED, TaskRow.worker == worker))
        return handed

    def stranded(self, messages: Mapping[str, float | None],
                 within: timedelta | None = None) -> list[tuple[str, str]]:
        """Queued rows, sent more than a lease ago and held by no worker, whose message is gone:
        not in the broker at all (a worker popped it and died before the broker recorded the
        delivery), delivered only before the last send (the broker holds an older message of the
        task, from a worker that died with it; the one sent since vanished), or delivered more than
        a lease ago to a receiver that never recorded it (it died at once). ``messages`` maps the
        task ids the broker holds to their latest delivery time (epoch seconds; ``None`` while
        still waiting in a queue). ``within``: a shorter wait than the lease (a worker was just
        found dead: a live receiver records what it holds at every beat, so a delivery older than a
        beat that no row records was the dead one's). The rows are marked as sent now."""
        now = self.clock()
        cutoff = now - (self.lease if within is None else within)
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
        for start in range(0, len(ids), BATCH_IDS):
            with self.db.write() as session:
                session.execute(update(TaskRow).where(
                    TaskRow.id.in_(ids[start:start + BATCH_IDS]), TaskRow.status == TaskStatus.QUEUED,
                    TaskRow.worker.is_(None)).values(dispatched_at=now))
        return lost

    def unserved(self, queues: Collection[str], wait: timedelta, limit: int = BATCH_IDS) -> list[str]:
        """Ids of queued rows of ``queues`` (a pool's lanes) made more than ``wait`` ago, at most
        ``limit``, oldest first: what a pool at zero left waiting for its first worker."""
        with self.db.read() as session:
            return list(session.scalars(
                select(TaskRow.id).where(TaskRow.status == TaskStatus.QUEUED, TaskRow.queue.in_(list(queues)),
                                         TaskRow.created_at < self.clock() - wait)
                .order_by(TaskRow.created_at).limit(limit)))

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
