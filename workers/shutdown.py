"""The shutdown budget: a worker told to stop (SIGTERM: a scale-in, a rolling upgrade) finishes
what it runs for at most ``TTS_SHUTDOWN_BUDGET_S``, then hands the rest back and exits.

Celery's warm shutdown stops consuming (at its next poll of the broker) and then runs what it
received, however long that takes; Kubernetes kills the pod at its grace period, and what it held
was found only when the leases lapsed. So when the budget runs out the worker stops claiming,
gives back the rows it runs (``TaskRows.hand_back``: queued again, the attempt not counted) and
sends them again, lets go of the rows it received and has not started (one that starts before the
exit goes back to the broker unclaimed, ``WorkerStopping``; one that does not is sent again by the
sweep once its lease lapses), gives back the leases of its webhook deliveries in flight, and
exits. A row that ends meanwhile stays
ended (a running row moves to ``done`` only from ``running``), so every task ends once; only its
synthesis may run again elsewhere. A worker that cannot even do this (the database down, a hang)
is recovered by the liveness sweep when its leases lapse, as after a crash.

Celery's own soft shutdown (``worker_soft_shutdown_timeout``) is not used: it sleeps the whole
timeout whenever a task runs, even one that ends a second later, and cancels running tasks by
terminating pool jobs, which the threads pool cannot do.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable

from workers.runtime import RuntimeHolder
from workers.webhooks import Deliveries

log = logging.getLogger(__name__)
POLL_S = 0.1
SETTLE_S = 0.3  # how long a claim under way when claiming stops may take to commit


class ShutdownBudget:
    """Started once when the worker is told to stop; hands back what still runs at the budget."""

    def __init__(self, holder: RuntimeHolder, busy: Callable[[], bool], deliveries: Deliveries | None,
                 exit_process: Callable[[int], None] = os._exit) -> None:
        self.holder = holder
        self.busy = busy  # whether the worker holds or runs a task (``Leases.held``, Celery's active)
        self.deliveries = deliveries
        self.exit_process = exit_process
        self._started = threading.Event()

    def start(self, worker: str) -> threading.Thread | None:
        """Watch the budget of ``worker`` (its Celery hostname, which its rows name) on a daemon
        thread: if the process still runs when it is spent, ``hand_back``; at most once."""
        budget_s = self.holder.settings.worker.shutdown_budget_s
        if self._started.is_set() or budget_s <= 0:
            return None
        self._started.set()
        log.warning("stopping: the tasks running have %g s to finish (TTS_SHUTDOWN_BUDGET_S); "
                    "then what still runs is handed back", budget_s)
        thread = threading.Thread(target=self._watch, args=(worker, time.monotonic() + budget_s),
                                  name="shutdown-budget", daemon=True)
        thread.start()
        return thread

    def _watch(self, worker: str, deadline: float) -> None:
        while time.monotonic() < deadline:
            if not self.busy() and not (self.deliveries and self.deliveries.held()):
                return  # nothing left to run: Celery's shutdown ends the process
            time.sleep(POLL_S)
        self.hand_back(worker)
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        self.exit_process(0)

    def hand_back(self, worker: str) -> int:
        """Give back the rows ``worker`` still holds and send them again, and the leases of its
        webhook deliveries in flight; how many tasks were sent."""
        runtime = self.holder.get()
        wiring = runtime.wiring
        runtime.executor.stopping.set()  # from now on a task starting here goes back unclaimed
        sent = 0
        try:
            # twice: a claim already under way when claiming stopped may commit after the first
            for wait_s in (0.0, SETTLE_S):
                time.sleep(wait_s)
                for task_id, queue in wiring.task_rows.hand_back(worker):
                    wiring.dispatcher.dispatch(task_id, queue)
                    sent += 1
            for subject_id in self.deliveries.held() if self.deliveries else []:
                wiring.callbacks.release(subject_id)
        except Exception as exc:  # noqa: BLE001 - the database or broker is down: the leases lapse
            log.error("the shutdown budget is spent, but handing back failed (%s): the recovery "
                      "sweep sends what this worker held once its leases lapse", exc)
            return sent
        log.warning("the shutdown budget is spent: %d task(s) still running handed back and sent "
                    "again; exiting", sent)
        return sent
