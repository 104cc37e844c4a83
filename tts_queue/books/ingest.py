"""Ingestion, in a worker: an accepted upload becomes chapters, sentences and tasks, in bounded batches.

``Ingester.run(book_id)`` claims the book (status ``parsing``) under a lease it renews as it goes,
parses the stored upload within the book limits (bytes read from the archive, characters of text),
selects the chapters, and walks the sentences a batch at a time: each batch is validated, looked up
in the cache with one query, and written as task and sentence rows, with the counters they add, in
one transaction (``BookRows.add_sentences``). Past ``TTS_MAX_BOOK_SENTENCES`` the book fails
``book_too_large``. Once every row is written the book is ``queued`` and its sentences are fed to
the broker a few at a time (``BulkWindow.feed``). A text upload is deleted then; an EPUB is kept
with the book (deleted and expired with it), as its read-along EPUB is made of its documents. A book that
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
from typing import TypeVar

from sqlalchemy import select

from tts_queue import metrics
from tts_queue.access.keys import queued_work
from tts_queue.books.ending import BookEnds
from tts_queue.books.rows import BookRows, NewSentence
from tts_queue.books.sources.chapter import MAX_TITLE_CHARS, Chapter, select_chapters
from tts_queue.books.sources.segment import Segment, segment_chapter
from tts_queue.books.sources.upload import BATCH_ROWS, SENTENCE_FORMAT
from tts_queue.books.window import BulkWindow
from tts_queue.db import utcnow
from tts_queue.enums import BookStatus
from tts_queue.errors import (
    AudioTooLong,
    BookError,
    BookOverQuota,
    BookTooLarge,
    EmptyBook,
    InvalidBook,
    NothingToSpeak,
)
from tts_queue.storage.backend import Storage
from tts_queue.synthesis.estimate.work import check_work, estimate_of
from tts_queue.synthesis.request import SynthesisRequest, build_request, routed_voice
from tts_queue.tables import ApiKey, BookRow, BookSource, CacheEntry
from tts_queue.tasks.rows import NewTask
from tts_queue.tasks.service import TaskService

log = logging.getLogger(__name__)
T = TypeVar("T")


def batched(items: Iterable[T], size: int) -> Iterator[list[T]]:
    """``items`` in lists of at most ``size``."""
    iterator = iter(items)
    while batch := list(islice(iterator, size)):
        yield batch


class Ingester:
    """Parses accepted books into rows and feeds their sentences to the broker."""

    def __init__(self, rows: BookRows, ends: BookEnds, tasks: TaskService, window: BulkWindow,
                 storage: Storage, lease: timedelta = timedelta(seconds=30), max_attempts: int = 3,
                 clock: Callable[[], datetime] = utcnow) -> None:
        self.rows = rows
        self.ends = ends
        self.tasks = tasks  # requests are built, checked and keyed as a submission's are
        self.registry = tasks.registry
        self.window = window  # where the book's sentences and chapter assemblies are fed
        self.storage = storage  # the books storage, where uploads wait for their parser
        self.db = rows.db
        self.settings = tasks.settings
        self.lease = lease
        self.max_attempts = max_attempts
        self.clock = clock

    def run(self, book_id: str) -> BookStatus | None:
        """Ingest one book; its status afterwards, or ``None`` when there was nothing to do (not
        parsing any more, or another worker holds it)."""
        if not self.rows.claim_parsing(book_id, self.lease):
            return None
        row = self.rows.book(book_id)
        if row.attempts > self.max_attempts:
            self._give_up(row, InvalidBook.code, f"the book could not be read (its parser stopped "
                                                 f"{self.max_attempts} times)")
            return BookStatus.FAILED
        began = time.perf_counter()
        try:
            self._ingest(row)
            metrics.stage("book_ingest", time.perf_counter() - began)
        except (BookError, AudioTooLong) as exc:  # a sentence over TTS_MAX_AUDIO_S fails the book too
            log.info("book %s: %s: %s", book_id, exc.code, exc.message)
            self._give_up(row, exc.code, exc.message)
            return BookStatus.FAILED
        except Exception:  # the broker or the storage failed: let the retry claim it at once
            self.rows.release(book_id)
            raise
        return BookStatus.QUEUED

    def _ingest(self, row: BookRow) -> None:
        from tts_queue.books.sources.parse import BookLimits, parse_book

        source = row.source or BookSource()
        limits = self.settings.books
        data = self.storage.read(str(source["upload"]))
        book = parse_book(data, source.get("filename"), source.get("input_format"),
                          source.get("split_pattern"), title=source.get("title"), max_bytes=limits.max_bytes,
                          limits=BookLimits(unpacked_bytes=limits.max_unpacked_bytes, chars=limits.max_chars))
        del data  # the parse holds what it needs; the upload's bytes can go
        chapters = select_chapters(book, row.options.get("chapters"))
        if not row.options.get("voice"):  # one voice for the whole book, chosen by its script
            row.options = {**row.options, "voice": routed_voice(_sample(chapters), self.registry)}
            self.rows.set_options(row.id, row.options)
        self.rows.clear(row.id)
        self.rows.renew(row.id)
        self.rows.add_chapters(row.id, [(c.number, c.title[:MAX_TITLE_CHARS]) for c in chapters])
        written = self._write_sentences(row, chapters)
        metrics.count(metrics.TASKS_SUBMITTED, written, pool=row.pool, lane="bulk")
        if not written:
            raise EmptyBook("the selected chapters have no sentences to speak")
        title, author = book.title[:MAX_TITLE_CHARS], book.author[:MAX_TITLE_CHARS] if book.author else None
        del book, chapters
        if self.rows.parsed(row.id, title, author):
            self.window.feed(row.pool)
            for number in self.rows.complete_chapters(row.id):  # every sentence was cached or done
                self.window.assemble(row.id, number, row.pool)
        if source.get("input_format") != "epub":  # an EPUB is kept: its read-along reuses its documents
            self.storage.delete([str(source["upload"])])
        log.info("book %s queued: %d sentences", row.id, written)

    def _sentences(self, chapters: list[Chapter]) -> Iterator[Segment]:
        for chapter in chapters:
            yield from segment_chapter(chapter)

    def _write_sentences(self, row: BookRow, chapters: list[Chapter]) -> int:
        """Task and sentence rows (with their counters), a batch per transaction; how many."""
        payload: dict[str, object] = {k: v for k, v in row.options.items()
                                   if k in ("voice", "speaker", "speed", "normalize")}
        limit = self.settings.books.max_sentences
        room = self._quota_room(row.owner)
        queue = self.window.queue(row.pool)
        index = 0
        for batch in batched(self._sentences(chapters), BATCH_ROWS):
            planned: list[tuple[Segment, SynthesisRequest, str]] = []
            for segment in batch:
                try:
                    request = build_request({**payload, "text": segment.text, "format": SENTENCE_FORMAT},
                                            self.registry, self.settings)
                except NothingToSpeak:  # "* * *" scene breaks and the like
                    continue
                check_work(request, self.registry.get(request.voice), row.pool, self.settings)
                planned.append((segment, request, self.tasks.key_of(request, row.owner)))
            if index + len(planned) > limit:
                raise BookTooLarge(f"the book has more than {limit} sentences (TTS_MAX_BOOK_SENTENCES)")
            if room is not None and index + len(planned) > room:
                raise BookOverQuota("the book has more sentences than its key may have queued (its quota); "
                                    "render it when earlier work has finished")
            cached = self._cached({key for _, _, key in planned})
            now = self.clock()
            sentences = []
            for segment, request, key in planned:
                # a sentence to synthesize keeps its audio estimate for the backlog (phonemized)
                estimate = None if key in cached else estimate_of(request, self.registry.get(request.voice))
                task = NewTask(str(uuid.uuid4()), key, request.to_dict(), row.pool, queue,
                               # a microsecond apart: fed to the broker in reading order
                               now + timedelta(microseconds=index), cache_hit=key in cached,
                               book_id=row.id, owner=row.owner, estimate_s=estimate)
                sentences.append(NewSentence(task, index, segment.chapter, segment.paragraph, segment.text,
                                             segment.pause_after, cached.get(key, 0.0)))
                index += 1
            self.rows.add_sentences(row.id, sentences)
            self.rows.renew(row.id)
        return index

    def _cached(self, keys: set[str]) -> dict[str, float]:
        """The durations of the live cache entries among ``keys`` (one query)."""
        with self.db.read() as session:
            return {key: seconds for key, seconds in session.execute(
                select(CacheEntry.key, CacheEntry.duration_s).where(
                    CacheEntry.key.in_(keys), CacheEntry.expired_at.is_(None)))}

    def _quota_room(self, owner: str | None) -> int | None:
        """How many more tasks the book's key may queue (``None``: no key, no quota)."""
        if owner is None:
            return None
        with self.db.read() as session:
            quota = session.scalar(select(ApiKey.max_queued).where(ApiKey.id == owner))
        return None if quota is None else max(0, int(quota) - queued_work(self.db, owner))

    def _give_up(self, row: BookRow, code: str, message: str) -> None:
        self.rows.clear(row.id)
        self.ends.fail(row.id, code, message)
        upload = (row.source or BookSource()).get("upload")
        if upload:
            self.storage.delete([str(upload)])

    def stalled(self) -> list[tuple[str, str]]:
        """``(book_id, pool)`` of books still parsing whose parser died or never started."""
        return self.rows.stalled(self.lease)


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
