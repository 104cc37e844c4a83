"""How soon a worker whose prefetch window is full takes the next message once a task ends.

A real ``celery worker`` process of the measured tree (two threads, so a window of two, unless
said otherwise), the tiny voice with each model call slowed by the tests' fault plugin, a private
Redis and SQLite; the API in this process. ``claim``: two requests of four calls of 250 ms fill both
threads, a one-call request follows once both run; from the first long task's end to the short
one's start (its ``started_at``), per round. ``backlog``: ``backlog`` one-call requests of
``call_ms`` sent at once; from the first submission to the last ``finished_at``, and the requests a second;
``backlog_16``: ``big_backlog`` such requests on 16 threads (the default concurrency). Against a tree
without the worker's wake-up (``workers.wakeup``): ``--against d46f6f7``."""

from __future__ import annotations

import statistics
import time
import uuid
from datetime import datetime
from typing import Any

from bench.harness.registry import Figures, scenario
from bench.harness.run import Run
from bench.harness.stack import slowed, start_worker, stop
from bench.harness.voice import voice_env


class Stack:
    """A worker of the measured tree (``threads`` threads, model calls slowed by ``delay_ms``) on a
    private Redis, and the API in this process."""

    def __init__(self, run: Run, delay_ms: int, threads: int) -> None:
        from api import create_app
        from tts_queue.cli.embedded_redis import EmbeddedRedis
        from tts_queue.migrate import upgrade
        from tts_queue.settings import Settings, current_values
        from workers.factory import make_celery

        self.threads = threads
        folder = run.work / f"handoff-{uuid.uuid4().hex[:6]}"
        self.broker = EmbeddedRedis(folder / "broker", persist=False)
        settings = Settings.from_env({**voice_env("tiny"), "TTS_DATA_DIR": str(folder / "data"),
                                      "TTS_REDIS_URL": self.broker.start(), "TTS_ALLOW_SPINNING": "false",
                                      "TTS_WARM_LONGEST": "false"})
        upgrade(settings.database_url)
        name = f"handoff-{uuid.uuid4().hex[:6]}@localhost"
        env = {**{k: v for k, v in current_values(settings).items() if v != ""}, **slowed(delay_ms)}
        self.worker = start_worker(run.tree, env, name, folder / "worker.log", threads)
        control = make_celery(settings).control
        deadline = time.monotonic() + 90
        while not control.ping(destination=[name], timeout=0.5):
            if self.worker.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the worker did not answer; see {folder / 'worker.log'}")
        self.client = create_app(settings).test_client()

    def submit(self, text: str) -> str:
        """One request through the API; its task id."""
        response = self.client.post("/v1/tts", json={"text": text})
        assert response.status_code == 202, response.get_json()
        return str(response.get_json()["task_id"])

    def done(self, task_id: str) -> dict[str, Any]:
        """Long-poll a task until it is done; its view."""
        for _ in range(8):
            view: dict[str, Any] = self.client.get(f"/v1/tasks/{task_id}?wait=60").get_json()
            if view["status"] in ("done", "failed", "cancelled"):
                assert view["status"] == "done", view
                return view
        raise RuntimeError(f"task {task_id} still {view['status']}")

    def stop(self) -> None:
        """Stop the worker and the broker."""
        stop(self.worker, 30)
        self.broker.stop()


def at(stamp: str) -> float:
    """A task view's ISO timestamp, in seconds since the epoch."""
    return datetime.fromisoformat(stamp).timestamp()


def handoff_delay(stack: Stack) -> float:
    """Two requests of four calls fill both threads, a one-call request follows once both run; the
    seconds from the first long one's end to the short one's start."""
    tag = uuid.uuid4().hex[:8]
    long = [stack.submit(" ".join(f"Long {k} sentence {n} of {tag} goes here." for n in range(4)))
            for k in range(2)]
    deadline = time.monotonic() + 30
    while not all(stack.client.get(f"/v1/tasks/{t}").get_json()["status"] == "running" for t in long):
        if time.monotonic() > deadline:
            raise RuntimeError("the long requests never ran together")
        time.sleep(0.02)
    short = stack.submit(f"Short one {tag}.")
    freed = min(at(stack.done(t)["finished_at"]) for t in long)
    return at(stack.done(short)["started_at"]) - freed


def drain(stack: Stack, count: int) -> dict[str, Any]:
    """``count`` one-call requests at once on ``stack``'s worker: how soon all are done."""
    tag, started = uuid.uuid4().hex[:8], time.time()
    ids = [stack.submit(f"Request {n} of {tag}.") for n in range(count)]
    last = max(at(stack.done(t)["finished_at"]) for t in ids)
    return {"requests": count, "threads": stack.threads, "seconds": round(last - started, 2),
            "per_s": round(count / (last - started), 2)}


@scenario("handoff", subject="service", takes="about a minute", quick={
    "rounds": 1, "backlog": 6, "big_backlog": 0, "claim_ms": 50},
    description="how soon a worker whose prefetch window is full takes the next message once a task ends "
                "(two threads); a backlog of one-call requests (two and sixteen threads)")
def handoff(run: Run, rounds: int = 10, backlog: int = 30, big_backlog: int = 160, claim_ms: int = 250,
            call_ms: int = 50) -> Figures:
    """The claim rounds on one worker (calls of ``claim_ms``), then the backlogs (calls of
    ``call_ms``), each on a fresh worker unless the calls last as long."""
    stacks = [Stack(run, claim_ms, 2)]
    try:
        delays = [handoff_delay(stacks[0]) for _ in range(rounds)]
        if call_ms != claim_ms:
            stacks.append(Stack(run, call_ms, 2))
        found = drain(stacks[-1], backlog)
        if big_backlog:
            stacks.append(Stack(run, call_ms, 16))
            big = drain(stacks[-1], big_backlog)
    finally:
        for stack in stacks:
            stack.stop()
    claim = {"rounds": rounds, "median_ms": round(statistics.median(delays) * 1000, 1),
             "max_ms": round(max(delays) * 1000, 1), "min_ms": round(min(delays) * 1000, 1)}
    figures: Figures = {"headline": {"claim_median_ms": claim["median_ms"], "backlog_per_s": found["per_s"]},
                        "claim": claim, "backlog": found}
    if big_backlog:
        figures["backlog_16"] = big
        figures["headline"]["backlog_16_per_s"] = big["per_s"]
    run.say(str(figures["headline"]))
    return figures
