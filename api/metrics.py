"""``GET /metrics``: Prometheus text for this host's processes, and the API's request counts.

``install`` counts every answered request by route template (never the raw path, so ids do not
make new series), method and status. The route serves ``tts_queue.metrics``' registry plus the
state gauges read from the database and Redis (``state``), at most once per
``metrics.STATE_TTL_S`` whatever the scrape rate.
"""

from __future__ import annotations

import time
from typing import Any

from flask import Blueprint, Flask, Response, current_app, g, request
from sqlalchemy import func, select
from werkzeug.exceptions import NotFound

import api.contract as contract
from api.auth import OPEN
from api.services import Services
from tts_queue import metrics
from tts_queue.enums import POOLS, TaskStatus
from tts_queue.settings import Settings
from tts_queue.tables import BookRow, CacheEntry, TaskRow
from tts_queue.tasks.keys import lane_of, pool_of, worker_queues

bp = Blueprint("metrics", __name__)
REGISTRY = "tts.metrics"


def install(app: Flask, settings: Settings, services: Services) -> None:
    """Count requests and serve ``/metrics`` (a 404 with ``TTS_METRICS=off``)."""
    metrics.configure(settings.metrics.enabled)
    app.register_blueprint(bp)
    if not settings.metrics.enabled:
        return
    app.extensions[REGISTRY] = metrics.registry([metrics.StateCollector(lambda: state(services))])

    @app.before_request
    def started() -> None:
        g.tts_started = time.perf_counter()

    @app.after_request
    def counted(response: Response) -> Response:
        route = request.url_rule.rule if request.url_rule is not None else "unmatched"
        metrics.count(metrics.HTTP_REQUESTS, route=route, method=request.method,
                      status=str(response.status_code))
        began = g.get("tts_started")
        if began is not None:
            metrics.observe(metrics.HTTP_SECONDS, time.perf_counter() - began, route=route)
        return response


@bp.get("/metrics")
@contract.operation("GET", "/metrics", "Prometheus metrics (404 with TTS_METRICS=off)", OPEN, errors=(404,),
                    responses={200: ("Prometheus text format", None, ("text/plain",))})
def serve_metrics() -> Response:
    """Every metric of the processes on this host, and the shared state gauges."""
    chosen = current_app.extensions.get(REGISTRY)
    if chosen is None:
        raise NotFound("metrics are off (TTS_METRICS=off)")
    return Response(metrics.exposition(chosen), mimetype=None, content_type=metrics.CONTENT_TYPE)


def state(services: Services) -> metrics.State:
    """The gauges that describe shared state rather than events."""
    prefix = services.settings.services.queue_prefix
    found: metrics.State = {}
    probe: Any = services.probe
    client = getattr(probe, "redis", None)
    if client is not None:
        # each queue once: the maintenance and webhooks queues are every pool's
        queues = list(dict.fromkeys(queue for pool in POOLS for queue in worker_queues(pool, prefix)))
        with client.pipeline(transaction=False) as pipe:
            for queue in queues:
                pipe.llen(queue)
            depths = pipe.execute()
        found["tts_queue_depth"] = ("Messages waiting in each broker queue", ["queue"],
                                    [((queue,), float(depth))
                                     for queue, depth in zip(queues, depths, strict=True)])
        live = {pool: 0.0 for pool in POOLS}
        for worker in probe.workers():
            live[worker.pool] = live.get(worker.pool, 0.0) + 1
        found["tts_live_workers"] = ("Workers with a live heartbeat, by pool", ["pool"],
                                     [((pool,), n) for pool, n in live.items()])
    with services.db.read() as session:
        queued = session.execute(select(TaskRow.queue, func.count())
                                 .where(TaskRow.status == TaskStatus.QUEUED).group_by(TaskRow.queue)).all()
        entries, size = session.execute(
            select(func.count(), func.coalesce(func.sum(CacheEntry.size_bytes), 0))
            .where(CacheEntry.expired_at.is_(None))).one()
        books = session.execute(select(BookRow.status, func.count()).group_by(BookRow.status)).all()
    rows: dict[tuple[str, str], float] = {}
    for queue, n in queued:
        try:
            place = (pool_of(queue), lane_of(queue).value)
        except ValueError:
            continue
        rows[place] = rows.get(place, 0.0) + n
    found["tts_tasks_queued"] = ("Task rows waiting for a worker (book sentences included), by pool and lane",
                                 ["pool", "lane"], sorted(rows.items()))
    found["tts_cache_entries"] = ("Live cache entries", [], [((), float(entries))])
    found["tts_cache_bytes"] = ("Bytes of live cached audio", [], [((), float(size))])
    found["tts_cache_budget_bytes"] = ("The audio store's disk budget (TTS_AUDIO_MAX_BYTES; 0: none)", [],
                                       [((), float(services.settings.cache.audio_max_bytes))])
    free = services.tasks.cache.store.storage.free_bytes()
    if free is not None:
        found["tts_storage_free_bytes"] = ("Free bytes on the audio store's filesystem", [],
                                           [((), float(free))])
    found["tts_books"] = ("Books by status", ["status"],
                          [((getattr(status, "value", str(status)),), float(n)) for status, n in books])
    return found
