"""A worker under a flood of tasks over their tenant's share: its memory and how often it sends
them round the broker: ``python -m bench run flood`` (``--against 90c5220``: the tree that sent
over-share tasks back, in the same run).

Each tree's worker is a real ``celery worker`` process with the default 16 threads, the tiny
voice, each model call slowed to 250 ms by the faults plugin (a slow model without the CPU), the
machine's Redis and a SQLite database; the API runs in this process with auth off, so every task
is one tenant's (its address). ``tasks`` long requests (twenty sentences at a quarter speed,
each text its own) are submitted at once: a dozen run, the rest are over the tenant's share.
From the last submission on, for ``seconds``, the worker's RSS is read every second
(``/proc/PID/status``), and so are the messages it has received (its log's ``received`` lines:
beyond one per task, each is a task sent back round the broker) and the tasks done.

The figures: RSS at the start, after the submissions, the means of the window's halves and its
peak; tasks sent back a second; tasks done a second. Each run has a private redis-server. Nothing
is asserted.
"""

from __future__ import annotations

import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from sqlalchemy import func, select

from api import create_app
from bench.harness.procs import rss_reader
from bench.harness.registry import Figures, scenario
from bench.harness.run import Run
from tests.support import WorkerProcess, flush_queues, hooked, service_settings, submit
from tests.support.tiny_voice import write_voice
from tts_queue.db import Database
from tts_queue.enums import TaskStatus
from tts_queue.tables import TaskRow
from workers.factory import make_celery

DELAY_MS = 250


def received(log: Path) -> int:
    """Messages the worker has received so far (its log's lines)."""
    return sum(1 for line in log.read_text(errors="replace").splitlines() if "tts.synthesize[" in line
               and line.rstrip().endswith("received"))


def flood(tree: Path, redis_url: str, tasks: int, seconds: int) -> dict[str, Any]:
    data = Path(tempfile.mkdtemp(prefix="flood-"))
    flush_queues(redis_url)
    write_voice(data / "voices")
    settings = service_settings(data, redis_url, data / "voices")
    tree_worker = type("TreeWorker", (WorkerProcess,), {"cwd": tree})
    log = data / "worker.log"
    worker = tree_worker(settings, f"flood-{uuid.uuid4().hex[:6]}@localhost", log, PYTHONPATH=str(tree),
                         **hooked(TTS_TEST_BATCH_DELAY_MS=str(DELAY_MS)))
    try:
        worker.wait_ready(make_celery(settings))
        rss = rss_reader(worker.process.pid, children=False)

        def rss_mb() -> float:
            return rss() / 2**20

        client = create_app(settings).test_client()
        fresh = rss_mb()
        tag = uuid.uuid4().hex[:8]
        started = time.monotonic()
        for number in range(tasks):
            text = " ".join(f"Flood {tag} request {number} line {n} goes on." for n in range(20))
            submit(client, text, speed=0.25)
        submitted_s = time.monotonic() - started
        after_submit, first = rss_mb(), received(log)
        db = Database(settings.database_url)
        done_before = count_done(db)
        samples, receipts = [], []
        for _ in range(seconds):
            time.sleep(1.0)
            samples.append(rss_mb())
            receipts.append(received(log))
        done = count_done(db) - done_before
    finally:
        worker.stop(now=True)
    half = len(samples) // 2
    resent = receipts[-1] - first
    return {"tree": str(tree), "tasks": tasks, "submitted_s": round(submitted_s, 1),
            "rss_fresh_mb": round(fresh, 1), "rss_after_submit_mb": round(after_submit, 1),
            "rss_first_half_mb": round(statistics.mean(samples[:half]), 1),
            "rss_second_half_mb": round(statistics.mean(samples[half:]), 1),
            "rss_peak_mb": round(max(samples), 1),
            "halves": round(statistics.mean(samples[half:]) / statistics.mean(samples[:half]), 3),
            "received_in_window": resent, "sent_back_per_s": round(resent / seconds, 1),
            "done_per_s": round(done / seconds, 2), "window_s": seconds}


def count_done(db: Database) -> int:
    with db.read() as session:
        return int(session.scalar(select(func.count()).select_from(TaskRow)
                                  .where(TaskRow.status == TaskStatus.DONE)) or 0)


@scenario("flood", subject="fairness", takes="about 3 minutes", quick={"tasks": 50, "seconds": 3},
          description="one worker under 5,000 requests of one tenant, most over its share: tasks sent "
                      "round the broker a second, and its memory over the next minute")
def flood_scenario(run: Run, tasks: int = 5000, seconds: int = 60) -> Figures:
    """One flood on the measured tree's worker, on a private redis-server."""
    from tests.support import private_redis

    broker = private_redis()
    url = broker.start()
    try:
        found = flood(run.tree, url, tasks, seconds)
    finally:
        broker.stop()
    return {"headline": {"sent_back_per_s": found["sent_back_per_s"], "rss_peak_mb": found["rss_peak_mb"]},
            **found}
