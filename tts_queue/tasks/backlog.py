"""The backlog: the work waiting AND running, per pool and lane, counted from the task rows.

What an autoscaler must read. A Redis list's length is not it: a worker takes messages ahead of
its threads (prefetch) and holds them reserved, and a book's sentences wait in the database until
the bulk window sends them (``books.window``), so with every worker saturated the lists read near
zero. The rows are the truth: every admitted task is a row ``queued`` until it is claimed and
``running`` until it ends, whatever the broker holds. Each row keeps its estimated audio seconds
from admission (``synthesis.work.estimate_of``; ``None`` on rows admitted before it was kept,
counted as tasks only). A book being parsed has no task rows yet: it counts as one task of
``PARSING_AUDIO_S`` on its pool's interactive lane (its ingestion runs there), so a pool an
autoscaler keeps at zero wakes for an upload too.

One query, grouped by queue and status over ``ix_tasks_status``; ``Backlog`` caches it a few
seconds per process, so every API replica reports the same figures whatever the scrape rate (an
autoscaler takes their ``max()``, not their ``sum()``). ``python -m bench run backlog`` measures the
query at 100,000 rows.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TypedDict

from sqlalchemy import func, select

from tts_queue.broker.names import lane_of, pool_of, queue_name
from tts_queue.db import Database
from tts_queue.enums import POOLS, BookStatus, Lane, TaskStatus
from tts_queue.tables import BookRow, TaskRow

LANES = (Lane.INTERACTIVE, Lane.BULK)  # the lanes that carry synthesis tasks
TTL_S = 5.0  # how long a process answers from one count (the metrics' own cache is as long)
PARSING_AUDIO_S = 60.0  # what a book being parsed counts for: over any activation threshold


@dataclass
class Place:
    """One pool and lane's backlog: tasks waiting and running, and their estimated audio."""

    queued: int = 0
    running: int = 0
    audio_s: float = 0.0

    @property
    def tasks(self) -> int:
        """Waiting and running together: what a worker pool has left to do."""
        return self.queued + self.running


class PlaceJSON(TypedDict):
    """One pool and lane in ``GET /v1/backlog``."""

    tasks: int
    queued: int
    running: int
    audio_seconds: float


class BacklogJSON(TypedDict):
    """``GET /v1/backlog``: every pool and lane, and when it was counted."""

    pools: dict[str, dict[str, PlaceJSON]]
    counted_at: str


def count(db: Database) -> dict[tuple[str, str], Place]:
    """Every pool and lane (zero where nothing waits), counted now from the rows."""
    places = {(pool, lane.value): Place() for pool in POOLS for lane in LANES}
    with db.read() as session:
        rows = session.execute(
            select(TaskRow.queue, TaskRow.status, func.count(),
                   func.coalesce(func.sum(TaskRow.estimate_s), 0.0))
            .where(TaskRow.status.in_((TaskStatus.QUEUED, TaskStatus.RUNNING)))
            .group_by(TaskRow.queue, TaskRow.status)).all()
        parsing = session.execute(select(BookRow.pool, func.count())
                                  .where(BookRow.status == BookStatus.PARSING).group_by(BookRow.pool)).all()
    for pool, books in parsing:
        place = places.setdefault((str(pool), Lane.INTERACTIVE.value), Place())
        place.queued += int(books)
        place.audio_s += PARSING_AUDIO_S * int(books)
    for queue, status, tasks, seconds in rows:
        try:
            place = places.setdefault((pool_of(queue), lane_of(queue).value), Place())
        except ValueError:  # not a task queue (none is written today)
            continue
        if status is TaskStatus.QUEUED:
            place.queued += int(tasks)
        else:
            place.running += int(tasks)
        place.audio_s += float(seconds or 0.0)
    return places


def waiting(db: Database, pool: str, prefix: str) -> int:
    """What waits for ``pool``'s workers now: its queued tasks (both lanes) and books being parsed
    (the bound on a pool at zero, ``TTS_SCALE_FROM_ZERO_MAX_TASKS``); two index-only counts."""
    queues = [queue_name(pool, lane, prefix) for lane in LANES]
    with db.read() as session:
        tasks = session.scalar(select(func.count()).select_from(TaskRow).where(
            TaskRow.status == TaskStatus.QUEUED, TaskRow.queue.in_(queues)))
        books = session.scalar(select(func.count()).select_from(BookRow).where(
            BookRow.status == BookStatus.PARSING, BookRow.pool == pool))
    return int(tasks or 0) + int(books or 0)


class Backlog:
    """``count`` cached for ``TTL_S`` in this process, shared by its threads."""

    def __init__(self, db: Database, ttl_s: float = TTL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.db = db
        self.ttl_s = ttl_s
        self.clock = clock
        self._lock = threading.Lock()
        self._at = -1e18
        self._places: dict[tuple[str, str], Place] = {}
        self._counted_at = datetime.now(timezone.utc)

    def places(self) -> tuple[dict[tuple[str, str], Place], datetime]:
        """Each pool and lane's backlog and when it was counted (at most ``ttl_s`` ago)."""
        with self._lock:
            if self.clock() - self._at >= self.ttl_s:
                self._places = count(self.db)
                self._at, self._counted_at = self.clock(), datetime.now(timezone.utc)
            return dict(self._places), self._counted_at

    def as_json(self) -> BacklogJSON:
        """What ``GET /v1/backlog`` answers."""
        places, counted_at = self.places()
        pools: dict[str, dict[str, PlaceJSON]] = {}
        for (pool, lane), place in sorted(places.items()):
            pools.setdefault(pool, {})[lane] = {"tasks": place.tasks, "queued": place.queued,
                                                "running": place.running,
                                                "audio_seconds": round(place.audio_s, 3)}
        return {"pools": pools, "counted_at": counted_at.isoformat()}
