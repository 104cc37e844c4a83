"""The one owner of a task row's life: every row is made, moved and deleted by ``TaskRows``.

Each change is a single guarded ``UPDATE ... WHERE status IN (allowed sources) RETURNING``, with
the allowed sources read from ``tts_queue.enums.TRANSITIONS``, so a late or duplicate message can
never move a finished row, and two processes racing on one row agree on who won (the one whose
update matched). A book sentence that ends ``done`` is counted in its chapter by the injected
``SentenceCounter`` inside that same transaction: whatever path ended it (synthesis, a cache hit in
the worker, an identical request in flight, a retry, a rerun, a redelivery), the row moves once,
so it is counted once. A worker's moves also carry the fence of its claim (``TaskRow.fence``): a
worker that froze while its task was released and run elsewhere finds its claim gone when it comes
back, and its late end, cache row and count are dropped. What else happens when a task ends is
``tts_queue.tasks.ending``'s.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import Enum
from typing import Any, Protocol, cast

from sqlalchemy import Table, and_, bindparam, delete, func, insert, not_, select, update
from sqlalchemy.orm import Session
from sqlalchemy.sql.dml import ReturningUpdate

from tts_queue.db import Database, Executor, utcnow
from tts_queue.enums import TaskStatus, sources
from tts_queue.storage.cache import CachedAudio
from tts_queue.tables import CacheEntry, RequestJSON, TaskRow
from tts_queue.tasks.outbox import BATCH_IDS, OutboxRows

log = logging.getLogger(__name__)
TASKS = cast(Table, TaskRow.__table__)
INSERT_TASK = insert(TASKS)  # one new row, its columns as parameters (``add``)
# A task's row and its live cache entry, the entry's columns in ``CachedAudio``'s order
# (``with_audio``), built once.
_ENTRIES = cast(Table, CacheEntry.__table__)
AUDIO_COLUMNS = ("audio_key", "audio_path", "audio_format", "audio_duration_s", "audio_size_bytes")
TASK_AND_AUDIO = (
    select(TASKS, *(_ENTRIES.c[name.removeprefix("audio_")].label(name) for name in AUDIO_COLUMNS))
    .select_from(TASKS.outerjoin(_ENTRIES, and_(_ENTRIES.c.key == TASKS.c.cache_key,
                                                _ENTRIES.c.expired_at.is_(None))))
    .where(TASKS.c.id == bindparam("task_id"))
)


def _claim_statement(first_only: bool) -> ReturningUpdate[Any]:
    """``claim``'s one statement, built once: the row moves to ``running`` (its attempt counted,
    its lease taken) only from a status that may, and not while another worker's lease on it holds;
    ``first_only``: only if never attempted. The claim takes the next fence (``TaskRow.fence``).
    Its parameters: ``claim_id``, ``claim_worker``, ``claim_at`` and ``lease_from`` (a lease taken
    before it has expired)."""
    c = TASKS.c
    at = bindparam("claim_at", type_=c.claimed_at.type)
    worker = bindparam("claim_worker", type_=c.worker.type)
    held_elsewhere = and_(c.status == TaskStatus.RUNNING, c.worker.is_not(None), c.worker != worker,
                          c.claimed_at.is_not(None),
                          c.claimed_at > bindparam("lease_from", type_=c.claimed_at.type))
    where = [c.id == bindparam("claim_id"), c.status.in_(sources(TaskStatus.RUNNING)), not_(held_elsewhere)]
    if first_only:
        where.append(c.attempts == 0)
    return (update(TASKS).where(*where)
            .values(status=TaskStatus.RUNNING, started_at=func.coalesce(c.started_at, at), claimed_at=at,
                    attempts=c.attempts + 1, fence=c.fence + 1, worker=worker)
            .returning(*c))


CLAIM_ANY, CLAIM_FIRST = _claim_statement(first_only=False), _claim_statement(first_only=True)


@functools.cache
def _move_statement(target: TaskStatus, columns: tuple[str, ...], fenced: bool) -> ReturningUpdate[Any]:
    """``_move``'s statement to ``target`` setting ``columns``, built once per kind of move: the row
    moves only from a status that may; ``fenced``: only while the claim that ``move_fence`` names
    holds it (running, its fence unchanged: no release or later claim since). Its parameters:
    ``move_id``, ``set_<column>`` and, fenced, ``move_fence``."""
    c = TASKS.c
    where = [c.id == bindparam("move_id"), c.status.in_(sources(target))]
    if fenced:
        where += [c.status == TaskStatus.RUNNING, c.fence == bindparam("move_fence", type_=c.fence.type)]
    return (update(TASKS).where(*where)
            .values(status=target, **{name: bindparam("set_" + name, type_=c[name].type) for name in columns})
            .returning(*c))


@dataclass(frozen=True)
class NewTask:
    """A task row to insert: ``done`` at once when ``cache_hit``, else ``queued``."""

    id: str
    cache_key: str
    request: RequestJSON
    pool: str
    queue: str
    created_at: datetime
    cache_hit: bool = False
    book_id: str | None = None
    owner: str | None = None
    address: str | None = None  # with auth off, the client address (``TaskRow.tenant``)
    keep: bool = False
    callback: bool = False
    dispatched: bool = False  # its message is sent right after the commit (``dispatched_at`` now)
    pin_bytes: int | None = None  # a pinned miss's estimated bytes (the pin cap counts them in flight)
    estimate_s: float | None = None  # its estimated audio seconds (the backlog sums them)

    def values(self) -> dict[str, object]:
        """The row's columns."""
        now = self.created_at
        return {"id": self.id, "cache_key": self.cache_key, "request": self.request, "pool": self.pool,
                "queue": self.queue, "created_at": now, "book_id": self.book_id, "owner": self.owner,
                "address": self.address,
                "keep": self.keep, "callback": self.callback, "attempts": 0, "cache_hit": self.cache_hit,
                "pin_bytes": self.pin_bytes, "estimate_s": self.estimate_s,
                "status": TaskStatus.DONE if self.cache_hit else TaskStatus.QUEUED,
                "started_at": now if self.cache_hit else None,
                "finished_at": now if self.cache_hit else None,
                "dispatched_at": now if self.dispatched and not self.cache_hit else None}


class Suspect(Enum):
    """What ``TaskRows.claim_first`` answers for a task attempted before (it may be the
    one that killed a worker): not claimed."""

    SUSPECT = "suspect"


@dataclass(frozen=True)
class ChapterCount:
    """A book's chapter right after one of its sentences was counted."""

    book_id: str
    chapter: int
    done: int
    total: int
    waiting: bool  # the chapter (and its book) wait for assembly: not finished, not parsing

    @property
    def complete(self) -> bool:
        """Every sentence of the chapter is done and it can be assembled now."""
        return self.waiting and self.done >= self.total


class SentenceCounter(Protocol):
    """Counts a book's finished sentence in its chapter (``tts_queue.books.rows.BookRows``)."""

    def count(self, session: Executor, task: TaskRow, seconds: float) -> ChapterCount | None:
        """Count ``task``, which just moved to ``done``, in the caller's transaction; the
        chapter's counters afterwards (``None`` if it is no book's sentence)."""


@dataclass(frozen=True)
class Ending:
    """A task row that just reached its end (exactly once per task: the update that moved it)."""

    row: TaskRow  # as it is now, detached
    chapter: ChapterCount | None = None  # a book sentence's chapter, counted with the move
    at_submission: bool = False  # answered from the cache as it was submitted
    seconds: float | None = None  # a ``done`` task's audio duration, when its ender knew it

    @property
    def status(self) -> TaskStatus:
        """done, failed or cancelled."""
        return self.row.status


@dataclass
class TaskRows(OutboxRows):
    """Creates task rows and moves them between statuses, only along allowed transitions (the
    leases and the outbox the sweep and the bulk window read: ``OutboxRows``)."""

    db: Database
    clock: Callable[[], datetime] = utcnow
    lease: timedelta = timedelta(seconds=30)
    counter: SentenceCounter | None = field(default=None, repr=False)  # books count their sentences

    def add(self, session: Executor, task: NewTask) -> TaskRow:
        """Insert a new row in the caller's transaction (``done`` on a cache hit, else ``queued``);
        the row as inserted. One Core INSERT on the table built once (``INSERT_TASK``), not the
        ORM's unit of work or bulk insert, nor a statement built per row (an eighth of a cache
        hit's time in process): the row returned is not in the session, and every column it was
        not given is ``None`` (as inserted: the table's defaults are ``None``)."""
        values = task.values()
        session.execute(INSERT_TASK, values)
        return TaskRow(**values)

    @staticmethod
    def with_audio(session: Executor, task_id: str) -> tuple[TaskRow, CachedAudio | None] | None:
        """A task's row (detached) and its live cache entry (file not checked) in one statement
        (a join), or ``None`` for an unknown id: what a status read or a download needs."""
        found = session.execute(TASK_AND_AUDIO, {"task_id": task_id}).first()
        if found is None:
            return None
        values = dict(found._mapping)
        audio = [values.pop(name) for name in AUDIO_COLUMNS]
        return TaskRow(**values), CachedAudio(*audio) if audio[0] is not None else None

    @staticmethod
    def add_many(session: Session, tasks: Sequence[NewTask]) -> None:
        """Insert many rows in the caller's transaction, in one statement (a book's sentences)."""
        if tasks:
            session.execute(insert(TaskRow), [task.values() for task in tasks])

    @staticmethod
    def delete_many(session: Session, task_ids: Collection[str]) -> None:
        """Delete rows in the caller's transaction (at most ``BATCH_IDS`` ids)."""
        if task_ids:
            session.execute(delete(TaskRow).where(TaskRow.id.in_(list(task_ids))))

    @staticmethod
    def of_book(session: Session, book_id: str, limit: int = BATCH_IDS) -> list[str]:
        """Up to ``limit`` ids of a book's task rows (deleting a book goes through them in batches)."""
        return list(session.scalars(select(TaskRow.id).where(TaskRow.book_id == book_id).limit(limit)))

    def attempts(self, task_id: str) -> int:
        """Attempts counted so far (0 for an unknown task)."""
        with self.db.read() as session:
            return int(session.scalar(select(TaskRow.attempts).where(TaskRow.id == task_id)) or 0)

    def claim(self, task_id: str, worker: str) -> TaskRow | None:
        """``queued|running -> running``, counting the attempt; ``None`` if finished or unknown."""
        claimed = self._claim(task_id, worker, first_only=False)
        return claimed if isinstance(claimed, TaskRow) else None

    def claim_first(self, task_id: str, worker: str,
                    also: Callable[[Executor, TaskRow], None] | None = None) -> TaskRow | Suspect | None:
        """As ``claim``, but a task attempted before is not claimed: ``SUSPECT`` (the caller claims
        it when it may run it: ``TaskExecutor``'s suspects lock). So the common first attempt costs
        one transaction, with no read of the attempts before it. ``also(session, row)``: more
        reads in that transaction once the row is claimed (the executor's cache lookup)."""
        return self._claim(task_id, worker, first_only=True, also=also)

    def _claim(self, task_id: str, worker: str, first_only: bool,
               also: Callable[[Executor, TaskRow], None] | None = None) -> TaskRow | Suspect | None:
        # One guarded UPDATE ... RETURNING (``CLAIM_FIRST``, ``CLAIM_ANY``), not a read and the
        # ORM's flush: on PostgreSQL a cancel or a second delivery waits on the row's lock, then
        # sees the claim; SQLite's BEGIN IMMEDIATE already serializes writers. Only a claim that
        # did not match reads the row, to say why.
        now = self.clock()
        with self.db.write_connection() as session:  # Core: no ORM session in a task's path
            found = session.execute(CLAIM_FIRST if first_only else CLAIM_ANY,
                                    {"claim_id": task_id, "claim_worker": worker, "claim_at": now,
                                     "lease_from": now - self.lease}).first()
            if found is None:
                return self._unclaimed(session, task_id, first_only)
            row = TaskRow(**found._mapping)
            if also is not None:
                also(session, row)
            return row

    @staticmethod
    def _unclaimed(session: Executor, task_id: str, first_only: bool) -> Suspect | None:
        """Why a claim did not match: ``SUSPECT`` for a task attempted before (``first_only``),
        else ``None`` (unknown, finished, or running under another worker's lease)."""
        seen = session.execute(select(TaskRow.status, TaskRow.attempts, TaskRow.worker)
                               .where(TaskRow.id == task_id)).first()
        if seen is None:
            log.warning("task %s is not in the database; dropping the message", task_id)
            return None
        if seen.status not in sources(TaskStatus.RUNNING):
            return None
        if first_only and seen.attempts > 0:
            return Suspect.SUSPECT
        log.info("task %s is running on %s (lease held); skipping this delivery", task_id, seen.worker)
        return None

    def finish(self, task_id: str, batch_size: int | None, cache_hit: bool = False,
               timings: dict[str, float | None] | None = None, seconds: float = 0.0,
               also: Callable[[Executor], None] | None = None, fence: int | None = None) -> Ending | None:
        """``running -> done``; the ending, or ``None`` if the row did not move. ``timings``: where
        the time went (ms); ``seconds``: the audio's duration (a book's counters add it up);
        ``also``: more writes in the same transaction, made only if the row moves (the audio's
        cache row: one commit for both); ``fence``: the worker's claim (``TaskRow.fence``), which
        must still hold the row."""
        return self._move(task_id, TaskStatus.DONE, seconds, also, fence, finished_at=self.clock(),
                          batch_size=batch_size, cache_hit=cache_hit, timings=timings)

    def fail(self, task_id: str, code: str, message: str, fence: int | None = None) -> Ending | None:
        """``queued|running -> failed`` with an error code and message (``fence``: a worker's, only
        while its claim holds the row); the ending, or ``None``."""
        return self._move(task_id, TaskStatus.FAILED, fence=fence, finished_at=self.clock(),
                          error_code=code, error_message=message)

    def cancel(self, task_id: str) -> Ending | None:
        """``queued -> cancelled``; the ending, or ``None``."""
        return self._move(task_id, TaskStatus.CANCELLED, finished_at=self.clock())

    def uncount_attempt(self, task_id: str, fence: int | None = None) -> None:
        """Take back the attempt of a claim that could not store its result for want of space
        (``fence``: only while that claim holds the row)."""
        held = () if fence is None else (TaskRow.status == TaskStatus.RUNNING, TaskRow.fence == fence)
        with self.db.write() as session:
            session.execute(update(TaskRow).where(TaskRow.id == task_id, TaskRow.attempts > 0, *held)
                            .values(attempts=TaskRow.attempts - 1))

    def set_keep(self, task_id: str, keep: bool) -> None:
        """Pin (or release) a task's audio against retention (not a status change)."""
        with self.db.write() as session:
            session.execute(update(TaskRow).where(TaskRow.id == task_id).values(keep=keep))

    def cancel_book(self, book_id: str) -> int:
        """``queued -> cancelled`` for every queued task of a book; how many moved."""
        with self.db.write() as session:
            moved = session.scalars(
                update(TaskRow).where(TaskRow.book_id == book_id,
                                      TaskRow.status.in_(sources(TaskStatus.CANCELLED)))
                .values(status=TaskStatus.CANCELLED, finished_at=self.clock()).returning(TaskRow.id)
            ).all()
        return len(moved)

    def _move(self, task_id: str, target: TaskStatus, seconds: float = 0.0,
              also: Callable[[Executor], None] | None = None, fence: int | None = None,
              **values: object) -> Ending | None:
        with self.db.write_connection() as session:  # Core: no ORM session in a task's path
            # a Core statement built once per kind of move, not the ORM's UPDATE ... RETURNING of
            # an entity built per call: the row comes back as columns
            columns = tuple(sorted(values))
            parameters = {"move_id": task_id, **{"set_" + name: values[name] for name in columns}}
            if fence is not None:
                parameters["move_fence"] = fence
            found = session.execute(_move_statement(target, columns, fence is not None), parameters).first()
            if found is None:
                return None
            if also is not None:  # after the move: a late worker's cache row is never written
                also(session)
            row = TaskRow(**found._mapping)
            chapter = None
            if row.book_id is not None and target is TaskStatus.DONE and self.counter is not None:
                chapter = self.counter.count(session, row, seconds)
        return Ending(row, chapter, seconds=seconds if target is TaskStatus.DONE else None)
