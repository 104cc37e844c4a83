"""The recovery sweep (``requeue_lost``) with a fake dispatcher and marker on SQLite."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from tests.support import FakeQueue
from tts_queue.db import Database
from tts_queue.enums import TaskStatus
from tts_queue.tables import TaskRow
from tts_queue.tasks.recovery import release_silent, requeue_lost
from tts_queue.tasks.rows import TaskRows

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc)
LEASE = timedelta(seconds=45)
GRACE = timedelta(seconds=10)


class Marker:
    def __init__(self, present: bool) -> None:
        self.here = present

    def present(self) -> bool:
        return self.here

    def set(self) -> None:
        self.here = True


Recorder = FakeQueue  # records what the sweep sends


@pytest.fixture
def db(tmp_path: Path) -> Database:
    database = Database(f"sqlite:///{tmp_path / 'tts.db'}")
    database.create_all()
    return database


def add(db: Database, status: TaskStatus, claimed_at: datetime | None = None, queue: str = "tts.cpu",
        worker: str | None = None, dispatched: bool = True, age: timedelta = timedelta(hours=3)) -> str:
    task_id = str(uuid.uuid4())
    with db.write() as session:
        session.add(TaskRow(id=task_id, status=status, cache_key="k" * 64, request={}, pool="cpu",
                            queue=queue, created_at=NOW - age, attempts=1, worker=worker,
                            claimed_at=claimed_at, started_at=claimed_at,
                            dispatched_at=NOW - age if dispatched else None))
    return task_id


def sweep(db: Database, recorder: Recorder, marker: Marker, at: datetime = NOW) -> int:
    """One run of the sweep at ``at``."""
    return requeue_lost(TaskRows(db, lambda: at, LEASE), recorder, marker, GRACE)


def test_a_broker_that_lost_its_data_gets_every_queued_task_again(db: Database) -> None:
    # Given queued tasks, finished ones, and a broker whose marker is gone
    queued = [add(db, TaskStatus.QUEUED), add(db, TaskStatus.QUEUED, queue="tts.gpu")]
    add(db, TaskStatus.DONE)
    add(db, TaskStatus.CANCELLED)
    marker, recorder = Marker(present=False), Recorder()
    # When the sweep runs
    count = sweep(db, recorder, marker)
    # Then exactly the queued tasks are sent again, to their own queues, and the marker is set
    assert count == 2 and sorted(recorder.sent) == sorted(zip(queued, ["tts.cpu", "tts.gpu"],
                                                               strict=True))
    assert marker.present()


def test_a_healthy_backlog_is_left_alone(db: Database) -> None:
    # Given queued tasks that were sent long ago and wait for a worker, and a broker with its data
    for _ in range(3):
        add(db, TaskStatus.QUEUED)
    recorder = Recorder()
    # Then the sweep sends nothing again
    assert sweep(db, recorder, Marker(present=True)) == 0 and recorder.sent == []


def test_tasks_held_by_a_dead_worker_are_sent_again_once(db: Database) -> None:
    # Given tasks held by a worker that stopped renewing (running, and received but not started),
    # and a running task whose worker renewed its lease just now
    stale = NOW - LEASE - timedelta(seconds=1)
    running = add(db, TaskStatus.RUNNING, claimed_at=stale, worker="dead@host")
    reserved = add(db, TaskStatus.QUEUED, claimed_at=stale, worker="dead@host")
    add(db, TaskStatus.RUNNING, claimed_at=NOW - timedelta(seconds=5), worker="alive@host")
    recorder = Recorder()
    # When the sweep runs twice in a row
    first = sweep(db, recorder, Marker(present=True))
    second = sweep(db, recorder, Marker(present=True), NOW + timedelta(seconds=15))
    # Then the dead worker's two were sent once each (released, lease bumped), the live one not
    assert (first, second) == (2, 0)
    assert sorted(recorder.sent) == sorted([(running, "tts.cpu"), (reserved, "tts.cpu")])
    with db.read() as session:
        row = session.get(TaskRow, running)
    assert row is not None and row.worker is None and row.status is TaskStatus.QUEUED
    assert row.attempts == 1  # released, not forgiven: the attempts cap still counts it


def test_a_row_committed_but_never_sent_is_sent_after_the_grace(db: Database) -> None:
    # Given a row whose API died between commit and dispatch, and one committed a moment ago
    lost = add(db, TaskStatus.QUEUED, dispatched=False, age=GRACE + timedelta(seconds=1))
    add(db, TaskStatus.QUEUED, dispatched=False, age=timedelta(seconds=2))
    recorder = Recorder()
    # When the sweep runs twice
    first = sweep(db, recorder, Marker(present=True))
    second = sweep(db, recorder, Marker(present=True))
    # Then only the old one is sent, once (the young one may still be sent by its API)
    assert (first, second) == (1, 0) and recorder.sent == [(lost, "tts.cpu")]


def test_a_message_that_vanished_with_its_receiver_is_sent_again(db: Database) -> None:
    # Given queued rows held by no worker, all sent 5 minutes ago:
    # one whose message a receiver took and never recorded (killed at once), one whose message
    # vanished entirely (popped, then the worker died), one still waiting in its queue, and one
    # delivered a moment ago (its receiver is recording it now), and one whose only delivery the
    # broker holds is older than its last send (a dead worker's old message; the one sent again
    # when the sweep released it vanished)
    sent = NOW - timedelta(minutes=5)
    ids = [add(db, TaskStatus.QUEUED, age=timedelta(minutes=5)) for _ in range(5)]
    taken_long_ago, vanished, waiting, just_taken, masked = ids
    messages: dict[str, float | None] = {
        taken_long_ago: (sent + timedelta(seconds=1)).timestamp(),
        masked: (sent - timedelta(minutes=1)).timestamp(),
        waiting: None,
        just_taken: (NOW - timedelta(seconds=2)).timestamp(),
    }
    recorder = Recorder()
    # When the sweep runs twice with the broker's view
    rows = TaskRows(db, lambda: NOW, LEASE)
    first = requeue_lost(rows, recorder, Marker(present=True), GRACE, messages=lambda: messages)
    second = requeue_lost(rows, recorder, Marker(present=True), GRACE, messages=lambda: messages)
    # Then the three lost ones are sent again, once, and the others are left alone
    assert (first, second) == (3, 0)
    assert sorted(recorder.sent) == sorted([(taken_long_ago, "tts.cpu"), (vanished, "tts.cpu"),
                                            (masked, "tts.cpu")])


class Roster:
    """Workers whose heartbeat stopped, and the names forgotten since."""

    def __init__(self, silent: list[str]) -> None:
        self.names = list(silent)
        self.forgotten: list[str] = []

    def silent(self) -> list[str]:
        return [name for name in self.names if name not in self.forgotten]

    def forget(self, name: str) -> bool:
        self.forgotten.append(name)
        return True


def test_a_silent_workers_tasks_are_sent_again_at_once(db: Database) -> None:
    # Given a worker whose heartbeat stopped a moment ago (its leases still fresh), running one task
    # and holding another received, and a live worker running a third
    fresh = NOW - timedelta(seconds=2)
    held = [add(db, status, fresh, worker="gone@h") for status in (TaskStatus.RUNNING, TaskStatus.QUEUED)]
    other = add(db, TaskStatus.RUNNING, fresh, worker="alive@h")
    # And two messages delivered and not yet recorded in their rows: one 8 s ago (more than a beat:
    # a live receiver would have recorded it, so the silent one had it), one 1 s ago (a live
    # worker's, to be recorded at its next beat)
    unrecorded, fresh_delivery = add(db, TaskStatus.QUEUED), add(db, TaskStatus.QUEUED)
    delivered = {unrecorded: (NOW - timedelta(seconds=8)).timestamp(),
                 fresh_delivery: (NOW - timedelta(seconds=1)).timestamp()}
    rows, recorder, roster = TaskRows(db, lambda: NOW, LEASE), Recorder(), Roster(["gone@h"])

    # When a live worker looks after its beat (twice; a beat every 5 s)
    def look() -> int:
        return release_silent(rows, recorder, roster, lambda: delivered, beat=timedelta(seconds=5))

    sent = look() + look()
    # Then the silent worker's tasks, and the message it received unrecorded, are sent again once,
    # its name is forgotten, the live worker's task and fresh delivery are left alone, and the next
    # sweep sends none of them again
    assert sent == 3
    assert sorted(recorder.sent) == sorted((task_id, "tts.cpu") for task_id in [*held, unrecorded])
    assert roster.forgotten == ["gone@h"]
    with db.read() as session:
        row = session.get(TaskRow, other)
        assert row is not None and row.worker == "alive@h" and row.status is TaskStatus.RUNNING
    assert sweep(db, recorder, Marker(present=True), NOW + timedelta(seconds=1)) == 0
