"""Retention at scale: one cleanup over ``entries`` cache entries (real files) and ``tasks`` task rows,
half of each stale; the cleanup runs with no grace, so one run expires, purges (files and rows),
deletes the stale task rows and walks the store for drift: its wall time and the process's peak
memory before and after (nothing is loaded whole)."""

from __future__ import annotations

import resource
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from bench.harness.registry import Figures, scenario
from bench.harness.run import Run

NOW = datetime(2026, 6, 1, tzinfo=timezone.utc)


def peak_mib() -> float:
    """The process's peak resident memory so far, in MiB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def populate(db: Any, store: Any, entries: int, tasks: int) -> None:
    """``entries`` cache rows with small real files and ``tasks`` finished task rows; half old."""
    from sqlalchemy import insert

    from tts_queue.enums import TaskStatus
    from tts_queue.tables import CacheEntry, TaskRow

    for start in range(0, entries, 5000):
        rows = []
        for n in range(start, min(entries, start + 5000)):
            key, when = f"{n:064x}", NOW - timedelta(days=30 if n % 2 else 1)
            path = store.relative_path(key, "wav")
            target = Path(str(store.local_root)) / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(b"RIFF0000")
            rows.append({"key": key, "path": path, "format": "wav", "voice": "v", "size_bytes": 8,
                         "duration_s": 0.1,
                         "created_at": when, "last_access_at": when, "hits": 0})
        with db.write() as session:
            session.execute(insert(CacheEntry), rows)
    for start in range(0, tasks, 5000):
        rows = [{"id": str(uuid.uuid4()), "status": TaskStatus.DONE, "cache_key": f"{n:064x}", "request": {},
                 "pool": "cpu", "queue": "tts.cpu", "created_at": NOW - timedelta(days=30 if n % 2 else 1),
                 "finished_at": NOW - timedelta(days=30 if n % 2 else 1), "attempts": 1, "cache_hit": False,
                 "keep": False} for n in range(start, min(tasks, start + 5000))]
        with db.write() as session:
            session.execute(insert(TaskRow), rows)


@scenario("cleanup", subject="storage", takes="a few minutes", quick={"entries": 200, "tasks": 200},
          description="one cleanup over 100,000 cache entries and 100,000 task rows: time and peak memory")
def cleanup(run: Run, entries: int = 100_000, tasks: int = 100_000) -> Figures:
    """Populate, then one cleanup."""
    from sqlalchemy import func, select

    from tts_queue.db import Database
    from tts_queue.settings import CacheSettings
    from tts_queue.storage.cache import AudioCache
    from tts_queue.storage.retention import Cleaner
    from tts_queue.storage.store import AudioStore
    from tts_queue.tables import CacheEntry, TaskRow

    db = Database(f"sqlite:///{run.work}/tts.db")
    db.create_all()
    store = AudioStore.at(run.work / "audio")
    started = time.perf_counter()
    populate(db, store, entries, tasks)
    populate_s, before = time.perf_counter() - started, peak_mib()
    cleaner = Cleaner(AudioCache(db, store), CacheSettings(delete_grace_s=0.0, disk_min_free=0.0),
                      clock=lambda: NOW)
    started = time.perf_counter()
    report = cleaner.run()
    cleanup_s = time.perf_counter() - started
    with db.read() as session:
        left_entries = session.scalar(select(func.count()).select_from(CacheEntry))
        left_tasks = session.scalar(select(func.count()).select_from(TaskRow))
    db.engine.dispose()
    return {"headline": {"cleanup_s": round(cleanup_s, 2), "peak_mib_growth": round(peak_mib() - before, 1),
                         "left_entries": left_entries, "left_tasks": left_tasks},
            "entries": entries, "tasks": tasks, "populate_s": round(populate_s, 1),
            "peak_mib_before": round(before, 1),
            "peak_mib_after": round(peak_mib(), 1), "report": report.as_json()}
