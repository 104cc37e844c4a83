"""Webhooks: once a task or a book finishes, its JSON is POSTed to the ``callback_url`` its request
named, signed, and retried with backoff until the receiver answers 2xx.

- ``UrlPolicy``: what a request may name (at submission, ``check``): a URL a request can carry
  (``tts_queue.webhooks.url.sendable``: no whitespace or control characters; a non-ASCII host as
  its IDNA A-label, other non-ASCII percent-encoded, and stored so), ``http``/``https`` only, a
  host, no credentials, at most 2,048 characters, a port of ``TTS_WEBHOOK_PORTS`` (80 and 443),
  and, unless ``TTS_WEBHOOK_ALLOW_PRIVATE``, a host whose every address is plainly public unicast
  (``tts_queue.webhooks.address.refusal``), looked up within ``TTS_WEBHOOK_LOOKUP_TIMEOUT_S``. A host
  that does not resolve and one that is not allowed get the very same answer, so a key cannot
  learn which internal names exist. ``target`` checks again at each delivery (the name may point
  elsewhere by then) and the delivery connects to the address it checked, so DNS cannot swap it.
- ``sign``: ``X-TTS-Signature: t=<unix time>,v1=<hex HMAC-SHA256 of "<t>.<body>">`` under
  ``TTS_WEBHOOK_SECRET``; a receiver recomputes it and rejects old timestamps (replays).
- ``CallbackRows``: the ``callbacks`` rows: registered with the task or book, made due when it
  finishes (``due``), leased by the one delivery in flight (``claim``, ``renew``; a lease older
  than ``TTS_LEASE_S`` is a dead worker's), and the outcome of each delivery (``record``):
  delivered, retried after ``TTS_WEBHOOK_BACKOFF_S`` doubled each time (at most 5 minutes), or
  failed after ``TTS_WEBHOOK_MAX_ATTEMPTS``. The recovery sweep sends again a due delivery whose
  message was lost and that no delivery holds (``lost``), and makes due the callbacks of books that
  finished on a path that did not.

The HTTP request itself is the worker's (``workers.webhooks``).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, cast
from urllib.parse import urlsplit

from sqlalchemy import Table, func, insert, or_, select, update
from sqlalchemy.orm import Session

from tts_queue.backoff import backoff_s
from tts_queue.db import Database, Executor, utcnow
from tts_queue.enums import BookStatus
from tts_queue.errors import InvalidCallbackUrl, QuotaExceeded
from tts_queue.settings import WebhookSettings
from tts_queue.tables import BookRow, Callback
from tts_queue.webhooks.address import Resolver, refusal
from tts_queue.webhooks.url import sendable

MAX_URL_CHARS = 2048
MAX_BACKOFF_S = 300.0
DEFAULT_PORTS = (80, 443)
EARLY_S = 1.0  # a delivery message this much before its row's time is a duplicate, and skipped
WAITING, PENDING, DELIVERED, FAILED = "waiting", "pending", "delivered", "failed"
INSERT_CALLBACK = insert(cast(Table, Callback.__table__))  # one new webhook row (``register``)
# One answer for a host that does not resolve (or not in time) and for one that is not allowed.
HOST_REFUSED = ("callback_url's host must resolve, within the lookup deadline, to public addresses "
                "only; this one does not, or is not allowed")


class UnresolvedHost(InvalidCallbackUrl):
    """A callback host that did not resolve in time: to a client the same as a refused one; at a
    delivery, a failed attempt (retried), not a refusal."""


@dataclass(frozen=True)
class Target:
    """Where a delivery goes: the URL's parts and the checked address to connect to."""

    scheme: str
    host: str
    port: int
    path: str
    address: str


@dataclass(frozen=True)
class UrlPolicy:
    """Which callback URLs the service calls (``TTS_WEBHOOK_ALLOW_PRIVATE``, ``TTS_WEBHOOK_PORTS``,
    ``TTS_WEBHOOK_LOOKUP_TIMEOUT_S``), with the resolver its lookups share."""

    allow_private: bool = False
    ports: tuple[int, ...] = DEFAULT_PORTS
    lookup_s: float = 2.0
    resolver: Resolver = field(default_factory=Resolver, compare=False, repr=False)

    @classmethod
    def from_settings(cls, webhooks: WebhookSettings) -> UrlPolicy:
        """The policy the settings describe."""
        return cls(webhooks.allow_private, webhooks.ports, webhooks.lookup_timeout_s)

    def check(self, url: Any, owner: str | None = None) -> str:
        """``url`` (stripped) as it will be sent (``sendable``) if the service may call it, else
        ``InvalidCallbackUrl`` (its lookup within ``owner``'s share of the resolver)."""
        if not isinstance(url, str) or not url.strip():
            raise InvalidCallbackUrl("callback_url must be an http(s) URL")
        cleaned: str = url.strip()
        if len(cleaned) > MAX_URL_CHARS:
            raise InvalidCallbackUrl(f"callback_url is longer than {MAX_URL_CHARS} characters")
        cleaned = sendable(cleaned)
        if len(cleaned) > MAX_URL_CHARS:
            raise InvalidCallbackUrl(f"callback_url is longer than {MAX_URL_CHARS} characters once "
                                     "percent-encoded")
        self.target(cleaned, owner=owner)
        return cleaned

    def target(self, url: str, lookup_s: float | None = None, owner: str | None = None) -> Target:
        """The parts of ``url`` and one checked address of its host (``InvalidCallbackUrl`` if
        none, or if it cannot be sent; ``lookup_s``: the lookup's deadline, the policy's by
        default; ``owner``: whose share of the resolver it takes)."""
        try:
            parts = urlsplit(sendable(url))  # a row stored before ``check`` encoded is refused or encoded
            port = parts.port
        except ValueError:
            raise InvalidCallbackUrl("callback_url is not a valid URL") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InvalidCallbackUrl("callback_url must be an http(s) URL with a host")
        if parts.username or parts.password:
            raise InvalidCallbackUrl("callback_url must not carry credentials (they would be logged)")
        port = port or (443 if parts.scheme == "https" else 80)
        if port not in self.ports:
            raise InvalidCallbackUrl(f"callback_url's port must be one of "
                                     f"{', '.join(map(str, self.ports))} (TTS_WEBHOOK_PORTS)")
        addresses = self.addresses(parts.hostname, port, self.lookup_s if lookup_s is None else lookup_s,
                                   owner)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        return Target(parts.scheme, parts.hostname, port, path, addresses[0])

    def addresses(self, host: str, port: int, lookup_s: float, owner: str | None = None) -> list[str]:
        """The addresses ``host`` resolves to within ``lookup_s``, every one allowed; else the one
        answer ``HOST_REFUSED`` (``UnresolvedHost`` when it did not resolve)."""
        addresses = self.resolver.addresses(host, port, lookup_s, owner or "")
        if addresses is None:
            raise UnresolvedHost(HOST_REFUSED)
        if not self.allow_private and any(refusal(address) for address in addresses):
            raise InvalidCallbackUrl(HOST_REFUSED)
        return addresses


def check_url(url: Any, allow_private: bool, ports: tuple[int, ...] = DEFAULT_PORTS) -> str:
    """``url`` if the service may call it, else ``InvalidCallbackUrl`` (``UrlPolicy.check``)."""
    return UrlPolicy(allow_private, ports).check(url)


def target(url: str, allow_private: bool, ports: tuple[int, ...] = DEFAULT_PORTS) -> Target:
    """The parts of ``url`` and one checked address of its host (``UrlPolicy.target``)."""
    return UrlPolicy(allow_private, ports).target(url)


def public_addresses(host: str, port: int, allow_private: bool) -> list[str]:
    """The addresses ``host`` resolves to, all allowed, else ``InvalidCallbackUrl``."""
    policy = UrlPolicy(allow_private)
    return policy.addresses(host, port, policy.lookup_s)


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """The ``X-TTS-Signature`` value of ``body`` sent at ``timestamp`` (unix seconds)."""
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


class CallbackRows:
    """The ``callbacks`` rows: registration, due, leases of deliveries in flight, outcomes, and
    what the sweep resends."""

    def __init__(self, db: Database, clock: Callable[[], datetime] = utcnow, policy: UrlPolicy | None = None,
                 lease: timedelta = timedelta(seconds=30)) -> None:
        self.db = db
        self.clock = clock
        self.policy = policy or UrlPolicy()
        self.lease = lease

    def register(self, session: Executor, subject_id: str, kind: str, url: str, base_url: str,
                 finished: bool = False, owner: str | None = None) -> None:
        """Record a callback in the caller's transaction (``finished``: due at once, a cache hit):
        one Core INSERT, on a session or a bare connection (a submission's)."""
        now = self.clock()
        session.execute(INSERT_CALLBACK, {
            "subject_id": subject_id, "kind": kind, "url": url, "base_url": base_url,
            "state": PENDING if finished else WAITING, "attempts": 0, "created_at": now,
            "next_at": now if finished else None, "owner": owner})

    def check_due(self, owner: str | None, limit: int) -> None:
        """Raise ``QuotaExceeded`` when ``owner`` (a key) has ``limit`` webhooks due and not yet
        delivered: a key whose receivers are slow cannot queue deliveries without end (one
        indexed count; with auth off, no key, no cap)."""
        if owner is None:
            return
        with self.db.read() as session:
            due = int(session.scalar(select(func.count()).select_from(Callback).where(
                Callback.owner == owner, Callback.state == PENDING)) or 0)
        if due >= limit:
            raise QuotaExceeded(f"this key has {due} webhooks due and not yet delivered; it may have "
                                f"{limit} (TTS_KEY_MAX_DUE_WEBHOOKS): retry once its receivers answered")

    def due(self, subject_id: str) -> bool:
        """The subject finished: its callback (if it has one waiting) is due now; whether it was."""
        with self.db.write() as session:
            result = session.execute(update(Callback).where(Callback.subject_id == subject_id,
                                                            Callback.state == WAITING)
                                     .values(state=PENDING, next_at=self.clock()))
        return bool(result.rowcount)  # type: ignore[attr-defined]

    def _free(self, now: datetime) -> Any:
        """No delivery holds the row: never leased, or its lease expired (its worker died)."""
        return or_(Callback.leased_at.is_(None), Callback.leased_at < now - self.lease)

    def claim(self, subject_id: str) -> Callback | None:
        """Lease ``subject_id``'s callback to the delivery about to run (detached); ``None`` when
        it is not due (delivered, failed, or a duplicate message early for its time) or another
        delivery holds it: a delivery in flight is never sent a second time."""
        now = self.clock()
        with self.db.write() as session:
            claimed = session.execute(
                update(Callback)
                .where(Callback.subject_id == subject_id, Callback.state == PENDING, self._free(now),
                       or_(Callback.next_at.is_(None), Callback.next_at <= now + timedelta(seconds=EARLY_S)))
                .values(leased_at=now))
            if not claimed.rowcount:  # type: ignore[attr-defined]
                return None
            row = session.get(Callback, subject_id)
            assert row is not None
            session.expunge(row)
            return row

    def renew(self, subject_ids: list[str]) -> None:
        """The deliveries of ``subject_ids`` are still running: their leases are fresh again."""
        if subject_ids:
            with self.db.write() as session:
                session.execute(update(Callback).where(
                    Callback.subject_id.in_(subject_ids), Callback.state == PENDING,
                    Callback.leased_at.is_not(None)).values(leased_at=self.clock()))

    def release(self, subject_id: str, later_s: float = 0.0) -> None:
        """Give a lease back without an attempt (the delivery could not start); ``later_s``: its
        time moves that much later too (no delivery slot was free), so the sweep does not take
        it for lost meanwhile."""
        values: dict[str, object] = {"leased_at": None}
        if later_s:
            values["next_at"] = self.clock() + timedelta(seconds=later_s)
        with self.db.write() as session:
            session.execute(update(Callback).where(Callback.subject_id == subject_id).values(**values))

    def record(self, subject_id: str, status: int | None, error: str | None, max_attempts: int,
               first_backoff_s: float) -> float | None:
        """The outcome of one delivery (``status``: the receiver's HTTP status, ``None`` when none
        came, or not all of it before the deadline), which also ends its lease. Returns the seconds
        until the next try, or ``None`` when there is none (delivered, or failed for good)."""
        now = self.clock()
        with self.db.write() as session:
            row = session.get(Callback, subject_id, with_for_update=True)
            if row is None or row.state != PENDING:
                return None
            row.attempts += 1
            row.leased_at = None
            row.last_status = status
            row.last_error = (error or "")[:256] or None
            if status is not None and 200 <= status < 300 and error is None:
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
                            .values(state=FAILED, next_at=None, leased_at=None, last_error=error[:256],
                                    attempts=Callback.attempts + 1))

    def summary(self, session: Session, subject_id: str) -> dict[str, Any] | None:
        """``{state, attempts, last_status}`` for a task's or book's JSON (``None``: no callback)."""
        row = session.get(Callback, subject_id)
        if row is None:
            return None
        return {"state": row.state, "attempts": row.attempts, "last_status": row.last_status}

    def lost(self, grace: timedelta) -> list[str]:
        """Due deliveries whose time passed more than ``grace`` ago and that no delivery holds
        (their message was lost, or their worker died with them); their time is moved to now, so
        each is sent again once. A leased one is in flight: it is never sent a second time."""
        now = self.clock()
        with self.db.write() as session:
            ids = list(session.scalars(select(Callback.subject_id).where(
                Callback.state == PENDING, Callback.next_at < now - grace, self._free(now)).limit(500)))
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
