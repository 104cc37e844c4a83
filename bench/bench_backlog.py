"""The backlog query's cost (``tts_queue.tasks.backlog.count``) at 1,000 and 100,000 task rows.

Run from the repository root (about a minute on 2 cores)::

    .venv/bin/python bench/bench_backlog.py [--rows 1000 100000] [--database-url URL]
        [--out bench/results/backlog.json]

Each size is a fresh migrated database (a temporary SQLite file unless ``--database-url`` names an
empty PostgreSQL database, whose ``tasks`` table is emptied between sizes) holding that many task
rows: half finished, two fifths waiting and a tenth running, spread over the four synthesis
queues (two pools, two lanes), each with an estimate. It times ``count`` 30 times and reports the
median and the 90th percentile, and the ratio of the largest size's median to the smallest's.
Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from sqlalchemy import delete, insert

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tts_queue.db import Database, utcnow  # noqa: E402
from tts_queue.enums import TaskStatus  # noqa: E402
from tts_queue.migrate import upgrade  # noqa: E402
from tts_queue.tables import TaskRow  # noqa: E402
from tts_queue.tasks.backlog import count  # noqa: E402

QUEUES = ("tts.cpu", "tts.cpu.bulk", "tts.gpu", "tts.gpu.bulk")
RUNS = 30


def fill(db: Database, rows: int) -> None:
    """``rows`` task rows: 50 % done, 40 % queued, 10 % running, over the four queues."""
    now = utcnow()
    batch: list[dict[str, Any]] = []
    for n in range(rows):
        kind = n % 10
        status = TaskStatus.DONE if kind < 5 else TaskStatus.QUEUED if kind < 9 else TaskStatus.RUNNING
        queue = QUEUES[n % 4]
        batch.append({"id": str(uuid.uuid4()), "status": status, "cache_key": f"{n:064x}", "request": {},
                      "pool": queue.split(".")[1], "queue": queue, "created_at": now, "attempts": 0,
                      "estimate_s": 3.0 + n % 7})
        if len(batch) == 5000:
            with db.write() as session:
                session.execute(insert(TaskRow), batch)
            batch = []
    if batch:
        with db.write() as session:
            session.execute(insert(TaskRow), batch)


def measure(url: str, rows: int) -> dict[str, Any]:
    upgrade(url)
    db = Database(url)
    with db.write() as session:
        session.execute(delete(TaskRow))
    fill(db, rows)
    count(db)  # warm: the connection, the page cache
    times = []
    for _ in range(RUNS):
        started = time.perf_counter()
        places = count(db)
        times.append(time.perf_counter() - started)
    db.engine.dispose()
    times.sort()
    waiting = sum(p.tasks for p in places.values())
    return {"rows": rows, "backlog_tasks": waiting,
            "median_ms": round(statistics.median(times) * 1000, 2),
            "p90_ms": round(times[int(RUNS * 0.9) - 1] * 1000, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, nargs="+", default=[1000, 100_000])
    parser.add_argument("--database-url", help="an empty PostgreSQL database (default: SQLite files)")
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "backlog.json"))
    args = parser.parse_args()
    runs = []
    with tempfile.TemporaryDirectory(prefix="tts-bench-backlog-") as tmp:
        for rows in args.rows:
            url = args.database_url or f"sqlite:///{tmp}/backlog-{rows}.db"
            runs.append(measure(url, rows))
            print(f"{rows:>8} rows: median {runs[-1]['median_ms']} ms, p90 {runs[-1]['p90_ms']} ms",
                  flush=True)
    result = {"when": datetime.now(timezone.utc).isoformat(), "machine": platform.platform(),
              "database": "postgresql" if args.database_url else "sqlite", "runs": runs,
              "median_ratio_largest_over_smallest": round(
                  runs[-1]["median_ms"] / max(0.01, runs[0]["median_ms"]), 1)}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
