"""The book service: a book's life as rows, from an accepted upload to deletion.

``accept`` is what the API does with an upload: cheap checks only (size, type, the fields' types
and values, the chapter range's syntax, the split pattern compiled by RE2, the archive's central
directory), then the upload is stored, a book row in status ``parsing`` is written and the
ingestion is queued; parsing, segmentation and task creation run in a worker
(``tts_queue.books.ingest``), which ends the book ``queued`` or ``failed`` with a stable code.

Each sentence becomes an ordinary synthesis task on the bulk lane of its pool, so the cache, dedup,
batching and the recovery sweep apply to books unchanged. Progress is two counters per chapter and
per book, moved by one statement per finished sentence (``sentence_finished``), never a count over
the book; the sweep repairs counters a crash left behind (``reconcile``). Chapters are assembled
by the worker that finishes a chapter's last sentence, and by the sweep when that did not happen.
A finished book can be deleted (rows, chapter files, its sentences' pins); books nobody read for
``TTS_BOOK_TTL_DAYS`` are deleted by the cleanup unless kept.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import PurePath
from typing import Any, Protocol

from sqlalchemy import case, delete, func, select, update

from tts_queue import metrics
from tts_queue.books.progress import book_progress
from tts_queue.db import get_by_id, utcnow
from tts_queue.enums import (
    BOOK_FORMATS,
    INPUT_FORMATS,
    OPEN_BOOK,
    POOLS,
    BookStatus,
    Lane,
    TaskStatus,
    book_sources,
)
from tts_queue.errors import (
    BookNotFound,
    BookTooLarge,
    EmptyBook,
    InvalidBook,
    InvalidRequest,
    ServiceUnavailable,
    UnknownChapters,
)
from tts_queue.storage import open_storage
from tts_queue.storage.backend import Storage
from tts_queue.synthesis.request import build_request
from tts_queue.tables import BookRow, CacheEntry, Callback, ChapterRow, SentenceRow, TaskRow
from tts_queue.tasks.keys import queue_name
from tts_queue.tasks.service import TaskService

log = logging.getLogger(__name__)

OPTIONS = ("voice", "speaker", "speed", "format", "chapters", "pool", "keep", "normalize")
# Sentences are cached as WAV: lossless for stitching, and shared with interactive WAV requests.
SENTENCE_FORMAT = "wav"
MAX_TITLE_CHARS = 512  # the column's width, on every database
MAX_CHAPTER_SPEC_CHARS = 1000
BATCH_ROWS = 500
ACCESS_EVERY = timedelta(minutes=1)  # a book's last access is written at most this often
_CHAPTER_SPEC = re.compile(r"\s*\d{1,6}(?:\s*-\s*\d{1,6})?(?:\s*,\s*\d{1,6}(?:\s*-\s*\d{1,6})?)*\s*")


class BookDispatcher(Protocol):
    """Puts sentence tasks, ingestions and chapter assemblies on queues."""

    def dispatch(self, task_id: str, queue: str, stream: bool = False) -> None:
        """Enqueue one sentence's task."""

    def deliver(self, subject_id: str, countdown: float = 0.0) -> None:
        """Enqueue the delivery of a callback."""

    def ingest(self, book_id: str, queue: str) -> None:
        """Enqueue the parsing of an accepted upload."""

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
    callback_url: str | None = None  # the book's JSON is POSTed here when it finishes


def _text_field(value: object, name: str, limit: int) -> str | None:
    """An optional string field of an upload, or a 400."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise InvalidRequest(f"{name} must be a string")
    if len(value) > limit:
        raise InvalidRequest(f"{name} is longer than {limit} characters")
    return value


def book_options(raw: Mapping[str, Any], default_format: str = "mp3") -> dict[str, Any]:
    """The rendering options of a book, checked for type and value (voice and speaker against the
    registry by ``BookService.accept``)."""
    unknown = sorted(set(raw) - set(OPTIONS))
    if unknown:
        raise InvalidRequest(f"unknown book option(s): {', '.join(unknown)}; known: {', '.join(OPTIONS)}")
    options = {k: v for k, v in raw.items() if v not in (None, "")}
    fmt = options.get("format", default_format)
    if not isinstance(fmt, str) or fmt.lower() not in BOOK_FORMATS:
        raise InvalidRequest(f"format must be one of {', '.join(BOOK_FORMATS)}; got {fmt!r}",
                             code="unsupported_format")
    options["format"] = fmt.lower()
    for name in ("voice", "pool"):
        if name in options and not isinstance(options[name], str):
            raise InvalidRequest(f"{name} must be a string")
    if "speaker" in options and (isinstance(options["speaker"], bool)
                                 or not isinstance(options["speaker"], (str, int))):
        raise InvalidRequest("speaker must be a name or a number")
    if "speed" in options:
        try:
            options["speed"] = float(options["speed"])
        except (TypeError, ValueError, OverflowError):
            raise InvalidRequest("speed must be a number") from None
    for flag in ("keep", "normalize"):
        if flag in options:
            value = options[flag]
            if isinstance(value, str):
                value = value.lower() in ("1", "true", "yes", "on")
            elif not isinstance(value, bool):
                raise InvalidRequest(f"{flag} must be true or false")
            options[flag] = value
    if "pool" in options and options["pool"] not in POOLS:
        raise InvalidRequest(f"pool must be one of {', '.join(POOLS)}")
    if "chapters" in options:
        spec = _text_field(options["chapters"], "chapters", MAX_CHAPTER_SPEC_CHARS)
        if spec is None or not _CHAPTER_SPEC.fullmatch(spec):
            raise UnknownChapters(f"chapter range {options['chapters']!r} does not parse; use a form "
                                  "like 2-5 or 1,3,7-9")
    return options


def upload_format(upload: Upload) -> str:
    """The format the upload will be read as (EPUB, text or Markdown), from cheap checks only: the
    name and type fields, the zip magic, an EPUB's central directory and container, text's
    encoding."""
    from tts_queue.books.epub import check_archive
    from tts_queue.books.source import ZIP_MAGIC, decode_text, detect_format

    if upload.input_format is not None and upload.input_format not in INPUT_FORMATS:
        raise InvalidRequest(f"input_format must be one of {', '.join(INPUT_FORMATS)}")
    fmt = detect_format(upload.data, upload.filename, upload.input_format)
    if fmt == "epub":
        if not upload.data.startswith(ZIP_MAGIC):
            raise InvalidBook("not an EPUB: an EPUB is a zip archive and this file is not one")
        check_archive(upload.data)
    else:
        if upload.data.startswith(ZIP_MAGIC):
            raise InvalidBook(f"the file is a zip archive, not {fmt}; send an EPUB as input_format 'epub'")
        if not any(ch.isalnum() for ch in decode_text(upload.data)):
            raise EmptyBook("the text has no prose to read")
    return fmt


class BookService:
    """Accepts books, counts their progress, cancels, unpins and deletes them."""

    def __init__(self, tasks: TaskService, dispatcher: BookDispatcher,
                 clock: Callable[[], datetime] = utcnow, storage: Storage | None = None) -> None:
        self.tasks = tasks
        self.db = tasks.db
        self.settings = tasks.settings
        self.dispatcher = dispatcher
        self.clock = clock
        self.live_workers: Callable[[str], int] = lambda pool: 1  # the worker runtime counts heartbeats
        # where uploads wait for their parser and chapter files live (``books/``)
        self.storage = storage or open_storage(self.settings.storage_url).child("books")

    # --- accepting ------------------------------------------------------------------------------

    def accept(self, upload: Upload, owner: str | None = None, base_url: str = "") -> str:
        """Check an upload cheaply, store it and queue its parsing; the new book's id (status
        ``parsing``). Nothing is written when a check fails. With ``upload.callback_url``, the
        book's JSON is POSTed there when it finishes (links under ``base_url``)."""
        from tts_queue.books.plaintext import compile_pattern

        callback_url = None
        if upload.callback_url not in (None, ""):
            callback_url = self.tasks.callbacks.policy.check(upload.callback_url)
        limit = self.settings.books.max_bytes
        if len(upload.data) > limit:
            raise BookTooLarge(f"the book is {len(upload.data)} bytes; the limit is {limit}")
        options = book_options(upload.options or {}, self.settings.books.default_format)
        title = _text_field(upload.title, "title", 100_000)
        pattern = _text_field(upload.split_pattern, "split_pattern", 1000)
        filename = _text_field(upload.filename, "filename", 1000)
        fmt = upload_format(upload)
        if pattern is not None and fmt != "epub":
            compile_pattern(pattern)  # RE2: refused here if it does not compile
        voice: dict[str, Any] = {k: options[k] for k in ("voice", "speaker", "speed", "normalize")
                                 if k in options}
        probe = build_request({**voice, "text": "Probe.", "format": SENTENCE_FORMAT}, self.tasks.registry,
                              self.settings)
        pool = self.tasks.pool_for(probe, options.get("pool"))
        self.tasks.require_worker(pool)
        self.tasks.require_storage()
        book_id = str(uuid.uuid4())
        upload_name = f"uploads/{book_id}"
        self.storage.put(upload_name, upload.data, "application/octet-stream")
        now = self.clock()
        fallback = PurePath(filename).stem if filename else None
        source = {"upload": upload_name, "filename": filename, "input_format": fmt, "split_pattern": pattern,
                  "title": title[:MAX_TITLE_CHARS] if title else None}
        with self.db.write() as session:
            session.add(BookRow(
                id=book_id, title=(title or fallback or "Untitled")[:MAX_TITLE_CHARS],
                status=BookStatus.PARSING, options=options, pool=pool, chapters_total=0, sentences_total=0,
                created_at=now, keep=bool(options.get("keep", False)), source=source, attempts=0, owner=owner,
                last_access_at=now,
                progress_at=now))
            if callback_url is not None:
                self.tasks.callbacks.register(session, book_id, "book", callback_url, base_url)
        try:
            self.dispatcher.ingest(book_id, self.ingest_queue(pool))
        except Exception as exc:
            log.warning("book %s: the ingestion could not be queued: %s", book_id, exc)
            self.fail(book_id, "service_unavailable", "the job queue was unreachable; nothing was queued")
            raise ServiceUnavailable("the job queue is unreachable; the book was not queued") from exc
        return book_id

    def queue(self, pool: str) -> str:
        """The bulk queue of ``pool`` (a book's sentences and chapter assemblies)."""
        return queue_name(pool, Lane.BULK, self.settings.services.queue_prefix)

    def window(self, pool: str, workers: int = 1) -> int:
        """How many book sentences of ``pool`` may be in the broker or running at once: per live
        worker, two batches plus two (enough to keep its model busy), never more than its threads
        minus ``TTS_INTERACTIVE_RESERVE`` (so interactive requests always find a free thread)."""
        worker = self.settings.worker
        per_worker = min(2 * self.settings.pool(pool).max_batch + 2,
                         worker.concurrency - worker.interactive_reserve)
        return max(1, per_worker) * max(1, workers)

    def feed(self, pool: str) -> int:
        """Send the oldest unsent book sentences of ``pool`` (books in the order they came, each
        in reading order) until ``window`` of them are in the broker or running; how many were sent.

        Book sentences are not all handed to the broker at once: a worker would fill every thread
        with them and a short request would wait for a free one. Each finished sentence, each
        ingested batch and the sweep call this; a message lost after its row was marked sent is
        sent again by the sweep's stranded-message rule, as any task's."""
        queue = self.queue(pool)
        window = self.window(pool, self.live_workers(pool))
        now = self.clock()
        with self.db.write() as session:
            in_flight = int(session.scalar(select(func.count()).select_from(TaskRow).where(
                TaskRow.queue == queue, TaskRow.status.in_((TaskStatus.QUEUED, TaskStatus.RUNNING)),
                TaskRow.dispatched_at.is_not(None))) or 0)
            if in_flight >= window:
                return 0
            unsent = (TaskRow.queue == queue, TaskRow.status == TaskStatus.QUEUED,
                      TaskRow.dispatched_at.is_(None))
            pick = select(TaskRow.id).where(*unsent).order_by(TaskRow.created_at).limit(window - in_flight)
            if self.db.engine.dialect.name == "postgresql":
                pick = pick.with_for_update(skip_locked=True)  # two feeders never take the same rows
            picked = list(session.scalars(pick))
            ids = list(session.scalars(update(TaskRow).where(TaskRow.id.in_(picked), *unsent)
                                       .values(dispatched_at=now).returning(TaskRow.id))) if picked else []
        for task_id in ids:
            self.dispatcher.dispatch(task_id, queue)
        return len(ids)

    def ingest_queue(self, pool: str) -> str:
        """Where a book's parsing goes: the interactive queue of ``pool``, so an upload never
        waits behind another book's backlog of sentences."""
        return queue_name(pool, Lane.INTERACTIVE, self.settings.services.queue_prefix)

    # --- rows -----------------------------------------------------------------------------------

    def book(self, book_id: str, owner: str | None = None) -> BookRow:
        """The row of ``book_id`` or ``BookNotFound`` (malformed ids, and another owner's books,
        included)."""
        return get_by_id(self.db, BookRow, book_id, BookNotFound, "book", owner)

    def chapters(self, book_id: str) -> list[ChapterRow]:
        """The chapter rows of a book, in order."""
        with self.db.read() as session:
            return list(session.scalars(
                select(ChapterRow).where(ChapterRow.book_id == book_id).order_by(ChapterRow.number)))

    def sentences(self, book_id: str, chapter: int | None = None) -> list[tuple[SentenceRow, TaskStatus]]:
        """The sentence rows of a book (or one chapter), in order, with their task's status
        (small books and tests; the assembler pages through a chapter instead)."""
        query = (select(SentenceRow, TaskRow.status).join(TaskRow, TaskRow.id == SentenceRow.task_id)
                 .where(SentenceRow.book_id == book_id).order_by(SentenceRow.index))
        if chapter is not None:
            query = query.where(SentenceRow.chapter == chapter)
        with self.db.read() as session:
            return [(sentence, status) for sentence, status in session.execute(query).all()]

    def progress(self, book_id: str, owner: str | None = None) -> dict[str, Any]:
        """Status, counts, audio seconds so far and an ETA, from the book's and chapters' counters
        (the reader's visit counts as an access)."""
        row = self.touch(book_id, owner)
        return book_progress(row, self.chapters(book_id), self.clock())

    def recent(self, owner: str | None, limit: int) -> list[dict[str, Any]]:
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
        summaries = []
        for row in rows:
            summary = book_progress(row, (), now)
            del summary["chapters"]
            summaries.append({**summary, "chapters_done": done.get(row.id, 0)})
        return summaries

    def touch(self, book_id: str, owner: str | None = None) -> BookRow:
        """The book's row, its last access recorded (at most once a minute: polling stays a read)."""
        row = self.book(book_id, owner)
        now = self.clock()
        if row.last_access_at is None or row.last_access_at < now - ACCESS_EVERY:
            with self.db.write() as session:
                session.execute(update(BookRow).where(BookRow.id == book_id).values(last_access_at=now))
            row.last_access_at = now
        return row

    # --- progress -------------------------------------------------------------------------------

    def sentence_finished(self, task_id: str, status: TaskStatus) -> list[tuple[BookRow, int]]:
        """A task just finished (its row moved): if it is a book's sentence, count it; return
        ``(book, chapter)`` when that chapter's last sentence is done. A failed sentence fails its
        book (with the reason). Ordinary tasks cost one indexed read."""
        with self.db.read() as session:
            sentence = session.execute(
                select(SentenceRow.book_id, SentenceRow.chapter, SentenceRow.index, SentenceRow.cache_key)
                .where(SentenceRow.task_id == task_id)).first()
        if sentence is None:
            return []
        book_id, number, index, key = sentence
        if status is TaskStatus.FAILED:
            with self.db.read() as session:
                code = session.scalar(select(TaskRow.error_code).where(TaskRow.id == task_id))
            self.fail(book_id, "sentence_failed", f"sentence {index} could not be synthesized ({code})")
            return []
        if status is not TaskStatus.DONE:
            return []
        with self.db.read() as session:
            seconds = float(session.scalar(select(CacheEntry.duration_s).where(CacheEntry.key == key)) or 0.0)
        now = self.clock()
        with self.db.write() as session:
            done = session.execute(
                update(ChapterRow).where(ChapterRow.book_id == book_id, ChapterRow.number == number)
                .values(sentences_done=ChapterRow.sentences_done + 1,
                        audio_seconds=ChapterRow.audio_seconds + seconds)
                .returning(ChapterRow.sentences_done, ChapterRow.sentences_total, ChapterRow.status)).first()
            book_status = session.execute(
                update(BookRow).where(BookRow.id == book_id)
                .values(sentences_done=BookRow.sentences_done + 1,
                        audio_seconds=BookRow.audio_seconds + seconds, progress_at=now,
                        status=case((BookRow.status == BookStatus.QUEUED, BookStatus.RUNNING),
                                    else_=BookRow.status))
                .returning(BookRow.status)).scalar()
        # (a book still parsing has its whole chapters assembled when its ingestion ends)
        if (done is None or done[0] < done[1] or done[2] not in book_sources(BookStatus.DONE)
                or book_status not in book_sources(BookStatus.DONE)):
            return []
        return [(self.book(book_id), number)]

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

    def reconcile(self, quiet_for: timedelta) -> int:
        """Recount the counters of open books that made no progress for ``quiet_for`` and are
        not complete (a worker died between finishing a sentence and counting it); how many
        books were recounted. A count over the book, only for books that stalled."""
        cutoff = self.clock() - quiet_for
        with self.db.read() as session:
            stalled = list(session.scalars(select(BookRow.id).where(
                BookRow.status.in_((BookStatus.QUEUED, BookStatus.RUNNING)),
                BookRow.sentences_done < BookRow.sentences_total,
                func.coalesce(BookRow.progress_at, BookRow.started_at, BookRow.created_at) < cutoff)))
        for book_id in stalled:
            with self.db.write() as session:
                counts: dict[int, int] = {number: done for number, done in session.execute(
                    select(SentenceRow.chapter, func.count()).join(TaskRow, TaskRow.id == SentenceRow.task_id)
                    .where(SentenceRow.book_id == book_id, TaskRow.status == TaskStatus.DONE)
                    .group_by(SentenceRow.chapter))}
                for number, done in counts.items():
                    session.execute(update(ChapterRow).where(ChapterRow.book_id == book_id,
                                                             ChapterRow.number == number)
                                    .values(sentences_done=done))
                session.execute(update(BookRow).where(BookRow.id == book_id).values(
                    sentences_done=sum(counts.values()), progress_at=self.clock()))
        return len(stalled)

    # --- ending ---------------------------------------------------------------------------------

    def cancel(self, book_id: str) -> None:
        """Cancel an unfinished book: its queued sentences are dropped."""
        with self.db.write() as session:
            session.execute(update(BookRow).where(BookRow.id == book_id, BookRow.status.in_(
                book_sources(BookStatus.CANCELLED))).values(status=BookStatus.CANCELLED,
                                                            finished_at=self.clock()))
            session.execute(update(ChapterRow).where(ChapterRow.book_id == book_id, ChapterRow.status.in_(
                book_sources(BookStatus.CANCELLED))).values(status=BookStatus.CANCELLED))
        self._cancel_sentences(book_id)
        self.finished(book_id)

    def fail(self, book_id: str, code: str, message: str) -> None:
        """Mark a book failed (unless it already finished) and drop its queued sentences."""
        with self.db.write() as session:
            session.execute(update(BookRow).where(BookRow.id == book_id, BookRow.status.in_(
                book_sources(BookStatus.FAILED))).values(
                    status=BookStatus.FAILED, finished_at=self.clock(), error_code=code,
                    error_message=message))
        self._cancel_sentences(book_id)
        self.finished(book_id)

    def _cancel_sentences(self, book_id: str) -> None:
        cancelled = self.tasks.rows.cancel_book(book_id)
        metrics.count(metrics.TASKS_CANCELLED, cancelled, pool=self.book(book_id).pool, lane=Lane.BULK.value)

    def finished(self, book_id: str) -> None:
        """The book ended (done, failed, cancelled): its callback, if it has one, is due now."""
        if self.tasks.callbacks.due(book_id):
            self.tasks.send_callback(book_id)

    def unpin(self, book_id: str, owner: str | None = None) -> None:
        """Release a book's ``keep`` pin: it and its sentences follow the normal retention again."""
        self.book(book_id, owner)
        with self.db.write() as session:
            session.execute(update(BookRow).where(BookRow.id == book_id).values(keep=False))

    def delete(self, book_id: str, owner: str | None = None) -> bool:
        """Delete a finished book: its chapter files (unless another book has the same chapter),
        captions, manifests, M4B and upload, then its sentence, task, chapter and book rows (its
        sentences' audio is no longer pinned). An unfinished book is cancelled instead; whether it
        was deleted."""
        row = self.book(book_id, owner)
        if not row.status.finished:
            self.cancel(book_id)
            return False
        self._delete_files(row)
        while True:  # in batches: a book may have hundreds of thousands of sentences
            with self.db.write() as session:
                ids = list(session.scalars(select(SentenceRow.task_id).where(SentenceRow.book_id == book_id)
                                           .limit(BATCH_ROWS)))
                if not ids:
                    break
                session.execute(delete(SentenceRow).where(SentenceRow.book_id == book_id,
                                                          SentenceRow.task_id.in_(ids)))
                session.execute(delete(TaskRow).where(TaskRow.id.in_(ids)))
        with self.db.write() as session:
            session.execute(delete(TaskRow).where(TaskRow.book_id == book_id))
            session.execute(delete(ChapterRow).where(ChapterRow.book_id == book_id))
            session.execute(delete(BookRow).where(BookRow.id == book_id))
            session.execute(delete(Callback).where(Callback.subject_id == book_id))
        log.info("book %s deleted", book_id)
        return True

    def _delete_files(self, row: BookRow) -> None:
        from tts_queue.books.assembler import ChapterFiles

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
        if row.source and row.source.get("upload"):
            names.append(str(row.source["upload"]))
        self.storage.delete(names)

    def stale(self, ttl: timedelta, now: datetime | None = None) -> list[str]:
        """Ids of finished, unkept books nobody read for ``ttl``."""
        cutoff = (now or self.clock()) - ttl
        with self.db.read() as session:
            return list(session.scalars(select(BookRow.id).where(
                BookRow.status.not_in(OPEN_BOOK), BookRow.keep.is_(False),
                func.coalesce(BookRow.last_access_at, BookRow.created_at) < cutoff)))

    def expire(self, ttl: timedelta, now: datetime | None = None) -> int:
        """Delete finished, unkept books nobody read for ``ttl``; how many (the cleanup's books)."""
        return sum(self.delete(book_id) for book_id in self.stale(ttl, now))
