"""The shared state ``/metrics`` shows as gauges (``tts_queue.metrics.STATE_GAUGES``): queue
depths and live workers from the broker, queued rows, cache size and books from the database."""

from __future__ import annotations

from sqlalchemy import func, select

from tts_queue import metrics
from tts_queue.broker.names import worker_queues
from tts_queue.enums import POOLS
from tts_queue.tables import BookRow, CacheEntry
from tts_queue.wiring.root import Wiring


def shared_state(wiring: Wiring) -> metrics.State:
    """Each state gauge's rows, read now (a few Redis commands and three queries: the rows waiting
    and running come from the backlog's, cached by ``Backlog`` itself)."""
    prefix = wiring.settings.services.queue_prefix
    # each queue once: the maintenance and webhooks queues are every pool's
    queues = list(dict.fromkeys(queue for pool in POOLS for queue in worker_queues(pool, prefix)))
    found: metrics.State = {}
    depths = wiring.watch.depths(queues)
    if depths:
        found["tts_queue_depth"] = [((queue,), float(depths.get(queue, 0))) for queue in queues]
        live = {pool: 0.0 for pool in POOLS}
        for worker in wiring.watch.workers():
            live[worker.pool] = live.get(worker.pool, 0.0) + 1
        found["tts_live_workers"] = [((pool,), n) for pool, n in live.items()]
    with wiring.db.read() as session:
        entries, size = session.execute(
            select(func.count(), func.coalesce(func.sum(CacheEntry.size_bytes), 0))
            .where(CacheEntry.expired_at.is_(None))).one()
        books = session.execute(select(BookRow.status, func.count()).group_by(BookRow.status)).all()
    places = sorted(wiring.backlog.places()[0].items())  # one grouped query, cached (``tasks.backlog``)
    found["tts_tasks_queued"] = [(place, float(c.queued)) for place, c in places if c.queued]
    found["tts_backlog_tasks"] = [(place, float(counted.tasks)) for place, counted in places]
    found["tts_backlog_audio_seconds"] = [(place, counted.audio_s) for place, counted in places]
    found["tts_cache_entries"] = [((), float(entries))]
    found["tts_cache_bytes"] = [((), float(size))]
    found["tts_cache_budget_bytes"] = [((), float(wiring.settings.cache.audio_max_bytes))]
    free = wiring.cache.store.storage.free_bytes()
    if free is not None:
        found["tts_storage_free_bytes"] = [((), float(free))]
    found["tts_books"] = [((status.value,), float(n)) for status, n in books]
    return found
