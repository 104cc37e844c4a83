"""Every response carries an ``X-Request-ID``: the client's (when it sends a sane one) or a new
one. It is in the access log (``tts-queue up``'s gunicorn logs the response header) and in every
log line the API writes while answering, so a client's report finds the server's log."""

from __future__ import annotations

import logging
import re
import uuid

from flask import Flask, Response, g, has_request_context, request

HEADER = "X-Request-ID"
_SANE = re.compile(r"[A-Za-z0-9._:-]{1,64}")


def current() -> str | None:
    """This request's id (``None`` outside a request)."""
    return g.get("request_id") if has_request_context() else None


class RequestIdFilter(logging.Filter):
    """Adds ``request_id`` to log records, and the id to messages written during a request."""

    def filter(self, record: logging.LogRecord) -> bool:
        request_id = current()
        record.request_id = request_id or "-"
        if request_id and not getattr(record, "tagged", False):
            record.msg = f"[request {request_id}] {record.msg}"
            record.tagged = True
        return True


def install(app: Flask) -> None:
    """Assign the id before every request and answer it after."""

    @app.before_request
    def _assign() -> None:
        given = request.headers.get(HEADER, "")
        g.request_id = given if _SANE.fullmatch(given) else uuid.uuid4().hex

    @app.after_request
    def _answer(response: Response) -> Response:
        response.headers[HEADER] = current() or uuid.uuid4().hex
        return response

    for name in ("api", "tts_queue", "flask.app"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, RequestIdFilter) for f in logger.filters):
            logger.addFilter(RequestIdFilter())
