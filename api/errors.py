"""The one place that maps errors to HTTP: ``{"error": {"code", "message"}}`` with a 4xx/5xx.

Every route raises; nothing else builds an error response. ``register_error_handlers`` takes an
optional body shape, so a later blueprint with a different error format (an OpenAI-compatible one)
reuses the same mapping of exceptions to statuses and codes.

Nothing secret leaves: a 5xx (and a synthesis or voice failure) answers the fixed sentence of its
stable code (``tts_queue.errors.PUBLIC_MESSAGES``), never the exception's text, which can name
hosts, users, socket paths, buckets or a URL with its password; that text goes to the log. A 5xx
body also carries the request's ``request_id``, which every log line of that request names.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable
from typing import Any

import redis
import sqlalchemy.exc
from flask import Flask, Response, jsonify
from werkzeug.exceptions import HTTPException

from api.request_id import current as current_request_id
from tts_queue.errors import (
    NotReady,
    ServiceUnavailable,
    StorageFull,
    TTSQueueError,
    is_storage_full,
    public_message,
)
from tts_queue.tasks.doctor import redacted

log = logging.getLogger(__name__)

# werkzeug's HTTP errors get stable codes too.
HTTP_CODES = {
    400: "bad_request",
    404: "not_found",
    405: "method_not_allowed",
    413: "request_too_large",
    415: "unsupported_media_type",
    416: "range_not_satisfiable",
}
# Outages of a backing service: 503 with Retry-After, never a 500.
OUTAGES = (sqlalchemy.exc.OperationalError, sqlalchemy.exc.InterfaceError,
           redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)

BodyShape = Callable[[TTSQueueError], dict[str, Any]]


def default_body(exc: TTSQueueError) -> dict[str, Any]:
    """``{"error": {"code", "message"}, **details}``."""
    return {"error": {"code": exc.code, "message": exc.message}, **exc.details}


def detail(exc: BaseException) -> str:
    """An exception's type and text for the log, with URL passwords masked."""
    return redacted(f"{type(exc).__name__}: {exc}")


def as_error(exc: Exception) -> TTSQueueError:
    """Any exception as a ``TTSQueueError`` with the status and code clients see."""
    if isinstance(exc, TTSQueueError):
        return exc
    if isinstance(exc, HTTPException):
        status = exc.code or 500
        error = TTSQueueError(exc.description or "", HTTP_CODES.get(status, "http_error"))
        error.http_status = status
        return error
    if is_storage_full(exc):
        log.warning("storage full: %s", detail(exc))
        return StorageFull(detail(exc))
    if isinstance(exc, OUTAGES):
        log.warning("service outage: %s", detail(exc))
        return ServiceUnavailable(detail(exc))
    trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    log.error("unhandled error: %s\n%s", detail(exc), redacted(trace.rstrip()))
    return TTSQueueError(detail(exc), "internal_error")


def public(error: TTSQueueError) -> TTSQueueError:
    """``error`` as a client may see it: same status, code, details and ``Retry-After``, and the
    message ``public_message`` allows."""
    message = public_message(error.code, error.message, error.http_status)
    if message == error.message:
        return error
    shown = TTSQueueError(message, error.code, error.details)
    shown.http_status = error.http_status
    shown.retry_after_s = error.retry_after_s
    return shown


def to_response(exc: Exception, body: BodyShape = default_body) -> tuple[Response, int]:
    """The JSON response and status of ``exc``, with ``Retry-After`` where it has one; a message
    replaced by its code's sentence is logged (``as_error`` logs what it wraps itself; readiness
    logs each check where it fails)."""
    error = public(as_error(exc))
    if error is not exc and isinstance(exc, TTSQueueError) and not isinstance(exc, NotReady):
        log.warning("%s %s: %s", exc.http_status, exc.code, redacted(exc.message))
    payload = body(error)
    request_id = current_request_id()
    if error.http_status >= 500 and request_id and isinstance(payload.get("error"), dict):
        payload["error"]["request_id"] = request_id  # the key to the details in the logs
    response = jsonify(payload)
    if error.retry_after_s is not None:
        response.headers["Retry-After"] = str(error.retry_after_s)
    for name, value in getattr(error, "headers", {}).items():  # WWW-Authenticate of a 401
        response.headers[name] = value
    if isinstance(exc, HTTPException):  # e.g. 416's Content-Range: bytes */<length>
        for name, value in exc.get_headers():
            if name.lower() in ("content-range", "allow"):
                response.headers[name] = value
    return response, error.http_status


def register_error_handlers(app: Flask, body: BodyShape = default_body) -> None:
    """Turn every exception into a JSON error; never a traceback page."""

    @app.errorhandler(Exception)
    def _any(exc: Exception) -> tuple[Response, int]:
        return to_response(exc, body)
