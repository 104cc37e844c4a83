"""``GET /metrics``: Prometheus text for this host's processes, and the API's request counts.

``install`` counts every answered request by route template (never the raw path, so ids do not
make new series), method (one of a fixed set, anything else ``other``) and status. The route
serves ``tts_queue.metrics``' registry plus the state gauges read from the database and Redis
(``tts_queue.wiring.state``), at most once per ``metrics.STATE_TTL_S`` whatever the scrape rate.
"""

from __future__ import annotations

import time

from flask import Blueprint, Flask, Response, current_app, g, request
from werkzeug.exceptions import NotFound

import api.contract as contract
from api.auth import OPEN
from api.services import Services
from tts_queue import metrics
from tts_queue.settings import Settings
from tts_queue.wiring.state import shared_state

bp = Blueprint("metrics", __name__)
REGISTRY = "tts.metrics"


def install(app: Flask, settings: Settings, services: Services) -> None:
    """Count requests and serve ``/metrics`` (a 404 with ``TTS_METRICS=off``)."""
    metrics.configure(settings.metrics.enabled)
    app.register_blueprint(bp)
    if not settings.metrics.enabled:
        return
    app.extensions[REGISTRY] = metrics.registry([metrics.StateCollector(lambda: shared_state(services))])

    @app.before_request
    def started() -> None:
        g.tts_started = time.perf_counter()

    @app.after_request
    def counted(response: Response) -> Response:
        route = request.url_rule.rule if request.url_rule is not None else "unmatched"
        metrics.count(metrics.HTTP_REQUESTS, route=route, method=metrics.method_label(request.method),
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
