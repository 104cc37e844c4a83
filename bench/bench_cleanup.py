"""Retention at scale: one cleanup over 100,000 cache entries (real files) and 100,000 task rows.

Run from the repository root (a few minutes, most of it creating the files)::

    .venv/bin/python bench/bench_cleanup.py [--entries 100000] [--tasks 100000]

Half the entries and half the task rows are stale; the cleanup runs with no grace, so one run
expires, purges (files and rows), deletes the stale task rows and walks the store for drift. It
reports wall time per phase total and the process's peak memory (ru_maxrss) before and after the
run, to show that nothing is loaded whole. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import sys
import tempfile
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

from sqlalchemy import func, insert, select

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tts_queue.db import Database  # noqa: E402
from tts_queue.enums import TaskStatus  # noqa: E402
from tts_queue.settings import CacheSettings  # noqa: E402
from tts_queue.storage.cache import AudioCache  # noqa: E402
from tts_queue.storage.retention import Cleaner  # noqa: E402
from tts_queue.storage.store import AudioStore  # noqa: E402
from tts_queue.tables import CacheEntry, TaskRow  # noqa: E402

NOW = datetime(2026, 6, 1, tzinfo=timezone.utc)


def peak_mib() -> float:
    """The process's peak resident memory so far, in MiB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def populate(db: Database, store: AudioStore, entries: int, tasks: int) -> None:
    """``entries`` cache rows with small real files and ``tasks`` finished task rows; half old."""
    batch = 5000
    for start in range(0, entries, batch):
        rows = []
        for n in range(start, min(entries, start + batch)):
            key = f"{n:064x}"
            path = store.relative_path(key, "wav")
            target = Path(str(store.local_root)) / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(b"RIFF0000")
            when = NOW - timedelta(days=30 if n % 2 else 1)
            rows.append({"key": key, "path": path, "format": "wav", "voice": "v", "size_bytes": 8,
                         "duration_s": 0.1, "created_at": when, "last_access_at": when, "hits": 0})
        with db.write() as session:
            session.execute(insert(CacheEntry), rows)
    for start in range(0, tasks, batch):
        rows = []
        for n in range(start, min(tasks, start + batch)):
            when = NOW - timedelta(days=30 if n % 2 else 1)
            rows.append({"id": str(uuid.uuid4()), "status": TaskStatus.DONE, "cache_key": f"{n:064x}",
                         "request": {}, "pool": "cpu", "queue": "tts.cpu", "created_at": when,
                         "finished_at": when, "attempts": 1, "cache_hit": False, "keep": False})
        with db.write() as session:
            session.execute(insert(TaskRow), rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "cleanup.json"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tts-bench-cleanup-") as tmp:
        db = Database(f"sqlite:///{tmp}/tts.db")
        db.create_all()
        store = AudioStore.at(Path(tmp) / "audio")
        started = time.perf_counter()
        populate(db, store, args.entries, args.tasks)
        populate_s = time.perf_counter() - started
        before = peak_mib()
        cleaner = Cleaner(AudioCache(db, store), CacheSettings(delete_grace_s=0.0, disk_min_free=0.0),
                          clock=lambda: NOW)
        started = time.perf_counter()
        report = cleaner.run()
        cleanup_s = time.perf_counter() - started
        with db.read() as session:
            left_entries = session.scalar(select(func.count()).select_from(CacheEntry))
            left_tasks = session.scalar(select(func.count()).select_from(TaskRow))
    result = {
        "when": datetime.now(timezone.utc).isoformat(), "machine": platform.platform(),
        "entries": args.entries, "tasks": args.tasks, "populate_s": round(populate_s, 1),
        "cleanup_s": round(cleanup_s, 1), "peak_mib_before": round(before, 1),
        "peak_mib_after": round(peak_mib(), 1), "left_entries": left_entries, "left_tasks": left_tasks,
        "report": report.as_json(),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(json.dumps({k: v for k, v in result.items() if k != "report"}, indent=2))


if __name__ == "__main__":
    main()
