"""Drift repair between the audio store and the cache rows (part of the cleanup).

One pass merges two streams in key order: the store's listing (a directory walk, or a bucket's
pages) and the cache rows (read in chunks). That finds, without a request per row:

- rows whose file is gone (only rows not touched within the grace: a writer stores the file before
  its row, and a listing can pass a directory before a new file lands there);
- audio files with no row, and sidecars without audio (older than the grace, for the same reason);
- temporary files left by crashed writes (older than ``tmp_age``; a bucket has none).

Each kind is fixed in bounded batches and counted.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import delete, select

from tts_queue.db import CacheEntry, Database
from tts_queue.storage import StoredObject
from tts_queue.store import SIDECAR, AudioStore

CHUNK = 500
KINDS = ("rows_without_file", "files_without_row", "temporary_files", "orphan_sidecars")


@dataclass
class _Stored:
    """The stored objects of one key."""

    key: str
    audio: dict[str, float] = field(default_factory=dict)  # name -> modified
    sidecars: dict[str, float] = field(default_factory=dict)


def repair_drift(db: Database, store: AudioStore, now: datetime, grace: timedelta,
                 tmp_age: timedelta) -> dict[str, int]:
    """Fix drift between ``store`` and the cache rows; counts per kind."""
    counts = dict.fromkeys(KINDS, 0)
    cutoff, newest = now - grace, now.timestamp() - grace.total_seconds()
    doomed: list[str] = []
    missing: list[str] = []

    def flush(final: bool = False) -> None:
        if len(doomed) >= CHUNK or (final and doomed):
            store.storage.delete(doomed)
            doomed.clear()
        if len(missing) >= CHUNK or (final and missing):
            with db.write() as session:  # a row stored again since it was read is left alone
                session.execute(delete(CacheEntry).where(CacheEntry.key.in_(missing),
                                                         CacheEntry.last_access_at < cutoff))
            missing.clear()

    rows = _rows(db)
    row = next(rows, None)
    for stored in _by_key(store, now.timestamp() - tmp_age.total_seconds(), counts, doomed):
        while row is not None and row[0] < stored.key:
            if row[2] < cutoff:
                missing.append(row[0])
                counts["rows_without_file"] += 1
            row = next(rows, None)
        if row is not None and row[0] == stored.key:
            if row[1] not in stored.audio and row[2] < cutoff:
                missing.append(stored.key)
                counts["rows_without_file"] += 1
            row = next(rows, None)
        elif stored.audio:
            old = [name for name, modified in stored.audio.items() if modified < newest]
            if len(old) == len(stored.audio):
                doomed.extend([*old, *stored.sidecars])
                counts["files_without_row"] += len(old)
        if not stored.audio:
            old = [name for name, modified in stored.sidecars.items() if modified < newest]
            doomed.extend(old)
            counts["orphan_sidecars"] += len(old)
        flush()
    while row is not None:
        if row[2] < cutoff:
            missing.append(row[0])
            counts["rows_without_file"] += 1
        row = next(rows, None)
        flush()
    flush(final=True)
    return counts


def _by_key(store: AudioStore, tmp_before: float, counts: dict[str, int],
            doomed: list[str]) -> Iterator[_Stored]:
    """The store's objects grouped by cache key, in key order; stale temporary files are doomed."""
    current: _Stored | None = None
    for item in store.storage.list():
        base = item.name.rsplit("/", 1)[-1]
        if base.endswith(".tmp"):
            if item.modified < tmp_before:
                doomed.append(item.name)
                counts["temporary_files"] += 1
            continue
        key = base.split(".", 1)[0]
        if current is None or current.key != key:
            if current is not None:
                yield current
            current = _Stored(key)
        _add(current, item)
    if current is not None:
        yield current


def _add(stored: _Stored, item: StoredObject) -> None:
    if item.name.endswith(SIDECAR):
        stored.sidecars[item.name] = item.modified
    else:
        stored.audio[item.name] = item.modified


def _rows(db: Database) -> Iterator[tuple[str, str, datetime]]:
    """Every cache row as (key, path, last access), in key order, a chunk per query."""
    after = ""
    while True:
        with db.read() as session:
            chunk = session.execute(
                select(CacheEntry.key, CacheEntry.path, CacheEntry.last_access_at)
                .where(CacheEntry.key > after).order_by(CacheEntry.key).limit(CHUNK)).all()
        if not chunk:
            return
        yield from ((key, path, last) for key, path, last in chunk)
        after = chunk[-1][0]

