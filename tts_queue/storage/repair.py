"""Drift repair between the audio store and the cache rows (part of the cleanup).

One pass merges two streams in key order: the store's listing (a directory walk, or a bucket's
pages) and the cache rows (read 500 at a time). That finds, without a request per row:

- rows whose file is gone (only rows not touched within the grace: a writer stores the file before
  its row, and a listing can pass a directory before a new file lands there);
- audio files with no row, versions of a key its row no longer names (it was stored again), and
  sidecars without their audio, once older than the grace and than ``tmp_age`` (a writer stores the
  file before its row, and the row can commit long after the file while the database is busy: a
  newer version than the row read may be one whose row is not committed yet);
- temporary files left by crashed writes (older than ``tmp_age``; a bucket has none).

Only names of the store's own layout (``ab/<64 hex, starting ab>[.<version>].<ext>``) are considered: anything
else under the root is left alone, and a listing that comes out of key order stops the pass
before it decides anything from it. Files are deleted a directory at a time, after checking once
more that no row was written for them meanwhile. Each kind is counted.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import delete, select

from tts_queue.db import Database
from tts_queue.storage.store import SIDECAR, AudioStore, sidecar
from tts_queue.tables import CacheEntry

log = logging.getLogger(__name__)

BATCH_ROWS = 500
KINDS = ("rows_without_file", "files_without_row", "temporary_files", "orphan_sidecars")
AUDIO_NAME = re.compile(r"^([0-9a-f]{2})/(\1[0-9a-f]{62})(?:\.[0-9a-f]{8})?\.(align\.json|[a-z0-9]+)$")
TEMPORARY_NAME = re.compile(r"^[0-9a-f]{2}/\.[^/]*\.tmp$")


@dataclass
class _Stored:
    """The stored objects of one key."""

    key: str
    audio: dict[str, float] = field(default_factory=dict)  # name -> modified
    sidecars: dict[str, float] = field(default_factory=dict)


@dataclass
class _Pass:
    """One repair pass: its counts and what it will delete."""

    db: Database
    store: AudioStore
    cutoff: datetime
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    orphans: dict[str, list[str]] = field(default_factory=dict)  # key -> names, rechecked first
    superseded: dict[str, list[str]] = field(default_factory=dict)  # key -> old versions, rechecked
    doomed: list[str] = field(default_factory=list)  # temporary files, orphan sidecars
    missing: list[str] = field(default_factory=list)  # keys of rows without a file
    out_of_order: bool = False

    def row_without_file(self, key: str) -> None:
        self.missing.append(key)
        if len(self.missing) >= BATCH_ROWS:
            self.flush_rows()

    def flush_rows(self) -> None:
        if self.missing:
            with self.db.write() as session:  # a row stored again since it was read is left alone
                result = session.execute(delete(CacheEntry).where(
                    CacheEntry.key.in_(self.missing), CacheEntry.last_access_at < self.cutoff))
            self.counts["rows_without_file"] += int(result.rowcount)  # type: ignore[attr-defined]
            self.missing.clear()

    def stop(self) -> None:
        """The listing broke key order: forget every decision not yet carried out."""
        self.out_of_order = True
        self.missing.clear()
        self.orphans.clear()
        self.superseded.clear()

    def flush_files(self) -> None:
        """Delete what was found so far (called per directory): orphan audio only if its key still
        has no row (the same audio may have been stored again during the walk), an old version only
        if the row does not name it now (the key may have been stored again after its row was read:
        the listing then shows the new file, which the row read before does not name)."""
        if self.superseded or self.orphans:
            with self.db.read() as session:  # what the rows name now, read once for both kinds
                named = {key: path for key, path in session.execute(
                    select(CacheEntry.key, CacheEntry.path)
                    .where(CacheEntry.key.in_([*self.superseded, *self.orphans])))}
            for key, names in self.superseded.items():
                live = named.get(key)
                old = [name for name in names if live is None or name not in (live, sidecar(live))]
                self.doomed.extend(old)
                sidecars = sum(name.endswith(SIDECAR) for name in old)
                self.counts["files_without_row"] += len(old) - sidecars
                self.counts["orphan_sidecars"] += sidecars
            for key, names in self.orphans.items():
                if key not in named:  # not stored again during the walk
                    self.counts["files_without_row"] += sum(not name.endswith(SIDECAR) for name in names)
                    self.doomed.extend(names)
            self.superseded.clear()
            self.orphans.clear()
        if self.doomed:
            self.store.storage.delete(self.doomed)
            self.doomed.clear()


def repair_drift(db: Database, store: AudioStore, now: datetime, grace: timedelta,
                 tmp_age: timedelta) -> dict[str, int]:
    """Fix drift between ``store`` and the cache rows; counts per kind."""
    state = _Pass(db, store, now - grace)
    newest = now.timestamp() - grace.total_seconds()
    # A file with no row may be a write whose row is not committed yet (the database busy, the
    # writer waiting for its lock): it waits as long as a temporary file would, whatever the grace.
    unclaimed = min(newest, now.timestamp() - tmp_age.total_seconds())
    rows = _rows(db)
    row = next(rows, None)
    for stored in _by_key(store, now.timestamp() - tmp_age.total_seconds(), state):
        while row is not None and row[0] < stored.key:
            if row[2] < state.cutoff:
                state.row_without_file(row[0])
            row = next(rows, None)
        if row is not None and row[0] == stored.key:
            if row[1] not in stored.audio and row[2] < state.cutoff:
                state.row_without_file(stored.key)
            # versions of the key its row no longer names (stored again since), once old enough
            superseded = [name for name, modified in stored.audio.items()
                          if name != row[1] and modified < unclaimed]
            if superseded:  # with their sidecars, deleted once the row is read again
                state.superseded[stored.key] = [*superseded, *(sidecar(name) for name in superseded
                                                               if sidecar(name) in stored.sidecars)]
            kept = {sidecar(name) for name in stored.audio}
            row = next(rows, None)
        elif stored.audio and all(modified < unclaimed for modified in stored.audio.values()):
            state.orphans[stored.key] = [*stored.audio, *stored.sidecars]
            kept = set(state.orphans[stored.key])
        else:
            kept = {sidecar(name) for name in stored.audio}
        old = [name for name, modified in stored.sidecars.items()
               if name not in kept and modified < unclaimed]
        state.doomed.extend(old)
        state.counts["orphan_sidecars"] += len(old)
    while row is not None and not state.out_of_order:
        if row[2] < state.cutoff:
            state.row_without_file(row[0])
        row = next(rows, None)
    state.flush_files()
    state.flush_rows()
    return state.counts


def _by_key(store: AudioStore, tmp_before: float, state: _Pass) -> Iterator[_Stored]:
    """The store's objects of its own layout grouped by cache key, in key order; stale temporary
    files are doomed. Files are flushed at each new directory. Stops if the order breaks."""
    current: _Stored | None = None
    directory = ""
    for item in store.storage.list():
        if TEMPORARY_NAME.match(item.name):
            if item.modified < tmp_before:
                state.doomed.append(item.name)
                state.counts["temporary_files"] += 1
            continue
        match = AUDIO_NAME.match(item.name)
        if match is None:
            continue  # not the store's: left alone
        if match.group(1) != directory:
            state.flush_files()
            directory = match.group(1)
        key = match.group(2)
        if current is not None and key < current.key:
            log.error("drift repair stopped: the store lists %s after %s (out of key order); what "
                      "was not yet carried out is dropped", item.name, current.key)
            state.stop()
            return
        if current is None or current.key != key:
            if current is not None:
                yield current
            current = _Stored(key)
        if item.name.endswith(SIDECAR):
            current.sidecars[item.name] = item.modified
        else:
            current.audio[item.name] = item.modified
    if current is not None:
        yield current


def _rows(db: Database) -> Iterator[tuple[str, str, datetime]]:
    """Every cache row as (key, path, last access), in key order, a batch per query."""
    after = ""
    while True:
        with db.read() as session:
            batch = session.execute(
                select(CacheEntry.key, CacheEntry.path, CacheEntry.last_access_at)
                .where(CacheEntry.key > after).order_by(CacheEntry.key).limit(BATCH_ROWS)).all()
        if not batch:
            return
        yield from ((key, path, last) for key, path, last in batch)
        after = batch[-1][0]
