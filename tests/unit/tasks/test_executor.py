"""The worker side of a task (``TaskExecutor``) on SQLite and the tiny voice: idempotent under
redelivery, cancellation respected, attempts capped, identical requests synthesized once, and a
full disk never leaves a file or a finished row behind."""

from __future__ import annotations

import errno
import logging
import threading
import time
import uuid
from typing import Any

import pytest
from sqlalchemy import event

from tests.support.executor import Counting, add_task, row
from tts_queue.db import utcnow
from tts_queue.enums import TaskStatus
from tts_queue.errors import PUBLIC_MESSAGES, ModelLoadError, SynthesisError, VoiceFilesMissing
from tts_queue.tables import TaskRow
from tts_queue.tasks.executor import TaskExecutor, WorkerStopping


def test_a_task_runs_once_and_a_redelivery_is_skipped(world: dict[str, Any]) -> None:
    task_id = add_task(world, "Hello there.")
    assert world["executor"].execute(task_id) is TaskStatus.DONE
    # When the same message is delivered again
    assert world["executor"].execute(task_id) is None
    # Then nothing ran twice and the row shows one attempt by this worker
    done = row(world, task_id)
    assert world["synth"].calls == 1
    assert done.status is TaskStatus.DONE and done.attempts == 1 and done.worker == "test-worker"
    assert done.batch_size == 1 and done.finished_at is not None
    assert world["cache"].peek(done.cache_key) is not None


def test_a_cancelled_task_is_never_started(world: dict[str, Any]) -> None:
    task_id = add_task(world, "Never mind.", status=TaskStatus.CANCELLED)
    assert world["executor"].execute(task_id) is None
    assert world["synth"].calls == 0 and row(world, task_id).status is TaskStatus.CANCELLED


def test_a_stopping_worker_claims_nothing_more(world: dict[str, Any]) -> None:
    # Given a worker that has handed back what it held (its shutdown budget spent)
    task_id = add_task(world, "Not here.")
    world["executor"].stopping.set()
    # When a task starts on it, it is refused unclaimed (the task body sends it back)
    with pytest.raises(WorkerStopping):
        world["executor"].execute(task_id)
    shown = row(world, task_id)
    assert shown.status is TaskStatus.QUEUED and shown.attempts == 0 and shown.worker is None
    assert world["synth"].calls == 0


def test_an_unknown_task_id_is_dropped(world: dict[str, Any]) -> None:
    assert world["executor"].execute(str(uuid.uuid4())) is None


def test_a_task_that_keeps_coming_back_fails_after_the_attempts_cap(world: dict[str, Any]) -> None:
    # Given a task already claimed twice (its workers died), with a cap of two attempts
    task_id = add_task(world, "Poison.", status=TaskStatus.RUNNING)
    with world["db"].write() as session:
        held = session.get(TaskRow, task_id)
        assert held is not None
        held.attempts = 2
    # When it is delivered a third time
    status = world["executor"].execute(task_id)
    # Then it fails with a clear code instead of running again
    assert status is TaskStatus.FAILED and world["synth"].calls == 0
    assert row(world, task_id).error_code == "too_many_attempts"


def test_a_voice_that_disappeared_fails_the_task_with_its_code(world: dict[str, Any]) -> None:
    task_id = add_task(world, "Who speaks?")
    with world["db"].write() as session:
        found = session.get(TaskRow, task_id)
        assert found is not None
        found.request = {**found.request, "voice": "gone"}
    assert world["executor"].execute(task_id) is TaskStatus.FAILED
    failed = row(world, task_id)
    # (a 4xx message the project wrote about the request itself stays as it is)
    assert failed.error_code == "unknown_voice" and "'gone'" in (failed.error_message or "")


def test_identical_requests_in_one_worker_are_synthesized_once(world: dict[str, Any]) -> None:
    # Given two tasks with the same request, and the first held inside synthesis
    first, second = add_task(world, "Same words."), add_task(world, "Same words.")
    world["synth"].gate.clear()
    results: dict[str, Any] = {}
    leader = threading.Thread(target=lambda: results.update(a=world["executor"].execute(first)))
    follower = threading.Thread(target=lambda: results.update(b=world["executor"].execute(second)))
    leader.start()
    deadline = time.monotonic() + 20
    while world["synth"].calls == 0:
        assert time.monotonic() < deadline, "the leader never started synthesizing"
        threading.Event().wait(0.001)
    follower.start()
    # When the leader finishes
    world["synth"].gate.set()
    leader.join(20)
    follower.join(20)
    # Then both are done and the model ran once
    assert results == {"a": TaskStatus.DONE, "b": TaskStatus.DONE}
    assert world["synth"].calls == 1


def test_a_full_disk_leaves_no_file_and_no_finished_row(
    world: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a disk that fills up while the audio is written
    import os

    real_fsync = os.fsync

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    task_id = add_task(world, "Too big for the disk.")
    # When the task runs, a storage_full error reaches the caller (Celery retries it until space returns)
    from tts_queue.errors import StorageFull

    with pytest.raises(StorageFull):
        world["executor"].execute(task_id)
    monkeypatch.setattr(os, "fsync", real_fsync)
    # Then no file (not even a temp file) is left, nothing is cached, and the row is not done
    assert [p for p in world["root"].rglob("*") if p.is_file()] == []
    assert row(world, task_id).status is TaskStatus.RUNNING
    # And the retry succeeds
    assert world["executor"].execute(task_id) is TaskStatus.DONE


def test_bulk_queues_run_at_low_priority() -> None:
    # Given the queues of each lane
    from tts_queue.broker.names import queue_name
    from tts_queue.enums import Lane
    from tts_queue.tasks.executor import lane_priority

    # Then book work (the bulk lane) yields to interactive requests inside the worker
    assert lane_priority(queue_name("cpu")) == 0
    assert lane_priority(queue_name("gpu", prefix="tts-x")) == 0
    assert lane_priority(queue_name("cpu", Lane.BULK)) == 1
    assert lane_priority(queue_name("cpu", Lane.MAINTENANCE)) == 0


def test_a_second_delivery_is_skipped_while_another_live_worker_holds_the_lease(
    world: dict[str, Any],
) -> None:
    # Given a task running on another worker that renewed its lease 5 s ago
    from datetime import timedelta

    task_id = add_task(world, "Still busy elsewhere.", status=TaskStatus.RUNNING)
    with world["db"].write() as session:
        held = session.get(TaskRow, task_id)
        assert held is not None
        held.worker, held.claimed_at, held.attempts = "other@host", utcnow() - timedelta(seconds=5), 1
    # When a copy of its message reaches this worker
    # Then it is skipped: nothing runs twice while the holder lives
    assert world["executor"].execute(task_id) is None
    assert world["synth"].calls == 0 and row(world, task_id).worker == "other@host"
    # And once the holder's lease has expired (it died), the task runs here as a new attempt
    with world["db"].write() as session:
        stale = session.get(TaskRow, task_id)
        assert stale is not None
        stale.claimed_at = utcnow() - timedelta(minutes=5)
    assert world["executor"].execute(task_id) is TaskStatus.DONE
    assert row(world, task_id).attempts == 2 and row(world, task_id).worker == "test-worker"


def test_a_full_disk_is_storage_full_and_costs_no_attempt(
    world: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a store whose filesystem is full
    from tts_queue.errors import StorageFull

    task_id = add_task(world, "No room at the inn.")

    def full(*_: Any, **__: Any) -> str:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(world["cache"].store, "write_file", full)
    # When the task runs
    with pytest.raises(StorageFull):
        world["executor"].execute(task_id)
    # Then the row is not failed and the claim's attempt was taken back, so waiting for space
    # never reaches the attempts cap
    waiting = row(world, task_id)
    assert waiting.status is TaskStatus.RUNNING and waiting.attempts == 0


def test_an_unreachable_bucket_waits_like_a_full_disk(
    world: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a store whose bucket cannot be reached
    from tts_queue.errors import StorageUnavailable, is_storage_full

    task_id = add_task(world, "The bucket is down.")

    def down(*_: Any, **__: Any) -> str:
        raise StorageUnavailable("the object store cannot be reached: connection refused")

    monkeypatch.setattr(world["cache"].store, "write_file", down)
    # When the task runs, the error says so (the worker retries after TTS_STORAGE_RETRY_S, for ever)
    with pytest.raises(StorageUnavailable) as raised:
        world["executor"].execute(task_id)
    assert raised.value.code == "storage_unavailable" and not is_storage_full(raised.value)
    # And, as for a full disk, the row waits and the attempt was taken back
    waiting = row(world, task_id)
    assert waiting.status is TaskStatus.RUNNING and waiting.attempts == 0


def test_the_last_part_of_a_local_disk_is_left_to_the_broker_and_database(
    world: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a worker that keeps the last 8 MB of its disk free, on a disk with 100 bytes more free
    from tts_queue.errors import StorageFull

    executor = world["executor"]
    executor.storage_floor_bytes = 8_000_000
    monkeypatch.setattr(world["cache"].store.storage, "free_bytes", lambda: 8_000_100)
    task_id = add_task(world, "This sentence would not fit above the floor.")
    # When a task's audio (a WAV of more than 100 bytes) would go under the floor
    with pytest.raises(StorageFull, match="kept for the broker"):
        executor.execute(task_id)
    # Then nothing was written, the row waits with its attempt taken back
    assert not list(world["root"].rglob("*.wav"))
    assert row(world, task_id).attempts == 0
    # And once there is room it completes
    monkeypatch.setattr(world["cache"].store.storage, "free_bytes", lambda: 50_000_000)
    assert executor.execute(task_id) is TaskStatus.DONE


SECRET = "cannot reach postgresql://tts:hunter2@10.9.8.7/tts (socket /run/private/db.sock)"


@pytest.mark.parametrize(("error", "code"), [
    (RuntimeError(SECRET), "internal_error"),
    (OSError(SECRET), "internal_error"),
], ids=["runtime", "os"])
def test_an_unexpected_error_is_stored_as_its_codes_sentence_and_logged(
    world: dict[str, Any], caplog: pytest.LogCaptureFixture, error: Exception, code: str
) -> None:
    # Given a task whose retries ran out on an error that quotes a URL, a host and a socket path
    task_id = add_task(world, "Unlucky.")
    # When the worker gives up on it
    with caplog.at_level(logging.WARNING, logger="tts_queue.tasks.executor"):
        status = world["executor"].fail_unexpected(task_id, error)
    # Then the row has the stable code and its fixed sentence, nothing of the exception
    failed = row(world, task_id)
    assert status is TaskStatus.FAILED and failed.error_code == code
    assert failed.error_message == PUBLIC_MESSAGES[code]
    # And the log has what happened, the URL's password masked
    assert type(error).__name__ in caplog.text and "/run/private/db.sock" in caplog.text
    assert "tts:***@10.9.8.7" in caplog.text and "hunter2" not in caplog.text


@pytest.mark.parametrize(("error", "code"), [
    (SynthesisError(f"phonemizer failed reading /srv/espeak-ng-data: {SECRET}"), "synthesis_failed"),
    (ModelLoadError(f"cannot read ONNX model /srv/voices/x.onnx: {SECRET}"), "model_load_failed"),
    (VoiceFilesMissing("voice 'x': missing file /srv/private/voices/x.onnx"), "voice_files_missing"),
], ids=["synthesis", "model-load", "files-missing"])
def test_a_synthesis_or_voice_failure_is_stored_as_its_codes_sentence(
    world: dict[str, Any], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
    error: Exception, code: str,
) -> None:
    # Given a model that fails with an error built from an exception's text and paths
    def fail(request: Any, priority: int = 0, on_audio: Any = None, owner: str = "") -> Any:
        raise error

    monkeypatch.setattr(world["synth"], "synthesize", fail)
    task_id = add_task(world, "Say this.")
    # When the task runs, it fails at once (another attempt cannot fix it)
    with caplog.at_level(logging.WARNING, logger="tts_queue.tasks.executor"):
        assert world["executor"].execute(task_id) is TaskStatus.FAILED
    # Then the row has the stable code and its fixed sentence; the log has the details
    failed = row(world, task_id)
    assert failed.error_code == code and failed.error_message == PUBLIC_MESSAGES[code]
    assert "/srv/" in caplog.text and "hunter2" not in caplog.text


def test_a_first_attempt_is_two_write_transactions_and_no_read(world: dict[str, Any]) -> None:
    # Given a queued task never attempted, one whose audio an identical request stored since its
    # submission, and every statement of their database counted
    task_id = add_task(world, "Counted writes.")
    stored = add_task(world, "Stored meanwhile.")
    assert world["executor"].execute(add_task(world, "Stored meanwhile.")) is TaskStatus.DONE
    statements: list[str] = []
    event.listen(world["db"].engine, "before_cursor_execute", lambda *args: statements.append(args[2]))
    # When the first is executed
    assert world["executor"].execute(task_id) is TaskStatus.DONE
    # Then it was claimed and looked up in the cache in one transaction (no read of its attempts
    # before it, no read transaction of its own for the lookup), and ended with its cache row in
    # the finish's transaction
    begins = [s.upper() for s in statements if s.upper().startswith("BEGIN")]
    assert begins == ["BEGIN IMMEDIATE", "BEGIN IMMEDIATE"], begins
    last = statements[statements.index("BEGIN IMMEDIATE", 1):]
    # (the fenced move first, the cache row after it: a claim that lost the row writes none)
    assert [s.split()[0].upper() for s in last if s.split()[0].upper() in ("INSERT", "UPDATE")] == \
        ["UPDATE", "INSERT"]
    entry = world["cache"].peek(row(world, task_id).cache_key)
    assert entry is not None and world["cache"].store.exists(entry.path)
    # And the second, found by that lookup in its claim, ends done as a hit, unsynthesized, in two
    # write transactions too
    calls = world["synth"].calls
    statements.clear()
    assert world["executor"].execute(stored) is TaskStatus.DONE
    assert [s.upper() for s in statements if s.upper().startswith("BEGIN")] == ["BEGIN IMMEDIATE"] * 2
    assert world["synth"].calls == calls and row(world, stored).cache_hit


def test_a_frozen_workers_late_result_is_dropped_unpublished(world: dict[str, Any]) -> None:
    # Given a task this worker is synthesizing when it freezes (held inside synthesis)
    task_id = add_task(world, "Frozen in the middle.")
    world["synth"].gate.clear()
    late: list[TaskStatus | None] = []
    frozen = threading.Thread(target=lambda: late.append(world["executor"].execute(task_id)))
    frozen.start()
    synthesizing(world["synth"])
    # And its heartbeat stopped long enough that its rows were released, and another worker
    # claimed the task and is synthesizing it too
    rows = world["executor"].rows
    assert rows.release(["test-worker"]) == [(task_id, "tts.cpu")]
    other_synth = Counting(world["registry"], world["synth"].engine)
    other_synth.gate.clear()
    other = TaskExecutor(world["cache"], other_synth, world["executor"].ends, "other-worker", None, None)
    current: list[TaskStatus | None] = []
    elsewhere = threading.Thread(target=lambda: current.append(other.execute(task_id)))
    elsewhere.start()
    synthesizing(other_synth)
    # When the frozen worker comes back and finishes its synthesis first
    world["synth"].gate.set()
    frozen.join(20)
    # Then its result is dropped: the row still runs under the other worker's claim, no cache row
    # names its audio, and its file was deleted, never published
    assert late == [None]
    held = row(world, task_id)
    assert (held.status, held.worker, held.fence) == (TaskStatus.RUNNING, "other-worker", 2)
    assert world["cache"].peek(held.cache_key) is None
    assert list(world["root"].rglob("*.wav")) == []
    # And the other worker ends it, once, with its own audio
    other_synth.gate.set()
    elsewhere.join(20)
    assert current == [TaskStatus.DONE]
    entry = world["cache"].peek(held.cache_key)
    assert entry is not None and row(world, task_id).worker == "other-worker"
    files = sorted(p.relative_to(world["root"]).as_posix() for p in world["root"].rglob("*.wav"))
    assert files == [entry.path]


def synthesizing(synth: Counting, timeout: float = 20) -> None:
    """Until ``synth`` was called (a task is inside synthesis)."""
    deadline = time.monotonic() + timeout
    while synth.calls == 0:
        assert time.monotonic() < deadline, "the task never started synthesizing"
        threading.Event().wait(0.001)
