"""Webhooks: once a task or a book finishes, its JSON is POSTed to the ``callback_url`` its request
named, signed, and retried with backoff until the receiver answers 2xx.

- ``check_url``: what a request may name (at submission): ``http``/``https`` only, a host, no
  credentials, at most 2,048 characters, and, unless ``TTS_WEBHOOK_ALLOW_PRIVATE``, a host whose
  every address is public. ``public_addresses`` checks again at each delivery (the name may point
  elsewhere by then) and the delivery connects to the address it checked, so DNS cannot swap it.
- ``sign``: ``X-TTS-Signature: t=<unix time>,v1=<hex HMAC-SHA256 of "<t>.<body>">`` under
  ``TTS_WEBHOOK_SECRET``; a receiver recomputes it and rejects old timestamps (replays).
- ``Callbacks``: the ``callbacks`` rows: registered with the task or book, made due when it
  finishes (``due``), and the outcome of each delivery (``record``): delivered, retried after
  ``TTS_WEBHOOK_BACKOFF_S`` doubled each time (at most 5 minutes), or failed after
  ``TTS_WEBHOOK_MAX_ATTEMPTS``. The recovery sweep sends again a due delivery whose message was
  lost, and makes due the callbacks of books that finished on a path that did not.

The HTTP request itself is the worker's (``workers.webhooks``).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import socket
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from tts_queue.backoff import backoff_s
from tts_queue.db import Database, utcnow
from tts_queue.enums import BookStatus
from tts_queue.errors import InvalidRequest
from tts_queue.tables import BookRow, Callback

MAX_URL_CHARS = 2048
MAX_BACKOFF_S = 300.0
WAITING, PENDING, DELIVERED, FAILED = "waiting", "pending", "delivered", "failed"


class InvalidCallbackUrl(InvalidRequest):
    """A ``callback_url`` the service will not call."""

    code = "invalid_callback_url"


@dataclass(frozen=True)
class Target:
    """Where a delivery goes: the URL's parts and the checked address to connect to."""

    scheme: str
    host: str
    port: int
    path: str
    address: str


def check_url(url: Any, allow_private: bool) -> str:
    """``url`` if the service may call it, else ``InvalidCallbackUrl`` (resolves its host)."""
    if not isinstance(url, str) or not url.strip():
        raise InvalidCallbackUrl("callback_url must be an http(s) URL")
    cleaned: str = url.strip()
    if len(cleaned) > MAX_URL_CHARS:
        raise InvalidCallbackUrl(f"callback_url is longer than {MAX_URL_CHARS} characters")
    target(cleaned, allow_private)
    return cleaned


def target(url: str, allow_private: bool) -> Target:
    """The parts of ``url`` and one checked address of its host (``InvalidCallbackUrl`` if none)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise InvalidCallbackUrl("callback_url is not a valid URL") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidCallbackUrl("callback_url must be an http(s) URL with a host")
    if parts.username or parts.password:
        raise InvalidCallbackUrl("callback_url must not carry credentials (they would be logged)")
    port = port or (443 if parts.scheme == "https" else 80)
    addresses = public_addresses(parts.hostname, port, allow_private)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Target(parts.scheme, parts.hostname, port, path, addresses[0])


def public_addresses(host: str, port: int, allow_private: bool) -> list[str]:
    """The addresses ``host`` resolves to; ``InvalidCallbackUrl`` if it does not resolve or, unless
    ``allow_private``, if any of them is not a public address (loopback, private, link-local,
    multicast, reserved, unspecified: a request must not reach the service's own network)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        raise InvalidCallbackUrl(f"callback_url's host {host!r} does not resolve") from None
    addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
    if not allow_private:
        for address in addresses:
            ip = ipaddress.ip_address(address.split("%")[0])
            if not ip.is_global or ip.is_multicast:
                raise InvalidCallbackUrl(f"callback_url's host {host!r} is a private or local address; "
                                         "the service does not call those (TTS_WEBHOOK_ALLOW_PRIVATE)")
    if not addresses:
        raise InvalidCallbackUrl(f"callback_url's host {host!r} does not resolve")
    return addresses


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """The ``X-TTS-Signature`` value of ``body`` sent at ``timestamp`` (unix seconds)."""
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


class Callbacks:
    """The ``callbacks`` rows: registration, due, delivery outcomes, and what the sweep resends."""

    def __init__(self, db: Database, clock: Callable[[], datetime] = utcnow) -> None:
        self.db = db
        self.clock = clock

    def register(self, session: Session, subject_id: str, kind: str, url: str, base_url: str,
                 finished: bool = False) -> None:
        """Record a callback in the caller's transaction (``finished``: due at once, a cache hit)."""
        now = self.clock()
        session.add(Callback(subject_id=subject_id, kind=kind, url=url, base_url=base_url,
                             state=PENDING if finished else WAITING, attempts=0, created_at=now,
                             next_at=now if finished else None))

    def due(self, subject_id: str) -> bool:
        """The subject finished: its callback (if it has one waiting) is due now; whether it was."""
        with self.db.write() as session:
            result = session.execute(update(Callback).where(Callback.subject_id == subject_id,
                                                            Callback.state == WAITING)
                                     .values(state=PENDING, next_at=self.clock()))
        return bool(result.rowcount)  # type: ignore[attr-defined]

    def pending(self, subject_id: str) -> Callback | None:
        """The callback of ``subject_id`` if a delivery is due (detached), else ``None``."""
        with self.db.read() as session:
            row = session.get(Callback, subject_id)
            if row is None or row.state != PENDING:
                return None
            session.expunge(row)
            return row

    def record(self, subject_id: str, status: int | None, error: str | None, max_attempts: int,
               first_backoff_s: float) -> float | None:
        """The outcome of one delivery (``status``: the receiver's HTTP status, ``None`` when none
        came). Returns the seconds until the next try, or ``None`` when there is none (delivered,
        or failed for good)."""
        now = self.clock()
        with self.db.write() as session:
            row = session.get(Callback, subject_id, with_for_update=True)
            if row is None or row.state != PENDING:
                return None
            row.attempts += 1
            row.last_status = status
            row.last_error = (error or "")[:256] or None
            if status is not None and 200 <= status < 300:
                row.state, row.delivered_at, row.next_at = DELIVERED, now, None
                return None
            if row.attempts >= max_attempts:
                row.state, row.next_at = FAILED, None
                return None
            wait = backoff_s(row.attempts, first_backoff_s, MAX_BACKOFF_S)
            row.next_at = now + timedelta(seconds=wait)
            return wait

    def give_up(self, subject_id: str, error: str) -> None:
        """Fail a callback without retrying (its address is refused now)."""
        with self.db.write() as session:
            session.execute(update(Callback)
                            .where(Callback.subject_id == subject_id, Callback.state == PENDING)
                            .values(state=FAILED, next_at=None, last_error=error[:256],
                                    attempts=Callback.attempts + 1))

    def summary(self, session: Session, subject_id: str) -> dict[str, Any] | None:
        """``{state, attempts, last_status}`` for a task's or book's JSON (``None``: no callback)."""
        row = session.get(Callback, subject_id)
        if row is None:
            return None
        return {"state": row.state, "attempts": row.attempts, "last_status": row.last_status}

    def lost(self, grace: timedelta) -> list[str]:
        """Due deliveries whose time passed more than ``grace`` ago (their message was lost); their
        time is moved to now, so each is sent again once."""
        now = self.clock()
        with self.db.write() as session:
            ids = list(session.scalars(select(Callback.subject_id).where(
                Callback.state == PENDING, Callback.next_at < now - grace).limit(500)))
            if ids:
                session.execute(update(Callback).where(Callback.subject_id.in_(ids)).values(next_at=now))
        return ids

    def finished_books(self) -> list[str]:
        """Make due the waiting callbacks of books that finished (on any path); their ids."""
        finished = (BookStatus.DONE, BookStatus.FAILED, BookStatus.CANCELLED)
        with self.db.write() as session:
            ids = list(session.scalars(
                select(Callback.subject_id).join(BookRow, BookRow.id == Callback.subject_id)
                .where(Callback.state == WAITING, Callback.kind == "book", BookRow.status.in_(finished))
                .limit(500)))
            if ids:
                session.execute(update(Callback)
                                .where(Callback.subject_id.in_(ids), Callback.state == WAITING)
                                .values(state=PENDING, next_at=self.clock()))
        return ids
