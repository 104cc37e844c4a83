"""Flask adapter: ``create_app(settings)`` serves the submit-and-poll API over the core.

``JSONErrorWorker`` (``api.server``) is the gunicorn worker class that serves it (``tts-queue up``
and the compose file): request heads are read off the threads under a deadline, connections are
capped per client address, and gunicorn's own answers are JSON too.
"""

from __future__ import annotations

import logging
import os

from flask import Flask

from api import auth, request_id
from api import metrics as api_metrics
from api.books import bp as books_bp
from api.docs import bp as docs_bp
from api.errors import register_error_handlers
from api.heads import json_error_response
from api.health import bp as health_bp
from api.openai import bp as openai_bp
from api.routes import bp
from api.server import JSONErrorWorker
from api.services import Services
from api.slots import SLOTS, Slots
from api.voices import bp as voices_bp
from api.web import bp as web_bp
from tts_queue.settings import Settings

log = logging.getLogger(__name__)
__all__ = ["JSONErrorWorker", "create_app", "json_error_response", "max_waiters"]


def max_waiters(settings: Settings) -> int:
    """Long-polls that may block at once: half the API threads, so the other half always serves
    submissions, status reads, downloads and probes."""
    return settings.api.threads // 2


def create_app(settings: Settings | None = None, services: Services | None = None) -> Flask:
    """Build the app; tests pass ``services`` with fakes, deployments pass nothing."""
    settings = settings or Settings.from_env(os.environ)
    app = Flask(__name__)
    # Text limit plus JSON overhead; larger bodies get a JSON 413 before parsing.
    app.config["MAX_CONTENT_LENGTH"] = settings.request.max_text_chars * 8 + 4096
    app.json.sort_keys = False  # type: ignore[attr-defined]
    app.extensions["tts"] = services or Services.build(settings)
    app.extensions[SLOTS] = Slots(max_waiters(settings), settings.api.slot_share)
    request_id.install(app)  # first: every later hook and error sees the id
    register_error_handlers(app)
    api_metrics.install(app, settings, app.extensions["tts"])
    app.register_blueprint(bp)
    app.register_blueprint(voices_bp)
    app.register_blueprint(health_bp)
    app.register_blueprint(books_bp)
    app.register_blueprint(docs_bp)
    app.register_blueprint(openai_bp)
    app.register_blueprint(web_bp)
    auth.install(app, settings, submissions=["tts.create_task", "tts.synthesize_sync", "books.create_book",
                                             "openai.speech"])
    if settings.api.auth != "required" and settings.api.host not in ("127.0.0.1", "localhost", "::1"):
        log.warning("THE API ACCEPTS REQUESTS WITHOUT KEYS (TTS_AUTH=off) AND IS SERVED ON %s: anyone "
                    "who can reach it can submit work and read every task; set TTS_AUTH=required and "
                    "make keys with `tts-queue keys create`", settings.api.host)
    if not settings.api.public_url and (settings.api.auth == "required" or settings.webhooks.secret):
        log.warning("TTS_PUBLIC_URL is not set: links in answers and in signed webhooks follow each "
                    "request's Host header, which a client chooses; set it to the address clients use")
    return app
