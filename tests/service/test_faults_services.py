"""Backing services that fail: real worker processes on a real Redis and database.

- **Database outage**: a private PostgreSQL stopped for a while under load: the API answers 503
  with ``Retry-After`` (never a 500, never a hang), and every accepted task ends done.
- **A broker restart that forgets every message**: the running task finishes, the worker keeps
  consuming, and a starting worker dispatches the lost queued task again from its row.
- **A released task whose redelivery is lost**: a dead worker's task, released by the sweep, then a
  broker restart that forgets its message.
- **Many writers on SQLite**: three workers, the API and the sweep on one file, no "database is
  locked".

Workers run the tiny voice (``tests/hooks`` adds a model-call delay where tasks must take time).
Each test has its own redis-server (embedded, unix socket, nothing on disk), so none touches the
machine's Redis; the outage test runs its own PostgreSQL cluster. Figures are printed (``pytest -s``).
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis
from flask import Flask

from api import create_app
from tests.support import (
    Fleet,
    PrivatePostgres,
    announce_idle_worker,
    hooked,
    private_redis,
    service_settings,
    settle,
    submit,
    wait_until,
)
from tts_queue.broker.names import RedisKeys, queue_name
from tts_queue.cli.embedded_redis import EmbeddedRedis
from tts_queue.enums import TaskStatus

pytestmark = pytest.mark.integration

LEASE_S = "4"
FAULT_ENV = {"TTS_LEASE_S": LEASE_S, "TTS_OUTBOX_GRACE_S": "1", "TTS_CPU_MAX_BATCH": "1"}
SWEEP_EVERY_S = 0.5
LONG_TEXT = " ".join(f"This is sentence number {n} of a long request." for n in range(1, 9))


def sentence(n: int) -> str:
    """One short sentence, different for every ``n`` (no two tasks share a cache key)."""
    return f"Request number {n} asks for one short sentence."


@pytest.fixture
def broker() -> Iterator[EmbeddedRedis]:
    """A private redis-server that keeps nothing on disk (restarting it forgets every message)."""
    server = private_redis()
    server.start()
    try:
        yield server
    finally:
        server.stop()


def fleet_on(tmp_path: Path, voices_dir: Path, broker_url: str, delay_ms: int = 0, **env: str) -> Fleet:
    """Workers of the tiny voice on ``broker_url`` and a migrated database (SQLite unless ``env``
    names one)."""
    settings = service_settings(tmp_path / "data", broker_url, voices_dir, **{**FAULT_ENV, **env})
    return Fleet(settings, tmp_path / "logs", **hooked(TTS_TEST_BATCH_DELAY_MS=str(delay_ms)))


# --- database outage ----------------------------------------------------------------------------

OUTAGE_S = 3.0
SUBMIT_EVERY_S = 0.2
SUBMIT_TIMEOUT_S = 15.0


@pytest.fixture
def private_postgres() -> Iterator[PrivatePostgres]:
    """A running private PostgreSQL cluster, deleted afterwards."""
    cluster = PrivatePostgres()
    try:
        cluster.init()
        cluster.start()
        yield cluster
    finally:
        cluster.destroy()


@dataclass
class Submission:
    """One API answer seen by the submitter."""

    phase: str
    status: int
    seconds: float
    body: Any = None
    retry_after: str | None = None


@dataclass
class Submitter:
    """Submits a new task every ``SUBMIT_EVERY_S`` from a thread, each with a deadline, and records
    what the API answered (``status`` 0: no answer within ``SUBMIT_TIMEOUT_S``, a hang)."""

    app: Flask
    phase: str = "before"
    answers: list[Submission] = field(default_factory=list)
    stopped: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        """The thread's loop."""
        pool = ThreadPoolExecutor(4, thread_name_prefix="submit")
        n = 0
        while not self.stopped.is_set():
            n += 1
            phase, began = self.phase, time.monotonic()
            future = pool.submit(self.app.test_client().post, "/v1/tts", json={"text": sentence(n)})
            try:
                response = future.result(timeout=SUBMIT_TIMEOUT_S)
            except FutureTimeout:
                self.answers.append(Submission(phase, 0, time.monotonic() - began))
                continue
            self.answers.append(Submission(phase, response.status_code, time.monotonic() - began,
                                           response.get_json(silent=True),
                                           response.headers.get("Retry-After")))
            self.stopped.wait(SUBMIT_EVERY_S)
        pool.shutdown(wait=False)

    def accepted(self, phase: str | None = None) -> list[str]:
        """Ids of the tasks answered 202 (in ``phase``, or all)."""
        return [a.body["task_id"] for a in self.answers
                if a.status == 202 and (phase is None or a.phase == phase)]


def test_a_database_outage_under_load_loses_nothing_and_answers_503(
    tmp_path: Path, voices_dir: Path, broker: EmbeddedRedis, private_postgres: PrivatePostgres,
) -> None:
    # Given a worker and the API on a private PostgreSQL, and tasks submitted continuously
    fleet = fleet_on(tmp_path, voices_dir, broker.url, TTS_DATABASE_URL=private_postgres.url)
    try:
        fleet.start()
        submitter = Submitter(create_app(fleet.settings))
        thread = threading.Thread(target=submitter.run, daemon=True)
        thread.start()
        try:
            wait_until(lambda: len(submitter.accepted()) >= 10, timeout=60, interval=0.1)
            # When the database stops (fast shutdown: open transactions are rolled back) under load
            private_postgres.stop()
            submitter.phase = "outage"
            time.sleep(OUTAGE_S)  # the outage itself, while submissions go on
            submitter.phase = "restarting"
            private_postgres.start()
            back = time.monotonic()
            submitter.phase = "after"
            # And submissions go on once it is back
            wait_until(lambda: len(submitter.accepted("after")) >= 10, timeout=60, interval=0.1)
        finally:
            submitter.stopped.set()
            thread.join(timeout=SUBMIT_TIMEOUT_S + 5)
        accepted = submitter.accepted()

        # (the scheduler's sweep runs again once the database is back)
        def all_finished() -> bool:
            fleet.sweep()
            return fleet.unfinished() == 0

        finished = settle(all_finished, timeout=90, interval=SWEEP_EVERY_S)
        recovered_s = time.monotonic() - back
        rows = fleet.rows()
    finally:
        fleet.stop()
    during = [a for a in submitter.answers if a.phase == "outage"]
    statuses = Counter(a.status for a in submitter.answers)
    print(f"\n{len(submitter.answers)} submissions {dict(statuses)}; during the {OUTAGE_S:.0f} s outage "
          f"{len(during)} answers, {sum(a.status == 503 for a in during)} of them 503, slowest "
          f"{max((a.seconds for a in during), default=0):.2f} s; {len(accepted)} accepted; "
          f"{len(rows)} rows, all finished {recovered_s:.1f} s after the restart (lease {LEASE_S} s)")
    # Then while the database was down every submission answered 503 in time, with Retry-After and
    # a JSON error; never a 500, never a hang
    assert during and all(a.status == 503 for a in during), Counter(a.status for a in during)
    assert set(statuses) <= {202, 503}, statuses
    for answer in (a for a in submitter.answers if a.status == 503):
        assert answer.retry_after and int(answer.retry_after) > 0
        assert answer.body["error"]["code"] == "service_unavailable", answer.body
    # And every accepted task ends done, and no row is left queued or running
    assert finished, "some rows are still queued or running"
    lost = [i for i in accepted if rows[i].status is not TaskStatus.DONE]
    assert not lost, Counter(rows[i].status for i in lost)


# --- a broker restart that forgets every message ------------------------------------------------


def test_restart_of_a_forgetful_broker_loses_no_accepted_job(
    tmp_path: Path, voices_dir: Path, broker: EmbeddedRedis,
) -> None:
    # Given a broker that keeps nothing on disk, a cpu worker, and no gpu worker yet
    fleet = fleet_on(tmp_path, voices_dir, broker.url, delay_ms=150)
    client = create_app(fleet.settings).test_client()
    try:
        fleet.start("cpu")
        # And a task accepted for the gpu pool (whose worker is busy elsewhere: it announces
        # itself but consumes nothing), waiting in the broker
        announce_idle_worker(broker.url, fleet.settings.services.queue_prefix)
        waiting_id = submit(client, "Waiting for a GPU.", pool="gpu")
        # And a long task running on the cpu worker
        running = submit(client, LONG_TEXT)
        wait_until(lambda: fleet.rows([running])[running].status is TaskStatus.RUNNING, timeout=60,
                   interval=0.02)

        # When the broker restarts and forgets every message
        broker.stop()
        broker.start()
        # (workers reconnect within milliseconds and re-declare their bindings, so the database is
        # not empty for long: check that the queued message and the recovery marker are gone)
        forgotten = redis.Redis.from_url(broker.url)
        prefix = fleet.settings.services.queue_prefix
        assert forgotten.llen(queue_name("gpu", prefix=prefix)) == 0
        assert not forgotten.exists(RedisKeys(prefix).broker_marker)

        # Then the worker survives the lost connection and finishes the running task
        wait_until(lambda: fleet.rows([running])[running].status is TaskStatus.DONE, timeout=60,
                   interval=0.1)
        assert fleet.workers[0].process.poll() is None

        # And it reconnects and serves new requests (once its next heartbeat says it is there, a
        # few seconds: the broker forgot the old one; meanwhile submissions get 503 no_worker)
        def accepted() -> Any:
            response = client.post("/v1/tts", json={"text": "After the restart."})
            assert response.status_code in (202, 503), response.get_json()
            return response.get_json()["task_id"] if response.status_code == 202 else None

        fresh = wait_until(accepted, timeout=60, interval=0.5)
        wait_until(lambda: fleet.rows([fresh])[fresh].status is TaskStatus.DONE, timeout=60, interval=0.1)

        # And a starting worker dispatches the lost task again from its row, and it completes
        # (the "gpu" worker runs on the CPU here: providers fall back when no GPU is present)
        assert fleet.rows([waiting_id])[waiting_id].status is TaskStatus.QUEUED
        fleet.start("gpu", ready=False, TTS_WORKER_POOL="gpu")
        wait_until(lambda: fleet.rows([waiting_id])[waiting_id].status is TaskStatus.DONE, timeout=60,
                   interval=0.1)
    finally:
        fleet.stop()


def test_a_dead_workers_task_survives_a_broker_restart_after_its_release(
    tmp_path: Path, voices_dir: Path, broker: EmbeddedRedis,
) -> None:
    # Given a broker that keeps nothing on disk and a worker running a long task
    fleet = fleet_on(tmp_path, voices_dir, broker.url, delay_ms=300)
    try:
        first = fleet.start()
        api = create_app(fleet.settings).test_client()
        task = submit(api, LONG_TEXT)
        wait_until(lambda: fleet.rows([task])[task].status is TaskStatus.RUNNING, timeout=60, interval=0.05)
        # When the worker dies and the sweep releases its task (dispatched again, waiting in the broker)
        first.kill_group()
        wait_until(lambda: fleet.sweep() > 0, timeout=30, interval=SWEEP_EVERY_S)
        released = fleet.rows([task])[task]
        # And the broker restarts before any worker took the message (it forgets every message)
        broker.stop()
        broker.start()
        fleet.start(ready=False)  # (a ping would go through the test's stale broker connection)

        # (which serves new work: a task submitted now completes)
        fresh_api = create_app(fleet.settings).test_client()

        def accepted() -> str | None:
            response = fresh_api.post("/v1/tts", json={"text": sentence(1)})
            assert response.status_code in (202, 503), response.get_json()
            return str(response.get_json()["task_id"]) if response.status_code == 202 else None

        control = wait_until(accepted, timeout=60, interval=0.5)
        wait_until(lambda: fleet.rows([control])[control].status is TaskStatus.DONE, timeout=60)

        # Then the sweep finds the released task again and it completes on the new worker
        def done() -> bool:
            fleet.sweep()
            return bool(fleet.rows([task])[task].status is TaskStatus.DONE)

        completed = settle(done, timeout=5 * float(LEASE_S), interval=SWEEP_EVERY_S)
        final = fleet.rows([task])[task]
        print(f"\nreleased as {released.status.value} (worker {released.worker}); after the broker "
              f"restart a new task completed; {5 * float(LEASE_S):.0f} s of sweeps later the released "
              f"task is {final.status.value} (worker {final.worker})")
        assert completed, (f"task stranded as {final.status.value} with worker {final.worker}: no "
                           "recovery path looks at a released running row")
    finally:
        fleet.stop()


# --- many writers on SQLite ---------------------------------------------------------------------

SQLITE_TASKS = 120
SUBMITTERS = 5


def test_many_writers_on_sqlite_never_see_database_is_locked(
    tmp_path: Path, voices_dir: Path, broker: EmbeddedRedis,
) -> None:
    # Given three workers on one SQLite file
    fleet = fleet_on(tmp_path, voices_dir, broker.url)
    try:
        for worker in [fleet.start(ready=False) for _ in range(3)]:
            worker.wait_ready(fleet.app)
        api = create_app(fleet.settings)
        answers: list[tuple[int, Any]] = []
        lock = threading.Lock()

        def client(offset: int) -> None:
            for n in range(offset, SQLITE_TASKS, SUBMITTERS):
                response = api.test_client().post("/v1/tts", json={"text": sentence(n)})
                with lock:
                    answers.append((response.status_code, response.get_json()))

        # When the API submits from several threads while the sweep runs and the workers write
        threads = [threading.Thread(target=client, args=(k,)) for k in range(SUBMITTERS)]
        for thread in threads:
            thread.start()
        sweeps = 0

        def step() -> bool:
            nonlocal sweeps
            fleet.sweep()
            sweeps += 1
            return len(answers) == SQLITE_TASKS and fleet.unfinished() == 0

        finished = settle(step, timeout=90, interval=SWEEP_EVERY_S)
        for thread in threads:
            thread.join(timeout=30)
        logs = fleet.log_text()
        ids = [body["task_id"] for status, body in answers if status == 202]
        rows = fleet.rows(ids)
    finally:
        fleet.stop()
    locked = logs.lower().count("database is locked")
    print(f"\n{SQLITE_TASKS} tasks from {SUBMITTERS} threads, 3 workers, {sweeps} sweeps: answers "
          f"{dict(Counter(s for s, _ in answers))}; 'database is locked' in worker logs: {locked}; "
          f"done {sum(r.status is TaskStatus.DONE for r in rows.values())}; by worker "
          f"{dict(Counter(r.worker for r in rows.values()))}")
    # Then every submission was accepted and every task is done
    assert [s for s, _ in answers] == [202] * SQLITE_TASKS, Counter(json.dumps(b) for s, b in answers
                                                                      if s != 202)
    assert finished and all(r.status is TaskStatus.DONE for r in rows.values())
    # And no writer ever saw "database is locked"
    assert locked == 0
