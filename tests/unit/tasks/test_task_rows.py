"""The one owner of a task row's life: every status change follows ``TRANSITIONS``, tested once."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from tts_queue.db import Database
from tts_queue.enums import TRANSITIONS, TaskStatus, sources
from tts_queue.tables import TaskRow
from tts_queue.tasks.rows import Ending, Suspect, TaskRows

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc)


@pytest.fixture
def rows(tmp_path: Path) -> TaskRows:
    db = Database(f"sqlite:///{tmp_path / 'tts.db'}")
    db.create_all()
    return TaskRows(db, lambda: NOW, timedelta(seconds=45))


def add(rows: TaskRows, status: TaskStatus, worker: str | None = None,
        claimed_at: datetime | None = None) -> str:
    task_id = str(uuid.uuid4())
    with rows.db.write() as session:
        session.add(TaskRow(id=task_id, status=status, cache_key="k" * 64, request={}, pool="cpu",
                            queue="tts.cpu", created_at=NOW, attempts=0, worker=worker,
                            claimed_at=claimed_at))
    return task_id


def status(rows: TaskRows, task_id: str) -> TaskStatus:
    with rows.db.read() as session:
        row = session.get(TaskRow, task_id)
        assert row is not None
        return row.status


def test_the_transition_table_is_what_the_docs_say() -> None:
    # Then finished statuses are final, cancel only stops queued work, and only running work ends
    assert all(not TRANSITIONS[s] for s in TaskStatus if s.finished)
    assert sources(TaskStatus.CANCELLED) == (TaskStatus.QUEUED,)
    assert sources(TaskStatus.DONE) == (TaskStatus.RUNNING,)
    assert set(sources(TaskStatus.RUNNING)) == {TaskStatus.QUEUED, TaskStatus.RUNNING}
    assert set(sources(TaskStatus.QUEUED)) == {TaskStatus.RUNNING}


@pytest.mark.parametrize(("start", "target"), list(itertools.product(TaskStatus, TaskStatus)))
def test_every_change_moves_a_row_only_along_an_allowed_transition(
    rows: TaskRows, start: TaskStatus, target: TaskStatus
) -> None:
    # Given a row in status ``start``
    task_id = add(rows, start)
    # When something tries to move it to ``target`` through the owner of its life
    if target is TaskStatus.RUNNING:
        moved = rows.claim(task_id, "w@h") is not None
    elif target is TaskStatus.QUEUED:
        with rows.db.write() as session:  # a held row whose lease expired long ago
            held = session.get(TaskRow, task_id)
            assert held is not None
            held.worker, held.claimed_at = "dead@h", NOW - timedelta(hours=1)
        moved = bool(rows.reclaim_stale()) and start is not TaskStatus.QUEUED
    else:
        change: Callable[[], Ending | None] = {
            TaskStatus.DONE: lambda: rows.finish(task_id, 1),
            TaskStatus.FAILED: lambda: rows.fail(task_id, "x", "y"),
            TaskStatus.CANCELLED: lambda: rows.cancel(task_id)}[target]
        moved = change() is not None
    # Then it moved exactly when the table allows it, and otherwise stayed where it was
    allowed = target in TRANSITIONS[start]
    assert moved == allowed
    assert status(rows, task_id) is (target if allowed else start)


def test_a_book_cancel_drops_only_its_queued_rows(rows: TaskRows) -> None:
    book = str(uuid.uuid4())
    ids = {s: add(rows, s) for s in (TaskStatus.QUEUED, TaskStatus.RUNNING, TaskStatus.DONE)}
    with rows.db.write() as session:
        for task_id in ids.values():
            row = session.get(TaskRow, task_id)
            assert row is not None
            row.book_id = book
    assert rows.cancel_book(book) == 1
    assert [status(rows, ids[s]) for s in ids] == [TaskStatus.CANCELLED, TaskStatus.RUNNING, TaskStatus.DONE]


def test_claim_first_leaves_a_task_attempted_before_unclaimed(rows: TaskRows) -> None:
    # Given a queued task, claimed once by a worker that then died (its row released)
    task_id = add(rows, TaskStatus.QUEUED)
    first = rows.claim_first(task_id, "w1")
    assert isinstance(first, TaskRow) and first.attempts == 1
    # When another claim_first meets it (a second delivery: the task may be what killed the worker)
    again = rows.claim_first(task_id, "w1")
    # Then it is not claimed and its attempts are not counted; a plain claim counts the second
    assert again is Suspect.SUSPECT
    assert rows.attempts(task_id) == 1
    claimed = rows.claim(task_id, "w1")
    assert claimed is not None and claimed.attempts == 2


@pytest.fixture(params=["sqlite", "postgresql"])
def any_rows(request: pytest.FixtureRequest, tmp_path: Path) -> TaskRows:
    """``TaskRows`` on SQLite and on a fresh PostgreSQL database."""
    if request.param == "sqlite":
        db = Database(f"sqlite:///{tmp_path / 'tts.db'}")
        db.create_all()
    else:
        db = Database(request.getfixturevalue("fresh_postgres_url"))
    return TaskRows(db, lambda: NOW, timedelta(seconds=45))


def test_a_claim_takes_a_free_or_expired_lease_and_never_another_workers_live_one(any_rows: TaskRows) -> None:
    rows = any_rows
    # Given rows: queued, held by another worker under a live lease, held under an expired one,
    # held by this worker, done
    queued = add(rows, TaskStatus.QUEUED)
    live = add(rows, TaskStatus.RUNNING, "other@h", NOW - timedelta(seconds=10))
    expired = add(rows, TaskStatus.RUNNING, "dead@h", NOW - timedelta(seconds=60))
    mine = add(rows, TaskStatus.RUNNING, "w@h", NOW - timedelta(seconds=10))
    finished = add(rows, TaskStatus.DONE)
    # When one worker claims each (and an id nobody knows)
    claimed = {name: rows.claim(task_id, "w@h") for name, task_id in
               {"queued": queued, "live": live, "expired": expired, "mine": mine,
                "finished": finished, "unknown": str(uuid.uuid4())}.items()}
    # Then the free, expired and own leases are taken, counted once, the row as it now stands
    for name in ("queued", "expired", "mine"):
        row = claimed[name]
        assert row is not None and row.status is TaskStatus.RUNNING and row.worker == "w@h", name
        assert row.attempts == 1 and row.claimed_at == NOW and row.started_at == NOW, name
        assert status(rows, row.id) is TaskStatus.RUNNING
    # And the live lease, the finished row and the unknown id are not, and nothing moved
    assert claimed["live"] is None and claimed["finished"] is None and claimed["unknown"] is None
    with rows.db.read() as session:
        held = session.get(TaskRow, live)
        assert held is not None and held.worker == "other@h" and held.attempts == 0
    assert status(rows, finished) is TaskStatus.DONE and rows.attempts(finished) == 0


def test_a_second_claim_keeps_the_first_start_and_counts_again(any_rows: TaskRows) -> None:
    # Given a task claimed once, then released (its worker died; the row back to queued)
    rows = any_rows
    task_id = add(rows, TaskStatus.QUEUED)
    first = rows.claim(task_id, "w1@h")
    assert first is not None and first.started_at == NOW
    with rows.db.write() as session:
        row = session.get(TaskRow, task_id)
        assert row is not None
        row.status, row.worker, row.started_at = TaskStatus.QUEUED, None, NOW - timedelta(minutes=5)
    # When another worker claims it
    again = rows.claim(task_id, "w2@h")
    # Then it keeps its first start, counts the second attempt and holds the new worker's lease
    assert again is not None and again.attempts == 2 and again.worker == "w2@h"
    assert again.started_at == NOW - timedelta(minutes=5) and again.claimed_at == NOW


def test_a_stopping_worker_hands_back_only_what_it_still_holds_without_counting_the_attempt(
    any_rows: TaskRows,
) -> None:
    rows = any_rows
    # Given rows this worker runs (claimed once) and holds received, one it ran that ended, and
    # one another worker runs
    running = add(rows, TaskStatus.QUEUED)
    assert rows.claim(running, "w@h") is not None
    received = add(rows, TaskStatus.QUEUED, "w@h", NOW - timedelta(seconds=5))
    ended = add(rows, TaskStatus.QUEUED)
    assert rows.claim(ended, "w@h") is not None and rows.finish(ended, 1) is not None
    elsewhere = add(rows, TaskStatus.QUEUED)
    assert rows.claim(elsewhere, "other@h") is not None
    # When the worker hands back what it holds
    handed = rows.hand_back("w@h")
    # Then the one it runs is queued again, held by nobody, its attempt not counted, and returned
    # with its queue to send again; the one it received is let go, not sent again (its message
    # went back to the broker with the worker's channel)
    assert handed == [(running, "tts.cpu")]
    with rows.db.read() as session:
        for task_id in (running, received):
            row = session.get(TaskRow, task_id)
            assert row is not None and row.status is TaskStatus.QUEUED and row.worker is None
            assert row.attempts == 0
            assert (row.dispatched_at == NOW) is (task_id == running)
    # And the ended row and the other worker's are untouched; a finish that comes too late does
    # not end the handed-back row (it ends once, where it runs next)
    assert status(rows, ended) is TaskStatus.DONE and status(rows, elsewhere) is TaskStatus.RUNNING
    assert rows.finish(running, 1) is None and status(rows, running) is TaskStatus.QUEUED


def test_a_released_claim_writes_nothing_more(rows: TaskRows) -> None:
    # Given a task claimed by w1, whose heartbeat then stopped: its rows were released
    task_id = add(rows, TaskStatus.QUEUED)
    first = rows.claim(task_id, "w1@h")
    assert first is not None and first.fence == 1
    assert rows.release(["w1@h"]) == [(task_id, "tts.cpu")]
    # When w1 comes back before anyone claimed the task again, it can neither fail it nor take its
    # attempt back
    assert rows.fail(task_id, "synthesis_failed", "late", fence=first.fence) is None
    rows.uncount_attempt(task_id, first.fence)
    assert status(rows, task_id) is TaskStatus.QUEUED and rows.attempts(task_id) == 1
    # And once w2 claimed it, w1's finish moves nothing and writes nothing in its transaction
    second = rows.claim(task_id, "w2@h")
    assert second is not None and second.fence == 2 and second.attempts == 2
    written: list[str] = []
    assert rows.finish(task_id, 1, also=lambda _: written.append("w1"), fence=first.fence) is None
    assert rows.fail(task_id, "synthesis_failed", "late", fence=first.fence) is None
    assert written == [] and status(rows, task_id) is TaskStatus.RUNNING
    # Then w2's own finish ends it, once, with its cache row written in the same transaction
    ending = rows.finish(task_id, 1, also=lambda _: written.append("w2"), fence=second.fence)
    assert ending is not None and ending.row.worker == "w2@h" and written == ["w2"]
    assert rows.finish(task_id, 1, fence=second.fence) is None


def test_release_frees_only_the_silent_workers_rows(rows: TaskRows) -> None:
    # Given rows a silent worker runs and holds received, one it finished, and one a live worker runs
    running = add(rows, TaskStatus.QUEUED)
    assert rows.claim(running, "gone@h") is not None
    received = add(rows, TaskStatus.QUEUED, "gone@h", NOW - timedelta(seconds=5))
    ended = add(rows, TaskStatus.QUEUED)
    assert rows.claim(ended, "gone@h") is not None and rows.finish(ended, 1) is not None
    elsewhere = add(rows, TaskStatus.QUEUED)
    assert rows.claim(elsewhere, "alive@h") is not None
    # When the silent worker's rows are released (its lease still fresh)
    released = rows.release(["gone@h"])
    # Then both rows it held are queued, held by nobody, marked sent now, attempts kept, and
    # returned to send again; the others are untouched; a second release finds nothing
    assert sorted(released) == sorted([(running, "tts.cpu"), (received, "tts.cpu")])
    with rows.db.read() as session:
        for task_id in (running, received):
            row = session.get(TaskRow, task_id)
            assert row is not None and row.status is TaskStatus.QUEUED and row.worker is None
            assert row.dispatched_at == NOW and row.attempts == (1 if task_id == running else 0)
    assert status(rows, ended) is TaskStatus.DONE and status(rows, elsewhere) is TaskStatus.RUNNING
    assert rows.release(["gone@h"]) == []


def test_a_worker_lets_go_only_of_its_own_rows_still_queued(rows: TaskRows) -> None:
    # Given rows recorded as held by this worker: one still queued (its message was sent back), one
    # it claimed since, and one another worker recorded
    sent_back = add(rows, TaskStatus.QUEUED, "w@h", NOW)
    claimed = add(rows, TaskStatus.QUEUED, "w@h", NOW)
    assert rows.claim(claimed, "w@h") is not None
    other = add(rows, TaskStatus.QUEUED, "other@h", NOW)
    # When it lets go of all three
    # Then only its queued row is held by nobody now
    assert rows.let_go([sent_back, claimed, other], "w@h") == 1
    with rows.db.read() as session:
        assert [session.get(TaskRow, i).worker for i in (sent_back, claimed, other)] == [  # type: ignore[union-attr]
            None, "w@h", "other@h"]
