"""The backlog query's cost (``tts_queue.tasks.backlog.count``) at 1,000 and 100,000 task rows: each
size a fresh migrated database (a temporary SQLite file, or with ``database_url`` an empty PostgreSQL
database whose ``tasks`` table is emptied between sizes) holding that many rows (half finished, two
fifths waiting, a tenth running, over the four synthesis queues, each with an estimate); ``count``
timed ``runs`` times: the median and 90th percentile, and the largest size's median over the
smallest's."""

from __future__ import annotations

import statistics
import time
import uuid
from typing import Any

from bench.harness.registry import Figures, scenario
from bench.harness.run import Run

QUEUES = ("tts.cpu", "tts.cpu.bulk", "tts.gpu", "tts.gpu.bulk")


def fill(db: Any, rows: int) -> None:
    """``rows`` task rows: 50% done, 40% queued, 10% running, over the four queues."""
    from sqlalchemy import insert

    from tts_queue.db import utcnow
    from tts_queue.enums import TaskStatus
    from tts_queue.tables import TaskRow

    now, batch = utcnow(), list[dict[str, Any]]()
    for n in range(rows):
        kind, queue = n % 10, QUEUES[n % 4]
        status = TaskStatus.DONE if kind < 5 else TaskStatus.QUEUED if kind < 9 else TaskStatus.RUNNING
        batch.append({"id": str(uuid.uuid4()), "status": status, "cache_key": f"{n:064x}", "request": {},
                      "pool": queue.split(".")[1], "queue": queue, "created_at": now, "attempts": 0,
                      "estimate_s": 3.0 + n % 7})
        if len(batch) == 5000 or n == rows - 1:
            with db.write() as session:
                session.execute(insert(TaskRow), batch)
            batch = []


def measure(url: str, rows: int, runs: int) -> dict[str, Any]:
    """``count`` on ``rows`` rows, ``runs`` times."""
    from sqlalchemy import delete

    from tts_queue.db import Database
    from tts_queue.migrate import upgrade
    from tts_queue.tables import TaskRow
    from tts_queue.tasks.backlog import count

    upgrade(url)
    db = Database(url)
    with db.write() as session:
        session.execute(delete(TaskRow))
    fill(db, rows)
    places = count(db)  # warm: the connection, the page cache
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        places = count(db)
        times.append(time.perf_counter() - started)
    db.engine.dispose()
    times.sort()
    return {"rows": rows, "backlog_tasks": sum(p.tasks for p in places.values()),
            "median_ms": round(statistics.median(times) * 1000, 2),
            "p90_ms": round(times[int(runs * 0.9) - 1] * 1000, 2)}


@scenario("backlog", subject="storage", takes="about a minute", quick={"rows": "100,1000", "runs": 5},
          description="the backlog query (waiting and running tasks per pool and lane) at 1,000 and 100,000 "
                      "rows")
def backlog(run: Run, rows: str = "1000,100000", runs: int = 30, database_url: str = "") -> Figures:
    """Each size in turn."""
    found = []
    for size in (int(r) for r in rows.split(",")):
        found.append(measure(database_url or f"sqlite:///{run.work}/backlog-{size}.db", size, runs))
        run.say(f"{size:>8} rows: median {found[-1]['median_ms']} ms, p90 {found[-1]['p90_ms']} ms")
    return {"headline": {f"median_ms_{r['rows']}_rows": r["median_ms"] for r in found}
            | {"largest_over_smallest": round(found[-1]["median_ms"] / max(0.01, found[0]["median_ms"]), 1)},
            "database": "postgresql" if database_url else "sqlite", "runs": found}
