"""The one owner of a book's rows: its book row, chapter rows and sentence rows.

Every book and chapter status change is here, each a guarded ``UPDATE ... WHERE status IN (allowed
sources)`` with the sources from ``tts_queue.enums.BOOK_TRANSITIONS`` (a test fails on a status
written anywhere else). A book's sentences are ordinary task rows, made and deleted through
``TaskRows``. Progress is two counters per chapter and per book:

- the ingester adds each batch of sentences and its cache hits to the counters in the transaction
  that inserts the batch (``add_sentences``), so a sentence that finishes meanwhile (the window and
  the sweep may feed a book still being parsed) adds to counters that already count it;
- a sentence that ends ``done`` is counted by ``count`` inside the very transaction that moves its
  task row (``TaskRows`` calls it): once per row, whatever path ended it;
- ``repair`` recounts the chapters of books still rendering whose counter lags their rows (rows
  changed by hand, or counted by an older version), every sweep, not only when a book stalls.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import bindparam, delete, func, insert, or_, select, update
from sqlalchemy.orm import Session

from tts_queue.db import Database, Executor, get_by_id, utcnow
from tts_queue.enums import OPEN_BOOK, BookStatus, TaskStatus, book_sources
from tts_queue.errors import BookNotFound
from tts_queue.tables import BookOptions, BookRow, BookSource, Callback, ChapterRow, SentenceRow, TaskRow
from tts_queue.tasks.outbox import BATCH_IDS
from tts_queue.tasks.rows import ChapterCount, NewTask, SentenceCounter, TaskRows

log = logging.getLogger(__name__)
# ``BookRows.count``'s statements, built once: a finished sentence's chapter number, then its
# chapter's and its book's counters (``RETURNING`` what the caller decides on), then the book's
# first counted sentence moving it ``queued -> running``.
_COUNT_CHAPTER_OF = select(SentenceRow.chapter).where(SentenceRow.task_id == bindparam("count_task"))
_COUNT_IN_CHAPTER = (
    update(ChapterRow)
    .where(ChapterRow.book_id == bindparam("count_book"), ChapterRow.number == bindparam("count_chapter"))
    .values(sentences_done=ChapterRow.sentences_done + 1,
            audio_seconds=ChapterRow.audio_seconds + bindparam("count_seconds"))
    .returning(ChapterRow.sentences_done, ChapterRow.sentences_total, ChapterRow.status)
)
_COUNT_IN_BOOK = (
    update(BookRow).where(BookRow.id == bindparam("count_book"))
    .values(sentences_done=BookRow.sentences_done + 1,
            audio_seconds=BookRow.audio_seconds + bindparam("count_seconds"),
            progress_at=bindparam("count_at"))
    .returning(BookRow.status)
)
_BOOK_STARTS = (
    update(BookRow)
    .where(BookRow.id == bindparam("count_book"), BookRow.status.in_(book_sources(BookStatus.RUNNING)))
    .values(status=BookStatus.RUNNING)
)
ACCESS_EVERY = timedelta(minutes=1)  # a book's last access is written at most this often


@dataclass(frozen=True)
class NewSentence:
    """One sentence of a book to insert, with its task (``task.cache_hit``: done already)."""

    task: NewTask
    index: int
    chapter: int
    paragraph: int
    text: str
    pause_after: str
    seconds: float = 0.0  # the cached audio's duration on a hit


class BookRows(SentenceCounter):
    """Creates, moves, counts and deletes a book's rows (see the module docstring). It is the
    ``SentenceCounter`` that ``TaskRows`` calls as a book sentence's row moves to done (wired in
    ``Wiring.build``), so a sentence is counted in the same transaction, once."""

    def __init__(self, db: Database, clock: Callable[[], datetime] = utcnow) -> None:
        self.db = db
        self.clock = clock

    # --- reads ----------------------------------------------------------------------------------

    def book(self, book_id: str, owner: str | None = None) -> BookRow:
        """The row of ``book_id`` or ``BookNotFound`` (malformed ids, and another owner's books,
        included)."""
        return get_by_id(self.db, BookRow, book_id, BookNotFound, "book", owner)

    def chapters(self, book_id: str) -> list[ChapterRow]:
        """The chapter rows of a book, in order."""
        with self.db.read() as session:
            return list(session.scalars(
                select(ChapterRow).where(ChapterRow.book_id == book_id).order_by(ChapterRow.number)))

    def complete_chapters(self, book_id: str) -> list[int]:
        """Chapters not yet assembled whose every sentence is done (by their counters)."""
        with self.db.read() as session:
            return list(session.scalars(select(ChapterRow.number).where(
                ChapterRow.book_id == book_id, ChapterRow.status.in_(book_sources(BookStatus.DONE)),
                ChapterRow.sentences_done >= ChapterRow.sentences_total)))

    def due_assemblies(self) -> list[tuple[str, int, str]]:
        """``(book_id, chapter, pool)`` of every open book's chapter whose sentences are all done
        (one query over the chapter rows)."""
        with self.db.read() as session:
            return [(book_id, number, pool) for book_id, number, pool in session.execute(
                select(ChapterRow.book_id, ChapterRow.number, BookRow.pool)
                .join(BookRow, BookRow.id == ChapterRow.book_id)
                .where(BookRow.status.in_(book_sources(BookStatus.DONE)),
                       ChapterRow.status.in_(book_sources(BookStatus.DONE)),
                       ChapterRow.sentences_done >= ChapterRow.sentences_total))]

    def stale(self, ttl: timedelta, now: datetime | None = None) -> list[str]:
        """Ids of finished, unkept books nobody read for ``ttl``."""
        cutoff = (now or self.clock()) - ttl
        with self.db.read() as session:
            return list(session.scalars(select(BookRow.id).where(
                BookRow.status.not_in(OPEN_BOOK), BookRow.keep.is_(False),
                func.coalesce(BookRow.last_access_at, BookRow.created_at) < cutoff)))

    # --- a new book and its ingestion -----------------------------------------------------------

    def create(self, session: Session, book_id: str, title: str, options: BookOptions, pool: str,
               source: BookSource, owner: str | None) -> None:
        """Insert an accepted book, ``parsing``, in the caller's transaction."""
        now = self.clock()
        session.add(BookRow(
            id=book_id, title=title, status=BookStatus.PARSING, options=options, pool=pool,
            chapters_total=0, sentences_total=0, created_at=now, keep=bool(options.get("keep", False)),
            source=source, attempts=0, owner=owner, last_access_at=now, progress_at=now))

    def set_options(self, book_id: str, options: BookOptions) -> None:
        """Record the options a book is rendered with (its voice, once chosen by its script)."""
        with self.db.write() as session:
            session.execute(update(BookRow).where(BookRow.id == book_id).values(options=options))

    def claim_parsing(self, book_id: str, lease: timedelta) -> bool:
        """Take the parsing of a book under a lease (counting the attempt); whether this caller has
        it (the book still parses and no live parser holds it)."""
        now = self.clock()
        with self.db.write() as session:
            claimed = session.execute(
                update(BookRow).where(
                    BookRow.id == book_id, BookRow.status == BookStatus.PARSING,
                    or_(BookRow.claimed_at.is_(None), BookRow.claimed_at < now - lease))
                .values(claimed_at=now, attempts=BookRow.attempts + 1).returning(BookRow.id)).first()
        return claimed is not None

    def renew(self, book_id: str) -> None:
        """Renew the parser's lease."""
        with self.db.write() as session:
            session.execute(update(BookRow).where(BookRow.id == book_id).values(claimed_at=self.clock()))

    def release(self, book_id: str) -> None:
        """Drop the parser's lease (it failed on an outage: the retry claims the book at once)."""
        with self.db.write() as session:
            session.execute(update(BookRow).where(BookRow.id == book_id).values(claimed_at=None))

    def stalled(self, lease: timedelta) -> list[tuple[str, str]]:
        """``(book_id, pool)`` of books still parsing whose lease expired (their worker died) or
        whose ingestion, sent more than a lease ago, never started (the message was lost); they
        are marked as sent again now, for the sweep to send."""
        now = self.clock()
        with self.db.write() as session:
            return [(book_id, pool) for book_id, pool in session.execute(
                update(BookRow).where(
                    BookRow.status == BookStatus.PARSING,
                    or_(BookRow.claimed_at < now - lease,
                        BookRow.claimed_at.is_(None) & (BookRow.progress_at < now - lease)))
                .values(progress_at=now, claimed_at=None).returning(BookRow.id, BookRow.pool))]

    def unserved(self, pool: str, wait: timedelta, limit: int = BATCH_IDS) -> list[str]:
        """Ids of books of ``pool`` still parsing that were accepted more than ``wait`` ago (a pool
        at zero whose worker never came: ``TTS_SCALE_FROM_ZERO_WAIT_S``), at most ``limit``."""
        with self.db.read() as session:
            return list(session.scalars(select(BookRow.id).where(
                BookRow.status == BookStatus.PARSING, BookRow.pool == pool,
                BookRow.created_at < self.clock() - wait).limit(limit)))

    def add_chapters(self, book_id: str, chapters: Sequence[tuple[int, str]]) -> None:
        """Insert a parsed book's chapters (``(number, title)``), ``queued`` with empty counters."""
        with self.db.write() as session:
            session.execute(insert(ChapterRow), [
                {"book_id": book_id, "number": number, "title": title, "status": BookStatus.QUEUED,
                 "sentences_total": 0, "sentences_done": 0, "audio_seconds": 0.0}
                for number, title in chapters])

    def add_sentences(self, book_id: str, sentences: Sequence[NewSentence]) -> None:
        """Insert a batch of sentences with their task rows and add them (and their cache hits)
        to the chapters' and the book's counters, in one transaction."""
        if not sentences:
            return
        per_chapter: dict[int, list[float]] = {}
        for s in sentences:
            count = per_chapter.setdefault(s.chapter, [0, 0, 0.0])
            count[0] += 1
            count[1] += s.task.cache_hit
            count[2] += s.seconds if s.task.cache_hit else 0.0
        with self.db.write() as session:
            TaskRows.add_many(session, [s.task for s in sentences])
            session.execute(insert(SentenceRow), [
                {"book_id": book_id, "index": s.index, "chapter": s.chapter, "paragraph": s.paragraph,
                 "text": s.text, "pause_after": s.pause_after, "task_id": s.task.id,
                 "cache_key": s.task.cache_key} for s in sentences])
            for number, (total, done, seconds) in per_chapter.items():
                session.execute(update(ChapterRow).where(ChapterRow.book_id == book_id,
                                                         ChapterRow.number == number).values(
                    sentences_total=ChapterRow.sentences_total + total,
                    sentences_done=ChapterRow.sentences_done + done,
                    audio_seconds=ChapterRow.audio_seconds + seconds))
            session.execute(update(BookRow).where(BookRow.id == book_id).values(
                sentences_total=BookRow.sentences_total + len(sentences),
                sentences_done=BookRow.sentences_done + sum(int(c[1]) for c in per_chapter.values()),
                audio_seconds=BookRow.audio_seconds + sum(c[2] for c in per_chapter.values())))

    def parsed(self, book_id: str, title: str, author: str | None) -> bool:
        """``parsing -> queued``: every sentence is written; chapters without any are dropped.
        Whether the book moved (it was not cancelled meanwhile)."""
        now = self.clock()
        with self.db.write() as session:
            session.execute(delete(ChapterRow).where(ChapterRow.book_id == book_id,
                                                     ChapterRow.sentences_total == 0))
            chapters = session.scalar(select(func.count()).select_from(ChapterRow)
                                      .where(ChapterRow.book_id == book_id)) or 0
            moved = session.execute(update(BookRow).where(
                BookRow.id == book_id, BookRow.status.in_(book_sources(BookStatus.QUEUED))).values(
                    status=BookStatus.QUEUED, title=title, author=author, chapters_total=chapters,
                    started_at=now, progress_at=now, claimed_at=None).returning(BookRow.id)).first()
        return moved is not None

    def clear(self, book_id: str) -> None:
        """Remove the chapter, sentence and task rows of a book (an interrupted ingestion's, or a
        book given up), a batch at a time, and zero its counters."""
        self._delete_sentences(book_id)
        with self.db.write() as session:
            session.execute(delete(ChapterRow).where(ChapterRow.book_id == book_id))
            session.execute(update(BookRow).where(BookRow.id == book_id).values(
                sentences_total=0, sentences_done=0, audio_seconds=0.0, chapters_total=0))

    # --- progress -------------------------------------------------------------------------------

    def count(self, session: Executor, task: TaskRow, seconds: float) -> ChapterCount | None:
        """The ``SentenceCounter`` of ``TaskRows``: count a sentence whose task row just moved to
        ``done``, in that transaction; the first counted sentence moves its book ``queued ->
        running``. Its statements are built once (``_COUNT_*``): a book's every sentence runs them."""
        number = session.execute(_COUNT_CHAPTER_OF, {"count_task": task.id}).scalar()
        if number is None or task.book_id is None:
            return None
        chapter = session.execute(_COUNT_IN_CHAPTER, {"count_book": task.book_id, "count_chapter": number,
                                                      "count_seconds": seconds}).first()
        book_status = session.execute(_COUNT_IN_BOOK, {"count_book": task.book_id, "count_seconds": seconds,
                                                       "count_at": self.clock()}).scalar()
        if book_status is BookStatus.QUEUED:
            session.execute(_BOOK_STARTS, {"count_book": task.book_id})
            book_status = BookStatus.RUNNING
        if chapter is None:
            return None
        done, total, status = chapter
        waiting = status in book_sources(BookStatus.DONE) and book_status in book_sources(BookStatus.DONE)
        return ChapterCount(task.book_id, number, done, total, waiting)

    def repair(self) -> int:
        """Recount the chapters of books still rendering whose counter is below their total and
        differs from their rows' count of done sentences; how many chapters were repaired."""
        with self.db.read() as session:
            lagging = session.execute(
                select(ChapterRow.book_id, ChapterRow.number)
                .join(BookRow, BookRow.id == ChapterRow.book_id)
                .where(BookRow.status.in_((BookStatus.QUEUED, BookStatus.RUNNING)),
                       ChapterRow.status.in_(book_sources(BookStatus.DONE)),
                       ChapterRow.sentences_done < ChapterRow.sentences_total)).all()
        repaired = 0
        for book_id, number in lagging:
            with self.db.write() as session:
                # The counter as it is now, in this transaction (FOR UPDATE: a finish counting a
                # sentence of this chapter waits), not as the read above saw it: a sentence that
                # finished since counted itself, so the book moves by the difference to this one.
                counted = int(session.scalar(
                    select(ChapterRow.sentences_done)
                    .where(ChapterRow.book_id == book_id, ChapterRow.number == number)
                    .with_for_update()) or 0)
                done = int(session.scalar(
                    select(func.count()).select_from(SentenceRow)
                    .join(TaskRow, TaskRow.id == SentenceRow.task_id)
                    .where(SentenceRow.book_id == book_id, SentenceRow.chapter == number,
                           TaskRow.status == TaskStatus.DONE)) or 0)
                if done == counted:
                    continue
                log.warning("book %s chapter %d: %d sentences done, counted %d; recounted", book_id, number,
                            done, counted)
                session.execute(update(ChapterRow).where(ChapterRow.book_id == book_id,
                                                         ChapterRow.number == number)
                                .values(sentences_done=done))
                session.execute(update(BookRow).where(BookRow.id == book_id).values(
                    sentences_done=BookRow.sentences_done + (done - counted), progress_at=self.clock()))
                repaired += 1
        return repaired

    def touch(self, book_id: str, owner: str | None = None) -> BookRow:
        """The book's row, its last access recorded (at most once a minute: polling stays a read)."""
        row = self.book(book_id, owner)
        now = self.clock()
        if row.last_access_at is None or row.last_access_at < now - ACCESS_EVERY:
            with self.db.write() as session:
                session.execute(update(BookRow).where(BookRow.id == book_id).values(last_access_at=now))
            row.last_access_at = now
        return row

    def unpin(self, book_id: str) -> None:
        """Release a book's ``keep`` pin: it and its sentences follow the normal retention again."""
        with self.db.write() as session:
            session.execute(update(BookRow).where(BookRow.id == book_id).values(keep=False))

    # --- ends -----------------------------------------------------------------------------------

    def chapter_done(self, book_id: str, number: int, digest: str, duration_s: float) -> bool:
        """A chapter's files are all stored: ``-> done``; whether it moved."""
        with self.db.write() as session:
            moved = session.execute(update(ChapterRow).where(
                ChapterRow.book_id == book_id, ChapterRow.number == number,
                ChapterRow.status.in_(book_sources(BookStatus.DONE)),
            ).values(status=BookStatus.DONE, digest=digest, duration_s=duration_s)
                .returning(ChapterRow.number)).first()
        return moved is not None

    def book_done(self, book_id: str, m4b_path: str | None) -> bool:
        """Every chapter is done and the M4B stored: ``-> done``; whether it moved."""
        return self._end(book_id, BookStatus.DONE, m4b_path=m4b_path)

    def fail(self, book_id: str, code: str, message: str) -> bool:
        """``-> failed`` with a stable code (unless it ended already); whether it moved."""
        return self._end(book_id, BookStatus.FAILED, error_code=code, error_message=message)

    def cancel(self, book_id: str) -> bool:
        """``-> cancelled``, with its unfinished chapters; whether the book moved."""
        moved = self._end(book_id, BookStatus.CANCELLED)
        with self.db.write() as session:
            session.execute(update(ChapterRow).where(ChapterRow.book_id == book_id, ChapterRow.status.in_(
                book_sources(BookStatus.CANCELLED))).values(status=BookStatus.CANCELLED))
        return moved

    def _end(self, book_id: str, target: BookStatus, **values: str | None) -> bool:
        with self.db.write() as session:
            moved = session.execute(update(BookRow).where(
                BookRow.id == book_id, BookRow.status.in_(book_sources(target)))
                .values(status=target, finished_at=self.clock(), **values).returning(BookRow.id)).first()
        return moved is not None

    def delete(self, book_id: str) -> None:
        """Delete a book's rows: sentences and their tasks a batch at a time (a book may have
        hundreds of thousands), then its chapters, callback and the book."""
        self._delete_sentences(book_id)
        while True:  # tasks without a sentence row
            with self.db.write() as session:
                ids = TaskRows.of_book(session, book_id)
                TaskRows.delete_many(session, ids)
            if not ids:
                break
        with self.db.write() as session:
            session.execute(delete(ChapterRow).where(ChapterRow.book_id == book_id))
            session.execute(delete(Callback).where(Callback.subject_id == book_id))
            session.execute(delete(BookRow).where(BookRow.id == book_id))

    def _delete_sentences(self, book_id: str) -> None:
        while True:
            with self.db.write() as session:
                ids = list(session.scalars(select(SentenceRow.task_id).where(SentenceRow.book_id == book_id)
                                           .limit(BATCH_IDS)))
                if not ids:
                    return
                session.execute(delete(SentenceRow).where(SentenceRow.task_id.in_(ids)))
                TaskRows.delete_many(session, ids)
