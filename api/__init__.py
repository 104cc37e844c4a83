"""Flask adapter: ``create_app(settings)`` serves the submit-and-poll API over the core.

``JSONErrorWorker`` is the gunicorn worker class that serves it (``tts-queue up`` and the compose
file): gunicorn's own answers, for requests it rejects before Flask sees them, are JSON too.
"""

from __future__ import annotations

import json
import logging
import os
import socket
from typing import Any

from flask import Flask
from gunicorn import util as gunicorn_util
from gunicorn.workers.gthread import ThreadWorker

from api import auth, request_id
from api import metrics as api_metrics
from api.books import bp as books_bp
from api.docs import bp as docs_bp
from api.errors import default_body, of_status, public, register_error_handlers
from api.openai import bp as openai_bp
from api.routes import bp
from api.services import Services
from api.slots import SLOTS, Slots
from api.web import bp as web_bp
from tts_queue.heap import LOG_LINE, freeze_start_up
from tts_queue.settings import Settings

log = logging.getLogger(__name__)


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
    return app


class _CapturedSocket:
    """Stands in for the client socket while gunicorn writes its error page, keeping the bytes."""

    def __init__(self, client: socket.socket) -> None:
        self.client = client
        self.data = b""

    def __getattr__(self, name: str) -> object:
        """Anything else gunicorn asks of the socket (its address, for the access log)."""
        return getattr(self.client, name)

    def gettimeout(self) -> float:
        """Non-blocking, so gunicorn writes at once."""
        return 0.0

    def sendall(self, data: bytes) -> None:
        """Keep what gunicorn would have sent."""
        self.data += data


def json_error_response(page: bytes, exc: BaseException) -> bytes:
    """gunicorn's HTML error response ``page`` rewritten as the API's JSON error, same status."""
    status_line = page.split(b"\r\n", 1)[0].decode("latin-1")  # "HTTP/1.1 414 URI Too Long"
    _, status, reason = (status_line.split(" ", 2) + ["", ""])[:3]
    number = int(status) if status.isdigit() else 500
    # gunicorn's own text for what the client sent (a 4xx) helps it; a 5xx's is server-side
    body = json.dumps(default_body(public(of_status(number, f"{reason}: {exc}"[:300])))).encode()
    head = (f"HTTP/1.1 {status or 500} {reason or 'Internal Server Error'}\r\nConnection: close\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n")
    return head.encode("latin-1") + body


class JSONErrorWorker(ThreadWorker):  # type: ignore[misc]
    """gunicorn's ``gthread`` worker whose error pages are ``{"error": {"code", "message"}}``.

    gunicorn keeps deciding the status and logging (its own ``handle_error``, written to a
    captured socket); only the page sent to the client changes from HTML to JSON.

    Each answer is written under a timeout (``TTS_WRITE_TIMEOUT_S``): a client that stops reading
    a streamed body (or any answer) for that long is dropped, so it cannot hold a thread, and a
    stream's slot, for ever.
    """

    write_timeout_s = Settings.from_env(os.environ).api.write_timeout_s

    def load_wsgi(self) -> None:
        """Load the app, then freeze the start-up heap (``tts_queue.heap``)."""
        super().load_wsgi()
        self.log.info(LOG_LINE, freeze_start_up())

    def handle_request(self, req: Any, conn: Any) -> bool:
        """Serve one request, its writes bounded by the write timeout."""
        conn.sock.settimeout(self.write_timeout_s)
        try:
            return bool(super().handle_request(req, conn))
        except TimeoutError:
            self.log.info("dropped %s: it read nothing for %.0f s", conn.client, self.write_timeout_s)
            return False

    def handle_error(self, req: object, client: socket.socket, addr: object, exc: BaseException) -> None:
        """Answer a request gunicorn rejected (or that failed outside Flask) with a JSON error."""
        captured = _CapturedSocket(client)
        super().handle_error(req, captured, addr, exc)
        if not captured.data:
            return
        try:
            gunicorn_util.write_nonblock(client, json_error_response(captured.data, exc))
        except Exception:  # noqa: BLE001 - the client may have gone; gunicorn does the same
            self.log.debug("Failed to send error message.")
