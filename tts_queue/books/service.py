"""The book service: accept a book, read its progress, delete it.

``accept`` is what the API does with an upload: cheap checks only (size, type, the fields' types
and values, the chapter range's syntax, the split pattern compiled by RE2, the archive's central
directory), then the upload is stored, a book row in status ``parsing`` is written and the
ingestion is queued; parsing, segmentation and task creation run in a worker
(``tts_queue.books.ingest``), which ends the book ``queued`` or ``failed`` with a stable code.

Each sentence becomes an ordinary synthesis task on the bulk lane of its pool, so the cache, dedup,
batching and the recovery sweep apply to books unchanged. The rows and their counters are
``BookRows``' (``books/rows.py``), the bulk window ``BulkWindow``'s (``books/window.py``), a
book's end ``BookEnds``' (``books/ending.py``). A finished book can be deleted (rows, chapter
files, its sentences' pins); books nobody read for ``TTS_BOOK_TTL_DAYS`` are deleted by the
cleanup unless kept.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import PurePath

from sqlalchemy import func, select

from tts_queue.books.ending import BookEnds
from tts_queue.books.progress import BookProgress, book_progress
from tts_queue.books.readalong.build import epub_name, failure_name
from tts_queue.books.rows import BookRows
from tts_queue.books.sources.chapter import MAX_TITLE_CHARS
from tts_queue.books.sources.upload import (
    MAX_PATTERN_CHARS,
    MAX_TITLE_FIELD_CHARS,
    SENTENCE_FORMAT,
    Upload,
    book_options,
    text_field,
    upload_format,
)
from tts_queue.books.window import BulkWindow
from tts_queue.broker.names import queue_name
from tts_queue.db import utcnow
from tts_queue.enums import BookStatus, Lane, TaskStatus
from tts_queue.errors import BookTooLarge, ServiceUnavailable
from tts_queue.storage.backend import Storage
from tts_queue.synthesis.request import build_request
from tts_queue.tables import BookRow, BookSource, ChapterRow, SentenceRow, TaskRow
from tts_queue.tasks.service import TaskService

log = logging.getLogger(__name__)



class BookService:
    """Accepts books, reads their progress, unpins and deletes them."""

    def __init__(self, tasks: TaskService, rows: BookRows, ends: BookEnds, window: BulkWindow,
                 storage: Storage, clock: Callable[[], datetime] = utcnow) -> None:
        self.tasks = tasks
        self.db = tasks.db
        self.settings = tasks.settings
        self.rows = rows
        self.ends = ends
        self.window = window
        self.dispatcher = tasks.dispatcher
        self.storage = storage  # where uploads wait for their parser and chapter files live (``books/``)
        self.clock = clock

    # --- accepting ------------------------------------------------------------------------------

    def accept(self, upload: Upload, owner: str | None = None, base_url: str = "") -> str:
        """Check an upload cheaply, store it and queue its parsing; the new book's id (status
        ``parsing``). Nothing is written when a check fails. With ``upload.callback_url``, the
        book's JSON is POSTed there when it finishes (links under ``base_url``)."""
        from tts_queue.books.sources.plaintext import compile_pattern

        callback_url = None
        if upload.callback_url not in (None, ""):
            callback_url = self.tasks.callbacks.policy.check(upload.callback_url, owner)
            self.tasks.callbacks.check_due(owner, self.settings.webhooks.key_max_due)
        limit = self.settings.books.max_bytes
        if len(upload.data) > limit:
            raise BookTooLarge(f"the book is {len(upload.data)} bytes; the limit is {limit}")
        options = book_options(upload.options or {}, self.settings.books.default_format)
        title = text_field(upload.title, "title", MAX_TITLE_FIELD_CHARS)
        pattern = text_field(upload.split_pattern, "split_pattern", MAX_PATTERN_CHARS)
        filename = text_field(upload.filename, "filename", MAX_PATTERN_CHARS)
        fmt = upload_format(upload)
        if pattern is not None and fmt != "epub":
            compile_pattern(pattern)  # RE2: refused here if it does not compile
        voice: dict[str, object] = {k: v for k, v in options.items()
                                    if k in ("voice", "speaker", "speed", "normalize")}
        probe = build_request({**voice, "text": "Probe.", "format": SENTENCE_FORMAT}, self.tasks.registry,
                              self.settings)
        pool = self.tasks.pool_for(probe, options.get("pool"))
        self.tasks.require_worker(pool)
        self.tasks.require_storage()
        book_id = str(uuid.uuid4())
        upload_name = f"uploads/{book_id}"
        self.storage.put(upload_name, upload.data, "application/octet-stream")
        fallback = PurePath(filename).stem if filename else None
        source = BookSource(upload=upload_name, filename=filename, input_format=fmt, split_pattern=pattern,
                            title=title[:MAX_TITLE_CHARS] if title else None)
        with self.db.write() as session:
            self.rows.create(session, book_id, (title or fallback or "Untitled")[:MAX_TITLE_CHARS], options,
                             pool, source, owner)
            if callback_url is not None:
                self.tasks.callbacks.register(session, book_id, "book", callback_url, base_url, owner=owner)
        try:
            self.dispatcher.ingest(book_id, self.ingest_queue(pool))
        except Exception as exc:
            log.warning("book %s: the ingestion could not be queued: %s", book_id, exc)
            self.ends.fail(book_id, ServiceUnavailable.code,
                           "the job queue was unreachable; nothing was queued")
            raise ServiceUnavailable("the job queue is unreachable; the book was not queued") from exc
        return book_id

    def ingest_queue(self, pool: str) -> str:
        """Where a book's parsing goes: the interactive queue of ``pool``, so an upload never
        waits behind another book's backlog of sentences."""
        return queue_name(pool, Lane.INTERACTIVE, self.settings.services.queue_prefix)

    # --- reading --------------------------------------------------------------------------------

    def book(self, book_id: str, owner: str | None = None) -> BookRow:
        """The row of ``book_id`` or ``BookNotFound`` (another owner's books included)."""
        return self.rows.book(book_id, owner)

    def chapters(self, book_id: str) -> list[ChapterRow]:
        """The chapter rows of a book, in order."""
        return self.rows.chapters(book_id)

    def touch(self, book_id: str, owner: str | None = None) -> BookRow:
        """The book's row, its last access recorded (at most once a minute: polling stays a read)."""
        return self.rows.touch(book_id, owner)

    def sentences(self, book_id: str, chapter: int | None = None) -> list[tuple[SentenceRow, TaskStatus]]:
        """The sentence rows of a book (or one chapter), in order, with their task's status
        (small books and tests; the assembler pages through a chapter instead)."""
        query = (select(SentenceRow, TaskRow.status).join(TaskRow, TaskRow.id == SentenceRow.task_id)
                 .where(SentenceRow.book_id == book_id).order_by(SentenceRow.index))
        if chapter is not None:
            query = query.where(SentenceRow.chapter == chapter)
        with self.db.read() as session:
            return [(sentence, status) for sentence, status in session.execute(query).all()]

    def progress(self, book_id: str, owner: str | None = None) -> BookProgress:
        """Status, counts, audio seconds so far and an ETA, from the book's and chapters' counters
        (the reader's visit counts as an access)."""
        row = self.touch(book_id, owner)
        return book_progress(row, self.chapters(book_id), self.clock())

    def recent(self, owner: str | None, limit: int) -> list[BookProgress]:
        """``owner``'s newest ``limit`` books' progress without their chapters, newest first (not
        counted as reads): two queries, however many chapters the books have."""
        with self.db.read() as session:
            rows = list(session.scalars(
                select(BookRow).where(BookRow.owner.is_(None) if owner is None else BookRow.owner == owner)
                .order_by(BookRow.created_at.desc()).limit(limit)))
            done: dict[str, int] = {book_id: count for book_id, count in session.execute(
                select(ChapterRow.book_id, func.count()).where(
                    ChapterRow.book_id.in_([row.id for row in rows]), ChapterRow.status == BookStatus.DONE)
                .group_by(ChapterRow.book_id))}
        now = self.clock()
        summaries: list[BookProgress] = []
        for row in rows:
            summary = book_progress(row, (), now)
            del summary["chapters"]
            summaries.append({**summary, "chapters_done": done.get(row.id, 0)})
        return summaries

    # --- pins and deletion ----------------------------------------------------------------------

    def unpin(self, book_id: str, owner: str | None = None) -> None:
        """Release a book's ``keep`` pin: it and its sentences follow the normal retention again."""
        self.book(book_id, owner)
        self.rows.unpin(book_id)

    def delete(self, book_id: str, owner: str | None = None) -> bool:
        """Delete a finished book: its chapter files (unless another book has the same chapter),
        captions, manifests, M4B, read-along EPUB and upload, then its rows (its sentences' audio is no longer
        pinned). An unfinished book is cancelled instead; whether it was deleted."""
        row = self.book(book_id, owner)
        if not row.status.finished:
            self.ends.cancel(book_id)
            return False
        self._delete_files(row)
        self.rows.delete(book_id)
        log.info("book %s deleted", book_id)
        return True

    def _delete_files(self, row: BookRow) -> None:
        from tts_queue.books.render.chapter_files import ChapterFiles

        fmt = str(row.options.get("format", "mp3"))
        names: list[str] = []
        with self.db.read() as session:
            digests = [d for d in session.scalars(select(ChapterRow.digest).where(
                ChapterRow.book_id == row.id, ChapterRow.digest.is_not(None))) if d]
            shared = set(session.scalars(select(ChapterRow.digest).where(
                ChapterRow.digest.in_(digests), ChapterRow.book_id != row.id))) if digests else set()
        for digest in digests:
            if digest not in shared:
                files = ChapterFiles.of(digest, fmt)
                names += [files.manifest, files.audio, files.srt, files.vtt]
        if row.m4b_path and not row.m4b_path.startswith("/"):
            names.append(row.m4b_path)
        names += [epub_name(row.id), failure_name(row.id)]  # its read-along EPUB, or why it failed
        if row.source and row.source.get("upload"):
            names.append(str(row.source["upload"]))
        self.storage.delete(names)

    def expire(self, ttl: timedelta, now: datetime | None = None) -> int:
        """Delete finished, unkept books nobody read for ``ttl``; how many (the cleanup's books)."""
        return sum(self.delete(book_id) for book_id in self.rows.stale(ttl, now))
