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


def chosen(given: str) -> str:
    """The id of a request that sent ``given`` as its ``X-Request-ID``: it when sane, else a new one."""
    return given if _SANE.fullmatch(given) else uuid.uuid4().hex


def _tag(record: logging.LogRecord) -> logging.LogRecord:
    """Name the request in a record written while answering one (``request_id`` and a prefix)."""
    request_id = current()
    record.request_id = request_id or "-"
    if request_id:
        record.msg = f"[request {request_id}] {record.msg}"
    return record


def _install_record_factory() -> None:
    """Tag every log record made during a request, whichever logger or handler takes it (a
    logger's filters would miss its children, a handler's would miss handlers added later)."""
    previous = logging.getLogRecordFactory()
    if getattr(previous, "tags_request_id", False):
        return

    def factory(*args: object, **kwargs: object) -> logging.LogRecord:
        return _tag(previous(*args, **kwargs))

    factory.tags_request_id = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(factory)


def install(app: Flask) -> None:
    """Assign the id before every request and answer it after."""

    @app.before_request
    def _assign() -> None:
        g.request_id = chosen(request.headers.get(HEADER, ""))

    @app.after_request
    def _answer(response: Response) -> Response:
        response.headers[HEADER] = current() or uuid.uuid4().hex
        return response

    _install_record_factory()
