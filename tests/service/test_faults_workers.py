"""Workers that die: real worker processes on a real Redis and database, killed under load.

- **Worker deaths under load**: worker process groups SIGKILLed at random moments while they hold
  running and reserved tasks, replacements started: nothing lost, nothing finished runs again,
  executions per task bounded by the attempts cap, on the default visibility timeout (an hour):
  the sweep finds the dead workers' tasks by their expired leases.
- **Poison task**: a task that kills its worker every time ends ``failed`` after the cap.
- **A book** survives the death of its worker without redoing finished sentences.
- **A message held but not started** (an ETA, as a retry's) is recorded in its row by the worker's
  next heartbeat, so its lease is the worker's, and it finishes elsewhere when that worker dies.
- **The outbox**: a row whose API died between commit and dispatch is sent by the sweep.
- **A worker that stops beating**: its tasks run elsewhere found by its expired heartbeat, with no
  sweep at all, whether it was frozen (SIGSTOP, then SIGCONT: its late results are dropped, each
  task ends once with one webhook and one audio file) or killed (SIGKILL).
- **Scale-in**: a worker SIGTERMed under load finishes what it runs, hands back what it had taken
  and not started, and exits; every task runs and ends once. One whose tasks run past its
  shutdown budget hands them back at once (not after their lease) and exits; each still ends once,
  with one webhook.

Workers run the tiny voice with a model-call delay (``tests/hooks``), so tasks take time without
loading the CPU. Each test has its own redis-server (embedded, unix socket, nothing on disk). The
lease is short (``TTS_LEASE_S``) and the sweep runs on demand every half second, as the scheduler
would. Figures are printed (``pytest -s``).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from api import create_app
from api.services import Services
from tests.support import (
    ROOT,
    Fleet,
    GroupWorkerProcess,
    Receiver,
    hooked,
    private_redis,
    service_settings,
    settings_env,
    settle,
    submit,
)
from tests.support import wait_until as wait_for
from tts_queue.broker.names import SYNTHESIZE
from tts_queue.db import utcnow
from tts_queue.enums import TaskStatus
from tts_queue.tables import CacheEntry, Callback
from workers.dispatch import CeleryDispatcher

pytestmark = pytest.mark.integration

LEASE_S = "4"
# What every worker of these tests runs with (the sweep in the test process reads the same).
FAULT_ENV = {"TTS_LEASE_S": LEASE_S, "TTS_OUTBOX_GRACE_S": "1", "TTS_CPU_MAX_BATCH": "1"}
SWEEP_EVERY_S = 0.5
UNFINISHED = (TaskStatus.QUEUED, TaskStatus.RUNNING)


def sentence(n: int, tag: str = "") -> str:
    """One short sentence, different for every ``n`` (no two tasks share a cache key)."""
    return f"{tag}Request number {n} asks for one short sentence."


@pytest.fixture
def make_fleet(tmp_path: Path, voices_dir: Path) -> Iterator[Callable[..., Fleet]]:
    """Build a ``Fleet`` on its own private broker and a migrated SQLite file (tiny voice); every
    worker and broker it started is stopped afterwards."""
    fleets: list[Fleet] = []
    brokers = []

    def make(delay_ms: int = 0, **env: str) -> Fleet:
        broker = private_redis()
        brokers.append(broker)
        settings = service_settings(tmp_path / "data", broker.start(), voices_dir, **{**FAULT_ENV, **env})
        fleet = Fleet(settings, tmp_path / "logs", **hooked(TTS_TEST_BATCH_DELAY_MS=str(delay_ms)))
        fleets.append(fleet)
        return fleet

    yield make
    for fleet in fleets:
        fleet.stop()
    for broker in brokers:
        broker.stop()


def attempts_report(rows: dict[str, Any]) -> str:
    """``executions per task: count`` for the rows."""
    histogram = Counter(r.attempts for r in rows.values())
    return ", ".join(f"{n}x: {histogram[n]}" for n in sorted(histogram))


# --- worker deaths under load -------------------------------------------------------------------

TASKS = 40
KILLS = 2


@dataclass
class Kill:
    """One injected crash: when, whom, how many tasks it held, its processes, and the attempts
    of every task already done at that moment."""

    at: datetime
    worker: str
    held: int
    pids: list[int]
    done_attempts: dict[str, int] = field(default_factory=dict)


def test_worker_deaths_under_load_lose_nothing_and_redo_nothing_finished(
    make_fleet: Callable[..., Fleet],
) -> None:
    # Given two workers (each leading its own process group) and a backlog of tasks that take time
    # (300 ms a call: each worker runs two calls at once (two runners), and at 120 ms the backlog
    # drained before the sweep loop's second kill point on a slow machine)
    fleet = make_fleet(delay_ms=300)
    for worker in [fleet.start(ready=False) for _ in range(2)]:
        worker.wait_ready(fleet.app)
    api = create_app(fleet.settings).test_client()
    ids = [submit(api, sentence(n)) for n in range(TASKS)]
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    kill_points = sorted(rng.sample(range(TASKS // 10, TASKS * 7 // 10), KILLS))  # done counts
    kills: list[Kill] = []
    cap = fleet.settings.worker.max_retries + 1

    def step() -> bool:
        fleet.sweep()
        rows = fleet.rows(ids)
        done = {i: r.attempts for i, r in rows.items() if r.status is TaskStatus.DONE}
        if kill_points and len(done) >= kill_points[0]:
            kill_points.pop(0)
            held = Counter(r.worker for r in rows.values() if r.status in UNFINISHED and r.worker)
            # When a worker's whole process group is SIGKILLed (preferably one holding tasks)
            candidates = [w for w in fleet.live() if held[w.name]] or fleet.live()
            victim = rng.choice(candidates)
            pids = victim.kill_group()
            # what it held when it died (it may have taken more since the rows were read)
            after = fleet.rows(ids)
            dead_held = sum(1 for r in after.values() if r.status in UNFINISHED and r.worker == victim.name)
            kills.append(Kill(utcnow(), victim.name, dead_held, pids, done))
            fleet.start(ready=False)  # and a replacement is started at once
        return all(r.status.finished for r in rows.values())

    # (the sweep runs every half second while the load drains)
    finished = settle(step, timeout=90, interval=SWEEP_EVERY_S)
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
    # And the kills hit workers holding several tasks, running and reserved
    assert len(kills) == KILLS and max(k.held for k in kills) >= 2, [k.held for k in kills]
    # And nothing that had finished before a kill ran again
    for kill in kills:
        assert all(rows[i].attempts == attempts for i, attempts in kill.done_attempts.items())
    # And a task ran again only because a worker died with it: extra executions are bounded by what
    # the dead workers held, and no task went past the attempts cap
    assert all(r.attempts <= cap for r in rows.values())
    assert extra <= sum(k.held for k in kills)


# --- poison task --------------------------------------------------------------------------------


def test_a_poison_task_fails_after_the_cap_and_the_others_finish(make_fleet: Callable[..., Fleet]) -> None:
    # Given workers that die (exit 137) whenever they synthesize a text containing POISON (a lease
    # of 2 s: each death is found sooner; two attempts: each one a worker's death and restart)
    fleet = make_fleet(delay_ms=20, TTS_LEASE_S="2", TTS_MAX_RETRIES="1")
    fleet.start("poison", TTS_TEST_POISON="POISON")
    api = create_app(fleet.settings).test_client()
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
                fleet.start("poison", ready=False, TTS_TEST_POISON="POISON")
        fleet.sweep()
        rows = fleet.rows([*normal, poison])
        return all(r.status.finished for r in rows.values())

    finished = settle(step, timeout=90, interval=SWEEP_EVERY_S)
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


# --- a book whose worker dies -------------------------------------------------------------------

BOOK = "# The Chapter\n\n" + "\n\n".join(
    " ".join(f"Paragraph {p} has sentence number {n} in it." for n in range(1, 4)) for p in range(1, 6))


def test_a_book_finishes_after_its_worker_dies_without_redoing_finished_sentences(
    make_fleet: Callable[..., Fleet],
) -> None:
    # Given a book rendering on a worker
    fleet = make_fleet(delay_ms=150)
    first = fleet.start("book")
    client = create_app(fleet.settings).test_client()
    book_id = client.post("/v1/books", json={"text": BOOK, "input_format": "markdown",
                                             "format": "wav"}).get_json()["book_id"]
    wait_for(lambda: client.get(f"/v1/books/{book_id}").get_json()["sentences_done"] >= 3,
             timeout=60, interval=0.05)
    # When every worker is SIGKILLed halfway and a new one started
    first.kill_group()
    tasks = {i: r for i, r in fleet.rows().items() if r.book_id == book_id}
    done_before = {i for i, r in tasks.items() if r.status is TaskStatus.DONE}
    assert 3 <= len(done_before) < len(tasks), "the kill came halfway"
    fleet.start("book")

    # Then the book completes with every sentence (the sweep assembles what the dead worker never
    # got to), and no sentence finished before the kill ran again
    def book_done() -> bool:
        fleet.sweep()
        return bool(client.get(f"/v1/books/{book_id}").get_json()["status"] == "done")

    assert settle(book_done, timeout=90, interval=SWEEP_EVERY_S), client.get(f"/v1/books/{book_id}").json
    final = fleet.rows(list(tasks))
    assert all(final[i].attempts == 1 for i in done_before)
    assert all(r.status is TaskStatus.DONE for r in final.values())
    twice = sum(1 for r in final.values() if r.attempts == 2)
    print(f"\nbook of {len(tasks)} sentences: {len(done_before)} done before the kill, {twice} "
          f"in flight at the kill ran twice")
    assert client.get(f"/v1/books/{book_id}/chapters/1/audio").status_code == 200


# --- held, not started ---------------------------------------------------------------------------


def test_a_message_held_but_not_started_is_recorded_by_the_next_beat_and_recovered_after_a_kill(
    make_fleet: Callable[..., Fleet],
) -> None:
    # Given a worker, and a queued task whose only message it holds without starting it (an ETA ten
    # minutes away, as a retry's countdown)
    fleet = make_fleet()
    holder = fleet.start("holder")

    class Later(CeleryDispatcher):
        def dispatch(self, task_id: str, queue: str, stream: bool = False) -> None:
            self.app.send_task(SYNTHESIZE, args=[task_id], queue=queue, task_id=task_id, countdown=600)

    services = Services.build(fleet.settings, dispatcher=Later(fleet.app))
    task_id = services.tasks.submit({"text": "Held by a worker that has not started it."}).id

    # Then its row says, within a few beats (a beat is a sixth of the lease here), that the worker
    # holds it, still queued
    def recorded() -> bool:
        row = fleet.rows([task_id])[task_id]
        return bool(row.status is TaskStatus.QUEUED and row.worker == holder.name)

    assert wait_for(recorded, timeout=20, interval=0.1)
    assert fleet.rows([task_id])[task_id].attempts == 0

    # When that worker's process group is SIGKILLed and another worker starts
    holder.kill_group()
    fleet.start("heir", ready=False)

    # Then the sweep releases the task once its lease expires, and it is done, run once
    def done() -> bool:
        fleet.sweep()
        return bool(fleet.rows([task_id])[task_id].status is TaskStatus.DONE)

    assert settle(done, timeout=60, interval=SWEEP_EVERY_S)
    row = fleet.rows([task_id])[task_id]
    assert row.attempts == 1 and row.worker is not None and row.worker.startswith("heir-"), row.worker


# --- the outbox ---------------------------------------------------------------------------------


def test_a_row_whose_api_died_before_dispatch_is_sent_by_the_sweep(make_fleet: Callable[..., Fleet]) -> None:
    # Given an API process that dies (os._exit) at the injected crash point between commit and dispatch
    fleet = make_fleet()
    fleet.start("outbox")
    script = textwrap.dedent("""
        import os, sys
        from tts_queue.settings import Settings
        from api.services import Services

        class CrashBeforeSend:
            def dispatch(self, task_id, queue, stream=False):
                print(task_id, flush=True)
                os._exit(9)  # the crash point: the row is committed, the message never sent

        settings = Settings.from_env(os.environ)
        services = Services.build(settings, dispatcher=CrashBeforeSend())
        services.tasks.submit({"text": "Sent by the sweep, not by the API."})
    """)
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=settings_env(fleet.settings),
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 9, result.stderr
    task_id = result.stdout.strip()
    assert fleet.rows([task_id])[task_id].status is TaskStatus.QUEUED

    # When the sweep runs (after the grace period)
    def done() -> bool:
        fleet.sweep()
        return bool(fleet.rows([task_id])[task_id].status is TaskStatus.DONE)

    # Then the task is sent once and completes
    assert settle(done, timeout=60, interval=SWEEP_EVERY_S)
    assert create_app(fleet.settings).test_client().get(f"/v1/tasks/{task_id}/audio").status_code == 200


# --- scale-in: SIGTERM under load ---------------------------------------------------------------


def test_a_worker_terminated_under_load_finishes_what_it_runs_and_every_task_ends_once(
    make_fleet: Callable[..., Fleet],
) -> None:
    # Given two workers and a backlog of tasks that take time (300 ms a model call)
    fleet = make_fleet(delay_ms=300)
    workers = [fleet.start(ready=False) for _ in range(2)]
    for worker in workers:
        worker.wait_ready(fleet.app)
    api = create_app(fleet.settings).test_client()
    ids = [submit(api, sentence(n, "scale-in ")) for n in range(TASKS)]
    victim = workers[0]

    def holding() -> int:
        return sum(1 for r in fleet.rows(ids).values() if r.status in UNFINISHED and r.worker == victim.name)

    # When one of them, holding several tasks, gets SIGTERM (as a scale-in or a rolling upgrade
    # sends it) and no replacement is started
    wait_for(lambda: holding() >= 2, timeout=30, interval=0.05)
    held = holding()
    sent = time.monotonic()
    victim.process.terminate()
    victim.process.wait(timeout=120)
    exit_s = time.monotonic() - sent
    # Then every task ends done on the workers left, the sweep running as the scheduler would
    finished = settle(lambda: fleet.sweep() >= 0 and all(r.status.finished for r in fleet.rows(ids).values()),
                      timeout=90, interval=SWEEP_EVERY_S)
    drained_s = time.monotonic() - sent
    rows = fleet.rows(ids)
    print(f"\nSIGTERM to a worker holding {held}: it exited after {exit_s:.1f} s, everything done "
          f"{drained_s:.1f} s after the signal (lease {LEASE_S} s); executions per task "
          f"{attempts_report(rows)}")
    assert finished and all(r.status is TaskStatus.DONE for r in rows.values())
    # And each ran once: what the worker ran it finished before it exited, what it had taken
    # and not started went back to the broker (no task ran twice, so none ended twice)
    assert all(r.attempts == 1 for r in rows.values()), attempts_report(rows)
    # And it exited within the chart's grace period (deploy/helm: terminationGracePeriodSeconds)
    assert exit_s < 90


def test_a_worker_past_its_shutdown_budget_hands_back_what_runs_and_every_task_ends_once(
    make_fleet: Callable[..., Fleet],
) -> None:
    # Given one worker running tasks that take longer than its shutdown budget (1.5 s a model
    # call, two at a time, a budget of 0.5 s), each task with a webhook, and a second worker
    # starting once the first has claimed them all
    receiver = Receiver()
    fleet = make_fleet(delay_ms=1500, TTS_SHUTDOWN_BUDGET_S="0.5",
                       TTS_WEBHOOK_ALLOW_PRIVATE="true", TTS_WEBHOOK_PORTS=str(receiver.port))
    victim = fleet.start()
    api = create_app(fleet.settings).test_client()
    ids = [submit(api, sentence(n, "budget "), callback_url=f"{receiver.url}/t{n}") for n in range(6)]
    wait_for(lambda: all(r.status is TaskStatus.RUNNING for r in fleet.rows(ids).values()), timeout=30,
             interval=0.05)
    other = fleet.start(ready=False)
    # When the first gets SIGTERM
    sent = time.monotonic()
    victim.process.terminate()
    victim.process.wait(timeout=60)
    exit_s = time.monotonic() - sent
    # Then it exits once the budget is spent, having handed back what it had not finished: queued
    # again, held by nobody, their attempt not counted
    rows = fleet.rows(ids)
    print(f"\nSIGTERM to a worker running 6 tasks of 1.5+ s, budget 0.5 s: exited after {exit_s:.1f} s; "
          f"statuses then {Counter(r.status.value for r in rows.values())}")
    handed = [r for r in rows.values() if r.status is not TaskStatus.DONE]  # it left them unfinished
    assert handed and all(r.worker != victim.name for r in handed)
    assert all(r.status is TaskStatus.QUEUED and r.worker is None and r.attempts == 0 or
               r.status is TaskStatus.RUNNING and r.worker == other.name and r.attempts == 1
               for r in handed)  # (the second worker may have claimed one already)
    assert "handed back" in fleet.log_text()
    # And the second worker finishes them all, the sweep running as the scheduler would (a message
    # the stopping worker's own last poll of the broker took as it exited is sent again by it once
    # its lease lapses)
    other.wait_ready(fleet.app)
    assert settle(lambda: fleet.sweep() >= 0 and all(r.status is TaskStatus.DONE
                                                     for r in fleet.rows(ids).values()),
                  timeout=60, interval=SWEEP_EVERY_S), \
        [(r.status.value, r.worker, r.attempts) for r in fleet.rows(ids).values()]
    # And each ended once: one attempt counted, one webhook delivered
    rows = fleet.rows(ids)
    assert all(r.attempts == 1 for r in rows.values()), attempts_report(rows)
    assert settle(lambda: len(receiver.calls) >= len(ids), timeout=30)
    # (once every callback row is delivered, no delivery can still be on its way)
    assert settle(lambda: delivered(fleet, ids), timeout=30, interval=0.05)
    assert sorted(c["path"] for c in receiver.calls) == sorted(f"/t{n}" for n in range(6))


# --- a worker that stops beating: frozen, then killed --------------------------------------------


def delivered(fleet: Fleet, ids: list[str]) -> bool:
    """Whether the callback of every task of ``ids`` is recorded delivered."""
    with fleet.db.read() as session:
        states = session.scalars(select(Callback.state).where(Callback.subject_id.in_(ids))).all()
    return len(states) == len(ids) and all(state == "delivered" for state in states)


def test_a_silent_workers_tasks_run_elsewhere_without_a_sweep_and_a_frozen_one_writes_nothing_late(
    make_fleet: Callable[..., Fleet],
) -> None:
    # Given two workers (a heartbeat that expires in 1.5 s: half a 3 s lease), tasks of 800 ms a
    # model call (longer than a submission takes on a loaded machine, so a worker runs two of a
    # batch at once: at 300 ms each could end before the next was submitted), each with a webhook,
    # and no sweep at all: only the heartbeats can recover
    receiver = Receiver()
    fleet = make_fleet(delay_ms=800, TTS_LEASE_S="3", TTS_WEBHOOK_ALLOW_PRIVATE="true",
                       TTS_WEBHOOK_PORTS=str(receiver.port))
    workers = [fleet.start("beat", ready=False) for _ in range(2)]
    for worker in workers:
        worker.wait_ready(fleet.app)
    api = create_app(fleet.settings).test_client()
    ids: list[str] = []

    def running_two(batch: list[str]) -> tuple[GroupWorkerProcess, list[str]] | None:
        """A live worker running at least two of ``batch``, and those it runs."""
        rows = fleet.rows(batch)
        for worker in fleet.live():
            runs = [i for i, r in rows.items() if r.status is TaskStatus.RUNNING and r.worker == worker.name]
            if len(runs) >= 2:
                return worker, runs
        return None

    def run_and_stop(tag: str, stop: signal.Signals) -> tuple[GroupWorkerProcess, list[str]]:
        """Submit six tasks, send ``stop`` to a worker's group once it runs two; it and its tasks."""
        batch = [submit(api, sentence(n, tag), callback_url=f"{receiver.url}/{tag}{n}") for n in range(6)]
        ids.extend(batch)
        worker, runs = wait_for(lambda: running_two(batch), timeout=30, interval=0.02)
        # (frozen between its writes, not inside one: holding SQLite's write lock meanwhile, the
        # signal finds every worker outside a write transaction; one frozen inside it would stop
        # every writer until it resumed, docs/limits.md)
        with fleet.db.write_connection():
            os.killpg(worker.process.pid, stop)
        return worker, runs

    def all_done(batch: list[str]) -> bool:
        return all(r.status is TaskStatus.DONE for r in fleet.rows(batch).values())

    # When a worker running tasks is frozen (SIGSTOP: no beat, no write)
    frozen, held = run_and_stop("frozen", signal.SIGSTOP)
    # Then its tasks run to the end on the other worker, found by its silent heartbeat
    assert wait_for(lambda: all_done(ids), timeout=60, interval=0.1)
    # And when it comes back (SIGCONT), its late results for them are dropped, unpublished
    os.killpg(frozen.process.pid, signal.SIGCONT)
    assert wait_for(lambda: all(f"task {i}: claim 1 no longer holds it" in fleet.log_text() for i in held),
                    timeout=60, interval=0.2)
    # When a worker running tasks is then SIGKILLed
    killed, lost = run_and_stop("killed", signal.SIGKILL)
    killed.process.wait(timeout=10)
    # Then its tasks too run to the end on the worker left
    assert wait_for(lambda: all_done(ids), timeout=60, interval=0.1)
    rows = fleet.rows(ids)
    print(f"\nfrozen {frozen.name} held {len(held)}, killed {killed.name} held {len(lost)}; executions "
          f"per task {attempts_report(rows)}")
    # And every task ended once, on one claim: the ones each stopped worker held were claimed
    # again by another, by the fence (the frozen worker's may have ended on the worker killed
    # later: it ran them before its kill), and one webhook each was delivered
    for task_ids, stopped in ((held, frozen), (lost, killed)):
        for task_id in task_ids:
            assert rows[task_id].fence >= 2 and rows[task_id].worker != stopped.name, (task_id, stopped.name)
    assert wait_for(lambda: len(receiver.calls) >= len(ids), timeout=30)
    assert sorted(c["path"] for c in receiver.calls) == sorted(
        f"/{tag}{n}" for tag in ("frozen", "killed") for n in range(6))
    # And the audio store holds each task's one file: none of the frozen worker's late ones
    audio = fleet.settings.data_dir / "audio"
    with fleet.db.read() as session:
        live = {entry.path for entry in session.query(CacheEntry)}
    assert sorted(p.relative_to(audio).as_posix() for p in audio.rglob("*.wav")) == sorted(live)
    assert len(live) == len(ids)
