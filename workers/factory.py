"""``make_celery(settings)``: the Celery app, its tasks, routing and schedule.

JSON only (pickle would let anyone who can write to the broker run code here), late acks with
rejection on worker loss (a crashed worker's tasks are redelivered), no result backend (task
status lives in the database rows), and one queue per pool and lane: ``tts.cpu``,
``tts.cpu.bulk``, ``tts.gpu``, ``tts.gpu.bulk``; a worker reads its interactive queue first.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import redis
from celery import Celery, signals

from tts_queue.broker import Completions, client_url, kombu_url
from tts_queue.db import Database, utcnow
from tts_queue.job import MAINTENANCE, queue_name
from tts_queue.recovery import requeue_lost
from tts_queue.settings import Settings
from workers.runtime import RuntimeHolder

log = logging.getLogger(__name__)

SYNTHESIZE = "tts.synthesize"
CLEANUP = "tts.cleanup"
REQUEUE = "tts.requeue_lost"
REQUEUE_INTERVAL_S = 30.0
# A worker that consumed nothing from the maintenance queue for this long is not ready: it may be
# alive but stuck after a broker restart (celery#9054, #10205).
CONSUMED_TTL_S = int(REQUEUE_INTERVAL_S * 3)


def consumed_key(prefix: str) -> str:
    """The Redis key that says a worker consumed a task recently."""
    return f"{prefix}:consumed"


def make_celery(settings: Settings) -> Celery:
    """A configured Celery app with the synthesis and cleanup tasks registered."""
    if not settings.redis_url:
        raise RuntimeError("TTS_REDIS_URL is not set: start with `tts-queue up` or set it")
    app = Celery("tts_queue", broker=kombu_url(settings.redis_url))
    maintenance = queue_name("", MAINTENANCE, settings.queue_prefix)
    app.conf.update(
        task_serializer="json",
        accept_content=["json"],
        result_serializer="json",
        task_ignore_result=True,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        worker_concurrency=settings.worker_concurrency,
        worker_pool="threads",
        # The threads pool cannot terminate a running job; asking it to on a broker reconnect
        # crashes the worker (celery#7185). Running tasks finish; late acks cover the rest.
        worker_cancel_long_running_tasks_on_connection_loss=False,
        broker_connection_retry_on_startup=True,
        broker_transport_options={
            "visibility_timeout": settings.visibility_timeout_s,
            # Scan for tasks of dead workers every few seconds (kombu's default is ~100 s).
            "unacked_restore_interval": max(1, min(10, settings.visibility_timeout_s // 3)),
            "unacked_restore_throttle": 1,
            "queue_order_strategy": "priority",
        },
        task_default_queue=queue_name(settings.default_pool, prefix=settings.queue_prefix),
        task_queues=None,
        beat_schedule={
            "delete-stale-audio": {
                "task": CLEANUP, "schedule": settings.cleanup_interval_s,
                "options": {"queue": maintenance, "expires": settings.cleanup_interval_s},
            },
            "requeue-lost-tasks": {
                "task": REQUEUE, "schedule": REQUEUE_INTERVAL_S,
                "options": {"queue": maintenance, "expires": REQUEUE_INTERVAL_S},
            },
        },
        worker_hijack_root_logger=False,
    )
    holder = RuntimeHolder(settings)
    app.tts_runtime = holder  # type: ignore[attr-defined]
    _register_tasks(app, holder)

    @signals.worker_ready.connect(weak=False)
    def _warm_up(**_: Any) -> None:
        runtime = holder.get()
        requeue(app, runtime.db, settings)
        if settings.warmup:
            runtime.warm_up()

    return app


def _register_tasks(app: Celery, holder: RuntimeHolder) -> None:
    settings = holder.settings
    assert settings.redis_url
    completions = Completions.from_url(settings.redis_url, settings.queue_prefix)

    @app.task(name=SYNTHESIZE, bind=True, max_retries=settings.max_retries)
    def synthesize(self: Any, task_id: str) -> str | None:
        """Synthesize one task row; unexpected errors retry with backoff, then fail the row."""
        try:
            runtime = holder.get()
            status = runtime.executor.execute(task_id, self.request.hostname)
        except Exception as exc:
            if self.request.retries >= self.max_retries:
                runtime = holder.get()
                status = runtime.executor.fail_unexpected(task_id, exc)
                completions.notify(task_id, status.value)
                return status.value
            log.warning("task %s: %s; retrying", task_id, exc)
            raise self.retry(exc=exc, countdown=min(30, 2 ** self.request.retries)) from exc
        if status is not None:
            completions.notify(task_id, status.value)
        return status.value if status else None

    @app.task(name=REQUEUE)
    def requeue_lost_tasks() -> int:
        """Dispatch again the tasks a broker restart lost (runs every 30 s on the scheduler)."""
        return requeue(app, holder.get().db, settings)

    @app.task(name=CLEANUP)
    def cleanup() -> dict[str, int]:
        """Delete audio not accessed for ``TTS_AUDIO_TTL_DAYS``."""
        runtime = holder.get()
        report = runtime.cache.delete_expired(utcnow(), timedelta(days=settings.audio_ttl_days))
        log.info("cleanup: %d entries, %d bytes freed", report.entries, report.bytes_freed)
        return {"entries": report.entries, "bytes_freed": report.bytes_freed}


class RedisMarker:
    """The ``BrokerMarker`` of ``tts_queue.recovery``: a key with no expiry in the broker's Redis."""

    def __init__(self, settings: Settings) -> None:
        assert settings.redis_url
        self.client = redis.Redis.from_url(client_url(settings.redis_url), socket_timeout=5)
        self.prefix = settings.queue_prefix
        self.key = f"{settings.queue_prefix}:broker-marker"

    def present(self) -> bool:
        """Whether the broker still has the data it had at the last sweep."""
        return bool(self.client.exists(self.key))

    def set(self) -> None:
        """Mark the broker's current data."""
        self.client.set(self.key, utcnow().isoformat())

    def mark_consumed(self) -> None:
        """Record that a worker just took a task off a queue (read by ``/readyz``)."""
        self.client.set(consumed_key(self.prefix), utcnow().isoformat(), ex=CONSUMED_TTL_S)


def requeue(app: Celery, db: Database, settings: Settings) -> int:
    """Re-dispatch tasks whose messages the broker lost (see ``tts_queue.recovery``)."""
    marker = RedisMarker(settings)
    marker.mark_consumed()
    return requeue_lost(db, CeleryDispatcher(app), marker, utcnow(),
                        timedelta(seconds=settings.visibility_timeout_s))


class CeleryDispatcher:
    """The ``Dispatcher`` seam of ``TaskService``, sending by task name (no task import needed)."""

    def __init__(self, app: Celery) -> None:
        self.app = app

    def dispatch(self, task_id: str, queue: str) -> None:
        """Send ``tts.synthesize(task_id)`` to ``queue``."""
        self.app.send_task(SYNTHESIZE, args=[task_id], queue=queue, task_id=task_id)

    def ping_workers(self, timeout: float = 1.0) -> list[str]:
        """Names of workers that answered a broadcast ping."""
        replies = self.app.control.ping(timeout=timeout) or []
        return [name for reply in replies for name in reply]
