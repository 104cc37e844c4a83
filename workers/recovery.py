"""The recovery sweep as the worker runs it: what the broker holds, and what to send again.

``tts_queue.tasks.recovery.requeue_lost`` decides from the rows; this module gives it the broker's
view (``broker_messages``: task ids waiting in the queues or delivered and unacknowledged, read
from kombu's Redis structures) and sends the chapters whose sentences are all done. Between
sweeps, each worker releases as often as it beats what workers whose heartbeat stopped held
(``release_silent_workers``), and, as it starts, what a dead predecessor of its name held
(``release_predecessor``).
"""

from __future__ import annotations

import json
import logging
from datetime import timedelta
from typing import TYPE_CHECKING, cast

from tts_queue.broker.heartbeat import Heartbeats
from tts_queue.broker.names import SYNTHESIZE, queue_name, task_queues
from tts_queue.enums import POOLS, Lane
from tts_queue.errors import NoWorker, public_error
from tts_queue.settings import Settings
from tts_queue.tasks.dispatcher import Dispatcher
from tts_queue.tasks.recovery import fail_unserved, release_silent, requeue_lost
from tts_queue.tasks.rows import TaskRows
from tts_queue.wiring.root import Wiring
from workers.markers import RedisBrokerMarker
from workers.runtime import WorkerRuntime

if TYPE_CHECKING:
    from redis import Redis

log = logging.getLogger(__name__)


def broker_messages(client: Redis, queues: list[str]) -> dict[str, float | None]:
    """The synthesis task ids the Redis transport holds: waiting in ``queues`` (``None``), else
    delivered and not yet acknowledged (kombu's ``unacked`` hash), with the latest delivery time
    (a task sent again after its worker died can have an old delivery beside the new message)."""
    held: dict[str, float | None] = {}
    for queue in queues:
        for raw in cast("list[bytes]", client.lrange(queue, 0, -1)):
            task_id = _task_id(raw)
            if task_id:
                held[task_id] = None
    # with scores, ZRANGE answers (member, score) pairs (redis-py's annotation covers every form)
    scored = client.zrange("unacked_index", 0, -1, withscores=True)
    delivered = dict(cast("list[tuple[bytes | str, float]]", scored))
    for tag, raw in cast("dict[bytes, bytes]", client.hgetall("unacked")).items():
        task_id = _task_id(raw, wrapped=True)
        if task_id and (task_id not in held or held[task_id] is not None):
            held[task_id] = max(float(delivered.get(tag, 0.0)), held.get(task_id) or 0.0)
    return held


def _task_id(raw: bytes | str, wrapped: bool = False) -> str | None:
    """The task id in a raw kombu message (``[message, exchange, routing key]`` when ``wrapped``)."""
    try:
        message = json.loads(raw)
        headers = (message[0] if wrapped else message).get("headers") or {}
    except (ValueError, TypeError, KeyError, IndexError, AttributeError):
        return None
    task_id = headers.get("id") if headers.get("task") == SYNTHESIZE else None
    return str(task_id) if task_id else None


def requeue(settings: Settings, rows: TaskRows, dispatcher: Dispatcher, marker: RedisBrokerMarker) -> int:
    """Re-dispatch tasks whose messages are lost or whose worker died; how many."""
    grace = timedelta(seconds=settings.worker.outbox_grace_s)
    queues = task_queues(settings.services.queue_prefix)
    return requeue_lost(rows, dispatcher, marker, grace,
                        messages=lambda: broker_messages(marker.client, queues))


def release_silent_workers(runtime: WorkerRuntime, heartbeats: Heartbeats) -> int:
    """Beside the beats: send again what workers whose heartbeat stopped held (a failure is logged;
    the next beat tries again); how many tasks were sent."""
    queues = task_queues(runtime.settings.services.queue_prefix)
    try:
        return release_silent(runtime.wiring.task_rows, runtime.wiring.dispatcher, heartbeats,
                              messages=lambda: broker_messages(heartbeats.client, queues),
                              beat=timedelta(seconds=heartbeats.ttl_s / 3))
    except Exception as exc:  # noqa: BLE001 - database or broker down: the next beat retries
        log.warning("could not release the tasks of silent workers: %s", exc)
        return 0


def release_predecessor(runtime: WorkerRuntime, name: str) -> int:
    """As a worker starts, before it takes anything: rows held under its own name were held by a
    predecessor that died (a restart keeps the name, and its heartbeat may not even have expired
    yet); they are released and sent again at once; how many."""
    released = runtime.wiring.task_rows.release([name])
    for task_id, queue in released:
        runtime.wiring.dispatcher.dispatch(task_id, queue)
    if released:
        log.warning("dispatched %d task(s) again: held by a previous %s that died", len(released), name)
    return len(released)


def sweep(runtime: WorkerRuntime, marker: RedisBrokerMarker) -> int:
    """The recovery sweep (``tts.requeue_lost``, every ``TTS_SWEEP_INTERVAL_S``): send again what a
    broker restart or a dead worker lost, refill the bulk windows, repair chapter counters that lag
    their rows, assemble the chapters whose sentences are all done but never were, resend stalled
    ingestions and lost callback deliveries; how many tasks were sent."""
    wiring = runtime.wiring
    settings = wiring.settings
    sent = requeue(settings, wiring.task_rows, wiring.dispatcher, marker)
    for pool in POOLS:  # book sentences whose window was not refilled (a worker died meanwhile)
        sent += wiring.window.feed(pool)
    wiring.book_rows.repair()
    assemble_due(wiring)
    for book_id, pool in runtime.ingester.stalled():
        log.warning("book %s: its ingestion stalled; sending it again", book_id)
        wiring.dispatcher.ingest(book_id, wiring.books.ingest_queue(pool))
    lease = timedelta(seconds=settings.worker.lease_s)  # due deliveries whose message was lost; ended books
    for subject_id in wiring.callbacks.finished_books() + wiring.callbacks.lost(lease):
        wiring.dispatcher.deliver(subject_id)
    fail_unserved_pools(wiring)
    return sent


def fail_unserved_pools(wiring: Wiring) -> int:
    """For each pool at zero (``TTS_SCALE_FROM_ZERO``) with still no live worker: fail ``no_worker``
    its tasks and books being parsed that waited ``TTS_SCALE_FROM_ZERO_WAIT_S``; how many."""
    routing, prefix = wiring.settings.routing, wiring.settings.services.queue_prefix
    wait = timedelta(seconds=routing.from_zero_wait_s)
    failed = 0
    for pool in routing.pools_from_zero:
        if wiring.watch.pool_alive(pool):
            continue
        queues = [queue_name(pool, lane, prefix) for lane in (Lane.INTERACTIVE, Lane.BULK)]
        failed += fail_unserved(wiring.task_rows, wiring.ends, queues, wait)
        code, message = public_error(NoWorker("no worker of the pool came within TTS_SCALE_FROM_ZERO_WAIT_S"))
        for book_id in wiring.book_rows.unserved(pool, wait):
            failed += wiring.book_ends.fail(book_id, code, message)
    return failed


def assemble_due(wiring: Wiring) -> int:
    """Send the assembly of every chapter whose sentences are all done but that was never
    assembled (its worker died in between), to its book's pool; how many."""
    due = wiring.book_rows.due_assemblies()
    for book_id, number, pool in due:
        wiring.window.assemble(book_id, number, pool)
    return len(due)
