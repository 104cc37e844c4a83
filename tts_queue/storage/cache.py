"""The content-hash cache: database rows that point at stored audio, with a hot in-process LRU.

A hit needs a row and its file; a row whose file is gone is deleted and counts as a miss, so a
lost file is re-synthesized instead of served broken. On disk the file is checked on every hit (a
``stat``); in a bucket it is not (a hit costs no storage round trip) and a download that finds the
object gone forgets the row (``forget``). Hits and last access are recorded for the
cleanup (``tts_queue.storage.retention``), which expires entries first and deletes them after a grace.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import cast

from cachetools import LRUCache
from sqlalchemy import Table, bindparam, delete, select, update
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session
from sqlalchemy.sql.dml import Insert

from tts_queue.db import Database, Executor, utcnow
from tts_queue.storage.store import AudioStore
from tts_queue.tables import CacheEntry

# Recording a hit (``hit_key``, ``hit_at``), built once: a Core statement on the table, with no
# loaded objects to refresh and none of the ORM's statement handling, nor building the statement
# per request (together a fifth of a hit's time in process). It also checks the row is not
# expired (another process's cleanup), so every process's hot cache honours expiry at once.
_ENTRIES = CacheEntry.__table__.c
RECORD_HIT = (
    update(cast(Table, CacheEntry.__table__))
    .where(_ENTRIES.key == bindparam("hit_key"), _ENTRIES.expired_at.is_(None))
    .values(hits=_ENTRIES.hits + 1, last_access_at=bindparam("hit_at"))
)
# A live entry by key (``entry_key``), built once, its columns in ``CachedAudio``'s order: a Core
# select, half of what the ORM's ``session.get`` costs (it builds, maps and tracks an object).
LIVE_ENTRY = (
    select(_ENTRIES.key, _ENTRIES.path, _ENTRIES.format, _ENTRIES.duration_s, _ENTRIES.size_bytes)
    .where(_ENTRIES.key == bindparam("entry_key"), _ENTRIES.expired_at.is_(None))
)


# What a re-stored key's row takes from the new file (the insert's ``excluded`` row); its hits and
# creation stay, and an expired entry is live again.
_RESTORED = ("path", "format", "voice", "size_bytes", "duration_s", "last_access_at")


@functools.cache
def record_statement(dialect: str) -> Insert:
    """``record``'s upsert for ``dialect``, built once per process: built per call, with its values
    in the statement, it was 15% of a Celery worker's CPU in a burst of misses (yappi, CPU clock:
    statement construction, coercion and its cache key), more than the model's call on the tiny
    voice. Its parameters: every column of ``cache_entries``."""
    table = cast(Table, CacheEntry.__table__)
    insert = (postgresql_insert if dialect == "postgresql" else sqlite_insert)(table)
    return insert.on_conflict_do_update(
        index_elements=[table.c.key],
        set_={**{name: insert.excluded[name] for name in _RESTORED}, "expired_at": None})


@dataclass(frozen=True)
class CachedAudio:
    """What a hit gives: where the audio is and what it is."""

    key: str
    path: str
    format: str
    duration_s: float
    size_bytes: int


class AudioCache:
    """Cache rows in the database, audio in the store, hot keys in memory."""

    def __init__(
        self,
        db: Database,
        store: AudioStore,
        hot_size: int = 4096,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.db = db
        self.store = store
        self.clock = clock
        self._hot: LRUCache[str, CachedAudio] = LRUCache(maxsize=max(1, hot_size))
        self._lock = threading.Lock()

    def _find(self, key: str, session: Executor | None = None) -> CachedAudio | None:
        """The entry for ``key`` from memory or the database (in ``session``'s transaction, if
        given), file not checked."""
        with self._lock:
            hit = self._hot.get(key)
        return hit if hit is not None else self._live_row(key, session)

    def _live_row(self, key: str, session: Executor | None = None) -> CachedAudio | None:
        """The unexpired database row of ``key`` (in ``session``'s transaction, if given)."""
        if session is None:
            with self.db.read_connection() as own:
                return self._live_row(key, own)
        found = session.execute(LIVE_ENTRY, {"entry_key": key}).first()
        return CachedAudio(*found) if found is not None else None

    def present(self, audio: CachedAudio | None) -> CachedAudio | None:
        """``audio`` if its file is there (where asking is cheap, as for a hit), else ``None``."""
        return audio if audio is not None and self._present(audio) else None

    def peek(self, key: str, session: Executor | None = None) -> CachedAudio | None:
        """The cached audio for ``key`` if its row is live (read from the database, not the hot
        cache, which another process's cleanup or ``forget`` may have outdated) and its file is
        there, without recording a hit; with ``session``, read in the caller's transaction."""
        return self.present(self._live_row(key, session))

    def lookup(self, key: str, session: Executor | None = None) -> CachedAudio | None:
        """The cached audio for ``key`` (recording the hit), or ``None``.

        With ``session`` (a write session), the entry is read and the hit recorded in the caller's
        transaction, so a cache-hit request costs one database commit and a miss no read
        transaction of its own.
        """
        hit = self._find(key, session)
        if hit is None:
            return None
        if not self._present(hit):  # forget that version only: another writer's newer one stays
            self._forget_version(hit, session)
            return None
        values = {"hit_key": key, "hit_at": self.clock()}
        if session is not None:
            result = session.execute(RECORD_HIT, values)
        else:
            with self.db.write() as own:
                result = own.execute(RECORD_HIT, values)
        with self._lock:
            if not result.rowcount:  # type: ignore[attr-defined]
                self._hot.pop(key, None)
                return None
            self._hot[key] = hit
        return hit

    def _present(self, hit: CachedAudio) -> bool:
        """Whether the hit's file is there, where asking is cheap (a ``stat`` on disk, not a
        bucket request: there a missing object shows at download and is forgotten then)."""
        return not self.store.verifies_hits or self.store.exists(hit.path)

    def drop_hot(self, keys: Iterable[str]) -> None:
        """Forget ``keys`` in this process's hot cache (they were expired)."""
        with self._lock:
            for key in keys:
                self._hot.pop(key, None)

    def put(self, key: str, fmt: str, voice: str, data: bytes, duration_s: float,
            alignment: dict[str, object] | None = None, content_type: str | None = None) -> CachedAudio:
        """Store audio for ``key`` atomically and record it (idempotent)."""
        relative = self.store.write(key, fmt, data, alignment, content_type)
        return self._record(key, relative, fmt, voice, len(data), duration_s)

    def put_file(self, key: str, fmt: str, voice: str, source: Path, duration_s: float,
                 alignment: dict[str, object] | None = None, content_type: str | None = None) -> CachedAudio:
        """Store a finished audio file for ``key`` (made in ``store.scratch()``, fsynced) and record
        it (idempotent): what a worker makes sentence by sentence is never whole in memory."""
        size = source.stat().st_size
        relative = self.store.write_file(key, fmt, source, alignment, content_type)
        return self._record(key, relative, fmt, voice, size, duration_s)

    def store_file(self, key: str, fmt: str, source: Path, duration_s: float,
                   alignment: dict[str, object] | None = None,
                   content_type: str | None = None) -> CachedAudio:
        """Store a finished audio file for ``key`` (as ``put_file``) without recording it: the
        caller records it with ``record`` in a transaction of its own (a task's finish)."""
        size = source.stat().st_size
        relative = self.store.write_file(key, fmt, source, alignment, content_type)
        return CachedAudio(key, relative, fmt, duration_s, size)

    def record(self, session: Executor, audio: CachedAudio, voice: str) -> None:
        """Record stored audio in the caller's write transaction (one upsert: another worker that
        stored the same key first made the same audio; the newer file wins) and in the hot map
        (a transaction that then fails leaves a hot entry whose count finds no row: a miss)."""
        now = self.clock()
        session.execute(record_statement(self.db.engine.dialect.name), {
            "key": audio.key, "hits": 0, "created_at": now, "path": audio.path, "format": audio.format,
            "voice": voice, "size_bytes": audio.size_bytes, "duration_s": audio.duration_s,
            "last_access_at": now, "expired_at": None})
        with self._lock:
            self._hot[audio.key] = audio

    def _record(self, key: str, relative: str, fmt: str, voice: str, size: int,
                duration_s: float) -> CachedAudio:
        hit = CachedAudio(key, relative, fmt, duration_s, size)
        with self.db.write() as session:
            self.record(session, hit, voice)
        return hit

    def forget_missing(self, key: str, path: str) -> None:
        """Forget ``key`` after a download found its file gone, if it still is: a worker that
        stored the same audio again since keeps its row. The file is drift repair's to clean."""
        with self._lock:
            self._hot.pop(key, None)
        if self.store.exists(path):
            return
        with self.db.write() as session:
            session.execute(delete(CacheEntry).where(CacheEntry.key == key, CacheEntry.path == path))

    def _forget_version(self, hit: CachedAudio, session: Executor | None) -> None:
        """Drop ``hit``'s row if it still names ``hit``'s file (a stale hot entry, or a row whose
        file went): a row another writer stored since, with a file of its own, is left alone."""
        with self._lock:
            self._hot.pop(hit.key, None)
        if session is None:
            with self.db.write() as own:
                self._forget_version(hit, own)
            return
        session.execute(delete(CacheEntry).where(CacheEntry.key == hit.key, CacheEntry.path == hit.path))

    def forget(self, key: str, session: Session | None = None) -> None:
        """Drop ``key`` from memory and the database, then the file its row named (never a file
        another writer stored for the key since: each write has a name of its own)."""
        with self._lock:
            self._hot.pop(key, None)
        if session is None:
            with self.db.write() as own:
                self.forget(key, own)
            return
        gone = session.execute(delete(CacheEntry).where(CacheEntry.key == key)
                               .returning(CacheEntry.path)).scalars().all()
        self.store.delete(gone)

