"""Webhooks: once a task or a book finishes, its JSON is POSTed to the ``callback_url`` its request
named, signed, and retried with backoff until the receiver answers 2xx.

- ``UrlPolicy`` (``tts_queue.webhooks.policy``): which URLs a request may name and a delivery may
  call.
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
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import Table, func, insert, or_, select, update
from sqlalchemy.orm import Session

from tts_queue.backoff import backoff_s
from tts_queue.db import Database, Executor, utcnow
from tts_queue.enums import BookStatus
from tts_queue.errors import QuotaExceeded
from tts_queue.tables import BookRow, Callback
from tts_queue.webhooks.policy import UrlPolicy

MAX_BACKOFF_S = 300.0
EARLY_S = 1.0  # a delivery message this much before its row's time is a duplicate, and skipped
WAITING, PENDING, DELIVERED, FAILED = "waiting", "pending", "delivered", "failed"
INSERT_CALLBACK = insert(cast(Table, Callback.__table__))  # one new webhook row (``register``)


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
