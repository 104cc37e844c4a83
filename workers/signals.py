"""The worker's Celery signal handlers, bound to their app.

Each handler is connected weakly and kept alive with the app (``workers.services``), and
answers only for senders of that app, so a second app in the same process (tests build several)
neither adds handlers that fire for the first nor keeps it alive.

- a task message arrives (``task_received``): the worker holds it (in memory); at the next
  heartbeat, the rows of the messages received since that are still queued (no thread claimed
  them yet: an ETA, a retry's countdown, a task waiting for the suspects lock) record which worker
  holds them, under a lease, in one statement for all of them; so the common case, a thread that
  claims at once, writes nothing here (the claim records the worker) and the consumer thread never
  waits on SQL;
- a task ends (``task_postrun``): its lease is no longer renewed, unless it waits on this worker for
  a place (``KeyShares.park``): its message is acknowledged but the worker holds its row until
  it sends it on, to the broker, when a place frees (``send_on``: after each task that held one,
  and at each heartbeat), or gives it back as it stops (``worker_shutting_down``);
- the consumer loses its broker connection (``LeasesOnReconnect``, a consumer bootstep): Celery
  drops every message it received and has not started (a reserved task, an ETA or countdown: their
  delivery tags die with the channel, and the broker only hands them out again after its
  visibility timeout); so the worker stops renewing their leases, and the sweep re-dispatches them
  once the lease lapses, instead of their rows staying held by a live worker for ever;
- the worker is ready (``worker_ready``): what a dead predecessor of the same name held is
  released, the recovery sweep runs once, the default voice is warmed, the heartbeat thread starts
  (beside it, as often, a thread renews the leases of every task held and of every webhook
  delivery in flight, then releases what workers whose heartbeat stopped held), and the consumed
  marker is set (its consumer is up);
- a task starts (``task_prerun``): the consumed marker is set (``/readyz``);
- the worker is told to stop (``worker_shutting_down``, SIGTERM): the tasks waiting on it for a
  place go back to the broker, and the shutdown budget starts (``workers.shutdown``: what still
  runs when it is spent is handed back);
- the worker shuts down (``worker_shutdown``): the heartbeat stops; no new webhook delivery starts.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from celery import Celery, signals
from celery.utils.dispatch import Signal

from tts_queue import metrics
from tts_queue.broker.heartbeat import Heartbeats, WorkerInfo
from tts_queue.broker.names import SYNTHESIZE
from tts_queue.errors import ConfigError
from tts_queue.fairness.threads import Parked
from tts_queue.heap import LOG_LINE, Trimmer, freeze_start_up
from workers.leases import Leases, lease_renewal, leases_on_reconnect, running_task_ids
from workers.markers import ConsumedMarker, RedisBrokerMarker
from workers.recovery import release_predecessor, release_silent_workers, requeue
from workers.runtime import RuntimeHolder
from workers.shutdown import ShutdownBudget
from workers.webhooks import Deliveries

if TYPE_CHECKING:
    from celery.worker.request import Request

log = logging.getLogger(__name__)
Handler = Callable[..., None]


def start_worker(sender: object, holder: RuntimeHolder, heartbeats: Heartbeats, marker: RedisBrokerMarker,
                 consumed: ConsumedMarker, deliveries: Deliveries | None, leases: Leases,
                 stop: threading.Event) -> None:
    """The worker is ready: metrics, the first recovery sweep, the warm-up, the heartbeat with its
    lease renewal, the consumed mark, the frozen start-up heap and the allocator's trimmer."""
    settings = holder.settings
    runtime = holder.get()
    metrics.configure(settings.metrics.enabled)
    if settings.metrics.enabled and settings.metrics.port:  # a worker on its own host: its own /metrics
        metrics.serve(settings.metrics.port)
        log.info("metrics on :%d/metrics", settings.metrics.port)
    name = getattr(sender, "hostname", None) or runtime.executor.worker_name
    release_predecessor(runtime, name)
    requeue(settings, runtime.wiring.task_rows, holder.dispatcher, marker)
    if settings.worker.warmup:
        try:
            runtime.warm_up()
        except ConfigError as exc:  # a demanded provider is missing: fail loudly, do not serve
            log.critical("worker cannot start: %s", exc.message)
            os._exit(3)

    def describe() -> WorkerInfo:
        return WorkerInfo(name, settings.worker.pool, runtime.wiring.registry.providers())

    runtime.executor.resend = partial(resend, holder, leases)  # parked tasks go back to the broker
    renew = lease_renewal(runtime, leases, name, deliveries)

    def bookkeeping() -> None:
        renew()
        release_silent_workers(runtime, heartbeats)

    heartbeats.start(describe, stop, then=bookkeeping)
    # A worker that has just started consumes (its consumer is up): readiness need not wait
    # for the scheduler's first sweep. From now on only taking tasks keeps the mark fresh.
    consumed.mark()
    # imports, services and the warm voice live as long as the worker: out of the collector's walks
    log.info(LOG_LINE, freeze_start_up())
    Trimmer(settings.worker.trim_interval_s, stop).start()


def resend(holder: RuntimeHolder, leases: Leases, task: Parked) -> None:
    """Send a task that waited on this worker back to the broker (whichever worker takes it holds
    it from then on); raises when the broker does not take it."""
    holder.dispatcher.dispatch(task.task_id, task.queue, stream=task.stream)
    leases.drop(task.task_id)


def give_back_waiting(holder: RuntimeHolder, leases: Leases) -> int:
    """The worker stops: the tasks waiting on it for a place go back to the broker (one the
    broker does not take is sent again by the sweep once its lease lapses); how many went."""
    shares = holder.get().executor.shares
    sent = 0
    for task in shares.drain() if shares is not None else []:
        try:
            resend(holder, leases, task)
            sent += 1
        except Exception as exc:  # noqa: BLE001 - the broker is down: the lease lapses, the sweep sends
            log.warning("stopping: task %s waiting for a place could not go back to the broker (%s)",
                        task.task_id, exc)
            leases.drop(task.task_id)
    return sent


def is_waiting(holder: RuntimeHolder, task_id: str) -> bool:
    """Whether ``task_id`` waits on this worker for a place."""
    shares = holder.get().executor.shares
    return shares is not None and shares.waits(task_id)


def waiting_ids(holder: RuntimeHolder) -> set[str]:
    """Ids of the tasks waiting on this worker for a place."""
    shares = holder.get().executor.shares
    return shares.waiting_ids() if shares is not None else set()


def only_for(app: Celery, handler: Handler) -> Handler:
    """``handler``, called only for senders of ``app`` (a second app in the process has its own)."""

    def checked(sender: object = None, **kwargs: Any) -> None:
        if getattr(sender, "app", None) is app:
            handler(sender=sender, **kwargs)

    return checked


def connect_signals(app: Celery, holder: RuntimeHolder, heartbeats: Heartbeats, marker: RedisBrokerMarker,
                    consumed: ConsumedMarker,
                    deliveries: Deliveries | None = None) -> tuple[Leases, list[Handler]]:
    """Connect the worker's handlers for ``app`` (see the module docstring); the leases they keep
    and the handlers, which the caller keeps alive as long as the app (``WorkerServices``)."""
    stop = threading.Event()
    leases = Leases()
    budget = ShutdownBudget(holder, lambda: bool(leases.held() or running_task_ids()), deliveries)
    names: list[str] = []  # this app's worker, once ready (``worker_shutting_down`` names only it)

    def received(sender: object = None, request: Request | None = None, **_: object) -> None:
        # Held in memory only: a thread free at once claims the task within milliseconds (the
        # claim records the worker); a row still queued at the next beat is recorded then, well
        # within a lease of its delivery, so a worker that dies with tasks reserved is found by
        # their expired leases, and one that dies before recording them by the stranded-message
        # rule (delivered more than a lease ago, held by nobody). Nothing here waits on SQL: this
        # runs on the consumer's thread, before Celery hands the message to a thread.
        if request is not None and request.name == SYNTHESIZE:
            leases.hold(request.id)

    def ended(sender: object = None, task_id: str | None = None, state: str | None = None,
              **_: object) -> None:
        # A task handed back for a retry stays held: its lease is renewed until it runs again; so
        # does one waiting here for a place, until it is sent on (``resend``).
        if task_id is not None and state != "RETRY" and not is_waiting(holder, task_id):
            leases.drop(task_id)

    def ready(sender: object = None, **_: object) -> None:
        hostname = getattr(sender, "hostname", None)
        if hostname:
            names.append(str(hostname))
        start_worker(sender, holder, heartbeats, marker, consumed, deliveries, leases, stop)

    def shutting_down(sender: object = None, **_: object) -> None:
        # sent from the signal handler with the worker's hostname (not an object of an app)
        if isinstance(sender, str) and sender in names:
            give_back_waiting(holder, leases)
            budget.start(sender)

    def shutdown(sender: object = None, **_: object) -> None:
        stop.set()
        if deliveries is not None:
            deliveries.close()

    def started(sender: object = None, **_: object) -> None:
        # Readiness proves consumption: marked whenever this worker really takes a task off a
        # queue (not at start-up), so a worker alive but no longer consuming makes /readyz fail.
        consumed.mark()

    handlers: list[tuple[Signal, Handler]] = [
        (signal, only_for(app, handler)) for signal, handler in (
            (signals.task_received, received), (signals.task_postrun, ended), (signals.worker_ready, ready),
            (signals.worker_shutdown, shutdown), (signals.task_prerun, started))]
    app.steps["consumer"].add(leases_on_reconnect(leases, partial(waiting_ids, holder)))
    handlers.append((signals.worker_shutting_down, shutting_down))
    for signal, handler in handlers:
        signal.connect(handler, weak=True)
    return leases, [handler for _, handler in handlers]
