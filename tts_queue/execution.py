"""The worker side of a task: claim its row, synthesize (or find it cached), store, finish.

Safe to run more than once for the same task id (at-least-once delivery): finished tasks are
skipped, a cancelled task is never started, and attempts are counted in the row so a task that
keeps killing workers is failed instead of redelivered forever. Identical requests (same cache
key) that reach one worker together are synthesized once: followers wait for the leader's audio.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime

from sqlalchemy import update

from tts_queue.cache import AudioCache
from tts_queue.db import Database, TaskRow, utcnow
from tts_queue.errors import InvalidRequest, SynthesisError, TTSQueueError, VoiceError
from tts_queue.request import SynthesisRequest
from tts_queue.status import TaskStatus
from tts_queue.synthesizer import Synthesizer

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
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.db = db
        self.cache = cache
        self.synthesizer = synthesizer
        self.worker_name = worker_name
        self.max_attempts = max_attempts
        self.clock = clock
        self.leader_timeout_s = 600.0
        self._inflight: dict[str, threading.Event] = {}
        self._inflight_lock = threading.Lock()

    def execute(self, task_id: str, worker_name: str | None = None) -> TaskStatus | None:
        """Process one task; return its final status, or ``None`` if there was nothing to do."""
        row = self._claim(task_id, worker_name or self.worker_name)
        if row is None:
            return None
        if row.attempts > self.max_attempts:
            return self.fail(task_id, "too_many_attempts",
                             f"gave up after {self.max_attempts} attempts (worker crashes or errors)")
        request = SynthesisRequest.from_dict(row.request)
        with self._inflight_lock:
            leader = self._inflight.get(row.cache_key)
            if leader is None:
                self._inflight[row.cache_key] = threading.Event()
        if leader is not None:
            # An identical request is being synthesized in this process: wait for its audio.
            leader.wait(timeout=self.leader_timeout_s)
        if self.cache.peek(row.cache_key) is not None:
            if leader is None:
                self._release(row.cache_key)
            return self._done(task_id, batch_size=None)
        if leader is not None:  # the leader failed; do the work ourselves
            return self.execute_uncached(task_id, row.cache_key, request)
        try:
            return self.execute_uncached(task_id, row.cache_key, request)
        finally:
            self._release(row.cache_key)

    def execute_uncached(self, task_id: str, key: str, request: SynthesisRequest) -> TaskStatus:
        """Synthesize, store atomically, and finish the row."""
        try:
            result = self.synthesizer.synthesize(request, group=task_id)
        except PERMANENT as exc:
            return self.fail(task_id, exc.code, exc.message)
        data = result.audio.encode(request.format)
        self.cache.put(key, request.format, request.voice, data,
                       result.audio.duration_s, result.alignment.to_dict())
        return self._done(task_id, batch_size=result.batch_size)

    def _release(self, key: str) -> None:
        with self._inflight_lock:
            event = self._inflight.pop(key, None)
        if event is not None:
            event.set()

    def fail(self, task_id: str, code: str, message: str) -> TaskStatus:
        """Mark a task failed (unless it already finished)."""
        self._update(task_id, (TaskStatus.QUEUED, TaskStatus.RUNNING), status=TaskStatus.FAILED,
                     finished_at=self.clock(), error_code=code, error_message=message)
        log.warning("task %s failed: %s: %s", task_id, code, message)
        return TaskStatus.FAILED

    def fail_unexpected(self, task_id: str, exc: BaseException) -> TaskStatus:
        """Mark a task failed after retries ran out on an unexpected error."""
        code = exc.code if isinstance(exc, TTSQueueError) else "internal_error"
        return self.fail(task_id, code, f"{type(exc).__name__}: {exc}")

    def _claim(self, task_id: str, worker_name: str) -> TaskRow | None:
        """queued|running -> running, counting the attempt; ``None`` if finished or unknown."""
        now = self.clock()
        with self.db.write() as session:
            # FOR UPDATE: a cancel or a second delivery waits for this claim (PostgreSQL);
            # SQLite's BEGIN IMMEDIATE already serializes writers.
            row = session.get(TaskRow, task_id, with_for_update=True)
            if row is None:
                log.warning("task %s is not in the database; dropping the message", task_id)
                return None
            if row.status.finished:
                return None
            row.status = TaskStatus.RUNNING
            row.started_at = row.started_at or now
            row.claimed_at = now
            row.attempts += 1
            row.worker = worker_name
            return row

    def _done(self, task_id: str, batch_size: int | None) -> TaskStatus:
        self._update(task_id, (TaskStatus.RUNNING,), status=TaskStatus.DONE,
                     finished_at=self.clock(), batch_size=batch_size)
        return TaskStatus.DONE

    def _update(self, task_id: str, when: tuple[TaskStatus, ...], **values: object) -> None:
        with self.db.write() as session:
            session.execute(
                update(TaskRow).where(TaskRow.id == task_id, TaskRow.status.in_(when)).values(**values)
            )
