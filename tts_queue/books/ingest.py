"""Ingestion, in a worker: an accepted upload becomes chapters, sentences and tasks, in bounded batches.

``Ingester.run(book_id)`` claims the book (status ``parsing``) under a lease it renews as it goes,
parses the stored upload within the book limits (bytes read from the archive, characters of text),
selects the chapters, and walks the sentences a batch at a time: each batch is validated, looked up
in the cache with one query, and written as task and sentence rows in one transaction. Past
``TTS_MAX_BOOK_SENTENCES`` the book fails ``book_too_large``. Once every row is written its tasks
are fed to the broker a few at a time (``BookService.feed``; after the counters are written, which
finishing sentences move), and the book is ``queued``. A book that
breaks a limit or does not parse ends ``failed`` with the error's stable code and keeps no rows but
its own. A retry (the worker died, the broker was down) starts over: the rows of an earlier
attempt are removed first.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime, timedelta
from itertools import islice
from typing import Any

from sqlalchemy import delete, insert, or_, select, update

from tts_queue import metrics
from tts_queue.access.keys import queued_work
from tts_queue.books.chapter import Chapter, select_chapters
from tts_queue.books.segment import Segment, segment_chapter
from tts_queue.books.service import BATCH_ROWS, MAX_TITLE_CHARS, SENTENCE_FORMAT, BookService
from tts_queue.db import utcnow
from tts_queue.enums import BookStatus, TaskStatus
from tts_queue.errors import BookError, BookTooLarge, EmptyBook, NothingToSpeak
from tts_queue.synthesis.request import SynthesisRequest, build_request, routed_voice
from tts_queue.tables import ApiKey, BookRow, CacheEntry, ChapterRow, SentenceRow, TaskRow

log = logging.getLogger(__name__)


def batched(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    """``items`` in lists of at most ``size``."""
    iterator = iter(items)
    while batch := list(islice(iterator, size)):
        yield batch


class Ingester:
    """Parses accepted books into rows and dispatches their sentences."""

    def __init__(self, books: BookService, lease: timedelta = timedelta(seconds=30), max_attempts: int = 3,
                 clock: Callable[[], datetime] = utcnow) -> None:
        self.books = books
        self.tasks = books.tasks
        self.db = books.db
        self.settings = books.settings
        self.lease = lease
        self.max_attempts = max_attempts
        self.clock = clock

    def run(self, book_id: str) -> BookStatus | None:
        """Ingest one book; its status afterwards, or ``None`` when there was nothing to do (not
        parsing any more, or another worker holds it)."""
        row = self._claim(book_id)
        if row is None:
            return None
        if row.attempts > self.max_attempts:
            self._give_up(row, "invalid_book", f"the book could not be read (its parser stopped "
                                               f"{self.max_attempts} times)")
            return BookStatus.FAILED
        began = time.perf_counter()
        try:
            self._ingest(row)
            metrics.stage("book_ingest", time.perf_counter() - began)
        except BookError as exc:
            log.info("book %s: %s: %s", book_id, exc.code, exc.message)
            self._give_up(row, exc.code, exc.message)
            return BookStatus.FAILED
        except Exception:  # the broker or the storage failed: let the retry claim it at once
            with self.db.write() as session:
                session.execute(update(BookRow).where(BookRow.id == book_id).values(claimed_at=None))
            raise
        return BookStatus.QUEUED

    # --- the lease ------------------------------------------------------------------------------

    def _claim(self, book_id: str) -> BookRow | None:
        now = self.clock()
        with self.db.write() as session:
            claimed = session.execute(
                update(BookRow).where(
                    BookRow.id == book_id, BookRow.status == BookStatus.PARSING,
                    or_(BookRow.claimed_at.is_(None), BookRow.claimed_at < now - self.lease))
                .values(claimed_at=now, attempts=BookRow.attempts + 1).returning(BookRow.id)).first()
        return self.books.book(book_id) if claimed is not None else None

    def _renew(self, book_id: str) -> None:
        with self.db.write() as session:
            session.execute(update(BookRow).where(BookRow.id == book_id).values(claimed_at=self.clock()))

    # --- the work -------------------------------------------------------------------------------

    def _ingest(self, row: BookRow) -> None:
        from tts_queue.books.source import BookLimits, parse_book

        source = row.source or {}
        limits = self.settings.books
        data = self.books.storage.read(str(source["upload"]))
        book = parse_book(data, source.get("filename"), source.get("input_format"),
                          source.get("split_pattern"), title=source.get("title"), max_bytes=limits.max_bytes,
                          limits=BookLimits(unpacked_bytes=limits.max_unpacked_bytes, chars=limits.max_chars))
        chapters = select_chapters(book, row.options.get("chapters"))
        if not row.options.get("voice"):  # one voice for the whole book, chosen by its script
            row.options = {**row.options, "voice": routed_voice(_sample(chapters), self.tasks.registry)}
            with self.db.write() as session:
                session.execute(update(BookRow).where(BookRow.id == row.id).values(options=row.options))
        self._clear(row.id)
        self._renew(row.id)
        with self.db.write() as session:
            session.execute(insert(ChapterRow), [
                {"book_id": row.id, "number": c.number, "title": c.title[:MAX_TITLE_CHARS],
                 "status": BookStatus.QUEUED, "sentences_total": 0, "sentences_done": 0, "audio_seconds": 0.0}
                for c in chapters])
        totals = self._write_sentences(row, chapters)
        metrics.count(metrics.TASKS_SUBMITTED, sum(count for count, _, _ in totals.values()),
                      pool=row.pool, lane="bulk")
        if not sum(count for count, _, _ in totals.values()):
            raise EmptyBook("the selected chapters have no sentences to speak")
        now = self.clock()
        with self.db.write() as session:  # counters first: sentences may finish while we dispatch
            for number, (count, done, seconds) in totals.items():
                session.execute(
                    update(ChapterRow).where(ChapterRow.book_id == row.id, ChapterRow.number == number)
                    .values(sentences_total=count, sentences_done=done, audio_seconds=seconds))
            session.execute(delete(ChapterRow).where(ChapterRow.book_id == row.id,
                                                     ChapterRow.sentences_total == 0))
            parsing = (BookRow.id == row.id, BookRow.status == BookStatus.PARSING)
            session.execute(update(BookRow).where(*parsing).values(
                title=book.title[:MAX_TITLE_CHARS],
                author=book.author[:MAX_TITLE_CHARS] if book.author else None,
                chapters_total=sum(1 for count, _, _ in totals.values() if count),
                sentences_total=sum(count for count, _, _ in totals.values()),
                sentences_done=sum(done for _, done, _ in totals.values()),
                audio_seconds=sum(seconds for _, _, seconds in totals.values()),
                started_at=now, progress_at=now))
        self.books.feed(row.pool)
        with self.db.write() as session:
            session.execute(update(BookRow).where(*parsing).values(status=BookStatus.QUEUED, claimed_at=None))
        for number in self.books.complete_chapters(row.id):  # every sentence was cached, or done already
            self.books.dispatcher.assemble(row.id, number, self.books.queue(row.pool))
        self.books.storage.delete([str(source["upload"])])
        log.info("book %s queued: %d sentences", row.id, sum(count for count, _, _ in totals.values()))

    def _sentences(self, chapters: list[Chapter]) -> Iterator[Segment]:
        for chapter in chapters:
            yield from segment_chapter(chapter)

    def _write_sentences(self, row: BookRow, chapters: list[Chapter]) -> dict[int, tuple[int, int, float]]:
        """Task and sentence rows, a batch per transaction; per chapter (sentences, done, seconds)."""
        payload: dict[str, Any] = {k: v for k, v in row.options.items()
                                   if k in ("voice", "speaker", "speed", "normalize")}
        limit = self.settings.books.max_sentences
        room = self._quota_room(row.owner)
        queue = self.books.queue(row.pool)
        totals: dict[int, tuple[int, int, float]] = {c.number: (0, 0, 0.0) for c in chapters}
        index = 0
        for batch in batched(self._sentences(chapters), BATCH_ROWS):
            planned: list[tuple[Segment, SynthesisRequest, str]] = []
            for segment in batch:
                try:
                    request = build_request({**payload, "text": segment.text, "format": SENTENCE_FORMAT},
                                            self.tasks.registry, self.settings)
                except NothingToSpeak:  # "* * *" scene breaks and the like
                    continue
                planned.append((segment, request, self.tasks.key_of(request, row.owner)))
            if index + len(planned) > limit:
                raise BookTooLarge(f"the book has more than {limit} sentences (TTS_MAX_BOOK_SENTENCES)")
            if room is not None and index + len(planned) > room:
                raise BookError("the book has more sentences than its key may have queued (its quota); "
                                "render it when earlier work has finished", code="quota_exceeded")
            now = self.clock()
            with self.db.write() as session:
                cached: dict[str, float] = {key: seconds for key, seconds in session.execute(
                    select(CacheEntry.key, CacheEntry.duration_s).where(
                        CacheEntry.key.in_({key for _, _, key in planned}), CacheEntry.expired_at.is_(None))
                )}
                tasks, sentences = [], []
                for segment, request, key in planned:
                    task_id, hit = str(uuid.uuid4()), key in cached
                    tasks.append({
                        "id": task_id, "status": TaskStatus.DONE if hit else TaskStatus.QUEUED,
                        "cache_key": key, "request": request.to_dict(), "pool": row.pool, "queue": queue,
                        # a microsecond apart: fed to the broker in reading order
                        "book_id": row.id, "created_at": now + timedelta(microseconds=index),
                        "started_at": now if hit else None,
                        "finished_at": now if hit else None, "attempts": 0, "cache_hit": hit, "keep": False,
                        "owner": row.owner})
                    sentences.append({
                        "book_id": row.id, "index": index, "chapter": segment.chapter,
                        "paragraph": segment.paragraph, "text": segment.text,
                        "pause_after": segment.pause_after, "task_id": task_id, "cache_key": key})
                    index += 1
                    count, done, seconds = totals[segment.chapter]
                    totals[segment.chapter] = (count + 1, done + hit, seconds + (cached[key] if hit else 0.0))
                if tasks:
                    session.execute(insert(TaskRow), tasks)
                    session.execute(insert(SentenceRow), sentences)
            self._renew(row.id)
        return totals

    def _quota_room(self, owner: str | None) -> int | None:
        """How many more tasks the book's key may queue (``None``: no key, no quota)."""
        if owner is None:
            return None
        with self.db.read() as session:
            quota = session.scalar(select(ApiKey.max_queued).where(ApiKey.id == owner))
        return None if quota is None else max(0, int(quota) - queued_work(self.db, owner))

    def _clear(self, book_id: str) -> None:
        """Remove the rows an earlier, interrupted attempt wrote."""
        while True:
            with self.db.write() as session:
                ids = list(session.scalars(select(SentenceRow.task_id).where(SentenceRow.book_id == book_id)
                                           .limit(BATCH_ROWS)))
                if not ids:
                    break
                session.execute(delete(SentenceRow).where(SentenceRow.task_id.in_(ids)))
                session.execute(delete(TaskRow).where(TaskRow.id.in_(ids)))
        with self.db.write() as session:
            session.execute(delete(ChapterRow).where(ChapterRow.book_id == book_id))

    def _give_up(self, row: BookRow, code: str, message: str) -> None:
        self._clear(row.id)
        self.books.fail(row.id, code, message)
        upload = (row.source or {}).get("upload")
        if upload:
            self.books.storage.delete([str(upload)])

    def stalled(self) -> list[tuple[str, str]]:
        """``(book_id, pool)`` of books still parsing whose lease expired (their worker died) or
        whose ingestion, sent more than a lease ago, never started (the message was lost); they
        are marked as sent again now, and the sweep sends them."""
        now = self.clock()
        with self.db.write() as session:
            return [(book_id, pool) for book_id, pool in session.execute(
                update(BookRow).where(
                    BookRow.status == BookStatus.PARSING,
                    or_(BookRow.claimed_at < now - self.lease,
                        BookRow.claimed_at.is_(None) & (BookRow.progress_at < now - self.lease)))
                .values(progress_at=now, claimed_at=None).returning(BookRow.id, BookRow.pool))]


def _sample(chapters: list[Chapter], chars: int = 2000) -> str:
    """The first ``chars`` characters of the chapters' paragraphs (the script a book is written in)."""
    taken: list[str] = []
    size = 0
    for paragraph in (p for chapter in chapters for p in chapter.paragraphs):
        taken.append(paragraph[:chars - size])
        size += len(taken[-1])
        if size >= chars:
            break
    return " ".join(taken)
