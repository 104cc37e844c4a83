"""The worker side of a task: claim its row, synthesize (or find it cached), store, end it.

Safe to run more than once for the same task id (at-least-once delivery): finished tasks are
skipped, a cancelled task is never started, and attempts are counted in the row so a task that
keeps killing workers is failed instead of redelivered forever. Every write for a task carries the
fence of its claim (``TaskRow.fence``): its end and cache row (``TaskEnds``), the attempt taken
back, its stream; a worker that froze while the task ran elsewhere has its late audio deleted
unpublished. Identical requests (same cache key) that reach one worker together are synthesized
once: followers wait for the leader's audio (``Leaders``). Every end goes through ``TaskEnds``
(``tts_queue.tasks.ending``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from tts_queue import metrics
from tts_queue.broker.names import lane_of
from tts_queue.broker.streams import AudioStreams, StreamPublisher
from tts_queue.db import Executor
from tts_queue.enums import STREAM_FORMATS, Lane, TaskStatus
from tts_queue.errors import (
    InvalidRequest,
    StorageFull,
    StorageUnavailable,
    SynthesisError,
    TooManyAttempts,
    VoiceError,
    public_error,
)
from tts_queue.fairness.threads import Held, KeyShares, OverShare, Parked, Work
from tts_queue.redact import redacted
from tts_queue.storage.cache import AudioCache, CachedAudio
from tts_queue.synthesis.formats import mime_type
from tts_queue.synthesis.request import SynthesisRequest
from tts_queue.synthesis.synthesizer import SynthesisResult, Synthesizer
from tts_queue.tables import TaskRow
from tts_queue.tasks.board import StatusBoard, shown
from tts_queue.tasks.encoding import Encoding, no_room
from tts_queue.tasks.ending import TaskEnds
from tts_queue.tasks.leaders import Leaders
from tts_queue.tasks.rows import Suspect
from tts_queue.tasks.timings import TaskTimes
from tts_queue.tasks.view import TaskView

log = logging.getLogger(__name__)

# Errors that another attempt cannot fix: the task fails at once with the error's code.
PERMANENT = (InvalidRequest, VoiceError, SynthesisError)


class WorkerStopping(Exception):  # noqa: N818 - a signal to send the task back, not an error
    """The worker has handed back what it held and is exiting: the task is not claimed here."""


class TaskExecutor:
    """Runs task ids through the synthesizer and ends their rows through ``TaskEnds``."""

    def __init__(self, cache: AudioCache, synthesizer: Synthesizer, ends: TaskEnds, worker_name: str,
                 board: StatusBoard | None, streams: AudioStreams | None, max_attempts: int = 4,
                 storage_floor_bytes: int = 0, shares: KeyShares | None = None,
                 short_task_s: float = 0.0) -> None:
        self.cache = cache
        self.synthesizer = synthesizer
        self.ends = ends
        self.rows = ends.rows
        self.worker_name = worker_name
        self.board = board  # a claimed task shows as running there
        self.streams = streams  # where a streamed task's audio goes as it is made
        self.max_attempts = max_attempts
        # Audio is not written into the last ``storage_floor_bytes`` of a local disk: that part is
        # left to the broker's log and the database sharing it (``tts-queue up``), so a full disk
        # stops new audio, not the queue.
        self.storage_floor_bytes = storage_floor_bytes
        self.leaders = Leaders()
        # each key's share of this worker's threads (``None``: no cap); tasks refused one wait
        # there until ``resend`` (the worker's: back to the broker) sends them on
        self.shares = shares
        self.short_task_s = short_task_s  # a request of at most this estimated audio is short
        self.resend: Callable[[Parked], None] | None = None
        # Tasks that already died with a worker run one at a time: if one of them is a poison that
        # kills the worker again, only it is charged another attempt, not the innocent tasks that
        # happened to be running beside it the first time.
        self._suspects = threading.Lock()
        # set once the worker's shutdown budget is spent: nothing more is claimed here
        self.stopping = threading.Event()
        self._claims = threading.local()  # each thread's last claim (task id, fence): its late failure

    def execute(self, task_id: str, worker_name: str | None = None,
                stream: bool = False) -> TaskStatus | None:
        """Process one task; return its final status, or ``None`` if there was nothing to do.
        ``stream``: a client is waiting to relay the audio as it is made (``AudioStreams``).
        A task whose key holds its share of this worker's threads raises ``OverShare`` unclaimed
        (its claim rolled back, no attempt counted), parked in ``shares`` until a place frees for
        it (``send_on``). Once the worker is stopping (``stopping``), ``WorkerStopping`` is raised
        unclaimed: send it back."""
        if self.stopping.is_set():
            raise WorkerStopping(f"task {task_id}: the worker is stopping")
        worker = worker_name or self.worker_name
        # the cache is looked up in the claim's transaction (an identical request may have stored
        # the audio since submission): one read transaction fewer for a first attempt
        cached: list[CachedAudio | None] = []
        taken: list[Held] = []

        def look(session: Executor, row: TaskRow) -> None:
            if self.shares is not None:
                work = self.work_of(row)
                try:
                    taken.append(self.shares.take(row.tenant, work, task_id=task_id))
                except OverShare:  # rolled back, and waits here for a place
                    self.shares.park(Parked(task_id, row.queue, stream, row.tenant, work))
                    raise
            cached.append(self.cache.peek(row.cache_key, session))

        try:
            claimed = self.rows.claim_first(task_id, worker, also=look)
            if claimed is Suspect.SUSPECT:  # attempted before: claimed (and run) under the lock
                with self._suspects:
                    if self.stopping.is_set():  # handed back while it waited for the lock
                        raise WorkerStopping(f"task {task_id}: the worker is stopping")
                    return self._execute(task_id, self.rows.claim(task_id, worker), stream)
            return self._execute(task_id, claimed, stream, cached)
        finally:
            for held in taken:
                assert self.shares is not None
                self.shares.release(held)
            if taken:
                self.send_on()

    def work_of(self, row: TaskRow) -> Work:
        """What ``row`` asks a thread for: a book sentence, or a short or long request (by its
        estimated audio; a row without an estimate is long)."""
        if lane_of(row.queue) is Lane.BULK:
            return Work.BULK
        short = row.estimate_s is not None and row.estimate_s <= self.short_task_s
        return Work.SHORT if short else Work.LONG

    def send_on(self) -> int:
        """Send on the parked tasks that would now get a place (``KeyShares.due``); how many. A
        task the broker did not take waits again."""
        if self.shares is None or self.resend is None:
            return 0
        sent = 0
        for task in self.shares.due():
            try:
                self.resend(task)
                sent += 1
            except Exception as exc:  # noqa: BLE001 - the broker is down: it waits for the next try
                log.warning("task %s: could not be sent on (%s); it waits here", task.task_id, exc)
                self.shares.park(task)
        return sent

    def _execute(self, task_id: str, claimed: TaskRow | Suspect | None, stream: bool,
                 cached: Sequence[CachedAudio | None] = ()) -> TaskStatus | None:
        row = self._shown(claimed)
        if row is None:
            return None
        self._claims.last = (task_id, row.fence)
        publisher = StreamPublisher(self.streams, task_id, row.fence) if stream and self.streams else None
        if publisher is not None:
            publisher.claim()  # a frozen worker's stream of this task is refused from now on
        if row.attempts > self.max_attempts:
            status = self.fail(task_id, TooManyAttempts.code,
                               f"gave up after {self.max_attempts} attempts (worker crashes or errors)",
                               fence=row.fence)
            return self._ended(publisher, status)
        times = TaskTimes(row.created_at, row.started_at or self.rows.clock(), self.rows.clock)
        leads = self.leaders.lead(row.cache_key)
        try:
            # what the claim found holds for a leader; a follower waited for a leader who may
            # have stored the audio since, and looks again
            entry = cached[0] if leads and cached else self.cache.peek(row.cache_key)
            if entry is not None:  # in the cache already (or made by the leader we waited for)
                ending = self.ends.done(task_id, batch_size=None, cache_hit=True, timings=times.timings(),
                                        seconds=entry.duration_s, fence=row.fence)
                return self._ended(publisher, TaskStatus.DONE if ending else None)
            return self._ended(publisher, self.synthesize(row, times, publisher))
        finally:
            if leads:
                self.leaders.end(row.cache_key)

    def _shown(self, claimed: TaskRow | Suspect | None) -> TaskRow | None:
        """The claimed row (``None``: nothing to do); an interactive task shows as running."""
        if not isinstance(claimed, TaskRow):
            return None
        row = claimed
        if self.board is not None and shown(row):
            try:
                self.board.show(TaskView.of(row), row.owner)
            except Exception as exc:  # noqa: BLE001 - the board only speeds up reads
                log.warning("task %s: not shown as running: %s", row.id, exc)
        return row

    @staticmethod
    def _ended(publisher: StreamPublisher | None, status: TaskStatus | None) -> TaskStatus | None:
        """Close a streamed task's stream (its reader sends the stored file if nothing streamed)."""
        if publisher is not None and status is not None:
            publisher.end(status.value)
        return status

    def synthesize(self, row: TaskRow, times: TaskTimes,
                   publisher: StreamPublisher | None = None) -> TaskStatus | None:
        """Synthesize, store atomically, and end the row; ``None`` if the row did not move (it
        ended meanwhile). The audio is encoded as sentences finish into a scratch file (so a long
        request's audio is never whole in memory), which is then stored; with a ``publisher``, each
        piece is also published at once, and the file stored is those pieces (``StreamEncoder``)."""
        request = SynthesisRequest.from_dict(row.request)
        encoding = Encoding(request.format, self.cache.store.scratch(),
                            publisher if request.format in STREAM_FORMATS else None)
        try:
            try:
                result = self.synthesizer.synthesize(request, priority=lane_priority(row.queue),
                                                     on_audio=encoding.write, owner=row.tenant)
            except PERMANENT as exc:  # the row keeps a sentence per code; the exception's text is logged
                return self.fail(row.id, *public_error(exc), detail=exc, fence=row.fence)
            stored, store_s = self._store(row, request, result, encoding.finish())
        except (StorageFull, StorageUnavailable):  # waiting for space (or the bucket) is no attempt
            self.rows.uncount_attempt(row.id, row.fence)
            raise
        finally:
            encoding.discard()
        timings = times.timings(text=result.text_s, inference=result.inference_s, encode=encoding.seconds,
                                store=store_s)
        # the cache row and the finish in one transaction (the file is in place already)
        ending = self.ends.done(row.id, batch_size=result.batch_size, timings=timings,
                                seconds=result.duration_s,
                                also=lambda session: self.cache.record(session, stored, request.voice),
                                fence=row.fence)
        if ending is None:  # its claim was lost (it ran elsewhere meanwhile): nothing names this file
            log.warning("task %s: claim %d no longer holds it (run again elsewhere); its audio is "
                        "dropped", row.id, row.fence)
            self.cache.store.delete([stored.path])
            return None
        metrics.count(metrics.AUDIO_SECONDS, result.duration_s)
        return TaskStatus.DONE

    def _store(self, row: TaskRow, request: SynthesisRequest, result: SynthesisResult,
               path: Path) -> tuple[CachedAudio, float]:
        """Store the encoded file (recorded with the finish); what was stored and the seconds taken.
        No room (``StorageFull``) or no bucket (``StorageUnavailable``) is the caller's to wait
        out; nothing partial is ever left (the file moves in whole)."""
        size = path.stat().st_size
        free = self.cache.store.storage.free_bytes() if self.storage_floor_bytes else None
        if free is not None and free - size < self.storage_floor_bytes:
            raise StorageFull(f"no room to store the audio of task {row.id}: {free} bytes free, the "
                              f"last {self.storage_floor_bytes} are kept for the broker and database")
        began = time.perf_counter()
        with no_room(path):
            stored = self.cache.store_file(row.cache_key, request.format, path, result.duration_s,
                                           result.alignment.to_dict(), mime_type(request.format))
        return stored, time.perf_counter() - began

    def fail(self, task_id: str, code: str, message: str, detail: BaseException | None = None,
             fence: int | None = None) -> TaskStatus:
        """Fail a task (unless it already ended, or ``fence``, the claim, no longer holds it) with
        ``message``, which clients read; ``detail``, the exception behind it, goes to the log only."""
        self.ends.fail(task_id, code, message, fence)
        if detail is None:
            log.warning("task %s failed: %s: %s", task_id, code, message)
        else:  # the exception's text can name hosts, paths or a URL: the log has it, not the row
            log.warning("task %s failed: %s: %s", task_id, code,
                        redacted(f"{type(detail).__name__}: {detail}"))
        return TaskStatus.FAILED

    def fail_unexpected(self, task_id: str, exc: BaseException) -> TaskStatus:
        """Fail a task after retries ran out on an unexpected error (under this thread's claim of
        it, when it got one): its row says what kind of failure (a sentence per code), the log says
        what happened."""
        claimed, fence = getattr(self._claims, "last", (None, None))
        return self.fail(task_id, *public_error(exc), detail=exc, fence=fence if claimed == task_id else None)


def lane_priority(queue: str) -> int:
    """Engine priority of a task from its queue: bulk (book) work yields to interactive requests."""
    return 1 if lane_of(queue) is Lane.BULK else 0
