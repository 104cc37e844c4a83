"""The worker side of webhooks: one delivery of a due callback (``tts.deliver_callback``).

The body is the task's JSON (``GET /v1/tasks/<id>``) or the book's (``GET /v1/books/<id>``), links
under the address the client used. The host is resolved and checked again now (public addresses
only, unless allowed) and the connection goes to the very address checked, with the host name for
the ``Host`` header and TLS (SNI, certificate): a name cannot be pointed at the service's own
network between the check and the request. No redirects are followed; 2xx is success; the rest is
retried with backoff by re-sending this task with a countdown (the sweep re-sends one whose
message was lost).
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from typing import Any

import urllib3

from tts_queue import __version__
from tts_queue.app.core import Core
from tts_queue.books.progress import book_document
from tts_queue.settings import Settings
from tts_queue.tables import Callback
from tts_queue.tasks.callbacks import InvalidCallbackUrl, Target, sign, target
from tts_queue.tasks.view import task_document

log = logging.getLogger(__name__)
RESPONSE_BYTES = 4096  # read at most this much of a receiver's answer


def deliver(core: Core, subject_id: str) -> str:
    """Try one delivery of ``subject_id``'s due callback; what happened, for the task's result."""
    settings: Settings = core.settings
    callbacks = core.callbacks
    callback = callbacks.pending(subject_id)
    if callback is None:
        return "not due"
    policy = settings.webhooks
    try:
        where = target(callback.url, policy.allow_private)
    except InvalidCallbackUrl as exc:  # its host now resolves to a refused address (or nowhere)
        callbacks.give_up(subject_id, f"refused: {exc.message}")
        log.warning("callback of %s refused: %s", subject_id, exc.message)
        return "refused"
    body = json.dumps(document(core, callback)).encode()
    status, error = post(where, body, callback.kind, policy.secret, policy.timeout_s)
    wait = callbacks.record(subject_id, status, error, policy.max_attempts, policy.backoff_s)
    if wait is not None:
        log.info("callback of %s answered %s; retrying in %.0f s", subject_id, status or error, wait)
        core.dispatcher.deliver(subject_id, countdown=wait)
        return "retrying"
    return "delivered" if status is not None and 200 <= status < 300 else "failed"


def document(core: Core, callback: Callback) -> dict[str, Any]:
    """The JSON a callback POSTs: the task's or the book's, as the API shows it."""
    if callback.kind == "book":
        progress = core.books.progress(callback.subject_id)
        return book_document(progress, callback.base_url)
    return task_document(core.tasks.get(callback.subject_id, fresh=True), callback.base_url)


def post(where: Target, body: bytes, kind: str, secret: str,
         timeout_s: float) -> tuple[int | None, str | None]:
    """POST ``body`` to the checked address; ``(HTTP status, None)`` or ``(None, the error)``."""
    headers = {
        "Host": where.host if where.port in (80, 443) else f"{where.host}:{where.port}",
        "Content-Type": "application/json",
        "User-Agent": f"tts-queue/{__version__}",
        "X-TTS-Event": f"{kind}.finished",
        "X-TTS-Delivery": str(uuid.uuid4()),
    }
    if secret:
        headers["X-TTS-Signature"] = sign(secret, int(time.time()), body)
    timeout = urllib3.Timeout(connect=timeout_s, read=timeout_s)
    pool: urllib3.HTTPConnectionPool
    if where.scheme == "https":
        pool = urllib3.HTTPSConnectionPool(where.address, where.port, timeout=timeout, retries=False,
                                           server_hostname=where.host, assert_hostname=where.host)
    else:
        pool = urllib3.HTTPConnectionPool(where.address, where.port, timeout=timeout, retries=False)
    try:
        with pool:
            response = pool.urlopen("POST", where.path, body=body, headers=headers, redirect=False,
                                    preload_content=False, assert_same_host=False)
            try:
                response.read(RESPONSE_BYTES)
            finally:
                response.release_conn()
            return int(response.status), None
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        return None, type(exc).__name__
