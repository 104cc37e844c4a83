"""``make_celery(settings)``: the worker's Celery app, its tasks, schedule and signal handlers.

It shares the message settings of ``workers.dispatch`` (JSON only, late acks with rejection on
worker loss, no result backend: task status lives in the database rows) and adds the tasks, the
threads pool, the beat schedule and the worker's runtime. Queue and task names come from
``tts_queue.broker``.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import redis
from celery import Celery, signals

from tts_queue.broker import (
    ASSEMBLE,
    BULK,
    CLEANUP,
    INTERACTIVE,
    MAINTENANCE,
    REQUEUE,
    SYNTHESIZE,
    RedisKeys,
    queue_name,
    redis_client,
)
from tts_queue.db import utcnow
from tts_queue.errors import ConfigError, StorageUnavailable, storage_full
from tts_queue.finish_signal import FinishSignals
from tts_queue.heartbeat import Heartbeats, WorkerInfo
from tts_queue.recovery import requeue_lost
from tts_queue.retention import Cleaner
from tts_queue.settings import Settings
from tts_queue.status import TaskStatus
from tts_queue.task_rows import TaskRows
from workers.dispatch import CeleryDispatcher, make_client
from workers.runtime import RuntimeHolder

log = logging.getLogger(__name__)
# A chapter assembly that holds its lock longer than this is taken to have died with its worker.
ASSEMBLY_LOCK_S = 900


def make_celery(settings: Settings) -> Celery:
    """A configured worker app with the synthesis, recovery and cleanup tasks registered."""
    app = make_client(settings)
    maintenance = queue_name("", MAINTENANCE, settings.services.queue_prefix)
    app.conf.update(
        worker_prefetch_multiplier=1,
        worker_concurrency=settings.worker.concurrency,
        worker_pool="threads",
        beat_schedule={
            "delete-stale-audio": {
                "task": CLEANUP, "schedule": settings.cache.cleanup_interval_s,
                "options": {"queue": maintenance, "expires": settings.cache.cleanup_interval_s},
            },
            "requeue-lost-tasks": {
                "task": REQUEUE, "schedule": settings.worker.sweep_interval_s,
                "options": {"queue": maintenance, "expires": settings.worker.sweep_interval_s},
            },
        },
    )
    holder = RuntimeHolder(settings, CeleryDispatcher(app))
    app.tts_runtime = holder  # type: ignore[attr-defined]
    marker = RedisMarker(settings)  # one Redis client for markers, heartbeats and the sweep
    _register_tasks(app, holder, marker)
    _connect_signals(app, holder, marker)
    return app


def _connect_signals(app: Celery, holder: RuntimeHolder, marker: RedisMarker) -> None:
    settings = holder.settings

    heartbeats = Heartbeats(marker.client, marker.keys, ttl_s=min(20.0, settings.worker.lease_s / 2))
    stop = threading.Event()
    leases = Leases()

    @signals.task_received.connect(weak=False)
    def _received(request: Any = None, **_: Any) -> None:
        # The row says which worker holds the task as soon as its message arrives, so a worker
        # that dies with tasks reserved or running is found by its expired leases.
        if request is not None and request.name == SYNTHESIZE:
            leases.hold(request.id)
            try:
                holder.get().rows.reserve(request.id, request.hostname)
            except Exception as exc:  # the database is down: the lease is renewed once it is back
                log.warning("could not record task %s as received: %s", request.id, exc)

    @signals.task_postrun.connect(weak=False)
    def _released(task_id: str | None = None, state: str | None = None, **_: Any) -> None:
        # A task handed back for a retry stays held: its lease is renewed until it runs again.
        if task_id is not None and state != "RETRY":
            leases.release(task_id)

    @signals.worker_ready.connect(weak=False)
    def _warm_up(sender: Any = None, **_: Any) -> None:
        runtime = holder.get()
        requeue(app, runtime.rows, marker)
        if settings.worker.warmup:
            try:
                runtime.warm_up()
            except ConfigError as exc:  # a demanded provider is missing: fail loudly, do not serve
                log.critical("worker cannot start: %s", exc.message)
                os._exit(3)
        name = getattr(sender, "hostname", None) or runtime.executor.worker_name

        def beat() -> WorkerInfo:
            try:
                runtime.rows.renew(leases.held(), name)  # the tasks this worker holds stay its own
            except Exception as exc:  # database down: keep beating; renew on the next beat
                log.warning("could not renew leases: %s", exc)
            return WorkerInfo(name, settings.worker.pool, runtime.registry.providers())

        heartbeats.start(beat, stop)

    @signals.worker_shutdown.connect(weak=False)
    def _stop_heartbeat(**_: Any) -> None:
        stop.set()

    @signals.task_prerun.connect(weak=False)
    def _consumed(**_: Any) -> None:
        # Readiness proves consumption: marked whenever this worker really takes a task off a
        # queue (not at start-up), so a worker alive but no longer consuming makes /readyz fail.
        marker.mark_consumed()


def wait_for_storage(task: Any, exc: BaseException, what: str) -> bool:
    """When ``exc`` means the storage is full or unreachable, send the task again after
    ``TTS_STORAGE_RETRY_S`` and say so (``True``): it waits however long it takes, never failed
    for it. A new message with the same id and retry count, not Celery's ``retry()``, which counts
    every wait against ``max_retries`` and gives up after a few."""
    if not (storage_full(exc) or isinstance(exc, StorageUnavailable)):
        return False
    wait = task.app.tts_runtime.settings.cache.storage_retry_s
    why = "storage full" if storage_full(exc) else "storage unreachable"
    log.warning("%s: %s (%s); retrying in %.0f s", what, why, exc, wait)
    task.signature_from_request(countdown=wait).apply_async()
    return True


def _register_tasks(app: Celery, holder: RuntimeHolder, marker: RedisMarker) -> None:
    # shared=False: Celery would otherwise register these closures on every app created later in
    # the process, and a second app (tests) would run the first app's runtime.
    settings = holder.settings
    assert settings.services.redis_url
    signals_ = FinishSignals.from_url(settings.services.redis_url, settings.services.queue_prefix)

    @app.task(name=SYNTHESIZE, bind=True, max_retries=settings.worker.max_retries, shared=False)
    def synthesize(self: Any, task_id: str) -> str | None:
        """Synthesize one task row; unexpected errors retry with backoff, then fail the row."""
        try:
            runtime = holder.get()
            status = runtime.executor.execute(task_id, self.request.hostname)
        except Exception as exc:
            if wait_for_storage(self, exc, f"task {task_id}"):
                return None
            if self.request.retries >= self.max_retries:
                status = holder.get().executor.fail_unexpected(task_id, exc)
                signals_.notify(task_id, status.value)
                return status.value
            log.warning("task %s: %s; retrying", task_id, exc)
            raise self.retry(exc=exc, countdown=min(30, 2 ** self.request.retries)) from exc
        if status is not None:
            signals_.notify(task_id, status.value)
            after_task(holder, task_id, status)
        return status.value if status else None

    @app.task(name=ASSEMBLE, shared=False, max_retries=settings.worker.max_retries, bind=True)
    def assemble_chapter(self: Any, book_id: str, number: int) -> str | None:
        """Stitch, caption and encode a chapter whose sentences are all done (idempotent)."""
        try:
            with marker.assembling(book_id, number, self.request.hostname or "worker") as mine:
                if not mine:  # the sweep or a second last sentence asked while it is being done
                    return "busy"
                status = holder.get().assembler.assemble(book_id, number)
        except Exception as exc:
            if wait_for_storage(self, exc, f"book {book_id} chapter {number}"):
                return None
            if self.request.retries >= self.max_retries:
                holder.get().books.fail(book_id, "assembly_failed", f"chapter {number}: {exc}")
                return "failed"
            raise self.retry(exc=exc, countdown=min(30, 2 ** self.request.retries)) from exc
        return status.value if status else None

    @app.task(name=REQUEUE, shared=False)
    def requeue_lost_tasks() -> int:
        """Dispatch again the tasks a broker restart or a dead worker lost, and assemble book
        chapters whose sentences are all done but were not assembled (every 30 s)."""
        runtime = holder.get()
        sent = requeue(app, runtime.rows, marker)
        dispatcher = CeleryDispatcher(app)
        for book_id, number in runtime.books.due_assemblies():
            dispatcher.assemble(book_id, number, queue_name(settings.worker.pool, BULK,
                                                            settings.services.queue_prefix))
        return sent

    @app.task(name=CLEANUP, shared=False)
    def cleanup() -> dict[str, Any]:
        """Retention (``tts_queue.retention``): expire by age and pressure, purge, drop old task
        rows, repair drift; one cleaner at a time."""
        report = Cleaner(holder.get().cache, settings.cache).run()
        log.info("cleanup: %s", report.as_json())
        return report.as_json()


class RedisMarker:
    """The ``BrokerMarker`` of ``tts_queue.recovery`` (a key with no expiry in the broker's Redis),
    and the short-lived "a worker consumed a task" key that ``/readyz`` reads."""

    def __init__(self, settings: Settings) -> None:
        assert settings.services.redis_url
        self.client = redis_client(settings.services.redis_url)
        self.keys = RedisKeys(settings.services.queue_prefix)
        self.window_s = settings.worker.consumed_window_s
        self._last_mark = 0.0

    def present(self) -> bool:
        """Whether the broker still has the data it had at the last sweep."""
        return bool(self.client.exists(self.keys.broker_marker))

    def set(self) -> None:
        """Mark the broker's current data."""
        self.client.set(self.keys.broker_marker, utcnow().isoformat())

    @contextmanager
    def assembling(self, book_id: str, chapter: int, holder: str) -> Iterator[bool]:
        """Hold the chapter's assembly lock (expires after ``ASSEMBLY_LOCK_S``, in case its holder
        dies); yields whether this caller got it. Without Redis, everyone gets it (assembly is
        idempotent, only slower twice)."""
        key = self.keys.assembling(book_id, chapter)
        try:
            got = bool(self.client.set(key, holder, nx=True, ex=ASSEMBLY_LOCK_S))
        except redis.RedisError:
            got, key = True, ""
        try:
            yield got
        finally:
            if got and key:
                try:
                    self.client.delete(key)
                except redis.RedisError:
                    pass

    def mark_consumed(self) -> None:
        """Record that this worker just took a task off a queue (at most once a second)."""
        now = time.monotonic()
        if now - self._last_mark >= 1.0 or self._last_mark == 0.0:
            self._last_mark = now
            self.client.set(self.keys.consumed, utcnow().isoformat(), px=int(self.window_s * 1000))


def after_task(holder: RuntimeHolder, task_id: str, status: TaskStatus) -> None:
    """A book's sentence finished: queue its chapter's assembly once every sentence is done."""
    runtime = holder.get()
    for book, number in runtime.books.after_task(task_id, status):
        holder.dispatcher.assemble(book.id, number, queue_name(book.pool, BULK,
                                                                runtime.settings.services.queue_prefix))


class Leases:
    """The task ids this worker holds (received, not yet finished), for lease renewal."""

    def __init__(self) -> None:
        self._held: set[str] = set()
        self._lock = threading.Lock()

    def hold(self, task_id: str) -> None:
        """The worker received ``task_id``."""
        with self._lock:
            self._held.add(task_id)

    def release(self, task_id: str) -> None:
        """The worker finished with ``task_id`` (done, failed, or handed back for a retry)."""
        with self._lock:
            self._held.discard(task_id)

    def held(self) -> list[str]:
        """The ids held now."""
        with self._lock:
            return list(self._held)


def broker_messages(client: Any, queues: list[str]) -> dict[str, float | None]:
    """The synthesis task ids the Redis transport holds: waiting in ``queues`` (``None``) or
    delivered and not yet acknowledged (kombu's ``unacked`` hash, with the delivery time)."""
    held: dict[str, float | None] = {}
    for queue in queues:
        for raw in client.lrange(queue, 0, -1):
            task_id = _task_id(raw)
            if task_id:
                held[task_id] = None
    delivered = dict(client.zrange("unacked_index", 0, -1, withscores=True))
    for tag, raw in client.hgetall("unacked").items():
        task_id = _task_id(raw, wrapped=True)
        if task_id:
            held[task_id] = float(delivered.get(tag, 0.0))
    return held


def _task_id(raw: bytes, wrapped: bool = False) -> str | None:
    """The task id in a raw kombu message (``[message, exchange, routing key]`` when ``wrapped``)."""
    try:
        message = json.loads(raw)
        headers = (message[0] if wrapped else message).get("headers") or {}
    except (ValueError, TypeError, KeyError, IndexError, AttributeError):
        return None
    return headers.get("id") if headers.get("task") == SYNTHESIZE else None


def requeue(app: Celery, rows: TaskRows, marker: RedisMarker) -> int:
    """Re-dispatch tasks whose messages are lost or whose worker died (``tts_queue.recovery``)."""
    settings: Settings = app.tts_runtime.settings  # type: ignore[attr-defined]
    grace = timedelta(seconds=settings.worker.outbox_grace_s)
    prefix = settings.services.queue_prefix
    queues = [queue_name(pool, lane, prefix) for pool in ("cpu", "gpu") for lane in (INTERACTIVE, BULK)]
    return requeue_lost(rows, CeleryDispatcher(app), marker, grace,
                        messages=lambda: broker_messages(marker.client, queues))
