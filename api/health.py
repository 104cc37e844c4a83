"""How the service is doing, as HTTP views: liveness, readiness, the backlog and the cache's figures."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, jsonify

import api.contract as contract
import api.schemas as schemas
from api.auth import ADMIN, OPEN, is_admin, require_admin
from api.routes import services
from tts_queue.errors import NotReady
from tts_queue.storage.stats import cache_stats

bp = Blueprint("health", __name__)


@bp.get("/v1/cache/stats")
@contract.operation("GET", "/v1/cache/stats", "The cache's figures (admin keys only)", ADMIN,
                    responses={200: ("Cache statistics", schemas.CacheStats, ("application/json",))})
def cache_statistics() -> Response:
    """Entries, bytes, hits, misses, hit ratio, pinned entries and the last cleanup."""
    require_admin()
    return jsonify(cache_stats(services().db))


@bp.get("/v1/backlog")
@contract.operation("GET", "/v1/backlog", "The work waiting and running per pool and lane, from the "
                    "rows (admin keys only)", ADMIN,
                    responses={200: ("The backlog", schemas.Backlog, ("application/json",))})
def backlog() -> Response:
    """Tasks queued and running and their estimated audio seconds, per pool and lane: what
    ``tts_backlog_tasks`` and ``tts_backlog_audio_seconds`` export, as JSON."""
    require_admin()
    return jsonify(services().backlog.as_json())


@bp.get("/healthz")
@contract.operation("GET", "/healthz", "The process is up", OPEN, errors=(),
                    responses={200: ("Up", schemas.Health, ("application/json",))})
def healthz() -> Response:
    """The process is up."""
    return jsonify(status="ok")


@bp.get("/readyz")
@contract.operation("GET", "/readyz", "Ready to serve (details for admin keys)", OPEN, errors=(503,),
                    responses={200: ("Ready", schemas.Ready, ("application/json",)),
                               503: ("Not ready", schemas.Error, ("application/json",))})
def readyz() -> Response:
    """Database, broker, storage, a live worker (heartbeat) and recent consumption; else 503
    ``not_ready``. Answered from a report shared by every thread and refreshed at most every
    couple of seconds by one of them (``Readiness``), so looping probes never hold the threads."""
    report = services().readiness.report()
    detailed = is_admin()
    if report.failed:
        details: dict[str, Any] = {"ready": False}
        if detailed:
            details.update(checks=report.checks, warnings=report.warnings)
        raise NotReady("not ready: " + (", ".join(report.failed) if detailed else "see the service's log"),
                       details=details)
    if not detailed:
        return jsonify(ready=True)
    return jsonify(ready=True, checks=report.checks, warnings=report.warnings)
