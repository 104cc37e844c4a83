"""The batch engine: one runner thread per worker process that executes the batching policy.

Request threads (Celery's thread pool, or the CLI) call ``run_sentences``; it queues each
sentence in the pure ``BatchPolicy`` and blocks on a future. The runner thread asks the policy
for the next batch, synthesizes it with one ``run_batch`` call and resolves the futures. Only this
thread calls the model, so ONNX Runtime gets all the cores and batches form under load.
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
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopping = False
        # The RunOptions of the bulk batch in the model, if one is: an interactive sentence that
        # arrives meanwhile stops it (``terminate``) and the batch runs again after it.
        self._preemptible: Any = None
        self._running_since = 0.0  # when the bulk batch in the model started (monotonic)
        self._running_ids = 0  # its padded ids
        self._s_per_id: float | None = None  # seconds per padded id, a moving average of past calls
        self.preempted = 0

    def start(self) -> BatchEngine:
        """Start the runner thread (idempotent)."""
        with self._cond:
            if self._thread is None:
                self._stopping = False
                self._thread = threading.Thread(target=self._loop, name="tts-batch-runner", daemon=True)
                self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the runner after the batch in progress."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None

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
            if priority == 0 and self._preemptible is not None and futures and self._worth_stopping():
                self._preemptible.terminate = True  # interactive work waits for no book sentence
            self._cond.notify_all()
        if self._thread is None:
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

    def _worth_stopping(self) -> bool:
        """Stop the bulk batch in the model only if less than half of it is done (by the time past
        calls took per id): then the work thrown away is less than the wait it saves."""
        if self._s_per_id is None:
            return True
        elapsed = time.monotonic() - self._running_since
        return self._s_per_id * self._running_ids - elapsed > elapsed

    def _loop(self) -> None:
        while True:
            with self._cond:
                batch = None
                while not self._stopping:
                    batch = self.policy.next_batch(self.clock())
                    if batch is not None:
                        break
                    deadline = self.policy.deadline()
                    self._cond.wait(None if deadline is None else max(0.0, deadline - self.clock()))
                if self._stopping:
                    for entry in self.policy.drain():
                        entry.ticket.set_exception(ServiceUnavailable("the worker is stopping"))
                    return
            assert batch is not None
            try:
                self._run(batch)
            except Exception as exc:  # never let the runner die: fail this batch, go on
                log.exception("batch runner error")
                for entry, _ in batch.members:
                    if not entry.ticket.done():
                        entry.ticket.set_exception(exc)

    def _run(self, batch: Batch) -> None:
        key = batch.key
        assert isinstance(key, BatchKey)
        # Bulk work may be stopped for interactive work, each sentence once: a book always advances
        options = run_options() if all(entry.priority > 0 and not entry.stopped
                                       for entry, _ in batch.members) else None
        with self._cond:
            self._preemptible = options
            self._running_since, self._running_ids = time.monotonic(), batch.padded_size
        started = time.monotonic()
        try:
            voice = self.registry.load(key.voice)
            items = voice.model.run_batch(batch.slots, key.scales, key.speaker, run_options=options)
        except Preempted:  # an interactive sentence came: it runs first, this batch after it
            with self._cond:
                self._preemptible = None
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
                self._preemptible = None
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


def run_options() -> Any:
    """A fresh ``onnxruntime.RunOptions`` (its ``terminate`` flag stops the call it is given to)."""
    import onnxruntime

    return onnxruntime.RunOptions()
