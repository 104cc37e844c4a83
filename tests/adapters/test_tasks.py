"""The Celery task bodies, called directly (adapter tier): retry, failure after the retry budget,
the recovery sweep and the cleanup task. The runtime is the worker's real one
over SQLite and the real Redis, with a fake executor."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
import redis
from celery import Task as CeleryTask
from celery import signals

from tests.support import local, migrate
from tts_queue.broker.connection import client_url
from tts_queue.broker.names import CLEANUP, REQUEUE, SYNTHESIZE, RedisKeys, queue_name
from tts_queue.db import utcnow
from tts_queue.enums import Lane, TaskStatus
from tts_queue.fairness.threads import KeyShares, OverShare, Parked, Work
from tts_queue.settings import Settings
from tts_queue.tables import TaskRow
from tts_queue.tasks.executor import TaskExecutor
from workers.factory import make_celery
from workers.recovery import broker_messages
from workers.services import context_of
from workers.signals import resend


@dataclass
class FakeExecutor:
    """Fails the first ``failures`` calls, then finishes; records what it was asked."""

    failures: int = 0
    calls: list[tuple[str, bool]] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    worker_name: str = "fake@worker"
    shares: KeyShares | None = None

    def execute(self, task_id: str, worker_name: str | None = None, stream: bool = False) -> TaskStatus:
        self.calls.append((task_id, stream))
        if len(self.calls) <= self.failures:
            raise RuntimeError(f"transient failure {len(self.calls)}")
        return TaskStatus.DONE

    def fail_unexpected(self, task_id: str, exc: BaseException) -> TaskStatus:
        self.failed.append((task_id, str(exc)))
        return TaskStatus.FAILED


@pytest.fixture
def world(tmp_path: Path, redis_url: str) -> Iterator[dict[str, Any]]:
    prefix = f"tts-tasks-{uuid.uuid4().hex[:8]}"
    settings = migrate(Settings.from_env({"TTS_DATA_DIR": str(tmp_path), "TTS_REDIS_URL": redis_url,
                                          "TTS_QUEUE_PREFIX": prefix, "TTS_MAX_RETRIES": "2",
                                          "TTS_AUDIO_TTL_DAYS": "7", "TTS_DELETE_GRACE_S": "0"}))
    app = make_celery(settings)
    app.conf.task_always_eager = True  # retries run in place, no broker round trip
    holder = context_of(app).holder
    real = holder.get()  # the worker's real runtime over this database and Redis, its executor a fake
    executor = FakeExecutor()
    holder._runtime = replace(real, executor=cast(TaskExecutor, executor))
    client = redis.Redis.from_url(client_url(redis_url))
    yield {"app": app, "core": real.wiring, "executor": executor, "redis": client, "keys": RedisKeys(prefix),
           "db": real.wiring.db, "prefix": prefix}
    real.engine.stop()
    for key in client.scan_iter(match=f"{prefix}*"):
        client.delete(key)


def test_the_synthesize_body_hands_the_task_to_the_executor(world: dict[str, Any]) -> None:
    # Given a task that runs fine
    task_id = str(uuid.uuid4())
    # When the synthesize task body runs, streamed or not
    result = world["app"].tasks[SYNTHESIZE].apply(args=[task_id]).get()
    streamed = world["app"].tasks[SYNTHESIZE].apply(args=[task_id], kwargs={"stream": True}).get()
    # Then the executor ran it each time as asked (its end's effects are ``TaskEnds``') and it
    # reports the status
    assert result == streamed == "done"
    assert world["executor"].calls == [(task_id, False), (task_id, True)]


def test_an_unexpected_error_is_retried_then_succeeds(world: dict[str, Any]) -> None:
    # Given an executor that fails twice (the retry budget is 2)
    world["executor"].failures = 2
    task_id = str(uuid.uuid4())
    # When the task runs
    result = world["app"].tasks[SYNTHESIZE].apply(args=[task_id]).get()
    # Then it ran three times, finished, and was never marked failed
    assert len(world["executor"].calls) == 3 and result == "done"
    assert world["executor"].failed == []


def test_after_the_retry_budget_the_row_is_failed_once(world: dict[str, Any]) -> None:
    # Given an executor that always fails
    world["executor"].failures = 100
    task_id = str(uuid.uuid4())
    # When the task runs
    world["app"].tasks[SYNTHESIZE].apply(args=[task_id])
    # Then after 1 + 2 retries the failure is recorded once, with the error (its end is the
    # executor's: ``fail_unexpected`` goes through ``TaskEnds``)
    assert len(world["executor"].calls) == 3
    assert world["executor"].failed == [(task_id, "transient failure 3")]


def test_the_cleanup_task_deletes_what_was_unused_for_the_configured_age(world: dict[str, Any]) -> None:
    # Given one entry last used 8 days ago and one used an hour ago (TTS_AUDIO_TTL_DAYS=7)
    cache = world["core"].cache
    now = utcnow()
    for key, age in (("a" * 64, timedelta(days=8)), ("b" * 64, timedelta(hours=1))):
        cache.clock = lambda age=age: now - age
        cache.put(key, "wav", "tiny", b"RIFF....", 1.0)
    cache.clock = utcnow
    # When the cleanup task body runs
    report = world["app"].tasks[CLEANUP].apply().get()
    # Then only the stale entry is gone, file and row, and the report says so
    assert report["expired_by_age"] == 1 and report["entries"] == 1 and report["bytes"] == 8
    assert cache.peek("a" * 64) is None and cache.peek("b" * 64) is not None
    assert not any(local(cache).root.rglob(f"{'a' * 64}*"))



def test_the_recovery_task_resends_queued_rows_when_the_broker_forgot(world: dict[str, Any]) -> None:
    # Given a queued row and a broker with no marker (it lost its data)
    task_id = str(uuid.uuid4())
    queue = queue_name("cpu", prefix=world["prefix"])
    with world["db"].write() as session:
        session.add(TaskRow(id=task_id, status=TaskStatus.QUEUED, cache_key="k" * 64, request={},
                            pool="cpu", queue=queue, created_at=utcnow(), attempts=0))
    # When the recovery task runs twice
    first = world["app"].tasks[REQUEUE].apply().get()
    second = world["app"].tasks[REQUEUE].apply().get()
    # Then the row was sent to its queue once (the marker is set after the first sweep)
    assert (first, second) == (1, 0)
    assert world["redis"].llen(queue) == 1
    assert world["redis"].exists(world["keys"].broker_marker)


def test_storage_waits_send_the_task_again_instead_of_counting_a_retry() -> None:
    """Synthesis and chapter assembly alike: a full disk or an unreachable bucket is waited out."""
    import errno

    from tts_queue.errors import StorageUnavailable
    from workers.tasks import resend_when_storage_blocked

    sent: list[Any] = []

    class FakeTask:
        def signature_from_request(self, countdown: float) -> Any:
            sent.append(countdown)
            return SimpleNamespace(apply_async=lambda: sent.append("sent"))

    def Task() -> CeleryTask[Any, Any]:  # noqa: N802 - reads like the class it stands for
        return cast("CeleryTask[Any, Any]", FakeTask())

    assert resend_when_storage_blocked(Task(), StorageUnavailable("bucket down"), "book b chapter 1", 7.0)
    full = OSError(errno.ENOSPC, "No space left on device")
    assert resend_when_storage_blocked(Task(), full, "task t", 7.0)
    assert sent == [7.0, "sent", 7.0, "sent"]
    assert not resend_when_storage_blocked(Task(), ValueError("a bug"), "task t", 7.0) and len(sent) == 4


def test_the_broker_view_keeps_a_waiting_copy_and_the_latest_delivery(redis_url: str) -> None:
    """A task sent again after its worker died can be in the broker twice: an old delivery in
    kombu's unacked hash beside a new copy waiting or delivered later."""
    import json as json_lib

    client = redis.Redis.from_url(client_url(redis_url))
    queue, index, unacked = f"q-{uuid.uuid4().hex[:8]}", "unacked_index", "unacked"

    def message(task_id: str) -> str:
        return json_lib.dumps({"headers": {"id": task_id, "task": SYNTHESIZE}})

    saved = (client.zrange(index, 0, -1, withscores=True), client.hgetall(unacked))
    client.delete(index, unacked)
    try:
        # Given task a delivered twice (at 100 and 200) and task b delivered once and waiting again
        client.hset(unacked, mapping={"t1": json_lib.dumps([json_lib.loads(message("a")), "", ""]),
                                      "t2": json_lib.dumps([json_lib.loads(message("a")), "", ""]),
                                      "t3": json_lib.dumps([json_lib.loads(message("b")), "", ""])})
        client.zadd(index, {"t1": 100.0, "t2": 200.0, "t3": 50.0})
        client.rpush(queue, message("b"))
        # Then a is known by its latest delivery and b as waiting
        assert broker_messages(client, [queue]) == {"a": 200.0, "b": None}
    finally:
        client.delete(index, unacked, queue)
        if saved[0]:
            client.zadd(index, dict(cast(list[tuple[str, float]], saved[0])))
        if saved[1]:
            client.hset(unacked, mapping=cast(Any, saved[1]))


@dataclass
class OverShareExecutor(FakeExecutor):
    """Finds every task over its key's share: parks it, as the real executor does."""

    def execute(self, task_id: str, worker_name: str | None = None, stream: bool = False) -> TaskStatus:
        assert self.shares is not None
        self.shares.park(Parked(task_id, "tts.cpu", stream, "alice", Work.LONG))
        raise OverShare("key alice holds its share")


def test_a_task_over_its_keys_share_waits_on_the_worker_and_sends_no_message(
    world: dict[str, Any], monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given an executor that finds the task's key at its share
    executor = OverShareExecutor(shares=KeyShares(concurrency=4, reserve=2))
    holder = context_of(world["app"]).holder
    holder._runtime = replace(holder.get(), executor=cast(TaskExecutor, executor))
    sent: list[Any] = []
    monkeypatch.setattr(CeleryTask, "signature_from_request", lambda *a, **k: sent.append(a))
    leases = context_of(world["app"]).leases
    task_id = str(uuid.uuid4())
    leases.hold(task_id)  # received
    # When the task body runs
    result = world["app"].tasks[SYNTHESIZE].apply(args=[task_id]).get()
    # Then it ended unclaimed, nothing was sent to the broker, and it waits on the worker
    assert result is None and sent == []
    assert executor.shares is not None and executor.shares.waits(task_id)
    # And as its body returns, its lease is still held (it is this worker's until sent on), where
    # a task that ended lets its go
    ended = str(uuid.uuid4())
    leases.hold(ended)
    for finished in (task_id, ended):
        signals.task_postrun.send(sender=world["app"].tasks[SYNTHESIZE], task_id=finished, state="SUCCESS")
    assert task_id in leases.held() and ended not in leases.held()


def test_a_task_sent_on_goes_back_to_its_queue_and_the_worker_lets_it_go(world: dict[str, Any]) -> None:
    # Given a task waiting on the worker, its lease held
    context = context_of(world["app"])
    task_id = str(uuid.uuid4())
    queue = queue_name("cpu", Lane.INTERACTIVE, world["prefix"])
    context.leases.hold(task_id)
    # When it is sent on
    resend(context.holder, context.leases, Parked(task_id, queue, True, "alice", Work.LONG))
    # Then its message waits on its queue, and the worker holds it no more
    assert broker_messages(world["redis"], [queue]).get(task_id, "absent") is None
    assert task_id not in context.leases.held()
