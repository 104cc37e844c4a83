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

from celery import Celery, bootsteps, signals
from celery.utils.dispatch import Signal

from tts_queue import metrics
from tts_queue.broker.heartbeat import Heartbeats, WorkerInfo
from tts_queue.broker.names import SYNTHESIZE
from tts_queue.errors import ConfigError
from tts_queue.fairness.threads import Parked
from tts_queue.heap import LOG_LINE, Trimmer, freeze_start_up
from workers.markers import ConsumedMarker, RedisBrokerMarker
from workers.recovery import release_predecessor, release_silent_workers, requeue
from workers.runtime import RuntimeHolder, WorkerRuntime
from workers.shutdown import ShutdownBudget
from workers.webhooks import Deliveries

if TYPE_CHECKING:
    from celery.worker.request import Request

log = logging.getLogger(__name__)
Handler = Callable[..., None]


class Leases:
    """The task ids this worker holds (received, not yet finished), for lease renewal, and those
    received since the last beat (the next beat records those still queued)."""

    def __init__(self) -> None:
        self._held: set[str] = set()
        self._unrecorded: set[str] = set()
        self._recorded: set[str] = set()  # held, and its row says so
        self._let_go: set[str] = set()  # recorded, then dropped unfinished maybe (sent back): rows to free
        self._lock = threading.Lock()

    def hold(self, task_id: str) -> None:
        """The worker received ``task_id``; its row may not say so yet."""
        with self._lock:
            self._held.add(task_id)
            self._unrecorded.add(task_id)

    def take_unrecorded(self) -> list[str]:
        """The held ids received since the last beat, now counted as recorded (``unrecord`` puts
        them back when writing them failed)."""
        with self._lock:
            taken = sorted(self._unrecorded)
            self._unrecorded.clear()
            self._recorded.update(taken)
        return taken

    def unrecord(self, task_ids: list[str]) -> None:
        """Recording ``task_ids`` failed: the next beat tries those still held again."""
        with self._lock:
            self._recorded.difference_update(task_ids)
            self._unrecorded.update(task_id for task_id in task_ids if task_id in self._held)

    def drop(self, task_id: str) -> None:
        """The worker is done with ``task_id`` (finished, failed, or handed back for a retry); a
        row recorded as held here is let go at the next beat (``take_let_go``)."""
        with self._lock:
            self._held.discard(task_id)
            self._unrecorded.discard(task_id)
            if task_id in self._recorded:
                self._recorded.discard(task_id)
                self._let_go.add(task_id)

    def take_let_go(self) -> list[str]:
        """Ids whose rows were recorded as held here and that this worker no longer holds: a
        message sent back to the broker (over its key's share, stopping) leaves its row queued, and
        it must not stay this worker's (only the lease would free it, not its heartbeat)."""
        with self._lock:
            taken = sorted(self._let_go - self._held)
            self._let_go.clear()
        return taken

    def let_go_later(self, task_ids: list[str]) -> None:
        """Letting ``task_ids`` go failed: the next beat tries again."""
        with self._lock:
            self._let_go.update(task_ids)

    def held(self) -> list[str]:
        """The ids held now."""
        with self._lock:
            return list(self._held)

    def keep_only(self, task_ids: set[str]) -> int:
        """Hold no ids but ``task_ids`` (the tasks running when the broker connection was lost);
        how many were let go."""
        with self._lock:
            gone = self._held - task_ids
            self._held &= task_ids
            self._unrecorded &= task_ids
        return len(gone)


def running_task_ids() -> set[str]:
    """Ids of the tasks this worker's threads are executing now (Celery's worker state)."""
    from celery.worker import state

    return {request.id for request in list(state.active_requests)}


def leases_on_reconnect(leases: Leases,
                        waiting: Callable[[], set[str]] = set) -> type[bootsteps.StartStopStep]:
    """A consumer bootstep that, whenever the consumer stops (its broker connection lost, or the
    worker stopping), lets go of the leases of every task held but not running nor ``waiting``
    here for a place (those are this worker's, not Celery's)."""

    class LeasesOnReconnect(bootsteps.StartStopStep):
        """Lets go of received-but-unstarted tasks' leases when the consumer stops."""

        def stop(self, parent: object) -> None:
            from celery.worker import state

            gone = leases.keep_only(running_task_ids() | waiting())
            stopping = state.should_stop is not None and state.should_stop is not False
            if gone and stopping:  # the worker still runs them, or hands them back at its budget
                log.warning("stopping: %d received task(s) not started yet", gone)
            elif gone:
                log.warning("the broker connection was lost: %d received task(s) not started were "
                            "dropped by Celery; their leases lapse and the sweep sends them again", gone)

    return LeasesOnReconnect


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


def lease_renewal(runtime: WorkerRuntime, leases: Leases, name: str,
                  deliveries: Deliveries | None) -> Callable[[], None]:
    """What runs beside each beat: send on the tasks waiting here that would now get a place (one
    missed after a task's end), let go of the rows recorded as held here of the tasks sent back
    since, record the tasks received and still queued, renew the leases of the tasks this worker
    holds (waiting ones too) and of its webhook deliveries in flight."""

    def renew() -> None:
        try:
            runtime.executor.send_on()
        except Exception as exc:  # noqa: BLE001 - never stop the heartbeat
            log.warning("could not send on the tasks waiting for a place: %s", exc)
        let_go, unrecorded = leases.take_let_go(), leases.take_unrecorded()
        try:
            runtime.wiring.task_rows.let_go(let_go, name)  # those dropped unfinished, still queued
            let_go = []
            runtime.wiring.task_rows.reserve_many(unrecorded, name)  # those still queued
            runtime.wiring.task_rows.renew(leases.held(), name)  # the tasks this worker holds stay its own
            if deliveries is not None:  # and so do the webhook deliveries in flight
                runtime.wiring.callbacks.renew(deliveries.held())
        except Exception as exc:  # database down: keep beating; record and renew on the next beat
            leases.let_go_later(let_go)
            leases.unrecord(unrecorded)
            log.warning("could not renew leases: %s", exc)

    return renew


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
