"""Recovery after a worker is SIGKILLed, on default settings: from the kill until every task the dead
worker held runs again, and until every task is done: ``python -m bench run recovery`` (``--against
REV``: the workers of another commit too, in the same run; the quick form: one run of ``restart``
with fewer tasks, as the survivor waits out the default lease). Each run starts, in a fresh
temporary directory, what ``tts-queue up`` starts: an embedded redis-server (append-only, as
``up`` runs it), SQLite, workers (``celery worker``, 16 threads, each leading its own process
group) and the beat scheduler (the recovery sweep every ``TTS_SWEEP_INTERVAL_S``), every setting
at its default (lease 30 s, sweep 15 s, visibility timeout 1 h; the heartbeat's expiry is half the
lease); the API is the Flask app in this process. The voice is the tiny test voice with each model
call held ``DELAY_MS`` (``tests/hooks``): a sentence takes as long as a real one on these cores
without loading them, so what is timed is the recovery. ``TASKS`` requests of two sentences are
submitted (``tasks``); once ``KILL_AFTER_DONE`` are done and a worker runs two or more, that worker's whole
process group is SIGKILLed. Two scenarios (``scenarios``), ``runs`` runs each:

- ``restart``: one worker, replaced at once by one of the same name (as ``up`` restarts a child);
- ``survivor``: two workers, the one killed is not replaced: the other must find out.

Figures, from the kill: ``reclaimed_s``, until every task the dead worker held (running or
received) is running again or done; ``total_s``, until every task is done; ``replacement_ready_s``
(``restart``), until the replacement answers a ping (by the time the replacement's start takes,
at worst, its tasks run again: it releases them as it starts). Medians of the runs; nothing is
asserted.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import select

from api import create_app
from bench.harness.registry import Figures, scenario
from bench.harness.run import Run
from tests.support import GroupWorkerProcess, hooked, service_settings, settings_env, submit
from tests.support.tiny_voice import write_voice
from tts_queue.cli.embedded_redis import EmbeddedRedis
from tts_queue.cli.launcher import scheduler_command
from tts_queue.db import Database
from tts_queue.enums import TaskStatus
from tts_queue.settings import Settings
from tts_queue.tables import TaskRow
from workers.factory import make_celery

SCENARIOS = ("restart", "survivor")
KILL_AFTER_DONE = 5
DELAY_MS = 250  # each model call (one sentence: the CPU pool batches nothing)
DEADLINE_S = 600.0
TEXT = "Run {run}, task {task}: this is the first sentence. And this is the second one of {run}."


def wait_for(check: Callable[[], Any], what: str, interval: float = 0.1) -> Any:
    """Poll ``check`` until truthy and return it (``SystemExit`` after ``DEADLINE_S``)."""
    deadline = time.monotonic() + DEADLINE_S
    while not (value := check()):
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {DEADLINE_S:.0f} s waiting for {what}")
        time.sleep(interval)
    return value


def rows(db: Database, ids: list[str]) -> dict[str, TaskRow]:
    """The task rows of ``ids``."""
    with db.read() as session:
        return {r.id: r for r in session.scalars(select(TaskRow).where(TaskRow.id.in_(ids)))}


class Service:
    """One run's pieces: an embedded broker, SQLite, the beat scheduler and workers of ``tree``."""

    def __init__(self, tree: Path, tmp: Path) -> None:
        self.tree, self.tmp = tree, tmp
        self.broker = EmbeddedRedis(tmp / "broker")
        write_voice(tmp / "voices")
        self.settings = service_settings(tmp / "data", self.broker.start(), tmp / "voices")
        self.env = {"PYTHONPATH": str(tree), **hooked(TTS_TEST_BATCH_DELAY_MS=str(DELAY_MS))}
        self.worker_class = type("TreeWorker", (GroupWorkerProcess,), {"cwd": tree})
        self.app = make_celery(self.settings)
        self.db = Database(self.settings.database_url)
        self.workers: list[GroupWorkerProcess] = []
        self.beat = subprocess.Popen(scheduler_command(self.settings.data_dir), cwd=tree,
                                     env=settings_env(self.settings, **self.env),
                                     stdout=open(tmp / "beat.log", "ab"),  # noqa: SIM115
                                     stderr=subprocess.STDOUT)

    def start(self, name: str) -> GroupWorkerProcess:
        """One more worker named ``name`` (not waited for)."""
        log = self.tmp / f"{name}.log"
        worker: GroupWorkerProcess = self.worker_class(self.settings, name, log, **self.env)
        self.workers.append(worker)
        return worker

    def stop(self) -> None:
        """Stop every worker, the scheduler and the broker."""
        for worker in self.workers:
            if worker.process.poll() is None:
                worker.stop(now=True)
        self.beat.terminate()
        self.beat.wait(timeout=30)
        self.db.engine.dispose()
        self.broker.stop()


def one_run(tree: Path, kind: str, run: int, tasks: int) -> dict[str, Any]:
    """Start the pieces, submit, kill a worker running tasks, time the recovery."""
    tmp = Path(tempfile.mkdtemp(prefix="tts-bench-recovery-"))
    service = Service(tree, tmp)
    try:
        names = ["cpu0@localhost"] if kind == "restart" else ["w1@localhost", "w2@localhost"]
        for worker in [service.start(name) for name in names]:
            worker.wait_ready(service.app, timeout=DEADLINE_S)
        client = create_app(service.settings).test_client()
        ids = [submit(client, TEXT.format(run=run, task=n)) for n in range(tasks)]

        def victim() -> tuple[GroupWorkerProcess, list[str]] | None:
            now = rows(service.db, ids)
            done = sum(r.status is TaskStatus.DONE for r in now.values())
            if done == len(ids):
                raise SystemExit(f"all {len(ids)} tasks ended before a worker ran two of them: "
                                 "nothing left to recover (more tasks, or a longer DELAY_MS)")
            if done < KILL_AFTER_DONE:
                return None
            for worker in service.workers:
                running = [i for i, r in now.items()
                           if r.status is TaskStatus.RUNNING and r.worker == worker.name]
                if len(running) >= 2:
                    return worker, running
            return None

        dead, _ = wait_for(victim, f"{KILL_AFTER_DONE} tasks done and a worker running two", 0.05)
        dead.kill_group()
        killed = time.monotonic()
        held = [i for i, r in rows(service.db, ids).items()
                if r.worker == dead.name and r.status in (TaskStatus.QUEUED, TaskStatus.RUNNING)]
        ready: list[float] = []
        if kind == "restart":
            service.start(dead.name)

        def reclaimed() -> bool:  # what it held runs again (a new claim) or is done
            if kind == "restart" and not ready and service.app.control.ping([dead.name], timeout=0.2):
                ready.append(time.monotonic())  # the replacement answers
            return all(r.status is TaskStatus.DONE or (r.status is TaskStatus.RUNNING and r.attempts >= 2)
                       for r in rows(service.db, held).values())

        wait_for(reclaimed, "the dead worker's tasks to run again", 0.2)
        back = time.monotonic()
        wait_for(lambda: all(r.status is TaskStatus.DONE for r in rows(service.db, ids).values()),
                 "every task to be done", 0.2)
        done = time.monotonic()
        final = rows(service.db, ids)
        return {"tasks": tasks, "held_by_dead_worker": len(held), "reclaimed_s": round(back - killed, 2),
                "total_s": round(done - killed, 2),
                "replacement_ready_s": round(ready[0] - killed, 2) if ready else None,
                "executions": dict(sorted(Counter(str(r.attempts) for r in final.values()).items()))}
    finally:
        service.stop()
        shutil.rmtree(tmp, ignore_errors=True)


# (the default tasks: more than two workers' 16 threads each, so a second wave runs after the kill)
@scenario("recovery", subject="service", takes="about 10 minutes",
          quick={"tasks": 24, "runs": 1, "scenarios": "restart"},
          description="a SIGKILLed worker's tasks: replaced at once by one of the same name, or found by the "
                      "worker beside it; from the kill until they run again and all are done")
def recovery(run: Run, tasks: int = 60, runs: int = 3, scenarios: str = ",".join(SCENARIOS)) -> Figures:
    """Each of ``scenarios`` on the measured tree's workers, ``runs`` runs of ``tasks`` requests; each
    scenario's runs and medians."""
    chosen = [name.strip() for name in scenarios.split(",") if name.strip()]
    if not chosen or set(chosen) - set(SCENARIOS):
        raise ValueError(f"scenarios is a list of {', '.join(SCENARIOS)}")
    defaults = Settings()
    figures: dict[str, Any] = {
        "settings": {"lease_s": defaults.worker.lease_s, "sweep_interval_s": defaults.worker.sweep_interval_s,
                     "visibility_timeout_s": defaults.worker.visibility_timeout_s,
                     "concurrency": defaults.worker.concurrency, "delay_ms": DELAY_MS},
        "goal_s": 30, "load_avg_before": os.getloadavg(),
    }
    for name in chosen:
        results = []
        for n in range(runs):
            results.append(one_run(run.tree, name, n, tasks))
            run.say(f"{name} run {n}: {json.dumps(results[-1])}")
        keys = ("reclaimed_s", "total_s", "replacement_ready_s") if name == "restart" else (
            "reclaimed_s", "total_s")
        figures[name] = {"runs": results, **{
            f"median_{key}": statistics.median(r[key] for r in results if r[key] is not None)
            for key in keys if any(r[key] is not None for r in results)}}
    figures["load_avg_after"] = os.getloadavg()
    figures["headline"] = {f"{name}_{key}": figures[name][f"median_{key}"]
                           for name in chosen for key in ("reclaimed_s", "total_s")
                           if f"median_{key}" in figures[name]}
    return figures
