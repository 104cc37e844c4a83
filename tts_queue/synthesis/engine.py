"""The batch engine: the runner threads of a worker process that execute the batching policy.

Request threads (Celery's thread pool, or the CLI) call ``run_sentences``; it queues each
sentence in the pure ``BatchPolicy`` and blocks on a future. A runner thread asks the policy for
the next batch, synthesizes it with one ``run_batch`` call and resolves the futures. Only runners
call the model. A pool has ``runners`` of them (``TTS_CPU_RUNNERS``, ``TTS_GPU_RUNNERS``): one
gives ONNX Runtime all the cores for one call at a time (and lets batches form under load, as a
GPU wants); two on a CPU keep the cores busy between and across calls (``bench/bench_runners.py``:
two calls at once ran 1.14-1.38x the sentences per second of one at a time on 2 cores), while a
lone call still gets every core. Interactive work comes first with any number of runners: its
arrival stops the bulk calls in the model (each bulk sentence once), and no runner starts a bulk
batch while an interactive one is in the model, so an interactive call never shares the cores
with a book's.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from tts_queue import metrics
from tts_queue.errors import ServiceUnavailable
from tts_queue.settings import PoolSettings
from tts_queue.synthesis.batching import Batch, BatchPolicy, Entry
from tts_queue.synthesis.inference import ItemAudio, Preempted, Scales
from tts_queue.synthesis.registry import VoiceRegistry

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BatchKey:
    """What must be equal for sentences to share one ONNX call."""

    voice: str
    scales: Scales
    speaker: int | None
    max_batch: int = 0  # the voice family's own bound (Kokoro: 1); 0: the pool's budget


NO_SAMPLES = np.zeros(0, dtype=np.float32)


@dataclass(frozen=True)
class SentenceResult:
    """A sentence's exact audio and the size of the batch it ran in."""

    audio: ItemAudio
    batch_size: int


DONE: Future[SentenceResult] = Future()  # stands in for a future whose result was taken


class BatchEngine:
    """Runs sentences from many threads in shared batches on one runner thread."""

    def __init__(
        self,
        registry: VoiceRegistry,
        pool: PoolSettings,
        clock: Callable[[], float] = time.monotonic,
        timeout_s: float = 600.0,
    ) -> None:
        self.registry = registry
        self.timeout_s = timeout_s
        self.policy = BatchPolicy(
            pool.policy, pool.max_batch, pool.max_padded_phonemes, pool.window_ms / 1000
        )
        self.clock = clock
        # The most recent batch sizes (bounded: a worker runs for months).
        self.batch_sizes: deque[int] = deque(maxlen=10_000)
        self.runners = max(1, pool.runners)
        self._cond = threading.Condition()
        self._threads: list[threading.Thread] = []
        self._stopping = False
        # The batches in the model, by runner: an interactive sentence that arrives stops the bulk
        # ones (their ``RunOptions.terminate``), which run again after it.
        self._running: dict[int, _Running] = {}
        self._s_per_id: float | None = None  # seconds per padded id, a moving average of past calls
        self.preempted = 0

    @property
    def _thread(self) -> threading.Thread | None:
        """The first runner thread, if the engine runs."""
        return self._threads[0] if self._threads else None

    @property
    def _preemptible(self) -> Any:
        """The RunOptions of a bulk batch in the model that may be stopped, if one is."""
        with self._cond:
            return next((r.options for r in self._running.values() if r.options is not None), None)

    def start(self) -> BatchEngine:
        """Start the runner threads (idempotent)."""
        with self._cond:
            if not self._threads:
                self._stopping = False
                for index in range(self.runners):
                    name = "tts-batch-runner" if index == 0 else f"tts-batch-runner-{index + 1}"
                    thread = threading.Thread(target=self._loop, args=(index,), name=name, daemon=True)
                    self._threads.append(thread)
                    thread.start()
        return self

    def stop(self) -> None:
        """Stop the runners after the batches in progress."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        for thread in self._threads:
            thread.join(timeout=30)
        self._threads = []

    def run_sentences(
        self, key: BatchKey, sentences: Sequence[Sequence[int]], priority: int = 0,
        on_result: Callable[[int, SentenceResult], None] | None = None,
    ) -> list[SentenceResult]:
        """Synthesize ``sentences`` (model ids) in shared batches; blocks until all are done.
        ``on_result(index, result)`` is called in sentence order as soon as each one (and every
        one before it) is done: streaming sends a sentence while the next ones are synthesized.
        With ``on_result``, the results returned keep no samples (the caller had them): a long
        request's audio is never all in memory."""
        futures: list[Future[SentenceResult]] = []
        with self._cond:
            now = self.clock()
            for ids in sentences:
                future: Future[SentenceResult] = Future()
                self.policy.append(Entry(key=key, ids=tuple(ids), arrived=now, ticket=future,
                                         priority=priority, max_batch=key.max_batch))
                futures.append(future)
            if priority == 0 and futures:  # interactive work waits for no book sentence
                for running in self._running.values():
                    if running.options is not None and self._worth_stopping(running):
                        running.options.terminate = True
            self._cond.notify_all()
        if not self._threads:
            self.start()
        deadline = time.monotonic() + self.timeout_s
        try:
            results = []
            for index, future in enumerate(futures):
                result = future.result(timeout=max(0.0, deadline - time.monotonic()))
                futures[index] = DONE  # the future held the samples: let them go
                if on_result is not None:
                    on_result(index, result)
                    result = replace(result, audio=replace(result.audio, samples=NO_SAMPLES))
                results.append(result)
            return results
        except FutureTimeout:
            raise ServiceUnavailable(
                f"synthesis did not finish within {self.timeout_s:.0f} s; the model may be stuck"
            ) from None

    def _worth_stopping(self, running: _Running) -> bool:
        """Stop a bulk batch in the model only if less than half of it is done (by the time past
        calls took per id): then the work thrown away is less than the wait it saves."""
        if self._s_per_id is None:
            return True
        elapsed = time.monotonic() - running.since
        return self._s_per_id * running.ids - elapsed > elapsed

    def _loop(self, index: int) -> None:
        while True:
            with self._cond:
                batch = None
                while not self._stopping:
                    # no bulk batch starts beside an interactive one: it would take half its cores
                    interactive_only = any(r.interactive for r in self._running.values())
                    batch = self.policy.next_batch(self.clock(), interactive_only)
                    if batch is not None:
                        break
                    deadline = self.policy.deadline(interactive_only)
                    self._cond.wait(None if deadline is None else max(0.0, deadline - self.clock()))
                if self._stopping:
                    for entry in self.policy.drain():
                        entry.ticket.set_exception(ServiceUnavailable("the worker is stopping"))
                    return
            assert batch is not None
            try:
                self._run(index, batch)
            except Exception as exc:  # never let the runner die: fail this batch, go on
                log.exception("batch runner error")
                for entry, _ in batch.members:
                    if not entry.ticket.done():
                        entry.ticket.set_exception(exc)

    def _run(self, index: int, batch: Batch) -> None:
        key = batch.key
        assert isinstance(key, BatchKey)
        # Bulk work may be stopped for interactive work, each sentence once: a book always advances
        bulk = all(entry.priority > 0 for entry, _ in batch.members)
        options = run_options() if bulk and not any(entry.stopped for entry, _ in batch.members) else None
        with self._cond:
            self._running[index] = _Running(options, time.monotonic(), batch.padded_size, not bulk)
        started = time.monotonic()
        try:
            voice = self.registry.load(key.voice)
            items = voice.model.run_batch(batch.slots, key.scales, key.speaker, run_options=options)
        except Preempted:  # an interactive sentence came: it runs first, this batch after it
            with self._cond:
                for entry, _ in batch.members:
                    self.policy.append(replace(entry, stopped=True))
                self.preempted += 1
            metrics.count(metrics.PREEMPTED)
            log.debug("stopped a bulk batch of %d for interactive work", len(batch.slots))
            return
        except BaseException as exc:  # hand every error to the waiting requests
            for entry, _ in batch.members:
                entry.ticket.set_exception(exc)
            return
        finally:
            with self._cond:
                self._running.pop(index, None)
                self._cond.notify_all()  # a bulk batch held back for this one may start now
        if batch.padded_size:
            rate = (time.monotonic() - started) / batch.padded_size
            self._s_per_id = rate if self._s_per_id is None else 0.8 * self._s_per_id + 0.2 * rate
        size = len(batch.slots)
        self.batch_sizes.append(size)
        metrics.observe(metrics.BATCH_SIZE, size)
        real = sum(len(slot) for slot in batch.slots)
        if batch.padded_size:
            metrics.observe(metrics.BATCH_PADDED, 1.0 - real / batch.padded_size)
        metrics.count(metrics.SENTENCES, size)
        log.debug("ran a batch of %d (%d padded ids)", size, batch.padded_size)
        for entry, slot in batch.members:
            entry.ticket.set_result(SentenceResult(audio=items[slot], batch_size=size))


@dataclass(frozen=True)
class _Running:
    """A batch in the model: its RunOptions when it may be stopped (bulk, never stopped before),
    when it started (monotonic), its padded ids, and whether it is interactive work."""

    options: Any
    since: float
    ids: int
    interactive: bool


def run_options() -> Any:
    """A fresh ``onnxruntime.RunOptions`` (its ``terminate`` flag stops the call it is given to)."""
    import onnxruntime

    return onnxruntime.RunOptions()
