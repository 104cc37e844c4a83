"""The worker side of webhooks: deliveries on threads of their own, each under a total deadline.

``tts.deliver_callback`` (on the ``<prefix>.webhooks`` queue) only hands a delivery over
(``hand_over``): it leases the callback row (``CallbackRows.claim``) and takes a slot of the worker's
``Deliveries`` (``TTS_WEBHOOK_CONCURRENCY`` threads, never the Celery threads that synthesize and
sweep) within its key's share, or, with no slot of its share free, gives the lease back, moves the
row's time later and sends itself again with that countdown, doubled at each busy turn (1, 2, 4 ...
30 s), so a key whose receivers are slow neither holds every thread nor makes its waiting
deliveries cross the broker every second. The slots are shared between keys (``tts_queue.fairness.slots``):
a key alone takes all but one, and beside others less, so another key's delivery finds a thread
while one key's tarpit receivers hold theirs. A delivery in flight is held by its lease, renewed by
the heartbeat while it runs, so neither a duplicate message nor the sweep sends it again; a worker
that dies with it lets the lease expire and the sweep sends it again (at least once).

One delivery (``deliver``) POSTs the task's JSON (``GET /v1/tasks/<id>``) or the book's (``GET
/v1/books/<id>``), links under the address the client used. The host is resolved and checked again
now (``UrlPolicy.target``) and the connection goes to the very address checked, with the host name
for the ``Host`` header and TLS (SNI, certificate). Lookup, connect, TLS, request, headers and at
most ``RESPONSE_BYTES`` of body share one deadline (``TTS_WEBHOOK_TIMEOUT_S``): at it the socket is
shut down whatever it is blocked in, so a receiver that trickles its answer a byte at a time holds a
thread no longer than that, and the attempt is a failed one. No redirects are followed; 2xx with
its body read is success; the rest is retried with backoff (the task sent again with a countdown).
"""

from __future__ import annotations

import functools
import http.client
import json
import logging
import socket
import ssl
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

from tts_queue import __version__, metrics
from tts_queue.access.keys import webhook_secret
from tts_queue.books.progress import book_document
from tts_queue.errors import InvalidCallbackUrl
from tts_queue.fairness.slots import FairSlots
from tts_queue.tables import Callback
from tts_queue.tasks.view import task_document
from tts_queue.webhooks.callbacks import sign
from tts_queue.webhooks.policy import Target, UnresolvedHost
from tts_queue.wiring.root import Wiring

log = logging.getLogger(__name__)
RESPONSE_BYTES = 4096  # read at most this much of a receiver's answer
BUSY_RETRY_S = 1.0  # no delivery slot of its key's share free: the message comes back after this,
MAX_BUSY_RETRY_S = 30.0  # doubled at each busy turn up to this


def busy_retry_s(busy: int) -> float:
    """How long a delivery that found no slot ``busy`` times before waits before its next turn."""
    return float(min(MAX_BUSY_RETRY_S, BUSY_RETRY_S * 2.0 ** min(busy, 16)))


class Deliveries:
    """The worker's own delivery threads: at most ``size`` deliveries in flight, shared between
    keys (a key alone holds all but one, beside others less: ``FairSlots``); the ids in flight,
    whose leases the heartbeat renews."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._slots = FairSlots(size)
        self._executor = ThreadPoolExecutor(max_workers=size, thread_name_prefix="webhook")
        self._held: set[str] = set()
        self._lock = threading.Lock()

    def reserve(self, owner: str = "") -> bool:
        """Take a slot of ``owner``'s share if one is free (never waits)."""
        return self._slots.take(owner)

    def unreserve(self, owner: str = "") -> None:
        """Give back a slot reserved for a delivery that will not run."""
        self._slots.give_back(owner)

    def start(self, subject_id: str, work: Callable[[], object], owner: str = "") -> None:
        """Run ``work`` (the delivery of ``subject_id``) in a slot reserved for ``owner``."""
        with self._lock:
            self._held.add(subject_id)

        def run() -> None:
            try:
                work()
            except Exception:  # its lease expires and the sweep sends it again
                log.exception("callback of %s: the delivery failed", subject_id)
            finally:
                with self._lock:
                    self._held.discard(subject_id)
                self._slots.give_back(owner)

        try:
            self._executor.submit(run)
        except RuntimeError:  # shutting down
            with self._lock:
                self._held.discard(subject_id)
            self._slots.give_back(owner)
            raise

    def held(self) -> list[str]:
        """The ids whose delivery is in flight now."""
        with self._lock:
            return list(self._held)

    def close(self) -> None:
        """Take no more deliveries (those in flight end by their deadline)."""
        self._executor.shutdown(wait=False)


def hand_over(wiring: Wiring, deliveries: Deliveries, subject_id: str, busy: int = 0) -> str:
    """The task body: start ``subject_id``'s due delivery on a delivery thread of its key's share,
    or send this message again later when none is free (``busy``: how many turns it found none
    before: the wait doubles); what happened."""
    callbacks = wiring.callbacks
    callback = callbacks.claim(subject_id)
    if callback is None:
        return _counted("not due")  # delivered, failed, early, or in flight elsewhere
    owner = callback.owner or ""
    if not deliveries.reserve(owner):
        wait = busy_retry_s(busy)
        callbacks.release(subject_id, later_s=wait)
        wiring.dispatcher.deliver(subject_id, countdown=wait, busy=busy + 1)
        return _counted("busy")
    try:
        deliveries.start(subject_id, functools.partial(deliver, wiring, callback), owner)
    except RuntimeError:  # the worker is shutting down: the sweep sends it once its lease is given back
        callbacks.release(subject_id)
        return _counted("busy")
    return "handed over"


def deliver(wiring: Wiring, callback: Callback) -> str:
    """One delivery of a leased callback, under the total deadline; records and returns its
    outcome (a retry is this callback's message sent again with the backoff as countdown). An
    unexpected error is a failed attempt too, so a callback that cannot be sent runs out of
    attempts instead of coming back from the sweep forever."""
    try:
        return _attempt(wiring, callback)
    except Exception as exc:
        log.exception("callback of %s: the delivery failed", callback.subject_id)
        return _outcome(wiring, callback.subject_id, None, f"internal: {type(exc).__name__}")


def _attempt(wiring: Wiring, callback: Callback) -> str:
    hooks = wiring.settings.webhooks
    callbacks = wiring.callbacks
    subject_id = callback.subject_id
    body = json.dumps(document(wiring, callback)).encode()
    secret = webhook_secret(wiring.db, callback.owner) or hooks.secret
    deadline = Deadline(hooks.timeout_s)
    status: int | None
    error: str | None
    try:
        where = callbacks.policy.target(callback.url, min(callbacks.policy.lookup_s, deadline.left()))
    except UnresolvedHost:  # a DNS failure is an attempt that failed, tried again later
        status, error = None, "the host did not resolve in time"
    except InvalidCallbackUrl as exc:  # its host now resolves to a refused address
        callbacks.give_up(subject_id, f"refused: {exc.message}")
        log.warning("callback of %s refused: %s", subject_id, exc.message)
        return _counted("refused")
    else:
        status, error = post(where, body, headers(where, body, callback.kind, secret), deadline)
    return _outcome(wiring, subject_id, status, error)


def _outcome(wiring: Wiring, subject_id: str, status: int | None, error: str | None) -> str:
    """Record one attempt's outcome; send the retry, if one is due."""
    hooks, callbacks = wiring.settings.webhooks, wiring.callbacks
    wait = callbacks.record(subject_id, status, error, hooks.max_attempts, hooks.backoff_s)
    if wait is not None:
        log.info("callback of %s answered %s; retrying in %.2f s", subject_id, status or error, wait)
        wiring.dispatcher.deliver(subject_id, countdown=wait)
        return _counted("retrying")
    return _counted("delivered" if status is not None and 200 <= status < 300 and error is None else "failed")


def _counted(outcome: str) -> str:
    metrics.count(metrics.WEBHOOKS, outcome=outcome.replace(" ", "_"))
    return outcome


def document(wiring: Wiring, callback: Callback) -> dict[str, Any]:
    """The JSON a callback POSTs: the task's or the book's, as the API shows it (links under
    ``TTS_PUBLIC_URL`` when it is set), and ``callback_url``, the receiver it is sent to: the
    signature covers it, so a body signed for one receiver fails the check at another."""
    base_url = wiring.settings.api.public_url or callback.base_url
    if callback.kind == "book":
        found = book_document(wiring.books.progress(callback.subject_id), base_url)
    else:
        found = task_document(wiring.tasks.get(callback.subject_id, fresh=True), base_url)
    return {**found, "callback_url": callback.url}


def headers(where: Target, body: bytes, kind: str, secret: str) -> dict[str, str]:
    """The headers of one delivery: host, event, a delivery id and the signature."""
    sent = {
        "Host": where.host if where.port in (80, 443) else f"{where.host}:{where.port}",
        "Content-Type": "application/json",
        "User-Agent": f"tts-queue/{__version__}",
        "X-TTS-Event": f"{kind}.finished",
        "X-TTS-Delivery": str(uuid.uuid4()),
        "Connection": "close",
    }
    if secret:
        sent["X-TTS-Signature"] = sign(secret, int(time.time()), body)
    return sent


class Deadline:
    """A point in time (monotonic clock) that a delivery may not pass."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.at = time.monotonic() + seconds

    def left(self) -> float:
        """Seconds until the deadline (0 once passed)."""
        return max(0.0, self.at - time.monotonic())

    def passed(self) -> bool:
        """Whether the deadline has come."""
        return time.monotonic() >= self.at


@contextmanager
def cut_at(sock: socket.socket, deadline: Deadline) -> Iterator[None]:
    """Shut the connection of ``sock`` down at ``deadline``, whatever call is blocked on it (a
    read that gets one byte every few seconds never times out by itself). The cut works on a
    duplicate descriptor of the same connection, so it outlives a TLS wrapper taking ``sock``'s."""
    handle = sock.dup()
    lock = threading.Lock()
    done = False

    def cut() -> None:
        with lock:
            if not done:
                try:
                    handle.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    timer = threading.Timer(deadline.left(), cut)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        with lock:
            done = True
            handle.close()


@functools.cache
def _tls() -> ssl.SSLContext:
    return ssl.create_default_context()


def post(where: Target, body: bytes, sent: dict[str, str],
         deadline: Deadline) -> tuple[int | None, str | None]:
    """POST ``body`` to the checked address before ``deadline``; ``(HTTP status, None)`` once the
    status, headers and (at most ``RESPONSE_BYTES`` of) body are all in, else ``(None, error)``."""
    try:
        raw = socket.create_connection((where.address, where.port), timeout=max(0.001, deadline.left()))
    except OSError as exc:
        return None, _error(exc, deadline)
    with raw, cut_at(raw, deadline):
        connection = http.client.HTTPConnection(where.host, where.port)
        try:
            connection.sock = _tls().wrap_socket(raw, server_hostname=where.host) \
                if where.scheme == "https" else raw
            connection.request("POST", where.path, body=body, headers=sent)
            response = connection.getresponse()
            expected = None if response.length is None else min(response.length, RESPONSE_BYTES)
            read = len(response.read(RESPONSE_BYTES))
        except (http.client.HTTPException, OSError, ValueError) as exc:
            return None, _error(exc, deadline)
        finally:
            connection.close()
    if deadline.passed() or (expected is not None and read < expected):
        return None, (f"deadline: the answer ({response.status}) was not all in within "
                      f"{deadline.seconds:g} s")
    return int(response.status), None


def _error(exc: BaseException, deadline: Deadline) -> str:
    if deadline.passed():
        return f"deadline: no complete answer within {deadline.seconds:g} s ({type(exc).__name__})"
    return type(exc).__name__
