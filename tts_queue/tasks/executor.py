"""The worker side of a task: claim its row, synthesize (or find it cached), store, finish.

Safe to run more than once for the same task id (at-least-once delivery): finished tasks are
skipped, a cancelled task is never started, and attempts are counted in the row so a task that
keeps killing workers is failed instead of redelivered forever. Identical requests (same cache
key) that reach one worker together are synthesized once: followers wait for the leader's audio.
"""

from __future__ import annotations

import errno
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from tts_queue import metrics
from tts_queue.db import Database, utcnow
from tts_queue.enums import STREAM_FORMATS, Lane, TaskStatus
from tts_queue.errors import (
    InvalidRequest,
    StorageFull,
    StorageUnavailable,
    SynthesisError,
    VoiceError,
    public_error,
)
from tts_queue.storage.cache import AudioCache
from tts_queue.synthesis.encoder import StreamEncoder, encode, mime_type
from tts_queue.synthesis.request import SynthesisRequest
from tts_queue.synthesis.synthesizer import Synthesizer
from tts_queue.tables import TaskRow
from tts_queue.tasks.doctor import redacted
from tts_queue.tasks.keys import lane_of
from tts_queue.tasks.rows import TaskRows
from tts_queue.tasks.streams import AudioStreams, StreamPublisher

log = logging.getLogger(__name__)

# Errors that another attempt cannot fix: the task fails at once with the error's code.
PERMANENT = (InvalidRequest, VoiceError, SynthesisError)


class TaskExecutor:
    """Runs task ids through the synthesizer and records the outcome in the task rows."""

    def __init__(
        self,
        db: Database,
        cache: AudioCache,
        synthesizer: Synthesizer,
        worker_name: str,
        max_attempts: int = 4,
        lease: timedelta = timedelta(seconds=30),
        clock: Callable[[], datetime] = utcnow,
        storage_floor_bytes: int = 0,
        streams: AudioStreams | None = None,
        on_claim: Callable[[TaskRow], None] | None = None,
        on_finish: Callable[[str], None] | None = None,
    ) -> None:
        self.cache = cache
        self.streams = streams  # where a streamed task's audio goes as it is made
        self.on_claim = on_claim  # told of each claimed row (the status board)
        self.on_finish = on_finish  # told of each task this executor finished, before anyone else
        # Audio is not written into the last ``storage_floor_bytes`` of a local disk: that part is
        # left to the broker's log and the database sharing it (``tts-queue up``), so a full disk
        # stops new audio, not the queue.
        self.storage_floor_bytes = storage_floor_bytes
        self.synthesizer = synthesizer
        self.worker_name = worker_name
        self.max_attempts = max_attempts
        self.rows = TaskRows(db, clock, lease)
        self.leader_timeout_s = 600.0
        self._inflight: dict[str, threading.Event] = {}
        self._inflight_lock = threading.Lock()
        # Tasks that already died with a worker run one at a time: if one of them is a poison that
        # kills the worker again, only it is charged another attempt, not the innocent tasks that
        # happened to be running beside it the first time.
        self._suspects = threading.Lock()

    def execute(self, task_id: str, worker_name: str | None = None,
                stream: bool = False) -> TaskStatus | None:
        """Process one task; return its final status, or ``None`` if there was nothing to do.
        ``stream``: a client is waiting to relay the audio as it is made (``AudioStreams``)."""
        if self.rows.attempts(task_id) > 0:
            with self._suspects:
                return self._execute(task_id, worker_name, stream)
        return self._execute(task_id, worker_name, stream)

    def _execute(self, task_id: str, worker_name: str | None, stream: bool = False) -> TaskStatus | None:
        row = self.rows.claim(task_id, worker_name or self.worker_name)
        if row is None:
            return None
        if self.on_claim is not None and row.book_id is None:
            try:
                self.on_claim(row)
            except Exception as exc:  # the board only speeds up reads
                log.warning("task %s: on_claim failed: %s", task_id, exc)
        publisher = StreamPublisher(self.streams, task_id, row.attempts) if stream and self.streams else None
        if row.attempts > self.max_attempts:
            return self.fail(task_id, "too_many_attempts",
                             f"gave up after {self.max_attempts} attempts (worker crashes or errors)")
        request = SynthesisRequest.from_dict(row.request)
        clock = Clock(row.created_at, row.started_at or self.rows.clock(), self.rows.clock)
        labels = {"pool": row.pool, "lane": lane_of(row.queue).value}
        with self._inflight_lock:
            leader = self._inflight.get(row.cache_key)
            if leader is None:
                self._inflight[row.cache_key] = threading.Event()
        if leader is not None:
            # An identical request is being synthesized in this process: wait for its audio.
            leader.wait(timeout=self.leader_timeout_s)
        if self.cache.peek(row.cache_key) is not None:
            if leader is None:
                self._end_lead(row.cache_key)
            timings = clock.timings()
            finished = self.rows.finish(task_id, batch_size=None, cache_hit=True, timings=timings)
            if finished:
                metrics.count(metrics.CACHE_HITS, where="worker")
                record(timings, labels)
            self._finished(task_id, finished)
            if publisher is not None:
                publisher.end(TaskStatus.DONE.value)  # nothing streamed: the reader sends the file
            return TaskStatus.DONE if finished else None
        if leader is not None:  # the leader failed; do the work ourselves
            return self.execute_uncached(task_id, row.cache_key, request, lane_priority(row.queue), publisher,
                                         clock, labels)
        try:
            return self.execute_uncached(task_id, row.cache_key, request, lane_priority(row.queue), publisher,
                                         clock, labels)
        finally:
            self._end_lead(row.cache_key)

    def execute_uncached(
        self, task_id: str, key: str, request: SynthesisRequest, priority: int = 0,
        publisher: StreamPublisher | None = None, clock: Clock | None = None,
        labels: dict[str, str] | None = None,
    ) -> TaskStatus | None:
        """Synthesize, store atomically, and finish the row; ``None`` if the row did not move (it
        finished meanwhile). With a ``publisher``, the audio is encoded as sentences finish and each
        piece is published at once; the file stored is those pieces (``StreamEncoder``)."""
        encoder: StreamEncoder | None = None
        encode_s = 0.0

        def on_audio(samples: Any, sample_rate: int) -> None:
            nonlocal encoder, encode_s
            assert publisher is not None
            began = time.perf_counter()
            if encoder is None:
                encoder = StreamEncoder(request.format, sample_rate)
            piece = encoder.write(samples)
            encode_s += time.perf_counter() - began
            publisher.send(piece)

        streaming = publisher is not None and request.format in STREAM_FORMATS
        try:
            if streaming:
                result = self.synthesizer.synthesize(request, priority=priority, on_audio=on_audio)
            else:
                result = self.synthesizer.synthesize(request, priority=priority)
        except PERMANENT as exc:  # the row keeps a sentence per code; the exception's text is logged
            status = self.fail(task_id, *public_error(exc), detail=exc)
            if publisher is not None:
                publisher.end(status.value)
            return status
        began = time.perf_counter()
        if encoder is not None and publisher is not None:
            tail, data = encoder.close()
            encode_s += time.perf_counter() - began
            publisher.send(tail)
        else:
            data = encode(result.audio, request.format)
            encode_s = time.perf_counter() - began
        free = self.cache.store.storage.free_bytes() if self.storage_floor_bytes else None
        if free is not None and free - len(data) < self.storage_floor_bytes:
            self.rows.uncount_attempt(task_id)
            raise StorageFull(f"no room to store the audio of task {task_id}: {free} bytes free, the "
                              f"last {self.storage_floor_bytes} are kept for the broker and database")
        began = time.perf_counter()
        try:
            self.cache.put(key, request.format, request.voice, data,
                           result.audio.duration_s, result.alignment.to_dict(), mime_type(request.format))
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):  # nothing partial is left (write_atomic)
                self.rows.uncount_attempt(task_id)  # waiting for space is not a failed attempt
                raise StorageFull(f"no room to store the audio of task {task_id}: {exc}") from exc
            raise
        except StorageUnavailable:  # the bucket is down: wait for it like for space, uncounted
            self.rows.uncount_attempt(task_id)
            raise
        store_s = time.perf_counter() - began
        clock = clock or Clock(None, None, self.rows.clock)
        timings = clock.timings(text=result.text_s, inference=result.inference_s, encode=encode_s,
                                store=store_s)
        finished = self.rows.finish(task_id, batch_size=result.batch_size, timings=timings)
        if finished:
            metrics.count(metrics.AUDIO_SECONDS, result.audio.duration_s)
            record(timings, labels)
        self._finished(task_id, finished)
        if publisher is not None:
            publisher.end(TaskStatus.DONE.value)
        return TaskStatus.DONE if finished else None

    def _finished(self, task_id: str, moved: bool) -> None:
        """Tell ``on_finish`` (the status board) of a row this executor moved to its end."""
        if moved and self.on_finish is not None:
            try:
                self.on_finish(task_id)
            except Exception as exc:  # the row is the truth; the board only speeds up reads
                log.warning("task %s: on_finish failed: %s", task_id, exc)

    def _end_lead(self, key: str) -> None:
        """This process's synthesis of ``key`` ended: wake the identical requests that waited."""
        with self._inflight_lock:
            event = self._inflight.pop(key, None)
        if event is not None:
            event.set()

    def fail(self, task_id: str, code: str, message: str, detail: BaseException | None = None) -> TaskStatus:
        """Mark a task failed (unless it already finished) with ``message``, which clients read;
        ``detail``, the exception behind it, goes to the log only."""
        failed = self.rows.fail(task_id, code, message)
        if failed:
            pool, queue = self.rows.placement(task_id)
            metrics.count(metrics.TASKS_FAILED, pool=pool, lane=lane_of(queue).value, code=code)
        self._finished(task_id, failed)
        if detail is None:
            log.warning("task %s failed: %s: %s", task_id, code, message)
        else:  # the exception's text can name hosts, paths or a URL: the log has it, not the row
            log.warning("task %s failed: %s: %s", task_id, code,
                        redacted(f"{type(detail).__name__}: {detail}"))
        return TaskStatus.FAILED

    def fail_unexpected(self, task_id: str, exc: BaseException) -> TaskStatus:
        """Mark a task failed after retries ran out on an unexpected error: its row says what
        kind of failure (a sentence per code), the log says what happened."""
        return self.fail(task_id, *public_error(exc), detail=exc)


def lane_priority(queue: str) -> int:
    """Engine priority of a task from its queue: bulk (book) work yields to interactive requests."""
    return 1 if lane_of(queue) is Lane.BULK else 0



TIMINGS = ("queue_ms", "text_ms", "inference_ms", "encode_ms", "store_ms", "total_ms")


@dataclass(frozen=True)
class Clock:
    """A task's times: when its row was made and first claimed, and the clock to read the end by."""

    created_at: datetime | None
    started_at: datetime | None
    now: Callable[[], datetime]

    def timings(self, **stages_s: float) -> dict[str, float | None]:
        """``TIMINGS`` in ms: the queue wait and the total from the row's times, the rest from
        ``stages_s`` (``None`` for a stage that did not run, as on a cache hit)."""
        def between(start: datetime | None, end: datetime | None) -> float | None:
            return None if start is None or end is None else round((end - start).total_seconds() * 1000, 1)

        ms = {f"{name}_ms": round(seconds * 1000, 1) for name, seconds in stages_s.items()}
        return {"queue_ms": between(self.created_at, self.started_at), "text_ms": ms.get("text_ms"),
                "inference_ms": ms.get("inference_ms"), "encode_ms": ms.get("encode_ms"),
                "store_ms": ms.get("store_ms"), "total_ms": between(self.created_at, self.now())}


def record(timings: dict[str, float | None], labels: dict[str, str] | None) -> None:
    """Count a finished task and its stages in the metrics."""
    if labels is not None:
        metrics.count(metrics.TASKS_FINISHED, 1.0, **labels)
    for name in TIMINGS:
        value = timings.get(name)
        if value is not None:
            metrics.stage(name[:-3], value / 1000)
