"""Everything a worker process builds once: the wiring of the core (``tts_queue.wiring.root``), plus the batch
engine, the executor and the ingester."""

from __future__ import annotations

import logging
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from functools import partial

from redis import Redis

from tts_queue.books.ingest import Ingester
from tts_queue.broker.watch import QueueWatch, RedisWatch
from tts_queue.fairness.threads import KeyShares
from tts_queue.settings import Settings
from tts_queue.synthesis.engine import BatchEngine
from tts_queue.synthesis.frontend.script import load_lexicon
from tts_queue.synthesis.providers import CPU
from tts_queue.synthesis.synthesizer import Synthesizer
from tts_queue.tasks.dispatcher import Dispatcher
from tts_queue.tasks.executor import TaskExecutor
from tts_queue.wiring.plugins import load_plugins, wrapped_synthesizer
from tts_queue.wiring.root import Wiring
from workers import m4b, readalong

log = logging.getLogger(__name__)
# Words without a sentence end, longer than any admitted sentence: cut at the phoneme limit.
LONGEST_WARM_UP = " ".join(["and the warm up goes on"] * 120) + "."


@dataclass
class WorkerRuntime:
    """The worker's long-lived services: the wiring and what only a worker runs."""

    wiring: Wiring
    engine: BatchEngine
    executor: TaskExecutor
    ingester: Ingester

    @property
    def settings(self) -> Settings:
        """The worker's settings."""
        return self.wiring.settings

    @classmethod
    def build(cls, settings: Settings, dispatcher: Dispatcher, watch: QueueWatch | None = None,
              name: str | None = None, redis: Redis | None = None) -> WorkerRuntime:
        """Wire the services of a worker serving ``settings.worker.pool`` (``redis``: the worker's
        one client for short commands, shared by its markers, heartbeats, watch and board)."""
        load_lexicon(settings.request.lexicon)  # a malformed TTS_LEXICON stops the worker at start
        plugins = load_plugins(settings.worker.plugins)
        books = settings.books  # child processes hold the M4B's memory and read-along builds' parsing
        source_writer = partial(readalong.build, timeout_s=books.readalong_timeout_s,
                                max_memory_mb=books.readalong_max_memory_mb)
        watch = watch or RedisWatch.from_settings(settings, redis)
        wiring = Wiring.build(settings, dispatcher, watch, plugins,
                              m4b_writer=m4b.build, redis=redis, source_writer=source_writer)
        engine = BatchEngine.for_pool(wiring.registry, settings, settings.worker.pool).start()
        executor = TaskExecutor(
            wiring.cache, wrapped_synthesizer(plugins, Synthesizer(wiring.registry, engine)), wiring.ends,
            name or f"{settings.worker.pool}@{socket.gethostname()}", wiring.board, wiring.streams,
            max_attempts=settings.worker.max_retries + 1,
            storage_floor_bytes=settings.cache.storage_reserve_bytes // 2,
            shares=KeyShares(settings.worker.concurrency, settings.worker.interactive_reserve),
            short_task_s=settings.worker.short_task_s)
        ingester = wiring.ingester(lease=timedelta(seconds=settings.worker.lease_s),
                                 max_attempts=settings.worker.max_retries + 1)
        return cls(wiring, engine, executor, ingester)

    def warm_up(self) -> None:
        """Load the default voice and run one sentence so the first request is not slow (a
        TensorRT session builds or reads its engines here: the log says how long that took), then
        (``TTS_WARM_LONGEST``) the longest sentence the settings admit, at speed 1: ONNX Runtime's
        arena grows to the size the longest calls need once, here, instead of in steps over hours
        of a book as longer sentences come (``python -m bench run session_memory``, variant
        ``no-patterns-pregrow``). A GPU-pool worker whose voice landed on the CPU says so in a
        warning."""
        started = time.perf_counter()
        voice = self.wiring.registry.load(None)
        loaded = time.perf_counter()
        limit = self.settings.request.max_sentence_phonemes
        short = voice.sentence_ids("Warm up.", limit)
        voice.model.run_batch(short, voice.scales())
        if self.engine.side_by_side:  # the single-threaded twin of side-by-side calls, built now
            voice.model.run_batch(short, voice.scales(), narrow=True)
        warm = time.perf_counter()
        longest: list[int] = []
        if self.settings.worker.warm_longest:  # one sentence cut at the limit: the longest there is
            longest = max(voice.sentence_ids(LONGEST_WARM_UP, limit), key=len)
            voice.model.run_batch([longest], voice.scales())
            if self.engine.side_by_side:
                # two at once on the twin: the arena both sessions share grows now to what calls
                # side by side need, fragments included, instead of creeping over a book (the
                # Sherlock EPUB: worker RSS halves 1.065 without this)
                with ThreadPoolExecutor(2, thread_name_prefix="tts-warm") as pool:
                    list(pool.map(lambda ids: voice.model.run_batch([ids], voice.scales(), narrow=True),
                                  [longest, longest]))
        log.info("worker warm: voice %s on %s (load %.2f s, first batch %.2f s, longest sentence "
                 "%d ids %.2f s)", voice.spec.id, voice.model.provider, loaded - started, warm - loaded,
                 len(longest), time.perf_counter() - warm)
        if self.settings.worker.pool == "gpu" and voice.model.provider == CPU:
            log.warning("GPU-pool worker runs voice %s on %s, not a GPU (TTS_PROVIDERS=%s): is "
                        "onnxruntime-gpu installed with working CUDA libraries? GPU-routed requests "
                        "are served at CPU speed; /readyz warns gpu_pool_on_cpu", voice.spec.id, CPU,
                        self.settings.onnx.providers)


class RuntimeHolder:
    """Builds the runtime on first use, once, from any thread."""

    def __init__(self, settings: Settings, dispatcher: Dispatcher, redis: Redis | None = None) -> None:
        self.settings = settings
        self.dispatcher = dispatcher
        self.redis = redis
        self._runtime: WorkerRuntime | None = None
        self._lock = threading.Lock()

    def get(self) -> WorkerRuntime:
        """The runtime, building it if needed."""
        with self._lock:
            if self._runtime is None:
                self._runtime = WorkerRuntime.build(self.settings, self.dispatcher, redis=self.redis)
            return self._runtime
