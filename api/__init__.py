"""Flask adapter: ``create_app(settings)`` serves the submit-and-poll API over the core."""

from __future__ import annotations

import os

from flask import Flask

from api.errors import register_error_handlers
from api.routes import bp
from api.services import Services
from tts_queue.settings import Settings


def create_app(settings: Settings | None = None, services: Services | None = None) -> Flask:
    """Build the app; tests pass ``services`` with fakes, deployments pass nothing."""
    settings = settings or Settings.from_env(os.environ)
    app = Flask(__name__)
    # Text limit plus JSON overhead; larger bodies get a JSON 413 before parsing.
    app.config["MAX_CONTENT_LENGTH"] = settings.request.max_text_chars * 8 + 4096
    app.json.sort_keys = False  # type: ignore[attr-defined]
    app.extensions["tts"] = services or Services.build(settings)
    register_error_handlers(app)
    app.register_blueprint(bp)
    return app


