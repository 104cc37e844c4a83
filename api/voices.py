"""The voices as an HTTP view: every voice the registry knows, with its state."""

from __future__ import annotations

from flask import Blueprint, Response, jsonify

import api.contract as contract
import api.schemas as schemas
from api.auth import KEY, is_admin
from api.routes import services
from tts_queue.broker.heartbeat import WorkerInfo

bp = Blueprint("voices", __name__)


@bp.get("/v1/voices")
@contract.operation("GET", "/v1/voices", "The voices (where each runs: admin keys only)", KEY,
                    responses={200: ("The voices", schemas.Voices, ("application/json",))})
def list_voices() -> Response:
    """Every voice the registry knows, with its state (worker names and providers for admins)."""
    registry = services().registry
    workers = _live_workers() if is_admin() else []
    voices = [
        {
            "id": spec.id,
            "aliases": list(spec.aliases),
            "language": spec.language,
            "languages": list(spec.spoken),
            "family": spec.family,
            "sample_rate": spec.sample_rate,
            "speakers": list(spec.speakers),
            "num_speakers": spec.num_speakers,
            "status": registry.status(spec),
            "default": spec.id == registry.get(None).id,
            "grade": spec.grade or None,
            # where the voice really runs, per worker that has it loaded (read back from ONNX Runtime)
            "providers": {w.name: w.providers[spec.id] for w in workers if spec.id in w.providers},
        }
        for spec in registry.specs()
    ]
    return jsonify(voices=voices)


def _live_workers() -> list[WorkerInfo]:
    """Live workers from their heartbeats ([] when the broker is down)."""
    try:
        return services().watch.workers()
    except Exception:  # noqa: BLE001 - the voices still answer when Redis is down
        return []
