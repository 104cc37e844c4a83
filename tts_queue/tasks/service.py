"""The task service: submit, look up, cancel, and find audio for tasks (the API's core).

Task rows in the database are the truth about status (Celery reports unknown ids as PENDING, so
it is never asked). ``Dispatcher`` is the seam to the queue: the Celery adapter implements it in
``workers/``; tests pass a fake.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import IO, Any, Protocol

from sqlalchemy import select

from tts_queue import metrics
from tts_queue.db import Database, get_by_id, utcnow
from tts_queue.enums import Lane, TaskStatus
from tts_queue.errors import (
    AudioExpired,
    AudioNotReady,
    NoWorker,
    ServiceUnavailable,
    StorageFull,
    TaskFailed,
    TaskNotCancellable,
    TaskNotFound,
    public_message,
)
from tts_queue.settings import Settings
from tts_queue.storage.cache import AudioCache
from tts_queue.synthesis.encoder import mime_type
from tts_queue.synthesis.registry import VoiceRegistry
from tts_queue.synthesis.request import SynthesisRequest, build_request, cache_key
from tts_queue.tables import CacheEntry, TaskRow
from tts_queue.tasks.board import StatusBoard, iso
from tts_queue.tasks.callbacks import Callbacks, UrlPolicy
from tts_queue.tasks.keys import lane_of, queue_name
from tts_queue.tasks.rows import TaskRows

log = logging.getLogger(__name__)


class Dispatcher(Protocol):
    """Puts a task id on a queue."""

    def dispatch(self, task_id: str, queue: str, stream: bool = False) -> None:
        """Enqueue ``task_id`` on ``queue`` (``stream``: its audio is published as it is made);
        raise on failure."""

    def deliver(self, subject_id: str, countdown: float = 0.0) -> None:
        """Enqueue the delivery of a task's or book's callback (``tts_queue.tasks.callbacks``)."""


@dataclass(frozen=True)
class TaskView:
    """What clients see of a task."""

    id: str
    status: TaskStatus
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    error_code: str | None
    error_message: str | None
    duration_s: float | None
    format: str
    voice: str
    cache_hit: bool = False
    keep: bool = False
    callback: dict[str, Any] | None = None  # {state, attempts, last_status} when it has one
    timings: dict[str, Any] | None = None  # ms per stage once finished by a worker (executor.TIMINGS)

    @classmethod
    def of(cls, row: TaskRow, duration_s: float | None = None,
           callback: dict[str, Any] | None = None) -> TaskView:
        """View of a row."""
        return cls(
            id=row.id, status=row.status, created_at=row.created_at, started_at=row.started_at,
            finished_at=row.finished_at, error_code=row.error_code, error_message=row.error_message,
            duration_s=duration_s, format=row.request.get("format", "wav"),
            voice=row.request.get("voice", ""), cache_hit=bool(row.cache_hit), keep=bool(row.keep),
            callback=callback, timings=row.timings,
        )

    def record(self, owner: str | None) -> dict[str, Any]:
        """This view as a status board record (``tts_queue.tasks.board``)."""
        return {"id": self.id, "status": self.status.value, "created_at": iso(self.created_at),
                "started_at": iso(self.started_at), "finished_at": iso(self.finished_at),
                "error_code": self.error_code, "error_message": self.error_message,
                "duration_s": self.duration_s, "format": self.format, "voice": self.voice,
                "cache_hit": self.cache_hit, "keep": self.keep, "owner": owner, "timings": self.timings}

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> TaskView:
        """The view a status board record holds."""
        def when(value: str | None) -> datetime | None:
            return datetime.fromisoformat(value) if value else None

        return cls(id=record["id"], status=TaskStatus(record["status"]),
                   created_at=datetime.fromisoformat(record["created_at"]),
                   started_at=when(record["started_at"]), finished_at=when(record["finished_at"]),
                   error_code=record["error_code"], error_message=record["error_message"],
                   duration_s=record["duration_s"], format=record["format"], voice=record["voice"],
                   cache_hit=record["cache_hit"], keep=record["keep"], timings=record.get("timings"))


def task_document(view: TaskView, base_url: str) -> dict[str, Any]:
    """The JSON form of a task, its links under ``base_url`` (the API's address, ending in ``/``):
    what ``GET /v1/tasks/<id>`` answers and what a callback POSTs."""
    status_url = f"{base_url}v1/tasks/{view.id}"
    body: dict[str, Any] = {
        "task_id": view.id,
        "status": view.status.value,
        "status_url": status_url,
        "voice": view.voice,
        "format": view.format,
        "created_at": view.created_at.isoformat(),
        "started_at": view.started_at.isoformat() if view.started_at else None,
        "finished_at": view.finished_at.isoformat() if view.finished_at else None,
        "cache_hit": view.cache_hit,
        "keep": view.keep,
    }
    body["timings"] = view.timings or None
    if view.status is TaskStatus.DONE:
        body["audio_url"] = f"{status_url}/audio"
        body["duration_s"] = round(view.duration_s, 3) if view.duration_s is not None else None
    if view.error_code:  # a server-side failure reads as its code's sentence, even in an old row
        body["error"] = {"code": view.error_code, "message": public_message(
            view.error_code, view.error_message or "", TaskFailed.http_status)}
    if view.callback is not None:
        body["callback"] = view.callback
    return body


@dataclass(frozen=True)
class AudioFile:
    """A task's finished audio in the store."""

    task_id: str
    key: str
    relative: str
    format: str
    mime_type: str
    size_bytes: int
    duration_s: float

    @property
    def filename(self) -> str:
        """The name a download is saved as."""
        return f"{self.task_id}.{self.format}"


class TaskService:
    """Submit-and-poll over the database, the cache and a dispatcher."""

    def __init__(
        self,
        settings: Settings,
        db: Database,
        cache: AudioCache,
        registry: VoiceRegistry,
        dispatcher: Dispatcher,
        clock: Callable[[], datetime] = utcnow,
        pool_alive: Callable[[str], bool] | None = None,
        board: StatusBoard | None = None,
    ) -> None:
        self.settings = settings
        self.board = board  # status records in Redis: polling reads no database
        self.db = db
        self.cache = cache
        self.registry = registry
        self.dispatcher = dispatcher
        self.clock = clock
        self.pool_alive = pool_alive
        self.rows = TaskRows(db, clock, timedelta(seconds=settings.worker.lease_s))
        self.callbacks = Callbacks(db, clock, UrlPolicy.from_settings(settings.webhooks),
                                   timedelta(seconds=settings.worker.lease_s))

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

    def require_worker(self, pool: str) -> None:
        """Raise ``NoWorker`` when no live worker serves ``pool`` (cache hits never need one)."""
        if self.pool_alive is not None and not self.pool_alive(pool):
            raise NoWorker(f"no live worker serves the {pool!r} pool; start one with "
                           f"`tts-queue worker --pool {pool}` or retry later")

    def require_storage(self) -> None:
        """Raise ``StorageFull`` when the audio store has less free space than the reserve."""
        free = self.cache.store.storage.free_bytes()  # a bucket has no free-space figure
        if free is not None and free < self.settings.cache.storage_reserve_bytes:
            raise StorageFull(f"the audio store has {free} bytes free (reserve "
                              f"{self.settings.cache.storage_reserve_bytes}); retry once space is freed")

    def submit(
        self, payload: Mapping[str, Any], lane: Lane = Lane.INTERACTIVE, book_id: str | None = None,
        pool: str | None = None, keep: bool = False, owner: str | None = None, stream: bool = False,
        callback_url: str | None = None, base_url: str = "",
    ) -> TaskView:
        """Validate and queue a request; a cache hit is answered at once as ``done`` (a new task of
        ``owner``, whoever's request made the audio). ``stream``: the worker publishes the audio
        as it is made (``tts_queue.tasks.streams``). ``callback_url``: the task's JSON is POSTed
        there when it finishes (links under ``base_url``)."""
        if callback_url is not None:
            callback_url = self.callbacks.policy.check(callback_url)
        request = build_request(payload, self.registry, self.settings)
        key = self.key_of(request, owner)
        chosen_pool = self.pool_for(request, pool)
        row = TaskRow(
            id=str(uuid.uuid4()), cache_key=key, request=request.to_dict(), pool=chosen_pool,
            queue=queue_name(chosen_pool, lane, self.settings.services.queue_prefix), book_id=book_id,
            created_at=self.clock(), keep=keep, owner=owner,
        )
        with self.db.write() as session:
            hit = self.cache.lookup(key, session)
            if hit is None:
                self.require_worker(chosen_pool)  # nothing is written when no worker would run it
                self.require_storage()
            self.rows.add(session, row, cache_hit=hit is not None)
            if callback_url is not None:
                self.callbacks.register(session, row.id, "task", callback_url, base_url,
                                        finished=hit is not None)
        metrics.count(metrics.TASKS_SUBMITTED, pool=chosen_pool, lane=lane.value)
        if hit is not None:
            metrics.count(metrics.CACHE_HITS, where="submit")
            metrics.count(metrics.TASKS_FINISHED, pool=chosen_pool, lane=lane.value)
        else:
            metrics.count(metrics.CACHE_MISSES)
        callback = {"state": "pending" if hit else "waiting", "attempts": 0, "last_status": None} \
            if callback_url is not None else None
        if hit is not None:
            view = TaskView.of(row, hit.duration_s, callback)
            if callback_url is not None:
                self.send_callback(row.id)
            elif book_id is None:
                self.post(view, owner)
            return view
        try:
            if stream:
                self.dispatcher.dispatch(row.id, row.queue, stream=True)
            else:
                self.dispatcher.dispatch(row.id, row.queue)
        except Exception as exc:
            log.warning("task %s: the broker is unreachable: %s", row.id, exc)
            self.rows.fail(row.id, "service_unavailable", "the job queue was unreachable; nothing was queued")
            raise ServiceUnavailable("the job queue is unreachable; nothing was queued") from exc
        self.rows.mark_dispatched([row.id])
        view = TaskView.of(row, callback=callback)
        if callback is None and book_id is None:
            self.post(view, owner)
        return view

    def publish(self, task: TaskRow | str) -> None:
        """Put a task's state as its row says now on the status board (the worker, after a claim
        and a finish); book sentences and tasks with a callback have no record."""
        if self.board is None:
            return
        row = task if isinstance(task, TaskRow) else self.row(task)
        if row.book_id is not None:
            return
        with self.db.read() as session:
            if self.callbacks.summary(session, row.id) is not None:
                return
        duration = None
        if row.status is TaskStatus.DONE:
            entry = self.cache.peek(row.cache_key)
            duration = entry.duration_s if entry else None
        self.board.put(TaskView.of(row, duration).record(row.owner))

    def post(self, view: TaskView, owner: str | None) -> None:
        """Put a task's new state on the status board (interactive tasks without a callback)."""
        if self.board is not None and view.callback is None:
            self.board.put(view.record(owner))

    def send_callback(self, subject_id: str) -> None:
        """Queue the delivery of a due callback (a lost message is sent again by the sweep)."""
        deliver = getattr(self.dispatcher, "deliver", None)
        if deliver is None:
            return
        try:
            deliver(subject_id)
        except Exception as exc:  # the sweep sends due deliveries whose message never left
            log.warning("callback of %s: the broker is unreachable: %s", subject_id, exc)

    def row(self, task_id: str, owner: str | None = None) -> TaskRow:
        """The row of ``task_id`` or ``TaskNotFound`` (malformed ids, and another owner's tasks,
        included)."""
        return get_by_id(self.db, TaskRow, task_id, TaskNotFound, "task", owner)

    def get(self, task_id: str, owner: str | None = None, fresh: bool = False) -> TaskView:
        """Status of a task, with the audio's duration once done and its callback's state: from
        the status board when it has the task (one Redis read), else (or ``fresh``) from the
        database."""
        if self.board is not None and not fresh:
            record = self.board.get(task_id)
            if record is not None and (owner is None or record.get("owner") == owner):
                return TaskView.from_record(record)
        row = self.row(task_id, owner)
        duration = None
        if row.status is TaskStatus.DONE:
            entry = self.cache.peek(row.cache_key)
            duration = entry.duration_s if entry else None
        with self.db.read() as session:
            callback = self.callbacks.summary(session, task_id)
        return TaskView.of(row, duration, callback)

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
        row = self.row(task_id, owner)
        if not self.rows.cancel(task_id):
            current = self.row(task_id).status.value
            raise TaskNotCancellable(f"task {task_id} is {current}; only queued tasks can be cancelled")
        metrics.count(metrics.TASKS_CANCELLED, pool=row.pool, lane=lane_of(row.queue).value)
        if self.callbacks.due(task_id):
            self.send_callback(task_id)
        view = self._read(row.id)
        if row.book_id is None:
            self.post(view, row.owner)
        return view

    def _read(self, task_id: str) -> TaskView:
        """The task's state from its row (never the board: after a change)."""
        return self.get(task_id, fresh=True)

    def unpin(self, task_id: str, owner: str | None = None) -> TaskView:
        """Release a task's keep pin: its audio follows the normal retention again."""
        row = self.row(task_id, owner)
        self.rows.set_keep(task_id, False)
        view = self._read(task_id)
        if row.book_id is None:
            self.post(view, row.owner)
        return view

    def audio(self, task_id: str, owner: str | None = None) -> AudioFile:
        """The finished audio of a task, or ``AudioNotReady``."""
        row = self.row(task_id, owner)
        if row.status is not TaskStatus.DONE:
            raise AudioNotReady(f"task {task_id} is {row.status.value}; no audio to serve")
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
