"""Drift repair between the audio store and the cache rows (part of the cleanup).

Finds and fixes, in bounded chunks: rows whose file is gone, audio files with no row (older than
the grace, since a writer stores the file before its row), temporary files left by crashed writes,
and alignment sidecars without their audio. Returns the count of each kind.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta
from pathlib import Path

from sqlalchemy import delete, select

from tts_queue.db import CacheEntry, Database
from tts_queue.store import AudioStore

CHUNK = 500
SIDECAR = ".align.json"


def repair_drift(db: Database, store: AudioStore, now: datetime, grace: timedelta,
                 tmp_age: timedelta) -> dict[str, int]:
    """Fix drift in the store under ``store.root``; counts per kind."""
    counts = {"rows_without_file": _rows_without_file(db, store), "files_without_row": 0,
              "temporary_files": 0, "orphan_sidecars": 0}
    if not store.root.is_dir():
        return counts
    now_s = now.timestamp()
    for directory in sorted(p for p in store.root.iterdir() if p.is_dir()):
        files = [p for p in directory.iterdir() if p.is_file()]
        audio = {}
        for path in files:
            try:
                age = now_s - path.stat().st_mtime
            except FileNotFoundError:  # a writer renamed its temporary file, or a cleaner won
                continue
            if path.name.endswith(".tmp"):
                if age > tmp_age.total_seconds():
                    counts["temporary_files"] += _unlink(path)
            elif not path.name.endswith(SIDECAR):
                audio[path.name.split(".", 1)[0]] = (path, age)
        for path in files:
            if path.name.endswith(SIDECAR) and path.name[: -len(SIDECAR)] not in audio:
                counts["orphan_sidecars"] += _unlink(path)
        counts["files_without_row"] += _files_without_row(db, audio, grace.total_seconds())
    return counts


def _rows_without_file(db: Database, store: AudioStore) -> int:
    """Delete rows whose file is missing, walking the table in key order."""
    gone = 0
    after = ""
    while True:
        with db.read() as session:
            rows = session.execute(select(CacheEntry.key, CacheEntry.path).where(CacheEntry.key > after)
                                   .order_by(CacheEntry.key).limit(CHUNK)).all()
        if not rows:
            return gone
        missing = [key for key, path in rows if not store.exists(path)]
        if missing:
            with db.write() as session:
                session.execute(delete(CacheEntry).where(CacheEntry.key.in_(missing)))
            gone += len(missing)
        after = rows[-1][0]


def _files_without_row(db: Database, audio: dict[str, tuple[Path, float]], grace_s: float) -> int:
    """Delete audio files (and sidecars) of one directory whose key has no row."""
    if not audio:
        return 0
    with db.read() as session:
        known = set(session.scalars(select(CacheEntry.key).where(CacheEntry.key.in_(list(audio)))))
    removed = 0
    for key, (path, age) in audio.items():
        if key not in known and age > grace_s:
            removed += _unlink(path)
            _unlink(path.with_name(key + SIDECAR))
    return removed


def _unlink(path: Path) -> int:
    try:
        os.unlink(path)
        return 1
    except FileNotFoundError:
        return 0
