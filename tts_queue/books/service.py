"""The book service: a whole book in, one ordinary cached task per sentence out, progress from rows.

A book is parsed, its chapters selected and cut into sentences (``tts_queue.books``); each sentence
becomes an ordinary synthesis task on the bulk lane of its pool, so the content-hash cache, dedup,
batching and the recovery sweep apply to books unchanged. The book, chapter, sentence and task rows
are written in one transaction (nothing half-created), then the tasks are dispatched. Progress and
completion are read from the rows, never from Celery; chapters are assembled by the worker that
finishes a chapter's last sentence, and by the periodic sweep when that did not happen.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from sqlalchemy import func, select, update

from tts_queue.books.chapter import select_chapters
from tts_queue.books.progress import book_progress
from tts_queue.books.segment import segment_book
from tts_queue.books.source import parse_book
from tts_queue.db import get_by_id, utcnow
from tts_queue.enums import BOOK_FORMATS, POOLS, BookStatus, Lane, TaskStatus, book_sources
from tts_queue.errors import (
    BookNotFound,
    EmptyBook,
    InvalidRequest,
    NothingToSpeak,
    ServiceUnavailable,
    TaskNotCancellable,
)
from tts_queue.synthesis.request import build_request
from tts_queue.tables import BookRow, ChapterRow, SentenceRow, TaskRow
from tts_queue.tasks.keys import queue_name
from tts_queue.tasks.service import TaskService

OPTIONS = ("voice", "speaker", "speed", "format", "chapters", "pool", "keep")
# Sentences are cached as WAV: lossless for stitching, and shared with interactive WAV requests.
SENTENCE_FORMAT = "wav"


class BookDispatcher(Protocol):
    """Puts task ids and chapter assemblies on queues."""

    def dispatch(self, task_id: str, queue: str) -> None:
        """Enqueue one sentence's task."""

    def assemble(self, book_id: str, chapter: int, queue: str) -> None:
        """Enqueue the assembly of one chapter."""


@dataclass(frozen=True)
class Upload:
    """A book as received: bytes or text, how to read it, and the rendering options."""

    data: bytes
    filename: str | None = None
    input_format: str | None = None
    title: str | None = None
    split_pattern: str | None = None
    options: Mapping[str, Any] | None = None


def book_options(raw: Mapping[str, Any], default_format: str = "mp3") -> dict[str, Any]:
    """The rendering options of a book, validated (voice and speaker are checked per sentence)."""
    unknown = sorted(set(raw) - set(OPTIONS))
    if unknown:
        raise InvalidRequest(f"unknown book option(s): {', '.join(unknown)}; known: {', '.join(OPTIONS)}")
    options = {k: v for k, v in raw.items() if v not in (None, "")}
    fmt = str(options.get("format", default_format)).lower()
    if fmt not in BOOK_FORMATS:
        raise InvalidRequest(f"format must be one of {', '.join(BOOK_FORMATS)}; got {fmt!r}",
                             code="unsupported_format")
    options["format"] = fmt
    if "speed" in options:
        try:
            options["speed"] = float(options["speed"])
        except (TypeError, ValueError):
            raise InvalidRequest("speed must be a number") from None
    if "keep" in options:
        keep = options["keep"]
        if isinstance(keep, str):
            keep = keep.lower() in ("1", "true", "yes", "on")
        options["keep"] = bool(keep)
    if "pool" in options and options["pool"] not in POOLS:
        raise InvalidRequest(f"pool must be one of {', '.join(POOLS)}")
    return options


class BookService:
    """Creates books as rows plus bulk tasks, reports their progress, cancels them."""

    def __init__(self, tasks: TaskService, dispatcher: BookDispatcher,
                 clock: Callable[[], datetime] = utcnow) -> None:
        self.tasks = tasks
        self.db = tasks.db
        self.settings = tasks.settings
        self.dispatcher = dispatcher
        self.clock = clock

    def create(self, upload: Upload) -> str:
        """Parse, split and queue a book; return its id. Nothing is written if anything is invalid."""
        options = book_options(upload.options or {}, self.settings.books.default_format)
        book = parse_book(upload.data, upload.filename, upload.input_format, upload.split_pattern,
                          title=upload.title, max_bytes=self.settings.books.max_bytes)
        chapters = select_chapters(book, options.get("chapters"))
        segments = segment_book(chapters)
        payload: dict[str, Any] = {k: options[k] for k in ("voice", "speaker", "speed") if k in options}
        planned = []
        for segment in segments:
            try:
                request = build_request({**payload, "text": segment.text, "format": SENTENCE_FORMAT},
                                        self.tasks.registry, self.settings)
            except NothingToSpeak:  # "* * *" scene breaks and the like
                continue
            planned.append((segment, request))
        if not planned:
            raise EmptyBook("the selected chapters have no sentences to speak")
        book_id = str(uuid.uuid4())
        pool = self.tasks.pool_for(planned[0][1], options.get("pool"))
        queue = queue_name(pool, Lane.BULK, self.settings.services.queue_prefix)
        now = self.clock()
        numbers = sorted({segment.chapter for segment, _ in planned})
        titles = {c.number: c.title for c in chapters}
        pending: list[str] = []
        if any(self.tasks.cache.peek(self.tasks.key_of(request)) is None for _, request in planned):
            self.tasks.require_worker(pool)
            self.tasks.require_storage()
        with self.db.write() as session:
            session.add(BookRow(id=book_id, title=book.title, author=book.author, status=BookStatus.QUEUED,
                                options=options, pool=pool, chapters_total=len(numbers),
                                sentences_total=len(planned), created_at=now,
                                keep=bool(options.get("keep", False))))
            for number in numbers:
                count = sum(1 for segment, _ in planned if segment.chapter == number)
                session.add(ChapterRow(book_id=book_id, number=number, title=titles[number],
                                       status=BookStatus.QUEUED, sentences_total=count))
            session.flush()
            for index, (segment, request) in enumerate(planned):
                key = self.tasks.key_of(request)
                hit = self.tasks.cache.peek(key) is not None
                task = TaskRow(id=str(uuid.uuid4()), cache_key=key, request=request.to_dict(), pool=pool,
                               queue=queue, book_id=book_id, created_at=now)
                self.tasks.rows.add(session, task, cache_hit=hit)
                session.add(SentenceRow(book_id=book_id, index=index, chapter=segment.chapter,
                                     paragraph=segment.paragraph, text=segment.text,
                                     pause_after=segment.pause_after, task_id=task.id, cache_key=key))
                if not hit:
                    pending.append(task.id)
        self._dispatch(book_id, pending, queue, numbers)
        return book_id

    def _dispatch(self, book_id: str, pending: list[str], queue: str, chapters: list[int]) -> None:
        try:
            for task_id in pending:
                self.dispatcher.dispatch(task_id, queue)
            self.tasks.rows.mark_dispatched(pending)
            for number in self.complete_chapters(book_id):
                self.dispatcher.assemble(book_id, number, queue)
        except Exception as exc:
            self.fail(book_id, "service_unavailable", f"broker: {exc}")
            raise ServiceUnavailable(
                f"the job queue is unreachable; the book was not queued ({exc})") from exc

    def complete_chapters(self, book_id: str) -> list[int]:
        """Chapters not yet assembled whose every sentence is done."""
        with self.db.read() as session:
            waiting = session.execute(
                select(SentenceRow.chapter, func.count())
                .join(TaskRow, TaskRow.id == SentenceRow.task_id)
                .where(SentenceRow.book_id == book_id, TaskRow.status != TaskStatus.DONE)
                .group_by(SentenceRow.chapter)
            ).all()
            open_chapters = session.scalars(select(ChapterRow.number).where(
                ChapterRow.book_id == book_id,
                ChapterRow.status.in_(book_sources(BookStatus.DONE)),
            )).all()
        busy = {number for number, count in waiting if count}
        return [number for number in open_chapters if number not in busy]

    def after_task(self, task_id: str, status: TaskStatus) -> list[tuple[BookRow, int]]:
        """After a sentence's task finished: ``(book, chapter)`` now ready to assemble, if any.

        A failed sentence fails its book (with the reason); ordinary tasks return nothing.
        """
        with self.db.read() as session:
            sentence = session.scalar(select(SentenceRow).where(SentenceRow.task_id == task_id))
        if sentence is None:
            return []
        if status is TaskStatus.FAILED:
            with self.db.read() as session:
                task = session.get(TaskRow, task_id)
            reason = f"{task.error_code}: {task.error_message}" if task else "unknown error"
            self.fail(sentence.book_id, "sentence_failed", f"sentence {sentence.index} failed: {reason}")
            return []
        with self.db.read() as session:  # only this chapter: one indexed count per finished sentence
            waiting = session.scalar(
                select(func.count()).select_from(SentenceRow).join(TaskRow, TaskRow.id == SentenceRow.task_id)
                .where(SentenceRow.book_id == sentence.book_id, SentenceRow.chapter == sentence.chapter,
                       TaskRow.status != TaskStatus.DONE))
        return [] if waiting else [(self.book(sentence.book_id), sentence.chapter)]

    def due_assemblies(self) -> list[tuple[str, int]]:
        """``(book_id, chapter)`` of every unfinished book's chapter whose sentences are all done."""
        with self.db.read() as session:
            open_books = session.scalars(select(BookRow.id).where(
                BookRow.status.in_(book_sources(BookStatus.DONE)))).all()
        return [(book_id, n) for book_id in open_books for n in self.complete_chapters(book_id)]

    def book(self, book_id: str) -> BookRow:
        """The row of ``book_id`` or ``BookNotFound`` (malformed ids included)."""
        return get_by_id(self.db, BookRow, book_id, BookNotFound, "book")

    def chapters(self, book_id: str) -> list[ChapterRow]:
        """The chapter rows of a book, in order."""
        with self.db.read() as session:
            return list(session.scalars(
                select(ChapterRow).where(ChapterRow.book_id == book_id).order_by(ChapterRow.number)))

    def sentences(self, book_id: str, chapter: int | None = None) -> list[tuple[SentenceRow, TaskStatus]]:
        """The sentence rows of a book (or one chapter), in order, with their task's status."""
        query = (select(SentenceRow, TaskRow.status).join(TaskRow, TaskRow.id == SentenceRow.task_id)
                 .where(SentenceRow.book_id == book_id).order_by(SentenceRow.index))
        if chapter is not None:
            query = query.where(SentenceRow.chapter == chapter)
        with self.db.read() as session:
            return [(sentence, status) for sentence, status in session.execute(query).all()]

    def progress(self, book_id: str) -> dict[str, Any]:
        """Status, counts, audio seconds so far and an ETA, from the rows."""
        return book_progress(self.db, self.book(book_id), self.chapters(book_id), self.clock())

    def cancel(self, book_id: str) -> None:
        """Cancel a book: its queued sentences are dropped; finished books cannot be cancelled."""
        row = self.book(book_id)
        if row.status.finished:
            raise TaskNotCancellable(f"book {book_id} is {row.status.value}; it cannot be cancelled")
        with self.db.write() as session:
            session.execute(update(BookRow).where(BookRow.id == book_id, BookRow.status.in_(
                book_sources(BookStatus.CANCELLED))).values(status=BookStatus.CANCELLED,
                                                            finished_at=self.clock()))
            session.execute(update(ChapterRow).where(ChapterRow.book_id == book_id, ChapterRow.status.in_(
                book_sources(BookStatus.CANCELLED))).values(status=BookStatus.CANCELLED))
        self.tasks.rows.cancel_book(book_id)

    def fail(self, book_id: str, code: str, message: str) -> None:
        """Mark a book failed (unless it already finished) and drop its queued sentences."""
        with self.db.write() as session:
            session.execute(update(BookRow).where(BookRow.id == book_id, BookRow.status.in_(
                book_sources(BookStatus.FAILED))).values(
                    status=BookStatus.FAILED, finished_at=self.clock(), error_code=code,
                    error_message=message))
        self.tasks.rows.cancel_book(book_id)
