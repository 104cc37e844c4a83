"""The tasks of a SIGKILLed worker: how soon they run again elsewhere, and all are done.

Each run starts, in a fresh folder, the pieces ``tts-queue up`` starts, from the measured tree: a
private redis-server (append-only, as ``up`` runs it), SQLite, one worker (16 threads, its own
process group) and the beat scheduler (the recovery sweep every ``TTS_SWEEP_INTERVAL_S``), on
default settings (lease 30 s, sweep 15 s) unless ``lease_s``/``sweep_s`` say otherwise; the API in
this process. It submits ``tasks`` requests of six sentences, waits until the worker runs as many
as one client's share of its threads, SIGKILLs the worker's whole process group and at once starts
a replacement with the same name (as ``up`` restarts a child), then measures from the kill:
``reclaimed_s`` (until every task the dead worker held runs again on the replacement: lease expiry
plus the wait for the next sweep), ``total_s`` (until every task is done), ``replacement_ready_s``.
Goal: recovery within 60 s."""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.harness.registry import Figures, scenario
from bench.harness.run import Run
from bench.harness.stack import slowed, stop
from bench.harness.tree import tree_env

WORKER = "cpu0@localhost"  # the name ``up`` gives its first worker; a restart keeps it
TEXT = " ".join(f"Run {{run}}, task {{task}}: this is sentence number {n} of a longer request."
                for n in range(1, 7))


def wait_for(check: Callable[[], Any], timeout: float, what: str, interval: float = 0.1) -> float:
    """Poll ``check`` until truthy; the monotonic time it became so."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)
    return time.monotonic()


def start(run: Run, command: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """A child of the measured tree in its own process group (as a supervisor starts it)."""
    with open(log, "ab") as out:
        return subprocess.Popen(command, cwd=run.tree, env=tree_env(run.tree, env), stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)


def one_run(run: Run, number: int, tasks: int, env: dict[str, str]) -> dict[str, Any]:
    """Start the pieces, submit, kill the worker holding its share, replace it, time the recovery."""
    from sqlalchemy import select

    from api import create_app
    from tts_queue.cli.embedded_redis import EmbeddedRedis
    from tts_queue.cli.launcher import scheduler_command, worker_command
    from tts_queue.db import Database
    from tts_queue.enums import TaskStatus
    from tts_queue.fairness.threads import KeyShares
    from tts_queue.migrate import upgrade
    from tts_queue.settings import Settings, current_values
    from tts_queue.tables import TaskRow
    from workers.dispatch import make_client

    folder = run.work / f"recovery-{number}"
    broker = EmbeddedRedis(folder / "broker")
    settings = Settings.from_env({**env, "TTS_DATA_DIR": str(folder / "data"),
                                  "TTS_REDIS_URL": broker.start()})
    upgrade(settings.database_url)
    child = {**{k: v for k, v in current_values(settings).items() if v != ""}, **env}
    held_share = KeyShares(settings.worker.concurrency, settings.worker.interactive_reserve).share(1)
    command = worker_command(settings.worker.pool, settings.worker.concurrency, WORKER,
                             settings.services.queue_prefix)
    control, db = make_client(settings).control, Database(settings.database_url)
    worker = start(run, command, child, folder / "worker-1.log")
    beat = start(run, scheduler_command(settings.data_dir), child, folder / "beat.log")
    replacement: subprocess.Popen[bytes] | None = None

    def rows(ids: list[str]) -> dict[str, Any]:
        with db.read() as session:
            return {r.id: r for r in session.scalars(select(TaskRow).where(TaskRow.id.in_(ids)))}

    try:
        wait_for(lambda: control.ping(destination=[WORKER], timeout=0.5), 120, "the worker")
        client = create_app(settings).test_client()
        tag = uuid.uuid4().hex[:4]
        ids = [client.post("/v1/tts", json={"text": TEXT.format(run=f"{number} {tag}", task=n)})
               .get_json()["task_id"] for n in range(max(tasks, held_share))]

        def holding() -> bool:
            running = sum(r.status is TaskStatus.RUNNING and r.worker == WORKER for r in rows(ids).values())
            return int(running) >= held_share

        wait_for(holding, 120, f"{held_share} running tasks")
        held = [i for i, r in rows(ids).items() if r.status is TaskStatus.RUNNING]
        os.killpg(worker.pid, signal.SIGKILL)
        killed = time.monotonic()
        worker.wait()
        replacement = start(run, command, child, folder / "worker-2.log")
        ready = wait_for(lambda: control.ping(destination=[WORKER], timeout=0.5), 120, "the replacement")
        back = wait_for(lambda: all(r.status.finished or (r.attempts >= 2 and r.worker == WORKER)
                                    for r in rows(held).values()), 600, "the held tasks claimed again", 0.2)
        done = wait_for(lambda: all(r.status is TaskStatus.DONE for r in rows(ids).values()), 600,
                        "every task done", 0.2)
        final = rows(ids)
        return {"tasks": len(ids), "held_by_dead_worker": len(held),
                "replacement_ready_s": round(ready - killed, 2),
                "reclaimed_s": round(back - killed, 2), "total_s": round(done - killed, 2),
                "executions": {str(k): sum(r.attempts == k for r in final.values())
                               for k in sorted({r.attempts for r in final.values()})}}
    finally:
        for process in (replacement, beat, worker):
            if process is not None:
                stop(process, 30, group=True)
        db.engine.dispose()
        broker.stop()


@scenario("recovery", subject="service", takes="about 5 minutes", quick={
    "voice": "tiny", "rounds": 1, "tasks": 12, "lease_s": 2.0, "sweep_s": 1.0, "delay_ms": 300},
    description="the tasks of a SIGKILLed worker: time until all run again and until all are done")
def recovery(run: Run, voice: str = "default", rounds: int = 3, tasks: int = 24, lease_s: float = 0.0,
             sweep_s: float = 0.0, delay_ms: int = 0) -> Figures:
    """``rounds`` runs, each on fresh pieces; the medians."""
    extra = {**({"TTS_LEASE_S": str(lease_s)} if lease_s else {}),
             **({"TTS_SWEEP_INTERVAL_S": str(sweep_s)} if sweep_s else {}),
             **(slowed(delay_ms) if delay_ms else {})}
    env = run.env(voice, **extra)
    found = []
    for number in range(rounds):
        found.append(one_run(run, number, tasks, env))
        run.say(f"run {number}: {found[-1]}")
    keys = ("replacement_ready_s", "reclaimed_s", "total_s")
    return {"headline": {f"median_{key}": statistics.median(r[key] for r in found) for key in keys},
            "goal_s": 60, "settings": extra, "runs": found}
