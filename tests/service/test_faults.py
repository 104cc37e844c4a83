"""Fault injection (issue 7, "Must show"): real worker processes, a real Redis, real databases.

- **Worker deaths under load**: worker process groups SIGKILLed at random moments, replacements
  started: nothing lost, executions per task bounded by the attempts cap.
- **Database outage**: a private PostgreSQL stopped for a while under load: the API answers 503
  with ``Retry-After`` (never a 500, never a hang), and every accepted task ends done.
- **Poison task**: a task that kills its worker every time ends ``failed`` after the cap.
- **Many writers on SQLite**: three workers, the API and the sweep on one file, no "database is
  locked".
- **A released task whose redelivery is lost**: a dead worker's task, released by the sweep, then a
  broker restart that forgets its message.

Each test has its own redis-server (embedded, on a unix socket, nothing on disk), so none touches
the machine's Redis; the outage test runs its own PostgreSQL cluster. The lease is short
(``TTS_LEASE_S``) and the sweep runs on demand every half second, as the scheduler would. Figures
are printed (``pytest -s``).
"""

from __future__ import annotations

import json
import os
import pwd
import random
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from sqlalchemy import func, select

from api import create_app
from tests.service.conftest import ROOT, GroupWorkerProcess, unavailable, wait_until
from tts_queue.cli.embedded_redis import EmbeddedRedis
from tts_queue.db import Database, utcnow
from tts_queue.enums import TaskStatus
from tts_queue.migrate import upgrade
from tts_queue.settings import Settings
from tts_queue.tables import TaskRow
from workers.factory import make_celery, sweep_now

pytestmark = pytest.mark.integration

LEASE_S = "4"
# What every worker of these tests runs with (the sweep in the test process reads the same).
FAULT_ENV = {"TTS_LEASE_S": LEASE_S, "TTS_OUTBOX_GRACE_S": "1", "TTS_CPU_MAX_BATCH": "1"}
SWEEP_EVERY_S = 0.5
UNFINISHED = (TaskStatus.QUEUED, TaskStatus.RUNNING)


def sentence(n: int, tag: str = "") -> str:
    """One short sentence, different for every ``n`` (no two tasks share a cache key)."""
    return f"{tag}Request number {n} asks for one short sentence."


def settle(step: Callable[[], bool], timeout: float, interval: float = SWEEP_EVERY_S) -> bool:
    """Poll ``step`` until it returns True or ``timeout`` passes; whether it did (the caller
    asserts, with the figures that explain a failure)."""
    deadline = time.monotonic() + timeout
    while not step():
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)
    return True


@pytest.fixture
def broker() -> Iterator[str]:
    """A private redis-server that keeps nothing on disk (short socket path: unix sockets allow
    about 100 characters)."""
    directory = Path(tempfile.mkdtemp(prefix="tts-redis-"))
    server = EmbeddedRedis(directory, persist=False)
    try:
        yield server.start()
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)


class Fleet:
    """One test's worker processes (each leading its own process group), its database, and the
    recovery sweep the scheduler would run."""

    def __init__(self, settings: Settings, logs: Path, **env: str) -> None:
        self.settings = settings
        self.logs = logs
        self.env = {**FAULT_ENV, **env}
        self.app = make_celery(settings)
        self.db = Database(settings.database_url)
        self.workers: list[GroupWorkerProcess] = []

    def start(self, prefix: str = "w", ready: bool = True, **env: str) -> GroupWorkerProcess:
        """Start one more worker; wait until it answers a ping unless ``ready`` is False."""
        name = f"{prefix}-{len(self.workers) + 1}@localhost"
        worker = GroupWorkerProcess(self.settings, name, self.logs / f"{name}.log", **{**self.env, **env})
        self.workers.append(worker)
        if ready:
            worker.wait_ready(self.app)
        return worker

    def live(self) -> list[GroupWorkerProcess]:
        """The workers whose process still runs."""
        return [w for w in self.workers if w.process.poll() is None]

    def sweep(self) -> int:
        """What the scheduler runs every ``TTS_SWEEP_INTERVAL_S`` (here on demand)."""
        return sweep_now(self.app)

    def rows(self, ids: list[str] | None = None) -> dict[str, TaskRow]:
        """Task rows by id (every row when ``ids`` is None)."""
        query = select(TaskRow) if ids is None else select(TaskRow).where(TaskRow.id.in_(ids))
        with self.db.read() as session:
            return {row.id: row for row in session.scalars(query)}

    def unfinished(self) -> int:
        """Rows of the whole table still queued or running."""
        with self.db.read() as session:
            return int(session.scalar(select(func.count()).select_from(TaskRow)
                                      .where(TaskRow.status.in_(UNFINISHED))) or 0)

    def log_text(self) -> str:
        """Every worker's log, concatenated."""
        for worker in self.workers:
            worker.log.flush()
        return "\n".join(p.read_text(errors="replace") for p in sorted(self.logs.glob("*.log")))

    def stop(self) -> None:
        """Stop every worker still running."""
        for worker in self.workers:
            worker.stop()


@pytest.fixture
def make_fleet(tmp_path: Path) -> Iterator[Callable[..., Fleet]]:
    """Build a ``Fleet`` on migrated settings (SQLite in ``tmp_path`` unless a URL is given);
    every worker it started is stopped afterwards."""
    fleets: list[Fleet] = []

    def make(redis_url: str, database_url: str | None = None, **env: str) -> Fleet:
        values = {"TTS_DATA_DIR": str(tmp_path / "data"), "TTS_REDIS_URL": redis_url, **FAULT_ENV, **env}
        if database_url:
            values["TTS_DATABASE_URL"] = database_url
        settings = Settings.from_env(values)
        upgrade(settings.database_url)
        logs = tmp_path / "logs"
        logs.mkdir(exist_ok=True)
        fleet = Fleet(settings, logs, **env)
        fleets.append(fleet)
        return fleet

    yield make
    for fleet in fleets:
        fleet.stop()


def submit(app: Flask, text: str) -> str:
    """Submit one task through the API; its id (the answer must be 202)."""
    response = app.test_client().post("/v1/tts", json={"text": text})
    assert response.status_code == 202, response.get_json()
    return str(response.get_json()["task_id"])


def attempts_report(rows: dict[str, TaskRow]) -> str:
    """``executions per task: count`` for the rows."""
    histogram = Counter(r.attempts for r in rows.values())
    return ", ".join(f"{n}x: {histogram[n]}" for n in sorted(histogram))


# --- worker deaths under load -------------------------------------------------------------------

TASKS = 80
KILLS = 3


@dataclass
class Kill:
    """One injected crash."""

    at: datetime
    worker: str
    held: int
    pids: list[int]


def test_worker_deaths_under_load_lose_nothing(broker: str, make_fleet: Callable[..., Fleet]) -> None:
    # Given two workers, each leading its own process group, and a backlog of short tasks
    fleet = make_fleet(broker)
    for worker in [fleet.start(ready=False) for _ in range(2)]:
        worker.wait_ready(fleet.app)
    api = create_app(fleet.settings)
    ids = [submit(api, sentence(n)) for n in range(TASKS)]
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    kill_points = sorted(rng.sample(range(TASKS // 10, TASKS * 7 // 10), KILLS))  # done counts
    kills: list[Kill] = []
    cap = fleet.settings.worker.max_retries + 1

    def step() -> bool:
        fleet.sweep()
        rows = fleet.rows(ids)
        done = sum(r.status is TaskStatus.DONE for r in rows.values())
        if kill_points and done >= kill_points[0]:
            kill_points.pop(0)
            held = Counter(r.worker for r in rows.values() if r.status in UNFINISHED and r.worker)
            # When a worker's whole process group is SIGKILLed (preferably one holding tasks)
            candidates = [w for w in fleet.live() if held[w.name]] or fleet.live()
            victim = rng.choice(candidates)
            pids = victim.kill_group()
            kills.append(Kill(utcnow(), victim.name, held[victim.name], pids))
            fleet.start(ready=False)  # and a replacement is started at once
        return all(r.status.finished for r in rows.values())

    # (the sweep runs every half second while the load drains)
    finished = settle(step, timeout=90)
    rows = fleet.rows(ids)
    lost = [i for i, r in rows.items() if r.status is not TaskStatus.DONE]
    last_done = max((r.finished_at for r in rows.values() if r.finished_at), default=None)
    recovery = (last_done - kills[-1].at).total_seconds() if kills and last_done else float("nan")
    extra = sum(r.attempts - 1 for r in rows.values() if r.attempts > 1)
    print(f"\nseed {seed}: {len(kills)} kills " + "; ".join(
        f"{k.worker} held {k.held} (group {k.pids})" for k in kills)
        + f"\nlast kill -> last completion {recovery:.1f} s (lease {LEASE_S} s); executions per task "
        f"{attempts_report(rows)}; {extra} extra execution(s)")
    # Then every task ends done: nothing lost, nothing stranded
    assert finished and not lost, f"{len(lost)} of {TASKS} not done: " + ", ".join(
        f"{rows[i].status.value} (worker {rows[i].worker}, {rows[i].attempts} attempts)" for i in lost)
    assert len(kills) == KILLS and sum(k.held for k in kills) > 0, "the kills hit workers holding tasks"
    # And a task ran again only because a worker died with it: extra executions are bounded by what
    # the dead workers held, and no task went past the attempts cap
    assert all(r.attempts <= cap for r in rows.values())
    assert extra <= sum(k.held for k in kills)


# --- database outage ----------------------------------------------------------------------------

OUTAGE_S = 20.0
SUBMIT_EVERY_S = 0.2
SUBMIT_TIMEOUT_S = 15.0


def free_port() -> int:
    """A TCP port nobody listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PrivatePostgres:
    """A throwaway PostgreSQL cluster (``initdb`` in a temporary directory) on a free port, run as
    the ``postgres`` OS user when the tests run as root (PostgreSQL refuses root)."""

    def __init__(self) -> None:
        self.initdb, self.pg_ctl = shutil.which("initdb"), shutil.which("pg_ctl")
        if not self.initdb or not self.pg_ctl:
            unavailable("initdb/pg_ctl not found: cannot run a private PostgreSQL")
        self.as_user: list[str] = []
        self.directory = Path(tempfile.mkdtemp(prefix="tts-pg-"))  # /tmp: postgres can reach it
        if os.geteuid() == 0:
            try:
                owner = pwd.getpwnam("postgres")
            except KeyError:
                unavailable("no `postgres` OS user to run a private PostgreSQL as")
            if not shutil.which("runuser"):
                unavailable("runuser not found: cannot run PostgreSQL as `postgres`")
            os.chown(self.directory, owner.pw_uid, owner.pw_gid)
            self.as_user = ["runuser", "-u", "postgres", "--"]
        self.data = self.directory / "data"
        self.port = free_port()

    @property
    def url(self) -> str:
        """SQLAlchemy URL of the cluster's ``postgres`` database."""
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str) -> None:
        subprocess.run([*self.as_user, *args], check=True, capture_output=True, timeout=60)

    def init(self) -> None:
        """Create the cluster (trust authentication, no fsync: a test's throwaway data)."""
        assert self.initdb
        self._run(self.initdb, "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync",
                  "-E", "UTF8")

    def start(self) -> None:
        """Start the server and wait until it accepts connections."""
        assert self.pg_ctl
        options = (f"-p {self.port} -c listen_addresses=127.0.0.1 -c fsync=off "
                   f"-c unix_socket_directories={self.directory}")
        self._run(self.pg_ctl, "-D", str(self.data), "-l", str(self.directory / "postgres.log"),
                  "-w", "-t", "30", "-o", options, "start")

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``fast``: disconnect clients, roll back their transactions)."""
        assert self.pg_ctl
        self._run(self.pg_ctl, "-D", str(self.data), "-m", mode, "-w", "-t", "30", "stop")

    def destroy(self) -> None:
        """Stop the server if it runs and delete the cluster."""
        if (self.data / "postmaster.pid").exists():
            try:
                self.stop("immediate")
            except subprocess.SubprocessError:
                pass
        shutil.rmtree(self.directory, ignore_errors=True)


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
    broker: str, make_fleet: Callable[..., Fleet], private_postgres: PrivatePostgres,
) -> None:
    # Given a worker and the API on a private PostgreSQL, and tasks submitted continuously
    fleet = make_fleet(broker, private_postgres.url)
    fleet.start()
    submitter = Submitter(create_app(fleet.settings))
    thread = threading.Thread(target=submitter.run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: len(submitter.accepted()) >= 15, timeout=60, interval=0.1)
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

    finished = settle(all_finished, timeout=90)
    recovered_s = time.monotonic() - back
    rows = fleet.rows()
    during = [a for a in submitter.answers if a.phase == "outage"]
    statuses = Counter(a.status for a in submitter.answers)
    print(f"\n{len(submitter.answers)} submissions {dict(statuses)}; during the {OUTAGE_S:.0f} s outage "
          f"{len(during)} answers, {sum(a.status == 503 for a in during)} of them 503, slowest "
          f"{max((a.seconds for a in during), default=0):.2f} s; {len(accepted)} accepted; "
          f"{len(rows)} rows, all finished {recovered_s:.1f} s after the restart (lease {LEASE_S} s); "
          f"executions per task {attempts_report(rows)}")
    # Then while the database was down every submission answered 503 in time, with Retry-After and
    # a JSON error; never a 500, never a hang
    assert during and all(a.status == 503 for a in during), Counter(a.status for a in during)
    assert set(statuses) <= {202, 503}, statuses
    for answer in (a for a in submitter.answers if a.status == 503):
        assert answer.retry_after and int(answer.retry_after) > 0
        assert answer.body["error"]["code"] == "service_unavailable", answer.body
    # And every accepted task ends done, and no row is left queued or running
    assert finished, f"{fleet.unfinished()} row(s) still queued or running"
    lost = [i for i in accepted if rows[i].status is not TaskStatus.DONE]
    assert not lost, Counter(rows[i].status for i in lost)


# --- poison task --------------------------------------------------------------------------------

POISON_HOOK = '''\
"""Test-only (tests/service/test_faults.py): a request whose text contains POISON kills the
worker process (os._exit) whenever it is synthesized, as a segfault in a native library would."""
import os

from tts_queue.synthesis import synthesizer

_synthesize = synthesizer.Synthesizer.synthesize


def _poisoned(self, request, priority=0):
    if "POISON" in request.text:
        os._exit(137)
    return _synthesize(self, request, priority)


synthesizer.Synthesizer.synthesize = _poisoned
'''


def test_a_poison_task_fails_after_the_cap_and_the_others_finish(
    broker: str, make_fleet: Callable[..., Fleet], tmp_path: Path,
) -> None:
    # Given workers that die (exit 137) whenever they synthesize a text containing POISON
    hook = tmp_path / "poison"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(POISON_HOOK)
    path = f"{hook}{os.pathsep}{ROOT}"  # the hook first: Python imports sitecustomize at start
    fleet = make_fleet(broker)
    fleet.start("poison", PYTHONPATH=path)
    api = create_app(fleet.settings)
    # And a poison task among normal ones
    normal = [submit(api, sentence(n)) for n in range(10)]
    poison = submit(api, sentence(10, "POISON. "))
    normal += [submit(api, sentence(n)) for n in range(11, 21)]
    dead: list[tuple[str, int]] = []  # (worker, exit code)

    # When each dead worker is replaced at once and the sweep runs every half second
    def step() -> bool:
        for worker in fleet.workers:
            if worker.process.poll() is not None and worker.name not in {w for w, _ in dead}:
                dead.append((worker.name, worker.process.returncode))
                fleet.start("poison", ready=False, PYTHONPATH=path)
        fleet.sweep()
        rows = fleet.rows([*normal, poison])
        return all(r.status.finished for r in rows.values())

    finished = settle(step, timeout=90)
    deaths = [code for _, code in dead]
    rows = fleet.rows([*normal, poison])
    cap = fleet.settings.worker.max_retries + 1
    print(f"\npoison: {rows[poison].status.value} ({rows[poison].error_code}) after "
          f"{rows[poison].attempts} claims; {len(deaths)} worker deaths {deaths}; normal tasks "
          f"{dict(Counter(rows[i].status.value for i in normal))}, executions per normal task "
          f"{attempts_report({i: rows[i] for i in normal})}")
    # Then the poison fails with too_many_attempts once the cap is spent (each attempt killed a worker)
    assert finished, [f"{r.status.value} (worker {r.worker}, {r.attempts} attempts)"
                      for r in rows.values() if not r.status.finished]
    assert rows[poison].status is TaskStatus.FAILED
    assert rows[poison].error_code == "too_many_attempts"
    assert len(deaths) == cap and set(deaths) == {137}
    # And every normal task ends done
    assert all(rows[i].status is TaskStatus.DONE for i in normal), {
        i: (rows[i].status.value, rows[i].error_code, rows[i].attempts) for i in normal
        if rows[i].status is not TaskStatus.DONE}


# --- many writers on SQLite ---------------------------------------------------------------------

SQLITE_TASKS = 120
SUBMITTERS = 5


def test_many_writers_on_sqlite_never_see_database_is_locked(
    broker: str, make_fleet: Callable[..., Fleet],
) -> None:
    # Given three workers on one SQLite file
    fleet = make_fleet(broker)
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

    finished = settle(step, timeout=90)
    for thread in threads:
        thread.join(timeout=30)
    logs = fleet.log_text()
    locked = logs.lower().count("database is locked")
    ids = [body["task_id"] for status, body in answers if status == 202]
    rows = fleet.rows(ids)
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


# --- a released task whose redelivery is lost ---------------------------------------------------

LONG_TEXT = " ".join(f"This is sentence number {n} of a long request." for n in range(1, 9))


def test_a_dead_workers_task_survives_a_broker_restart_after_its_release(
    make_fleet: Callable[..., Fleet],
) -> None:
    # Given a broker that keeps nothing on disk and a worker running a long task
    server = EmbeddedRedis(Path(tempfile.mkdtemp(prefix="tts-redis-")), persist=False)
    fleet = make_fleet(server.start())
    try:
        first = fleet.start()
        api = create_app(fleet.settings)
        task = submit(api, LONG_TEXT)
        wait_until(lambda: fleet.rows([task])[task].status is TaskStatus.RUNNING, timeout=60, interval=0.05)
        # When the worker dies and the sweep releases its task (dispatched again, waiting in the broker)
        first.kill_group()
        wait_until(lambda: fleet.sweep() > 0, timeout=30, interval=SWEEP_EVERY_S)
        released = fleet.rows([task])[task]
        # And the broker restarts before any worker took the message (it forgets every message)
        server.stop()
        server.start()
        fleet.start(ready=False)  # (a ping would go through the test's stale broker connection)

        # (which serves new work: a task submitted now completes)
        fresh_api = create_app(fleet.settings)

        def accepted() -> str | None:
            response = fresh_api.test_client().post("/v1/tts", json={"text": sentence(1)})
            assert response.status_code in (202, 503), response.get_json()
            return str(response.get_json()["task_id"]) if response.status_code == 202 else None

        control = wait_until(accepted, timeout=60, interval=0.5)
        wait_until(lambda: fleet.rows([control])[control].status is TaskStatus.DONE, timeout=60)

        # Then the sweep finds the released task again and it completes on the new worker
        def done() -> bool:
            fleet.sweep()
            return fleet.rows([task])[task].status is TaskStatus.DONE

        completed = settle(done, timeout=5 * float(LEASE_S))
        final = fleet.rows([task])[task]
        print(f"\nreleased as {released.status.value} (worker {released.worker}); after the broker "
              f"restart a new task completed; {5 * float(LEASE_S):.0f} s of sweeps later the released "
              f"task is {final.status.value} (worker {final.worker})")
        assert completed, (f"task stranded as {final.status.value} with worker {final.worker}: no "
                           "recovery path looks at a released running row")
    finally:
        fleet.stop()  # before the broker goes
        server.stop()
        shutil.rmtree(server.directory, ignore_errors=True)
