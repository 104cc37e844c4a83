"""``make_celery(settings)``: the worker's Celery app and its configuration.

It shares the message settings of ``workers.dispatch`` (JSON only, late acks with rejection on
worker loss, no result backend: task status lives in the database rows) and adds the threads
pool, the beat schedule, the runtime, the webhook delivery threads (``workers.webhooks``), the
tasks (``workers.tasks``), the signal handlers (``workers.signals``) and the consumer step that
wakes the event loop when a task's thread hands it an ack (``workers.wakeup``). Queue and task names
come from ``tts_queue.broker.names``.
"""

from __future__ import annotations

from celery import Celery

from tts_queue.broker.connection import redis_client
from tts_queue.broker.heartbeat import Heartbeats
from tts_queue.broker.lock import AssemblyLock
from tts_queue.broker.names import CLEANUP, REQUEUE, RedisKeys, queue_name
from tts_queue.enums import Lane
from tts_queue.settings import Settings
from workers.dispatch import CeleryDispatcher, make_client
from workers.markers import ConsumedMarker, RedisBrokerMarker
from workers.recovery import sweep
from workers.runtime import RuntimeHolder
from workers.services import WorkerServices, attach, context_of
from workers.signals import connect_signals
from workers.tasks import register_tasks
from workers.wakeup import WakeOnHandOff
from workers.webhooks import Deliveries

HEARTBEAT_TTL_S = 10.0  # at most: a dead worker's tasks run elsewhere within about 20 s


def make_celery(settings: Settings) -> Celery:
    """A configured worker app with its tasks, schedule and signal handlers."""
    app = make_client(settings)
    maintenance = queue_name("", Lane.MAINTENANCE, settings.services.queue_prefix)
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
    assert settings.services.redis_url
    # the worker's one client for short commands: markers, heartbeats, the sweep, the watch, the board
    client = redis_client(settings.services.redis_url)
    holder = RuntimeHolder(settings, CeleryDispatcher(app, settings.services.queue_prefix), client)
    keys = RedisKeys(settings.services.queue_prefix)
    marker = RedisBrokerMarker(client, keys)
    deliveries = Deliveries(settings.webhooks.concurrency)  # webhooks' own threads, not Celery's
    register_tasks(app, holder, marker, AssemblyLock(client, keys), deliveries)
    # a beat every third of the expiry; a worker silent for 10 s (three beats) is taken for dead
    heartbeats = Heartbeats(client, keys, ttl_s=min(HEARTBEAT_TTL_S, settings.worker.lease_s / 2))
    leases, handlers = connect_signals(app, holder, heartbeats, marker,
                                       ConsumedMarker(client, keys, settings.worker.consumed_window_s),
                                       deliveries)
    app.steps["consumer"].add(WakeOnHandOff)
    attach(app, WorkerServices(holder, marker, deliveries, leases, handlers))
    return app


def sweep_now(app: Celery) -> int:
    """Run ``app``'s recovery sweep now, as the scheduler's ``tts.requeue_lost`` does."""
    context = context_of(app)
    return sweep(context.holder.get(), context.marker)
