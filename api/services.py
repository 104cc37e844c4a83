"""The services the API's views use, built once per app and kept in ``app.extensions["tts"]``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from tts_queue.books.assembler import ChapterAssembler
from tts_queue.books.service import BookDispatcher, BookService
from tts_queue.db import Database
from tts_queue.settings import Settings
from tts_queue.storage import open_storage
from tts_queue.storage.cache import AudioCache
from tts_queue.storage.store import AudioStore
from tts_queue.synthesis.registry import VoiceRegistry
from tts_queue.tasks.heartbeat import WorkerInfo
from tts_queue.tasks.service import TaskService


class QueueProbe(Protocol):
    """What readiness asks of the queue."""

    def ping_broker(self) -> None:
        """Raise if the broker is unreachable."""

    def ping_workers(self, timeout: float = 1.0) -> list[str]:
        """Names of live workers."""

    def wait_finished(self, task_id: str, timeout: float) -> None:
        """Block until ``task_id`` may have finished (or ``timeout``)."""

    def consuming(self) -> bool:
        """Whether a worker consumed a task recently."""

    def workers(self) -> list[WorkerInfo]:
        """Live workers from their heartbeats."""


@dataclass
class Services:
    """Settings, database, registry and task service of one app."""

    settings: Settings
    db: Database
    registry: VoiceRegistry
    tasks: TaskService
    probe: QueueProbe | None
    books: BookService
    assembler: ChapterAssembler

    @classmethod
    def build(
        cls, settings: Settings, dispatcher: BookDispatcher | None = None, probe: Any = None
    ) -> Services:
        """Wire the services; with no dispatcher given, the Celery one is used."""
        if dispatcher is None:
            from api.celery_queue import CeleryQueue

            dispatcher = probe = CeleryQueue(settings)
        db = Database(settings.database_url)
        registry = VoiceRegistry.from_settings(settings)
        storage = open_storage(settings.storage_url)
        cache = AudioCache(db, AudioStore.from_settings(settings, storage), settings.cache.hot_size)
        tasks = TaskService(settings, db, cache, registry, dispatcher,
                            pool_alive=getattr(probe, "pool_alive", None))
        books = BookService(tasks, dispatcher)
        return cls(settings, db, registry, tasks, probe, books,
                   ChapterAssembler(books, cache, storage.child("books")))
