"""The one place that maps errors to HTTP: ``{"error": {"code", "message"}}`` with a 4xx/5xx.

Every route raises; nothing else builds an error response. ``register_error_handlers`` takes an
optional body shape, so a later blueprint with a different error format (an OpenAI-compatible one)
reuses the same mapping of exceptions to statuses and codes.

Nothing secret leaves: a 5xx (and a synthesis or voice failure) answers the fixed sentence of its
stable code (each error class's ``public``), never the exception's text, which can name
hosts, users, socket paths, buckets or a URL with its password; that text goes to the log. A 5xx
body also carries the request's ``request_id``, which every log line of that request names.
"""

from __future__ import annotations

import json
import logging
import traceback
from collections.abc import Callable
from email.utils import formatdate
from http import HTTPStatus

import redis
import sqlalchemy.exc
from flask import Flask, Response, jsonify
from werkzeug.exceptions import HTTPException

from api.request_id import current as current_request_id
from tts_queue.errors import (
    BadRequest,
    ExpectationFailed,
    Forbidden,
    HeadersTooLarge,
    HttpError,
    InternalError,
    MethodNotAllowed,
    NotFound,
    NotImplementedByServer,
    NotReady,
    RangeNotSatisfiable,
    RequestLineTooLong,
    RequestTooLarge,
    ServiceUnavailable,
    StorageFull,
    TTSQueueError,
    UnsupportedMediaType,
    is_storage_full,
    public_message,
)
from tts_queue.redact import redacted

log = logging.getLogger(__name__)

# The error classes of HTTP statuses that werkzeug (routing, body limits) or gunicorn (request
# line, headers) answer before or beside the views.
HTTP_ERRORS: dict[int, type[TTSQueueError]] = {
    400: BadRequest, 403: Forbidden, 404: NotFound, 405: MethodNotAllowed, 413: RequestTooLarge,
    414: RequestLineTooLong, 415: UnsupportedMediaType, 416: RangeNotSatisfiable, 417: ExpectationFailed,
    431: HeadersTooLarge,
    500: InternalError, 501: NotImplementedByServer,
}
# Outages of a backing service: 503 with Retry-After, never a 500.
OUTAGES = (sqlalchemy.exc.OperationalError, sqlalchemy.exc.InterfaceError,
           redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)

BodyShape = Callable[[TTSQueueError], dict[str, object]]  # an error's JSON, only serialized


def default_body(exc: TTSQueueError) -> dict[str, object]:
    """``{"error": {"code", "message"}, **details}``: the one shape of an error's JSON."""
    return {"error": {"code": exc.code, "message": exc.message}, **exc.details}


def of_status(status: int, message: str) -> TTSQueueError:
    """The error of an HTTP ``status`` answered outside the views, with its class's code."""
    cls = HTTP_ERRORS.get(status, HttpError)
    error = cls(message)
    if cls is HttpError:
        error.http_status = status
    return error


def detail(exc: BaseException) -> str:
    """An exception's type and text for the log, with URL passwords masked."""
    return redacted(f"{type(exc).__name__}: {exc}")


def as_error(exc: Exception) -> TTSQueueError:
    """Any exception as a ``TTSQueueError`` with the status and code clients see."""
    if isinstance(exc, TTSQueueError):
        return exc
    if isinstance(exc, HTTPException):
        return of_status(exc.code or 500, exc.description or "")
    if is_storage_full(exc):
        log.warning("storage full: %s", detail(exc))
        return StorageFull(detail(exc))
    if isinstance(exc, OUTAGES):
        log.warning("service outage: %s", detail(exc))
        return ServiceUnavailable(detail(exc))
    trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    log.error("unhandled error: %s\n%s", detail(exc), redacted(trace.rstrip()))
    return InternalError(detail(exc))


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
    detail = payload.get("error")
    if error.http_status >= 500 and request_id and isinstance(detail, dict):
        detail["request_id"] = request_id  # the key to the details in the logs
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


def error_bytes(exc: TTSQueueError) -> bytes:
    """``exc`` as a whole HTTP/1.1 answer that closes its connection: its status, JSON body and
    ``Retry-After``, for what the server's poller answers itself, before any thread or Flask."""
    error = public(exc)
    body = json.dumps(default_body(error)).encode()
    lines = [f"HTTP/1.1 {error.http_status} {HTTPStatus(error.http_status).phrase}",
             f"Date: {formatdate(usegmt=True)}", "Connection: close", "Content-Type: application/json",
             f"Content-Length: {len(body)}"]
    if error.retry_after_s is not None:
        lines.append(f"Retry-After: {error.retry_after_s}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def register_error_handlers(app: Flask, body: BodyShape = default_body) -> None:
    """Turn every exception into a JSON error; never a traceback page."""

    @app.errorhandler(Exception)
    def _any(exc: Exception) -> tuple[Response, int]:
        return to_response(exc, body)
