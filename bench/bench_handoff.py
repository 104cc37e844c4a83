"""How soon a worker whose prefetch window is full takes the next message once a task ends: a
worker of this tree against one of ``--before`` (a tree without ``workers.wakeup``), in one run.

    git worktree add /tmp/tts-before d46f6f7
    .venv/bin/python bench/bench_handoff.py --before /tmp/tts-before [--rounds 10] [--out PATH]

Each tree's worker is a real ``celery worker`` process with two threads (so a window of two) unless
said otherwise, the tiny voice, each model call slowed by the faults plugin, the machine's Redis and
a SQLite database; the API runs in this process. Three scenarios per tree:

- ``claim``: two requests of four calls of 250 ms fill both threads, a one-call request follows
  once both run; from the first long task's end to the short one's start (its ``started_at``), per
  round;
- ``backlog``: 30 one-call requests of 50 ms sent at once; from the first submission to the last
  ``finished_at``, and the requests a second;
- ``backlog_16``: the same with 160 requests and 16 threads (the default concurrency).

The results (each tree's figures and the ratios of before to after) go to ``--out``
(``bench/results/handoff.json``); nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from api import create_app  # noqa: E402
from tests.support import (  # noqa: E402
    WorkerProcess,
    at,
    done,
    flush_queues,
    handoff_delay,
    hooked,
    service_settings,
    submit,
)
from tests.support.tiny_voice import write_voice  # noqa: E402
from workers.factory import make_celery  # noqa: E402


class Stack:
    """A worker of ``tree`` (``threads`` threads, model calls slowed by ``delay_ms``) and the API in
    process."""

    def __init__(self, tree: Path, redis_url: str, delay_ms: int, threads: int = 2) -> None:
        data = Path(tempfile.mkdtemp(prefix="handoff-"))
        flush_queues(redis_url)
        write_voice(data / "voices")
        settings = service_settings(data, redis_url, data / "voices")
        tree_worker = type("TreeWorker", (WorkerProcess,), {"threads": threads, "cwd": tree})
        self.worker = tree_worker(settings, f"handoff-{uuid.uuid4().hex[:6]}@localhost", data / "worker.log",
                                  PYTHONPATH=str(tree), **hooked(TTS_TEST_BATCH_DELAY_MS=str(delay_ms)))
        self.worker.wait_ready(make_celery(settings))
        self.client = create_app(settings).test_client()

    def stop(self) -> None:
        self.worker.stop()


def claim(tree: Path, redis_url: str, rounds: int) -> dict[str, Any]:
    stack = Stack(tree, redis_url, 250)
    try:
        delays = [handoff_delay(stack.client) for _ in range(rounds)]
    finally:
        stack.stop()
    return {"rounds": rounds, "median_ms": round(statistics.median(delays) * 1000, 1),
            "max_ms": round(max(delays) * 1000, 1), "min_ms": round(min(delays) * 1000, 1)}


def backlog(tree: Path, redis_url: str, count: int = 30, threads: int = 2) -> dict[str, Any]:
    stack = Stack(tree, redis_url, 50, threads)
    try:
        tag = uuid.uuid4().hex[:8]
        started = time.time()
        ids = [submit(stack.client, f"Request {n} of {tag}.") for n in range(count)]
        last = max(at(done(stack.client, t)["finished_at"]) for t in ids)
    finally:
        stack.stop()
    seconds = last - started
    return {"requests": count, "threads": threads, "seconds": round(seconds, 2),
            "per_s": round(count / seconds, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, required=True, help="a tree without workers.wakeup")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--redis-url", default=os.environ.get("TTS_TEST_REDIS_URL", "redis://127.0.0.1:6379/9"))
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "handoff.json")
    args = parser.parse_args()
    trees = {"before": args.before.resolve(), "after": ROOT}
    figures: dict[str, Any] = {}
    for label, tree in trees.items():
        figures[label] = {"tree": str(tree), "claim": claim(tree, args.redis_url, args.rounds),
                          "backlog": backlog(tree, args.redis_url),
                          "backlog_16": backlog(tree, args.redis_url, 160, 16)}
        print(label, json.dumps(figures[label]), flush=True)
    before, after = figures["before"], figures["after"]
    figures["ratios"] = {
        "claim_median_before_over_after": round(before["claim"]["median_ms"]
                                                / max(after["claim"]["median_ms"], 0.1), 1),
        "backlog_per_s_after_over_before": round(after["backlog"]["per_s"] / before["backlog"]["per_s"], 2),
        "backlog_16_per_s_after_over_before": round(after["backlog_16"]["per_s"]
                                                    / before["backlog_16"]["per_s"], 2),
    }
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    figures.update(commit=commit, machine=f"{platform.platform()}, {os.cpu_count()} cores",
                   written=datetime.now(timezone.utc).isoformat(timespec="seconds"))
    args.out.write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps(figures["ratios"]))


if __name__ == "__main__":
    main()
