"""Everything a worker process builds once: database, cache, voices, batch engine, executor."""

from __future__ import annotations

import logging
import socket
import threading
import time
from dataclasses import dataclass
from datetime import timedelta

from tts_queue.books.assembler import ChapterAssembler
from tts_queue.books.ingest import Ingester
from tts_queue.books.service import BookDispatcher, BookService
from tts_queue.db import Database
from tts_queue.settings import Settings
from tts_queue.storage import open_storage
from tts_queue.storage.cache import AudioCache
from tts_queue.storage.store import AudioStore
from tts_queue.synthesis.engine import BatchEngine
from tts_queue.synthesis.frontend import load_lexicon
from tts_queue.synthesis.providers import CPU
from tts_queue.synthesis.registry import VoiceRegistry
from tts_queue.synthesis.synthesizer import Synthesizer
from tts_queue.tasks.board import StatusBoard
from tts_queue.tasks.connection import redis_client
from tts_queue.tasks.executor import TaskExecutor
from tts_queue.tasks.heartbeat import Heartbeats
from tts_queue.tasks.keys import RedisKeys
from tts_queue.tasks.rows import TaskRows
from tts_queue.tasks.service import TaskService
from tts_queue.tasks.streams import AudioStreams

log = logging.getLogger(__name__)


class LiveWorkers:
    """Live workers per pool from their heartbeats, read at most every 5 s (the bulk window)."""

    def __init__(self, heartbeats: Heartbeats, every_s: float = 5.0) -> None:
        self.heartbeats = heartbeats
        self.every_s = every_s
        self._counts: dict[str, int] = {}
        self._read_at = -1e9
        self._lock = threading.Lock()

    def __call__(self, pool: str) -> int:
        with self._lock:
            now = time.monotonic()
            if now - self._read_at > self.every_s:
                try:
                    counts: dict[str, int] = {}
                    for worker in self.heartbeats.live():
                        counts[worker.pool] = counts.get(worker.pool, 0) + 1
                    self._counts, self._read_at = counts, now
                except Exception as exc:  # Redis hiccup: keep the last count
                    log.warning("live workers unknown: %s", exc)
            return max(1, self._counts.get(pool, 1))


def _board(settings: Settings) -> StatusBoard | None:
    """The status board: the broker's Redis."""
    url = settings.services.redis_url
    return StatusBoard(redis_client(url), RedisKeys(settings.services.queue_prefix)) if url else None


def _streams(settings: Settings) -> AudioStreams | None:
    """Where streamed tasks' audio goes: the broker's Redis."""
    url = settings.services.redis_url
    return AudioStreams(redis_client(url), RedisKeys(settings.services.queue_prefix)) if url else None


@dataclass
class WorkerRuntime:
    """The worker's long-lived services."""

    settings: Settings
    db: Database
    cache: AudioCache
    registry: VoiceRegistry
    engine: BatchEngine
    executor: TaskExecutor
    rows: TaskRows
    books: BookService
    assembler: ChapterAssembler
    ingester: Ingester

    @classmethod
    def build(cls, settings: Settings, dispatcher: BookDispatcher, name: str | None = None) -> WorkerRuntime:
        """Wire the services of a worker serving ``settings.worker.pool``."""
        db = Database(settings.database_url)
        storage = open_storage(settings.storage_url)
        cache = AudioCache(db, AudioStore.from_settings(settings, storage), settings.cache.hot_size)
        load_lexicon(settings.request.lexicon)  # a malformed TTS_LEXICON stops the worker at start
        registry = VoiceRegistry.from_settings(settings)
        engine = BatchEngine(registry, settings.pool(settings.worker.pool)).start()
        synthesizer = Synthesizer(registry, engine)
        executor = TaskExecutor(
            db, cache, synthesizer, name or f"{settings.worker.pool}@{socket.gethostname()}",
            max_attempts=settings.worker.max_retries + 1, lease=timedelta(seconds=settings.worker.lease_s),
            storage_floor_bytes=settings.cache.storage_reserve_bytes // 2,
            streams=_streams(settings),
        )
        tasks = TaskService(settings, db, cache, registry, dispatcher, board=_board(settings))
        executor.on_claim = executor.on_finish = tasks.publish
        books = BookService(tasks, dispatcher, storage=storage.child("books"))
        if settings.services.redis_url:
            books.live_workers = LiveWorkers(Heartbeats(redis_client(settings.services.redis_url),
                                                        RedisKeys(settings.services.queue_prefix)))
        assembler = ChapterAssembler(
            books, cache, books.storage,
            id_map=registry.id_map)  # any family's symbol -> ids (Kokoro voices have no Piper config)
        ingester = Ingester(books, lease=timedelta(seconds=settings.worker.lease_s),
                            max_attempts=settings.worker.max_retries + 1)
        return cls(settings, db, cache, registry, engine, executor, executor.rows, books, assembler, ingester)

    def warm_up(self) -> None:
        """Load the default voice and run one sentence so the first request is not slow (a
        TensorRT session builds or reads its engines here: the log says how long that took). A
        GPU-pool worker whose voice landed on the CPU says so in a warning."""
        started = time.perf_counter()
        voice = self.registry.load(None)
        loaded = time.perf_counter()
        ids = voice.sentence_ids("Warm up.", self.settings.request.max_sentence_phonemes)
        voice.model.run_batch(ids, voice.scales())
        log.info("worker warm: voice %s on %s (load %.2f s, first batch %.2f s)", voice.spec.id,
                 voice.model.provider, loaded - started, time.perf_counter() - loaded)
        if self.settings.worker.pool == "gpu" and voice.model.provider == CPU:
            log.warning("GPU-pool worker runs voice %s on %s, not a GPU (TTS_PROVIDERS=%s): is "
                        "onnxruntime-gpu installed with working CUDA libraries? GPU-routed requests "
                        "are served at CPU speed; /readyz warns gpu_pool_on_cpu", voice.spec.id, CPU,
                        self.settings.onnx.providers)


class RuntimeHolder:
    """Builds the runtime on first use, once, from any thread."""

    def __init__(self, settings: Settings, dispatcher: BookDispatcher) -> None:
        self.settings = settings
        self.dispatcher = dispatcher
        self._runtime: WorkerRuntime | None = None
        self._lock = threading.Lock()

    def get(self) -> WorkerRuntime:
        """The runtime, building it if needed."""
        with self._lock:
            if self._runtime is None:
                self._runtime = WorkerRuntime.build(self.settings, self.dispatcher)
            return self._runtime
