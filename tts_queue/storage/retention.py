"""Retention: the cleanup that keeps the cache and the task table bounded, safely and observably.

One run, with ``now`` passed in (tests move the clock):

1. **Expire by age**: cache entries not accessed for the audio TTL are marked expired (no longer
   hits; an identical request synthesizes again). Pinned entries are never expired: audio of a
   book still rendering, of a book or task a client asked to keep.
2. **Expire by pressure**: above ``TTS_AUDIO_MAX_BYTES``, or under ``TTS_DISK_MIN_FREE`` free
   space, the least recently used unpinned entries are expired until back under the low watermark.
3. **Purge**: entries expired longer than the grace lose their row, then the file that row named
   (a download already streaming completes; a later one gets 410 ``audio_expired``). A row stored
   again meanwhile is not expired any more and is left alone, with its new file.
4. **Task rows**: finished rows older than the task TTL go (book sentences and kept tasks stay).
5. **Drift repair**: rows whose file is gone, files with no row, temporary files of crashed writes
   and sidecars without audio are removed, and counted.

Everything works in batches of ``BATCH_ROWS`` rows (nothing loaded whole). One cleaner runs at a
time: a lock row with an expiry (``maintenance_locks``) makes a second scheduler's run a no-op.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import cast

from sqlalchemy import ColumnElement, CompoundSelect, Select, delete, func, or_, select, update
from sqlalchemy.exc import IntegrityError

from tts_queue.db import utcnow
from tts_queue.enums import OPEN_BOOK, TaskStatus
from tts_queue.settings import CacheSettings
from tts_queue.storage.cache import AudioCache
from tts_queue.storage.repair import repair_drift
from tts_queue.tables import (
    BookRow,
    CacheEntry,
    Callback,
    CleanupReportJSON,
    CleanupRun,
    MaintenanceLock,
    SentenceRow,
    TaskRow,
)

BATCH_ROWS = 500
LOCK = "cleanup"
TMP_MAX_AGE = timedelta(hours=1)


@dataclass
class CleanupReport:
    """What a cleanup did (or, dry, would do)."""

    dry_run: bool = False
    skipped: str | None = None  # why nothing ran (another cleaner holds the lock)
    expired_by_age: int = 0
    expired_by_pressure: int = 0
    pressure_reason: str | None = None
    entries: int = 0  # entries whose file and row were deleted (or would go, dry)
    bytes: int = 0
    task_rows: int = 0
    pinned: int = 0
    oldest_access: str | None = None
    newest_access: str | None = None
    drift: dict[str, int] = field(default_factory=dict)
    books: int = 0  # books deleted for not being read for TTS_BOOK_TTL_DAYS (the books layer's part)

    def as_json(self) -> CleanupReportJSON:
        """JSON-safe form."""
        return cast(CleanupReportJSON, asdict(self))


class Cleaner:
    """Runs retention over one database, cache and store."""

    def __init__(self, cache: AudioCache, policy: CacheSettings,
                 clock: Callable[[], datetime] = utcnow, holder: str | None = None,
                 on_tasks_deleted: Callable[[list[str]], None] | None = None) -> None:
        self.cache = cache
        self.on_tasks_deleted = on_tasks_deleted  # told of each batch of deleted task ids (status board)
        self.db = cache.db
        self.store = cache.store
        self.policy = policy
        self.clock = clock
        self.holder = holder or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"

    def run(self, older_than: timedelta | None = None, dry_run: bool = False) -> CleanupReport:
        """One cleanup; ``older_than`` overrides the audio age (task rows keep their own TTL)."""
        now = self.clock()
        age = older_than if older_than is not None else timedelta(days=self.policy.audio_ttl_days)
        report = CleanupReport(dry_run=dry_run)
        report.pinned = self._count(select(func.count()).select_from(CacheEntry)
                                    .where(CacheEntry.key.in_(pinned_keys())))
        if dry_run:
            return self._dry(report, now, age)
        if not self._lock(now):
            report.skipped = "another cleanup holds the lock"
            return report
        try:
            report.expired_by_age = self._expire(self._stale(now - age), now)
            self._pressure(report, now)
            report.entries, report.bytes = self._purge(now)
            report.task_rows = self._delete_tasks(now)
            report.drift = self._repair(now)
            self._record(report, now)
        finally:
            self._unlock()
        return report

    # --- selection --------------------------------------------------------------------------

    def _stale(self, cutoff: datetime) -> Select[str]:
        return select(CacheEntry.key).where(
            CacheEntry.expired_at.is_(None), CacheEntry.last_access_at < cutoff,
            CacheEntry.key.not_in(pinned_keys()))

    def _count(self, query: Select[int]) -> int:
        with self.db.read() as session:
            return int(session.scalar(query) or 0)

    def _dry(self, report: CleanupReport, now: datetime, age: timedelta) -> CleanupReport:
        stale = self._stale(now - age).subquery()
        with self.db.read() as session:
            count, size, oldest, newest = session.execute(
                select(func.count(), func.coalesce(func.sum(CacheEntry.size_bytes), 0),
                       func.min(CacheEntry.last_access_at), func.max(CacheEntry.last_access_at))
                .where(CacheEntry.key.in_(select(stale.c.key)))
            ).one()
        report.entries, report.bytes = int(count), int(size)
        report.oldest_access = oldest.isoformat() if oldest else None
        report.newest_access = newest.isoformat() if newest else None
        report.task_rows = self._count(select(func.count()).select_from(TaskRow).where(*self._old_tasks(now)))
        return report

    # --- phases -----------------------------------------------------------------------------

    def _expire(self, keys: Select[str], now: datetime, limit: int | None = None) -> int:
        """Mark the entries ``keys`` selects as expired, a batch at a time; how many."""
        total = 0
        while limit is None or total < limit:
            take = BATCH_ROWS if limit is None else min(BATCH_ROWS, limit - total)
            with self.db.write() as session:
                batch = session.scalars(keys.limit(take)).all()
                if not batch:
                    break
                session.execute(update(CacheEntry).where(CacheEntry.key.in_(batch))
                                .values(expired_at=now))
            self.cache.drop_hot(batch)
            total += len(batch)
        return total

    def _pressure(self, report: CleanupReport, now: datetime) -> None:
        """Expire least recently used entries while over the budget or under the free floor."""
        live = self._count(select(func.coalesce(func.sum(CacheEntry.size_bytes), 0))
                           .where(CacheEntry.expired_at.is_(None)))
        excess = 0
        if self.policy.audio_max_bytes > 0 and live > self.policy.audio_max_bytes:
            excess = int(live - self.policy.audio_max_bytes * self.policy.low_watermark)
            report.pressure_reason = f"audio store {live} bytes > budget {self.policy.audio_max_bytes}"
        disk = self.store.storage.disk_usage()  # a bucket has no free-space floor
        if disk is not None and disk[0] < self.policy.disk_min_free:
            target = self.policy.disk_min_free / self.policy.low_watermark
            excess = max(excess, int((target - disk[0]) * disk[1]))
            report.pressure_reason = f"free space {disk[0]:.1%} < {self.policy.disk_min_free:.1%}"
        freed = 0
        while excess > 0 and freed < excess:
            with self.db.write() as session:
                rows = session.execute(
                    select(CacheEntry.key, CacheEntry.size_bytes)
                    .where(CacheEntry.expired_at.is_(None), CacheEntry.key.not_in(pinned_keys()))
                    .order_by(CacheEntry.last_access_at).limit(BATCH_ROWS)
                ).all()
                if not rows:
                    break
                chosen = []
                for key, size in rows:
                    if freed >= excess:
                        break
                    chosen.append(key)
                    freed += size
                session.execute(update(CacheEntry).where(CacheEntry.key.in_(chosen)).values(expired_at=now))
            self.cache.drop_hot(chosen)
            report.expired_by_pressure += len(chosen)

    def _purge(self, now: datetime) -> tuple[int, int]:
        """Rows, then files, of entries expired longer than the grace; (entries, bytes).

        The delete re-checks the expiry and returns the paths of the rows it really removed, so
        an entry stored again since it was read (not expired any more, a new file) keeps its file.
        """
        cutoff = now - timedelta(seconds=self.policy.delete_grace_s)
        entries = freed = 0
        while True:
            with self.db.read() as session:
                keys = session.scalars(
                    select(CacheEntry.key)
                    .where(CacheEntry.expired_at.is_not(None), CacheEntry.expired_at <= cutoff)
                    .limit(BATCH_ROWS)
                ).all()
            if not keys:
                return entries, freed
            with self.db.write() as session:
                gone = session.execute(
                    delete(CacheEntry).where(CacheEntry.key.in_(keys), CacheEntry.expired_at.is_not(None),
                                             CacheEntry.expired_at <= cutoff)
                    .returning(CacheEntry.path, CacheEntry.size_bytes)).all()
            self.store.delete(path for path, _ in gone)  # one request per batch on a bucket
            entries += len(gone)
            freed += sum(size for _, size in gone)

    def _old_tasks(self, now: datetime) -> list[ColumnElement[bool]]:
        cutoff = now - timedelta(days=self.policy.task_ttl_days)
        return [TaskRow.status.in_([s for s in TaskStatus if s.finished]),
                TaskRow.finished_at < cutoff, TaskRow.book_id.is_(None), TaskRow.keep.is_(False)]

    def _delete_tasks(self, now: datetime) -> int:
        total = 0
        while True:
            with self.db.write() as session:
                ids = session.scalars(select(TaskRow.id).where(*self._old_tasks(now)).limit(BATCH_ROWS)).all()
                if not ids:
                    return total
                session.execute(delete(TaskRow).where(TaskRow.id.in_(ids)))
                session.execute(delete(Callback).where(Callback.subject_id.in_(ids)))
            if self.on_tasks_deleted is not None:
                self.on_tasks_deleted(list(ids))
            total += len(ids)

    def _repair(self, now: datetime) -> dict[str, int]:
        return repair_drift(self.db, self.store, now, timedelta(seconds=self.policy.delete_grace_s),
                            TMP_MAX_AGE)

    # --- lock and record --------------------------------------------------------------------

    def _lock(self, now: datetime, ttl: timedelta = timedelta(minutes=30)) -> bool:
        try:
            with self.db.write() as session:
                row = session.get(MaintenanceLock, LOCK, with_for_update=True)
                if row is None:
                    session.add(MaintenanceLock(name=LOCK, holder=self.holder, expires_at=now + ttl))
                    return True
                if row.holder != self.holder and row.expires_at > now:
                    return False
                row.holder, row.expires_at = self.holder, now + ttl
                return True
        except IntegrityError:  # another cleaner inserted the lock first
            return False

    def _unlock(self) -> None:
        with self.db.write() as session:
            session.execute(delete(MaintenanceLock).where(MaintenanceLock.name == LOCK,
                                                          MaintenanceLock.holder == self.holder))

    def _record(self, report: CleanupReport, started: datetime) -> None:
        with self.db.write() as session:
            session.add(CleanupRun(started_at=started, finished_at=self.clock(), report=report.as_json()))


def pinned_keys() -> CompoundSelect[str]:
    """Cache keys that must not be evicted: kept tasks, and every sentence of a book that is still
    rendering or that a client asked to keep."""
    books = select(BookRow.id).where(or_(
        BookRow.status.in_(OPEN_BOOK), BookRow.keep.is_(True)))
    return select(TaskRow.cache_key).where(TaskRow.keep.is_(True)).union(
        select(SentenceRow.cache_key).where(SentenceRow.book_id.in_(books)))
