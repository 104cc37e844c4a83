"""The recovery sweep (``requeue_lost``) with a fake dispatcher and marker on SQLite."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from tts_queue.db import Database, TaskRow
from tts_queue.recovery import MARGIN, requeue_lost
from tts_queue.status import TaskStatus
from tts_queue.task_rows import TaskRows

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc)
VISIBILITY = timedelta(hours=1)


class Marker:
    def __init__(self, present: bool) -> None:
        self.here = present

    def present(self) -> bool:
        return self.here

    def set(self) -> None:
        self.here = True


class Recorder:
    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []

    def dispatch(self, task_id: str, queue: str) -> None:
        self.sent.append((task_id, queue))


@pytest.fixture
def db(tmp_path: Path) -> Database:
    database = Database(f"sqlite:///{tmp_path / 'tts.db'}")
    database.create_all()
    return database


def add(db: Database, status: TaskStatus, claimed_at: datetime | None = None,
        queue: str = "tts.cpu") -> str:
    task_id = str(uuid.uuid4())
    with db.write() as session:
        session.add(TaskRow(id=task_id, status=status, cache_key="k" * 64, request={}, pool="cpu",
                            queue=queue, created_at=NOW - timedelta(hours=3), attempts=1,
                            claimed_at=claimed_at, started_at=claimed_at))
    return task_id


def test_a_broker_that_lost_its_data_gets_every_queued_task_again(db: Database) -> None:
    # Given queued tasks, finished ones, and a broker whose marker is gone
    queued = [add(db, TaskStatus.QUEUED), add(db, TaskStatus.QUEUED, queue="tts.gpu")]
    add(db, TaskStatus.DONE)
    add(db, TaskStatus.CANCELLED)
    marker, recorder = Marker(present=False), Recorder()
    # When the sweep runs
    count = requeue_lost(TaskRows(db, lambda: NOW), recorder, marker, NOW, VISIBILITY)
    # Then exactly the queued tasks are sent again, to their own queues, and the marker is set
    assert count == 2 and sorted(recorder.sent) == sorted(zip(queued, ["tts.cpu", "tts.gpu"],
                                                               strict=True))
    assert marker.present()


def test_queued_tasks_are_left_alone_while_the_broker_kept_its_data(db: Database) -> None:
    add(db, TaskStatus.QUEUED)
    recorder = Recorder()
    assert requeue_lost(TaskRows(db, lambda: NOW), recorder, Marker(present=True), NOW, VISIBILITY) == 0
    assert recorder.sent == []


def test_a_running_task_of_a_dead_worker_is_sent_again_once(db: Database) -> None:
    # Given one task claimed long ago (its worker died) and one claimed just now
    orphan = add(db, TaskStatus.RUNNING, claimed_at=NOW - VISIBILITY - MARGIN - timedelta(seconds=1))
    add(db, TaskStatus.RUNNING, claimed_at=NOW - timedelta(minutes=5))
    recorder = Recorder()
    # When the sweep runs twice in a row
    first = requeue_lost(TaskRows(db, lambda: NOW), recorder, Marker(present=True), NOW, VISIBILITY)
    later = NOW + timedelta(seconds=30)
    second = requeue_lost(TaskRows(db, lambda: later), recorder, Marker(present=True), later, VISIBILITY)
    # Then only the orphan was sent, and only once (its claim time was bumped)
    assert (first, second) == (1, 0) and recorder.sent == [(orphan, "tts.cpu")]
    with db.read() as session:
        row = session.get(TaskRow, orphan)
    assert row is not None and row.claimed_at == NOW and row.status is TaskStatus.RUNNING
