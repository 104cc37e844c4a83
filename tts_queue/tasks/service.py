"""The task service: submit, look up, cancel, and find audio for tasks (the API's core).

Task rows in the database are the truth about status (Celery reports unknown ids as PENDING, so
it is never asked). The queue is reached through the ``Dispatcher`` seam
(``tts_queue.tasks.dispatcher``); a task's end, whoever ends it, goes through ``TaskEnds``.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import IO, Any

from sqlalchemy import select

from tts_queue import metrics
from tts_queue.broker.names import queue_name
from tts_queue.broker.streams import AudioStreams
from tts_queue.broker.watch import QueueWatch
from tts_queue.db import Database, check_id, get_by_id, owned, utcnow
from tts_queue.enums import Lane, TaskStatus
from tts_queue.errors import (
    AudioExpired,
    AudioNotReady,
    NoWorker,
    ServiceUnavailable,
    StorageFull,
    TaskNotCancellable,
    TaskNotFound,
)
from tts_queue.settings import Settings
from tts_queue.storage.cache import AudioCache, CachedAudio
from tts_queue.synthesis.estimate.work import check_work, estimate_of, pinned_estimate
from tts_queue.synthesis.formats import mime_type
from tts_queue.synthesis.registry import VoiceRegistry
from tts_queue.synthesis.request import SynthesisRequest, build_request, cache_key
from tts_queue.tables import CacheEntry, TaskRow
from tts_queue.tasks.backlog import waiting
from tts_queue.tasks.board import StatusBoard, shown
from tts_queue.tasks.dispatcher import Dispatcher
from tts_queue.tasks.ending import TaskEnds
from tts_queue.tasks.rows import NewTask, TaskRows
from tts_queue.tasks.view import AudioFile, TaskView
from tts_queue.webhooks.callbacks import CallbackRows

log = logging.getLogger(__name__)
WAITING_CALLBACK = {"state": "waiting", "attempts": 0, "last_status": None}
FRESH_DOWNLOAD = timedelta(minutes=1)  # a download this soon after the end records no cache access


class TaskService:
    """Submit-and-poll over the database, the cache and a dispatcher."""

    def __init__(
        self,
        settings: Settings,
        db: Database,
        cache: AudioCache,
        registry: VoiceRegistry,
        dispatcher: Dispatcher,
        ends: TaskEnds,
        callbacks: CallbackRows,
        board: StatusBoard | None,
        streams: AudioStreams | None,
        watch: QueueWatch,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.settings = settings
        self.db = db
        self.cache = cache
        self.registry = registry
        self.dispatcher = dispatcher
        self.ends = ends
        self.rows: TaskRows = ends.rows
        self.callbacks = callbacks
        self.board = board  # status records in Redis: polling reads no database
        self.streams = streams  # streamed tasks' audio in Redis
        self.watch = watch  # live workers (heartbeats) and the finished signals long-polls wait on
        self.clock = clock

    def key_of(self, request: SynthesisRequest, owner: str | None = None) -> str:
        """The cache key of a validated request (of its owner's own cache with
        ``TTS_CACHE_SCOPE=key``)."""
        digest = self.registry.voice_digest(self.registry.get(request.voice))
        if owner is not None and self.settings.api.cache_scope == "key":
            digest = f"{digest}:owner:{owner}"
        return cache_key(request, digest)

    def pool_for(self, request: SynthesisRequest, preferred: str | None = None) -> str:
        """The worker pool that serves a request: the caller's choice, the voice's, or the default."""
        routing = self.settings.routing
        return preferred or routing.voice_pools.get(request.voice, routing.default_pool)

    def require_worker(self, pool: str) -> bool:
        """Whether a live worker serves ``pool`` (cache hits never need one); without one,
        ``NoWorker``, unless an autoscaler starts its workers from zero on its backlog
        (``TTS_SCALE_FROM_ZERO``) and fewer than ``TTS_SCALE_FROM_ZERO_MAX_TASKS`` wait for it."""
        if self.watch.pool_alive(pool):
            return True
        routing = self.settings.routing
        if pool not in routing.pools_from_zero:
            raise NoWorker(f"no live worker serves the {pool!r} pool; start one with "
                           f"`tts-queue worker --pool {pool}` or retry later")
        held = waiting(self.db, pool, self.settings.services.queue_prefix)
        if held >= routing.from_zero_max_tasks:
            raise NoWorker(f"no worker of the {pool!r} pool is alive yet and {held} tasks already wait "
                           f"for one (TTS_SCALE_FROM_ZERO_MAX_TASKS); retry later")
        return False

    def waiting_for(self, view: TaskView) -> TaskView:
        """``view``, saying ``waiting_for: worker`` while it is queued for a pool at zero none of
        whose workers is alive yet (``TTS_SCALE_FROM_ZERO``)."""
        if (view.status is TaskStatus.QUEUED and view.pool in self.settings.routing.pools_from_zero
                and not self.watch.pool_alive(view.pool)):
            return dataclasses.replace(view, waiting_for="worker")
        return view

    def require_storage(self) -> None:
        """Raise ``StorageFull`` when the audio store has less free space than the reserve."""
        free = self.cache.store.storage.free_bytes()  # a bucket has no free-space figure
        if free is not None and free < self.settings.cache.storage_reserve_bytes:
            raise StorageFull(f"the audio store has {free} bytes free (reserve "
                              f"{self.settings.cache.storage_reserve_bytes}); retry once space is freed")

    def submit(
        self, payload: Mapping[str, Any], pool: str | None = None, keep: bool = False,
        owner: str | None = None, stream: bool = False, callback_url: str | None = None,
        base_url: str = "", address: str | None = None,
    ) -> TaskView:
        """Validate and queue a request; a cache hit is answered at once as ``done`` (a new task of
        ``owner``, whoever's request made the audio; ``address``: with auth off, the client's,
        whose fair share of the workers it runs in). ``stream``: the worker publishes the audio
        as it is made (``tts_queue.broker.streams``). ``callback_url``: the task's JSON is POSTed
        there when it finishes (links under ``base_url``)."""
        if callback_url is not None:
            callback_url = self.callbacks.policy.check(callback_url, owner)
            self.callbacks.check_due(owner, self.settings.webhooks.key_max_due)
        request = build_request(payload, self.registry, self.settings)
        key = self.key_of(request, owner)
        chosen_pool = self.pool_for(request, pool)
        check_work(request, self.registry.get(request.voice), chosen_pool, self.settings)
        queue = queue_name(chosen_pool, Lane.INTERACTIVE, self.settings.services.queue_prefix)
        alive = True
        with self.db.write_connection() as session:
            hit = self.cache.lookup(key, session)
            pin_bytes, estimate_s = None, None
            if hit is None:
                alive = self.require_worker(chosen_pool)  # nothing is written when no worker would run it
                self.require_storage()
                spec = self.registry.get(request.voice)
                estimate_s = estimate_of(request, spec)  # the backlog's audio seconds
                if keep:
                    pin_bytes = pinned_estimate(request, spec)
            row = self.rows.add(session, NewTask(
                str(uuid.uuid4()), key, request.to_dict(), chosen_pool, queue, self.clock(),
                cache_hit=hit is not None, owner=owner, address=address, keep=keep,
                callback=callback_url is not None, dispatched=True, pin_bytes=pin_bytes,
                estimate_s=estimate_s))  # sent after this commit
            if callback_url is not None:
                self.callbacks.register(session, row.id, "task", callback_url, base_url,
                                        finished=hit is not None, owner=owner)
        metrics.count(metrics.TASKS_SUBMITTED, pool=chosen_pool, lane=Lane.INTERACTIVE.value)
        if hit is not None:
            self.ends.answered(row, hit.duration_s)
            pending = {**WAITING_CALLBACK, "state": "pending"} if callback_url is not None else None
            return TaskView.of(row, hit.duration_s, pending)
        metrics.count(metrics.CACHE_MISSES)
        stream = stream and self.streams is not None
        try:
            if stream and self.streams is not None:  # the reader's mark first: the worker
                self.streams.attach(row.id)  # appends only while it is there
            self.dispatcher.dispatch(row.id, row.queue, stream=stream)
        except Exception as exc:
            log.warning("task %s: the broker is unreachable: %s", row.id, exc)
            # an end like any other: its webhook is due, waiters wake, the failure is counted
            self.ends.fail(row.id, ServiceUnavailable.code,
                           "the job queue was unreachable; nothing was queued")
            raise ServiceUnavailable("the job queue is unreachable; nothing was queued") from exc
        view = TaskView.of(row, callback=dict(WAITING_CALLBACK) if callback_url is not None else None)
        self._show(row, view)
        return view if alive else dataclasses.replace(view, waiting_for="worker")

    def _show(self, row: TaskRow, view: TaskView) -> None:
        """Put a task's state on the status board, if it has a record there."""
        if self.board is not None and shown(row):
            self.board.show(view, row.owner)

    def row(self, task_id: str, owner: str | None = None) -> TaskRow:
        """The row of ``task_id`` or ``TaskNotFound`` (malformed ids, and another owner's tasks,
        included)."""
        return get_by_id(self.db, TaskRow, task_id, TaskNotFound, "task", owner)

    def _row_and_audio(self, task_id: str, owner: str | None) -> tuple[TaskRow, CachedAudio | None]:
        """A task's row and its live cache entry (file not checked) in one Core read, or
        ``TaskNotFound`` as ``row`` raises it: a status read or a download costs one statement,
        not two ORM reads."""
        check_id(task_id, TaskNotFound, "task")
        with self.db.read_connection() as connection:
            row, entry = self.rows.with_audio(connection, task_id) or (None, None)
        return owned(row, task_id, TaskNotFound, "task", owner), entry

    def get(self, task_id: str, owner: str | None = None, fresh: bool = False) -> TaskView:
        """Status of a task, with the audio's duration once done and its callback's state: from
        the status board when it has the task (one Redis read), else (or ``fresh``) from the
        database."""
        if self.board is not None and not fresh:
            record = self.board.get(task_id)
            if record is not None and (owner is None or record.get("owner") == owner):
                return self.waiting_for(TaskView.from_record(record))
        row, entry = self._row_and_audio(task_id, owner)
        duration = None
        if row.status is TaskStatus.DONE:
            entry = self.cache.present(entry)
            duration = entry.duration_s if entry else None
        callback = None
        if row.callback:
            with self.db.read() as session:
                callback = self.callbacks.summary(session, task_id)
        return self.waiting_for(TaskView.of(row, duration, callback))

    def wait(self, view: TaskView, seconds: float, read_first: bool = True) -> TaskView:
        """A long-poll: ``view`` once its task finished, or as it is after ``seconds``. It waits
        on the worker's finished signal and re-reads the task on it, and every
        ``TTS_WAIT_RECHECK_S`` in case a signal was lost. ``read_first``: the row, never the board,
        for the state the caller saw unfinished (a record whose update was lost while Redis was
        down stays stale for its TTL, a restarted Redis even reloads it, and would hold the waiter
        for that long); after a wake, a finished record is final (``current``)."""
        recheck = self.settings.api.wait_recheck_s
        deadline = time.monotonic() + seconds
        if read_first:
            view = self.get(view.id, fresh=True)
        while not view.status.finished:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self.watch.wait_finished(view.id, min(left, recheck))
            view = self.current(view.id)
        return view

    def current(self, task_id: str) -> TaskView:
        """A waiter's read of a task it may see (ownership checked already): a finished record on
        the status board is final (nothing moves a finished task, and tasks whose view changes
        after their end, with a callback, have no record), so it is answered from the board; any
        other state is read from the row (an unfinished record whose update was lost while Redis
        was down would stay stale for its TTL)."""
        if self.board is not None:
            record = self.board.get(task_id)
            if record is not None and TaskStatus(record["status"]).finished:
                return TaskView.from_record(record)
        return self.get(task_id, fresh=True)

    def recent(self, owner: str | None, limit: int) -> list[TaskView]:
        """``owner``'s newest ``limit`` tasks (book sentences excepted), newest first; with auth off
        (``owner`` None), the tasks submitted without a key."""
        with self.db.read() as session:
            rows = list(session.scalars(
                select(TaskRow).where(TaskRow.owner.is_(None) if owner is None else TaskRow.owner == owner,
                                      TaskRow.book_id.is_(None))
                .order_by(TaskRow.created_at.desc()).limit(limit)))
            keys = {row.cache_key for row in rows if row.status is TaskStatus.DONE}
            durations: dict[str, float] = {}
            if keys:
                durations = {key: seconds for key, seconds in session.execute(
                    select(CacheEntry.key, CacheEntry.duration_s).where(CacheEntry.key.in_(keys)))}
        return [TaskView.of(row, durations.get(row.cache_key)) for row in rows]

    def cancel(self, task_id: str, owner: str | None = None) -> TaskView:
        """Cancel a queued task; running or finished tasks raise ``TaskNotCancellable``."""
        self.row(task_id, owner)
        if self.ends.cancel(task_id) is None:
            current = self.row(task_id).status.value
            raise TaskNotCancellable(f"task {task_id} is {current}; only queued tasks can be cancelled")
        return self._read(task_id)

    def _read(self, task_id: str) -> TaskView:
        """The task's state from its row (never the board: after a change)."""
        return self.get(task_id, fresh=True)

    def unpin(self, task_id: str, owner: str | None = None) -> TaskView:
        """Release a task's keep pin: its audio follows the normal retention again."""
        row = self.row(task_id, owner)
        self.rows.set_keep(task_id, False)
        view = self._read(task_id)
        self._show(row, view)
        return view

    def audio(self, task_id: str, owner: str | None = None) -> AudioFile:
        """The finished audio of a task, or ``AudioNotReady``."""
        # The download that follows a task's end reads the row and the entry in one statement,
        # without recording an access: it was stored or counted as a hit within the minute
        # (retention's last access is that fresh). A later one records it (``lookup``).
        row, entry = self._row_and_audio(task_id, owner)
        if row.status is not TaskStatus.DONE:
            raise AudioNotReady(f"task {task_id} is {row.status.value}; no audio to serve")
        fresh = row.finished_at is not None and self.clock() - row.finished_at < FRESH_DOWNLOAD
        entry = self.cache.present(entry) if fresh else None
        if not fresh:
            entry = self.cache.lookup(row.cache_key)
        if entry is None:
            raise AudioExpired(f"the audio of task {task_id} has expired from the cache; resubmit")
        return AudioFile(task_id, entry.key, entry.path, entry.format, mime_type(entry.format),
                         entry.size_bytes, entry.duration_s)

    def open_audio(self, audio: AudioFile, start: int = 0) -> IO[bytes]:
        """A seekable reader of the audio; ``AudioExpired`` if it was deleted since the lookup (a
        cleanup, or an object removed from the bucket behind the database's back: forgotten)."""
        try:
            return self.cache.store.open(audio.relative, start)
        except FileNotFoundError:
            raise self.audio_gone(audio) from None

    def audio_gone(self, audio: AudioFile) -> AudioExpired:
        """The error for audio whose file was found missing at download; its row is forgotten
        (unless stored again meanwhile), so the same request is synthesized anew."""
        self.cache.forget_missing(audio.key, audio.relative)
        return AudioExpired(f"the audio of task {audio.task_id} has expired from the cache; resubmit")
