"""Recovery time after a worker SIGKILL, on default settings (goal: at most 60 s).

Run from the repository root (about 5 minutes on 2 cores)::

    .venv/bin/python bench/bench_recovery.py [--runs 3] [--tasks 24] [--out bench/results/recovery.json]

Each run starts, in a fresh temporary directory, the pieces ``tts-queue up`` starts: an embedded
redis-server (append-only, as ``up`` runs it), SQLite, one worker (``celery worker``, 16 threads,
in its own process group) and the beat scheduler (``celery beat``: the recovery sweep every
``TTS_SWEEP_INTERVAL_S``), all on default settings (lease 30 s, sweep 15 s, visibility timeout 1 h);
the API is the Flask app in this process. It submits ``--tasks`` requests of six sentences, waits
until the worker runs as many as one client's share of its threads (12), SIGKILLs the worker's
whole process group and at once starts a replacement with the same name (as ``up`` restarts a
child), then measures from the kill:

- ``reclaimed_s``: until every task the dead worker held is running again on the replacement (the
  recovery itself: lease expiry plus the wait for the next sweep);
- ``total_s``: until every task is done (recovery plus the processing of what remained);
- ``replacement_ready_s``: until the replacement answers a ping.

The median of the runs goes to the headline. Results are written to a JSON file; nothing is
asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from sqlalchemy import select

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from api import create_app  # noqa: E402
from tts_queue.cli.embedded_redis import EmbeddedRedis  # noqa: E402
from tts_queue.cli.launcher import child_env, scheduler_command, worker_command  # noqa: E402
from tts_queue.cli.supervisor import die_with_parent  # noqa: E402
from tts_queue.db import Database  # noqa: E402
from tts_queue.enums import TaskStatus  # noqa: E402
from tts_queue.fairness.threads import KeyShares  # noqa: E402
from tts_queue.migrate import upgrade  # noqa: E402
from tts_queue.settings import Settings  # noqa: E402
from tts_queue.tables import TaskRow  # noqa: E402
from workers.dispatch import make_client  # noqa: E402

WORKER = "cpu0@localhost"  # the name ``up`` gives its first worker; a restart keeps it
# what a dead worker holds running: one key's share of its 16 threads (all but the interactive
# reserve: the requests here are one client's)
HELD = KeyShares(Settings().worker.concurrency, Settings().worker.interactive_reserve).share(1)
TEXT = " ".join(f"Run {{run}}, task {{task}}: this is sentence number {n} of a longer request."
                for n in range(1, 7))


def start(command: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """A child in its own process group (as a supervisor starts it), killed if we die."""
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=open(log, "ab"),  # noqa: SIM115
                            stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=die_with_parent)


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM the child's group and wait; SIGKILL if it lingers."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def wait_for(check: Any, timeout: float, what: str, interval: float = 0.1) -> float:
    """Poll ``check`` until truthy; the monotonic time it became so (``SystemExit`` on timeout)."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)
    return time.monotonic()


def rows(db: Database, ids: list[str]) -> dict[str, TaskRow]:
    """The task rows of ``ids``."""
    with db.read() as session:
        return {r.id: r for r in session.scalars(select(TaskRow).where(TaskRow.id.in_(ids)))}


def one_run(run: int, tasks: int, tmp: Path) -> dict[str, Any]:
    """Start the pieces, submit, kill the worker holding ``HELD`` tasks, replace it, time the recovery."""
    broker = EmbeddedRedis(tmp / "broker")
    settings = Settings.from_env({"TTS_DATA_DIR": str(tmp / "data"), "TTS_REDIS_URL": broker.start()})
    upgrade(settings.database_url)
    env = child_env(settings, {k: v for k, v in os.environ.items() if not k.startswith("TTS_")})
    pool, prefix = settings.worker.pool, settings.services.queue_prefix
    command = worker_command(pool, settings.worker.concurrency, WORKER, prefix)
    control = make_client(settings)
    db = Database(settings.database_url)
    worker = start(command, env, tmp / "worker-1.log")
    beat = start(scheduler_command(settings.data_dir), env, tmp / "beat.log")
    replacement: subprocess.Popen[bytes] | None = None
    try:
        wait_for(lambda: control.control.ping(destination=[WORKER], timeout=0.5), 120, "the worker")
        client = create_app(settings).test_client()
        ids = []
        for n in range(tasks):
            response = client.post("/v1/tts", json={"text": TEXT.format(run=run, task=n)})
            assert response.status_code == 202, response.get_json()
            ids.append(response.get_json()["task_id"])

        def holding() -> bool:
            current = rows(db, ids).values()
            return sum(r.status is TaskStatus.RUNNING and r.worker == WORKER for r in current) >= HELD

        wait_for(holding, 120, f"{HELD} running tasks")
        held = [i for i, r in rows(db, ids).items() if r.status is TaskStatus.RUNNING]
        os.killpg(worker.pid, signal.SIGKILL)
        killed = time.monotonic()
        worker.wait()
        replacement = start(command, env, tmp / "worker-2.log")
        ready = wait_for(lambda: control.control.ping(destination=[WORKER], timeout=0.5), 120,
                         "the replacement")

        def reclaimed() -> bool:  # the held tasks run again (or already finished) on the replacement
            return all(r.status.finished or (r.attempts >= 2 and r.worker == WORKER)
                       for r in rows(db, held).values())

        back = wait_for(reclaimed, 600, "the dead worker's tasks to be claimed again", 0.2)
        done = wait_for(lambda: all(r.status is TaskStatus.DONE for r in rows(db, ids).values()), 600,
                        "every task to be done", 0.2)
        final = rows(db, ids)
        return {
            "tasks": tasks, "held_by_dead_worker": len(held),
            "replacement_ready_s": round(ready - killed, 2), "reclaimed_s": round(back - killed, 2),
            "total_s": round(done - killed, 2),
            "executions": {str(k): sum(r.attempts == k for r in final.values())
                           for k in sorted({r.attempts for r in final.values()})},
        }
    finally:
        for process in (replacement, beat, worker):
            if process is not None:
                stop(process)
        broker.stop()


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and write its JSON results."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=24, help=f"requests per run (at least {HELD})")
    parser.add_argument("--out", default="bench/results/recovery.json")
    args = parser.parse_args(argv)
    defaults = Settings.from_env({})
    load_before = os.getloadavg()
    runs = []
    for run in range(args.runs):
        tmp = Path(tempfile.mkdtemp(prefix="tts-bench-recovery-"))
        try:
            result = one_run(run, max(args.tasks, HELD), tmp)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        runs.append(result)
        print(f"run {run}: {json.dumps(result)}", flush=True)
    headline = {key: statistics.median(r[key] for r in runs)
                for key in ("replacement_ready_s", "reclaimed_s", "total_s")}
    results = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {"cpu_count": os.cpu_count(), "platform": platform.platform(),
                    "python": platform.python_version(), "load_avg_before": load_before,
                    "load_avg_after": os.getloadavg()},
        "settings": {"lease_s": defaults.worker.lease_s, "sweep_interval_s": defaults.worker.sweep_interval_s,
                     "visibility_timeout_s": defaults.worker.visibility_timeout_s,
                     "concurrency": defaults.worker.concurrency},
        "goal_s": 60,
        "runs": runs,
        "headline": {"median_" + key: value for key, value in headline.items()},
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    print(f"median over {len(runs)} runs: {json.dumps(headline)} (goal: recovery <= 60 s); "
          f"written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
