"""The leases a worker holds: the task ids it received and has not finished (``Leases``), their
renewal beside each heartbeat (``lease_renewal``), and what it lets go of when its consumer loses
the broker (``leases_on_reconnect``: Celery drops every message received and not started)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from celery import bootsteps

from workers.runtime import WorkerRuntime
from workers.webhooks import Deliveries

log = logging.getLogger(__name__)


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
