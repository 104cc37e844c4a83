"""The cache's figures: entries, bytes, hits, misses, hit ratio, pinned entries, the last cleanup."""

from __future__ import annotations

from typing import TypedDict

from sqlalchemy import func, select

from tts_queue.db import Database
from tts_queue.enums import TaskStatus
from tts_queue.storage.retention import pinned_keys
from tts_queue.tables import CacheEntry, CleanupRun, TaskRow


class LastCleanup(TypedDict):
    """What the last cleanup did (from its ``cleanup_runs`` row)."""

    at: str
    entries: int
    bytes: int
    task_rows: int
    expired_by_pressure: int
    drift: dict[str, int]


class CacheStats(TypedDict):
    """``GET /v1/cache/stats`` and ``tts-queue cache stats``."""

    entries: int
    bytes: int
    hits: int
    misses: int
    hit_ratio: float | None
    pinned: int
    last_cleanup: LastCleanup | None


def cache_stats(db: Database) -> CacheStats:
    """``entries``, ``bytes``, ``hits``, ``misses``, ``hit_ratio``, ``pinned``, ``last_cleanup``.

    Hits count every time stored audio answered a request (``cache_entries.hits``); misses count
    the tasks that had to be synthesized (within the task rows' retention).
    """
    with db.read() as session:
        entries, size, hits = session.execute(
            select(func.count(), func.coalesce(func.sum(CacheEntry.size_bytes), 0),
                   func.coalesce(func.sum(CacheEntry.hits), 0))
            .where(CacheEntry.expired_at.is_(None))
        ).one()
        misses = session.scalar(select(func.count()).select_from(TaskRow).where(
            TaskRow.cache_hit.is_(False), TaskRow.status == TaskStatus.DONE)) or 0
        pinned = session.scalar(select(func.count()).select_from(CacheEntry)
                                .where(CacheEntry.key.in_(pinned_keys()))) or 0
        last = session.scalars(select(CleanupRun).order_by(CleanupRun.started_at.desc()).limit(1)).first()
    total = int(hits) + int(misses)
    return {
        "entries": int(entries), "bytes": int(size), "hits": int(hits), "misses": int(misses),
        "hit_ratio": round(int(hits) / total, 4) if total else None, "pinned": int(pinned),
        "last_cleanup": None if last is None else {
            "at": last.started_at.isoformat(), "entries": last.report.get("entries", 0),
            "bytes": last.report.get("bytes", 0), "task_rows": last.report.get("task_rows", 0),
            "expired_by_pressure": last.report.get("expired_by_pressure", 0),
            "drift": last.report.get("drift", {}),
        },
    }
