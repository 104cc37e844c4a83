"""API keys: made once and shown once, stored as a SHA-256 hash, found by a public prefix, compared
in constant time, revoked by name.

A key reads ``tts_<prefix>_<secret>``: the prefix (12 hex characters) finds the row, the secret
(32 random bytes) proves it. A key carries 256 bits of randomness, so one SHA-256 is enough (a
slow password hash would only slow every request). Verified keys are remembered for a few
seconds, so a revocation takes effect within ``CACHE_S``.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from cachetools import TTLCache
from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError

from tts_queue.db import Database, utcnow
from tts_queue.enums import TaskStatus
from tts_queue.errors import InvalidRequest
from tts_queue.tables import ApiKey, BookRow, CacheEntry, SentenceRow, TaskRow

CACHE_S = 5.0
DEFAULT_RATE = "120/minute"
DEFAULT_MAX_QUEUED = 2000
_KEY = re.compile(r"tts_([0-9a-f]{12})_[A-Za-z0-9_-]{43}")
_RATE = re.compile(r"\s*(\d{1,9})\s*(?:/|per)\s*(second|minute|hour|day)s?\s*", re.IGNORECASE)
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,127}")


@dataclass(frozen=True)
class Principal:
    """Who a request is: a key's id, name and limits (never the key itself)."""

    id: str
    name: str
    rate: str
    max_queued: int
    admin: bool


@dataclass(frozen=True)
class KeyInfo:
    """A key as ``tts-queue keys list`` shows it."""

    name: str
    prefix: str
    rate: str
    max_queued: int
    admin: bool
    created_at: datetime
    revoked_at: datetime | None


def check_rate(rate: str) -> str:
    """``rate`` normalized to ``N/unit`` (second, minute, hour, day), or ``InvalidRequest``."""
    match = _RATE.fullmatch(rate)
    if match is None or int(match.group(1)) < 1:
        raise InvalidRequest(f"rate {rate!r} is not a limit like 120/minute")
    return f"{int(match.group(1))}/{match.group(2).lower()}"


def digest(key: str) -> str:
    """The stored form of a key."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


class ApiKeys:
    """Makes, lists, revokes and verifies keys over the ``api_keys`` table."""

    def __init__(self, db: Database, clock: Callable[[], datetime] = utcnow) -> None:
        self.db = db
        self.clock = clock
        self._cache: TTLCache[str, Principal] = TTLCache(maxsize=4096, ttl=CACHE_S, timer=time.monotonic)
        # Keys that are not live, apart: a flood of made-up keys neither pushes real keys out of
        # the cache above nor costs a database query each time one is sent again.
        self._unknown: TTLCache[str, bool] = TTLCache(maxsize=16384, ttl=CACHE_S, timer=time.monotonic)
        self._lock = threading.Lock()

    def create(self, name: str, rate: str = DEFAULT_RATE, max_queued: int = DEFAULT_MAX_QUEUED,
               admin: bool = False, webhook_secret: str | None = None) -> tuple[KeyInfo, str]:
        """A new key called ``name``: its description and the key itself (shown once, never stored);
        ``webhook_secret``: signs its webhooks instead of ``TTS_WEBHOOK_SECRET``."""
        if not _NAME.fullmatch(name):
            raise InvalidRequest("a key's name is 1-128 letters, digits and . _ @ -, starting with a letter "
                                 "or digit")
        if max_queued < 1:
            raise InvalidRequest("max_queued must be at least 1")
        prefix = secrets.token_hex(6)
        key = f"tts_{prefix}_{secrets.token_urlsafe(32)}"
        row = ApiKey(id=str(uuid.uuid4()), name=name, prefix=prefix, hash=digest(key), rate=check_rate(rate),
                     max_queued=max_queued, admin=admin, created_at=self.clock(),
                     webhook_secret=webhook_secret)
        try:
            with self.db.write() as session:
                session.add(row)
        except IntegrityError:
            raise InvalidRequest(f"a key called {name!r} exists already") from None
        return _info(row), key

    def list(self) -> list[KeyInfo]:
        """Every key, revoked ones included, by name."""
        with self.db.read() as session:
            return [_info(row) for row in session.scalars(select(ApiKey).order_by(ApiKey.name))]

    def revoke(self, name: str) -> bool:
        """Revoke the key called ``name``; whether one was live."""
        with self.db.write() as session:
            result = session.execute(update(ApiKey).where(ApiKey.name == name, ApiKey.revoked_at.is_(None))
                                     .values(revoked_at=self.clock()))
        with self._lock:
            self._cache.clear()
            self._unknown.clear()
        return bool(result.rowcount)  # type: ignore[attr-defined]

    def verify(self, key: str) -> Principal | None:
        """The principal of a live key, or ``None`` (malformed, unknown, wrong or revoked keys alike)."""
        match = _KEY.fullmatch(key)
        if match is None:
            return None
        stored = digest(key)
        with self._lock:
            if stored in self._cache:
                return self._cache[stored]
            if stored in self._unknown:
                return None
        with self.db.read() as session:
            row = session.scalar(select(ApiKey).where(ApiKey.prefix == match.group(1)))
        principal = None
        if row is not None and row.revoked_at is None and hmac.compare_digest(row.hash, stored):
            principal = Principal(row.id, row.name, row.rate, row.max_queued, row.admin)
        with self._lock:
            if principal is None:
                self._unknown[stored] = True
            else:
                self._cache[stored] = principal
        return principal


def webhook_secret(db: Database, owner: str | None) -> str | None:
    """The key ``owner``'s own webhook secret, if it has one."""
    if owner is None:
        return None
    with db.read() as session:
        found: str | None = session.scalar(select(ApiKey.webhook_secret).where(ApiKey.id == owner))
    return found


def new_webhook_secret() -> str:
    """A fresh webhook secret (``whsec_`` and 32 random bytes, URL-safe)."""
    return f"whsec_{secrets.token_urlsafe(32)}"


def queued_work(db: Database, owner: str) -> int:
    """How many of ``owner``'s tasks wait or run (book sentences included): its quota's count."""
    with db.read() as session:
        return int(session.scalar(select(func.count()).select_from(TaskRow).where(
            TaskRow.owner == owner, TaskRow.status.in_((TaskStatus.QUEUED, TaskStatus.RUNNING)))) or 0)


def task_rows(db: Database, owner: str) -> int:
    """How many task rows ``owner`` holds (its submissions, cache hits included, until the cleanup
    deletes them; a book's sentences are bounded by the queued-work quota instead)."""
    with db.read() as session:
        return int(session.scalar(select(func.count()).select_from(TaskRow).where(
            TaskRow.owner == owner, TaskRow.book_id.is_(None))) or 0)


def pinned_bytes(db: Database, owner: str) -> int:
    """Bytes of audio that ``owner``'s pins (``keep``) hold against retention: what its pinned
    tasks and the sentences of its pinned books stored, and the estimate of its pinned tasks
    still queued or running (so pinning submissions sent together are counted together)."""
    kept_books = select(BookRow.id).where(BookRow.owner == owner, BookRow.keep.is_(True))
    kept_keys = select(TaskRow.cache_key).where(TaskRow.owner == owner, TaskRow.keep.is_(True)).union(
        select(SentenceRow.cache_key).where(SentenceRow.book_id.in_(kept_books)))
    with db.read() as session:
        stored = session.scalar(select(func.coalesce(func.sum(CacheEntry.size_bytes), 0))
                                .where(CacheEntry.key.in_(kept_keys)))
        in_flight = session.scalar(select(func.coalesce(func.sum(TaskRow.pin_bytes), 0)).where(
            TaskRow.owner == owner, TaskRow.keep.is_(True),
            TaskRow.status.in_((TaskStatus.QUEUED, TaskStatus.RUNNING))))
    return int(stored or 0) + int(in_flight or 0)


class Usage:
    """A key's rows and pinned bytes as the caps see them: counted from the database at most every
    ``every_s`` per key, and between counts by the submissions this process accepted, so a check
    costs a dictionary read (a cap can be overshot by what other processes accepted meanwhile)."""

    def __init__(self, db: Database, every_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.db = db
        self.every_s = every_s
        self.clock = clock
        self._rows: dict[str, tuple[float, int]] = {}
        self._lock = threading.Lock()

    def rows(self, owner: str) -> int:
        """``owner``'s task rows (``task_rows``), at most ``every_s`` old plus what was added since."""
        now = self.clock()
        with self._lock:
            counted = self._rows.get(owner)
        if counted is None or now - counted[0] > self.every_s:
            counted = (now, task_rows(self.db, owner))
            with self._lock:
                self._rows[owner] = counted
                if len(self._rows) > 65536:  # bounded however many keys there are
                    self._rows.clear()
        return counted[1]

    def added(self, owner: str) -> None:
        """``owner`` was given one more task row."""
        with self._lock:
            counted = self._rows.get(owner)
            if counted is not None:
                self._rows[owner] = (counted[0], counted[1] + 1)


def _info(row: ApiKey) -> KeyInfo:
    return KeyInfo(row.name, row.prefix, row.rate, row.max_queued, row.admin, row.created_at, row.revoked_at)
