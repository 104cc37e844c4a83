"""The one wiring of the core's services: ``Wiring.build(settings, dispatcher, watch)``.

The API (``api.services.Services``), a worker (``workers.runtime.WorkerRuntime``) and the shell's
commands (``tts_queue.cli``) each build a ``Wiring`` and add their own parts to it (readiness and
keys; the batch engine, executor and ingester), so what a task's end does, which storage client
serves a process and how books are counted are decided here once. Every collaborator is passed
to its constructor; nothing is set afterwards.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta

from redis import Redis

from tts_queue.books.ending import BookEnds, SentenceEnd, WindowRefill
from tts_queue.books.ingest import Ingester
from tts_queue.books.readalong.build import ReadAlongBuilder
from tts_queue.books.readalong.builds import ReadAlongs
from tts_queue.books.readalong.job import SourceWriter, write_source
from tts_queue.books.render.assembler import ChapterAssembler
from tts_queue.books.render.m4b import M4BWriter, write_m4b
from tts_queue.books.rows import BookRows
from tts_queue.books.service import BookService
from tts_queue.books.sources.chapter import BookLimits
from tts_queue.books.window import BulkWindow
from tts_queue.broker.connection import redis_client
from tts_queue.broker.lock import AssemblyLock
from tts_queue.broker.names import RedisKeys
from tts_queue.broker.streams import AudioStreams
from tts_queue.broker.watch import QueueWatch
from tts_queue.db import Database
from tts_queue.errors import TTSQueueError
from tts_queue.settings import Settings
from tts_queue.storage import open_storage
from tts_queue.storage.backend import Storage
from tts_queue.storage.cache import AudioCache
from tts_queue.storage.retention import Cleaner
from tts_queue.storage.store import AudioStore
from tts_queue.synthesis.registry import VoiceRegistry
from tts_queue.tasks.backlog import Backlog
from tts_queue.tasks.board import StatusBoard
from tts_queue.tasks.dispatcher import Dispatcher
from tts_queue.tasks.ending import DeliveryDue, EndEffect, ShowOnBoard, TaskEnds, WakeWaiters, count_metrics
from tts_queue.tasks.rows import TaskRows
from tts_queue.tasks.service import TaskService
from tts_queue.webhooks.callbacks import CallbackRows
from tts_queue.webhooks.policy import UrlPolicy
from tts_queue.wiring.plugins import WorkerPlugin, wrapped_loader


@dataclass
class Wiring:
    """The services every process of tts-queue shares, built once per process."""

    settings: Settings
    db: Database
    storage: Storage  # the one storage client of the process (``audio/`` and ``books/`` are children)
    cache: AudioCache
    registry: VoiceRegistry
    dispatcher: Dispatcher
    watch: QueueWatch
    board: StatusBoard | None  # status records in the broker's Redis (none without one)
    streams: AudioStreams | None  # streamed tasks' audio in the broker's Redis
    task_rows: TaskRows
    book_rows: BookRows
    callbacks: CallbackRows
    ends: TaskEnds
    tasks: TaskService
    window: BulkWindow
    book_ends: BookEnds
    books: BookService
    assembler: ChapterAssembler
    readalongs: ReadAlongs  # books' read-along EPUBs: built on request, on the bulk lane
    backlog: Backlog  # the work waiting and running per pool and lane, from the rows (autoscaling)

    @classmethod
    def build(cls, settings: Settings, dispatcher: Dispatcher, watch: QueueWatch,
              plugins: Sequence[WorkerPlugin] = (), m4b_writer: M4BWriter = write_m4b,
              redis: Redis | None = None, source_writer: SourceWriter = write_source) -> Wiring:
        """Wire the core over ``settings``' database, storage, voices (loaded through ``plugins``)
        and Redis (``redis``: the process's client for its short commands, made here if none is
        given); books' M4Bs written by ``m4b_writer`` (in process unless a worker says)."""
        db = Database(settings.database_url)
        storage = open_storage(settings.storage_url)
        cache = AudioCache(db, AudioStore.from_settings(settings, storage), settings.cache.hot_size)
        registry = VoiceRegistry.from_settings(settings, wrapped_loader(plugins))
        board, streams, finish_lock, client = None, None, None, None
        keys = RedisKeys(settings.services.queue_prefix)
        if settings.services.redis_url:
            client = redis or redis_client(settings.services.redis_url)
            board = StatusBoard(client, keys)
            streams = AudioStreams(client, keys, settings.api.stream_max_bytes)
            finish_lock = AssemblyLock(client, keys).finishing
        book_rows = BookRows(db)
        # the two owners of rows meet here: a book's sentence is counted as its task row ends
        task_rows = TaskRows(db, lease=timedelta(seconds=settings.worker.lease_s), counter=book_rows)
        callbacks = CallbackRows(db, policy=UrlPolicy.from_settings(settings.webhooks),
                              lease=timedelta(seconds=settings.worker.lease_s))
        window = BulkWindow(settings, db, task_rows, dispatcher, watch.live_workers)
        book_ends = BookEnds(book_rows, task_rows, callbacks, dispatcher)
        effects: list[EndEffect] = [count_metrics]
        if board is not None:
            effects.append(ShowOnBoard(board, lambda key: _duration(cache, key)))
        effects += [WakeWaiters(watch), DeliveryDue(callbacks, dispatcher), SentenceEnd(book_ends, window),
                    WindowRefill(window)]
        ends = TaskEnds(task_rows, effects, board)
        tasks = TaskService(settings, db, cache, registry, dispatcher, ends, callbacks, board, streams,
                            watch)
        books = BookService(tasks, book_rows, book_ends, window, storage.child("books"))
        assembler = ChapterAssembler(book_rows, book_ends, cache, books.storage,
                                     id_map=lambda voice: _id_map(registry, voice), m4b_writer=m4b_writer,
                                     finish_lock=finish_lock)
        builder = ReadAlongBuilder(book_rows, assembler, books.storage,
                                   lambda voice: _language(registry, voice), settings.books.max_epub_bytes,
                                   limits=BookLimits(unpacked_bytes=settings.books.max_unpacked_bytes,
                                                     chars=settings.books.max_chars),
                                   source_writer=source_writer)
        readalongs = ReadAlongs(builder, dispatcher, client, keys, settings.routing.awake)
        return cls(settings, db, storage, cache, registry, dispatcher, watch, board, streams, task_rows,
                   book_rows, callbacks, ends, tasks, window, book_ends, books, assembler, readalongs,
                   Backlog(db))

    def ingester(self, lease: timedelta = timedelta(seconds=30), max_attempts: int = 3) -> Ingester:
        """The books' parser over this wiring's rows, ends, task service, window and storage."""
        return Ingester(self.book_rows, self.book_ends, self.tasks, self.window, self.books.storage,
                        lease=lease, max_attempts=max_attempts)

    def cleaner(self) -> Cleaner:
        """The retention cleanup over this core's cache; deleted task rows leave the board too."""
        return Cleaner(self.cache, self.settings.cache, on_tasks_deleted=self.ends.forget)


def _duration(cache: AudioCache, key: str) -> float | None:
    """The audio's duration of a cache key (the hot map; a row read on a miss)."""
    entry = cache.peek(key)
    return entry.duration_s if entry is not None else None


def _language(registry: VoiceRegistry, voice: str | None) -> str:
    """A voice's language as BCP 47 (``en_US`` -> ``en-US``); ``und`` for a voice no longer known."""
    try:
        return registry.get(voice).language.replace("_", "-")
    except TTSQueueError:
        return "und"


def _id_map(registry: VoiceRegistry, voice: str | None) -> Mapping[str, Sequence[int]]:
    """A voice's symbols to ids, any family's (word captions)."""
    return registry.id_map(voice)
