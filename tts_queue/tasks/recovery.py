"""Repair at-least-once delivery from the task rows: the sweep that runs every few seconds.

A dead worker is found first by its heartbeat (``release_silent``, run by every live worker as often
as it beats): a worker whose heartbeat expired (``Heartbeats.silent``: it missed its beats
for the heartbeat's ttl) has every row it held released and dispatched again at once, well within
a lease; so is a restarted worker's predecessor of the same name, as it starts. A worker thought
dead that was only frozen (a stopped process, a long pause) and comes back finds its claims gone:
every write it makes for a task carries its claim's fence (``TaskRow.fence``) and is dropped.

Four cases, checked by the scheduler's sweep (every ``TTS_SWEEP_INTERVAL_S``) and when a worker
starts; the rows are the truth, Celery's visibility timeout is only a last resort:

- **A worker died** and no live worker saw its heartbeat stop (none was running, or its name was
  forgotten): the rows it held (received or running) stop having their lease renewed; once a lease
  is older than ``TTS_LEASE_S`` the row is released and its task dispatched again. A live worker
  renews its leases, so long tasks are not duplicated.
- **A row was committed but never sent**: a queued row with no dispatch time, older than
  ``TTS_OUTBOX_GRACE_S``, is sent. A long healthy backlog is never re-sent: its rows have a
  dispatch time. (An interactive submission writes its dispatch time with the row, since it
  sends right after the commit; if the API dies in between, the next rule finds the row.)
- **A message vanished** (a worker killed between taking the message and writing the row, or an
  API killed between its commit and its send): a queued row held by nobody, sent more than a
  lease ago, whose message is neither waiting in a queue nor recently delivered, is dispatched
  again.
- **The broker lost its data** (Redis without persistence restarted, a flush, a failover): a marker
  key in Redis is then missing, and every ``queued`` row is dispatched again.

And one case no sending repairs: **a pool at zero whose worker never came** (``TTS_SCALE_FROM_ZERO``:
its work is accepted with no worker alive). Once a task of it has waited
``TTS_SCALE_FROM_ZERO_WAIT_S`` and the pool still has no live worker, it fails ``no_worker``
(``fail_unserved``): its webhook is called and its waiters wake.

Duplicates are safe: ``TaskExecutor`` skips finished tasks and tasks whose lease another live
worker holds, and a late result of a claim that was released is dropped (its fence).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping
from datetime import timedelta
from typing import Protocol

from tts_queue.errors import NoWorker, public_error
from tts_queue.tasks.dispatcher import Dispatcher
from tts_queue.tasks.ending import TaskEnds
from tts_queue.tasks.rows import TaskRows

log = logging.getLogger(__name__)


class Roster(Protocol):
    """The workers that stopped beating (``tts_queue.broker.heartbeat.Heartbeats``)."""

    def silent(self) -> list[str]:
        """Names of workers that beat lately and whose heartbeat expired since."""

    def forget(self, name: str) -> bool:
        """Drop a silent worker's name (what it held was released); whether it was dropped."""


class BrokerMarker(Protocol):
    """A key that lives exactly as long as the broker's data does."""

    def present(self) -> bool:
        """Whether the marker is still there."""

    def set(self) -> None:
        """Create the marker."""


def requeue_lost(
    rows: TaskRows, dispatcher: Dispatcher, marker: BrokerMarker, outbox_grace: timedelta,
    messages: Callable[[], Mapping[str, float | None]] | None = None,
) -> int:
    """Dispatch again every task whose message may be lost; return how many.

    ``messages`` (optional) lists what the broker holds (task id -> delivery time, ``None`` while
    queued), to find queued rows whose message vanished with a worker that never recorded it.
    """
    lost = [] if marker.present() else rows.queued()
    orphans = rows.reclaim_stale()
    unsent = rows.unsent(outbox_grace)
    if messages is not None:
        orphans += rows.stranded(messages())
    seen: set[str] = set()
    for task_id, queue in lost + orphans + unsent:
        if task_id not in seen:
            seen.add(task_id)
            dispatcher.dispatch(task_id, queue)
    marker.set()
    if seen:
        log.warning("dispatched %d task(s) again from the database (%d of dead workers, %d never sent)",
                    len(seen), len(orphans), len(unsent))
    return len(seen)


def release_silent(rows: TaskRows, dispatcher: Dispatcher, roster: Roster,
                   messages: Callable[[], Mapping[str, float | None]] | None = None,
                   beat: timedelta = timedelta(seconds=5)) -> int:
    """Release every row held by a worker whose heartbeat stopped, dispatch those tasks again, and
    forget the worker's name; how many were sent. ``messages`` (what the broker holds, as for
    ``requeue_lost``): the messages such a worker had received and not yet recorded in a row (a
    worker records them at each beat, every ``beat``) are found too, as stranded a beat after
    their delivery rather than a lease. Safe from several workers at once: the release is one
    guarded update, so each row goes to one of them (a stranded message may be sent twice: a
    claim runs it once)."""
    silent = roster.silent()
    if not silent:
        return 0
    released = rows.release(silent)
    stranded = rows.stranded(messages(), within=beat) if messages is not None else []
    sent = dict(released + stranded)
    for task_id, queue in sent.items():
        dispatcher.dispatch(task_id, queue)
    for name in silent:
        roster.forget(name)
    if sent:
        log.warning("dispatched %d task(s) again: held by %s, whose heartbeat stopped (%d of them "
                    "received, not yet recorded)", len(sent), ", ".join(silent), len(stranded))
    return len(sent)


def fail_unserved(rows: TaskRows, ends: TaskEnds, queues: Collection[str], wait: timedelta) -> int:
    """Fail ``no_worker`` the tasks of ``queues`` (the lanes of a pool at zero, none of whose workers
    is alive) that waited more than ``wait`` (a batch of them per call: the sweep comes back for the
    rest); each end runs its effects (webhook, waiters, book). How many failed."""
    code, message = public_error(NoWorker("no worker of the pool came within TTS_SCALE_FROM_ZERO_WAIT_S"))
    failed = sum(ends.fail(task_id, code, message) is not None for task_id in rows.unserved(queues, wait))
    if failed:
        log.warning("%d task(s) failed no_worker: no worker of their pool came within %.0f s", failed,
                    wait.total_seconds())
    return failed
