"""The one place that maps errors to HTTP: ``{"error": {"code", "message"}}`` with a 4xx/5xx."""

from __future__ import annotations

import logging

import redis
import sqlalchemy.exc
from flask import Flask, Response, jsonify
from werkzeug.exceptions import HTTPException

from tts_queue.errors import ServiceUnavailable, TTSQueueError

log = logging.getLogger(__name__)

# werkzeug's HTTP errors get stable codes too.
HTTP_CODES = {
    400: "bad_request",
    404: "not_found",
    405: "method_not_allowed",
    413: "request_too_large",
    415: "unsupported_media_type",
}


def error_response(code: str, message: str, status: int) -> tuple[Response, int]:
    """The JSON error body and status."""
    return jsonify(error={"code": code, "message": message}), status


def register_error_handlers(app: Flask) -> None:
    """Turn every exception into a JSON error; never a traceback page."""

    @app.errorhandler(TTSQueueError)
    def _tts_error(exc: TTSQueueError) -> tuple[Response, int]:
        return error_response(exc.code, exc.message, exc.http_status)

    @app.errorhandler(HTTPException)
    def _http_error(exc: HTTPException) -> tuple[Response, int]:
        status = exc.code or 500
        return error_response(HTTP_CODES.get(status, "http_error"), exc.description or "", status)

    @app.errorhandler(sqlalchemy.exc.OperationalError)
    @app.errorhandler(sqlalchemy.exc.InterfaceError)
    @app.errorhandler(redis.exceptions.ConnectionError)
    @app.errorhandler(redis.exceptions.TimeoutError)
    def _outage(exc: Exception) -> tuple[Response, int]:
        log.warning("service outage: %s", exc)
        return error_response(ServiceUnavailable.code,
                              f"a backing service is unreachable ({type(exc).__name__}); retry later", 503)

    @app.errorhandler(Exception)
    def _unexpected(exc: Exception) -> tuple[Response, int]:
        log.exception("unhandled error")
        return error_response("internal_error", "an unexpected error occurred; it was logged", 500)
