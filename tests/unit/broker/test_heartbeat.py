"""Heartbeats on a real Redis: live workers are read by name, never by scanning the keyspace."""

from __future__ import annotations

import threading
import uuid
from typing import Any, cast

import pytest
import redis

from tts_queue.broker.connection import client_url
from tts_queue.broker.heartbeat import Heartbeats, WorkerInfo
from tts_queue.broker.names import RedisKeys
from workers import leases as worker_leases
from workers.leases import Leases


def test_live_workers_are_read_by_name_without_a_scan(redis_url: str) -> None:
    # Given two workers' heartbeats, one of which has since expired, among many other keys
    client = redis.Redis.from_url(client_url(redis_url))
    keys = RedisKeys(f"hb-{uuid.uuid4().hex[:8]}")
    heartbeats = Heartbeats(client, keys, ttl_s=30)
    heartbeats.beat(WorkerInfo("alive@host", "cpu", {"tiny": "CPUExecutionProvider"}))
    heartbeats.beat(WorkerInfo("gone@host", "gpu"))
    client.delete(keys.worker("gone@host"))  # its key expired
    client.mset({keys.status(str(n)): "{}" for n in range(200)})
    before = _calls(client, "scan")
    # When the live workers are read
    live = heartbeats.live()
    # Then only the live one is listed, with what it announced, and nothing scanned the keys
    assert live == [WorkerInfo("alive@host", "cpu", {"tiny": "CPUExecutionProvider"})]
    assert _calls(client, "scan") == before
    client.delete(*(keys.status(str(n)) for n in range(200)), keys.workers, keys.worker("alive@host"))


def test_a_worker_whose_heartbeat_expired_is_silent_until_forgotten_or_back(redis_url: str) -> None:
    # Given three workers that beat, two of whose heartbeats have expired since
    client = redis.Redis.from_url(client_url(redis_url))
    keys = RedisKeys(f"hb-{uuid.uuid4().hex[:8]}")
    heartbeats = Heartbeats(client, keys, ttl_s=30)
    for name in ("alive@host", "dead@host", "frozen@host"):
        heartbeats.beat(WorkerInfo(name, "cpu"))
    client.delete(keys.worker("dead@host"), keys.worker("frozen@host"))
    # Then those two are silent
    assert heartbeats.silent() == ["dead@host", "frozen@host"]
    # When the frozen one beats again before it is forgotten, and both are forgotten
    heartbeats.beat(WorkerInfo("frozen@host", "cpu"))
    assert heartbeats.forget("dead@host") and not heartbeats.forget("frozen@host")
    # Then the dead one's name is gone, the one that came back stays listed and live
    assert heartbeats.silent() == []
    assert [w.name for w in heartbeats.live()] == ["alive@host", "frozen@host"]
    client.delete(keys.workers, keys.worker("alive@host"), keys.worker("frozen@host"))


def test_a_beat_never_waits_for_the_lease_bookkeeping_after_it(redis_url: str) -> None:
    # Given a worker whose lease bookkeeping blocks (the database's lock held elsewhere) or fails
    client = redis.Redis.from_url(client_url(redis_url))
    keys = RedisKeys(f"hb-{uuid.uuid4().hex[:8]}")
    heartbeats = Heartbeats(client, keys, ttl_s=1.5)  # a beat (and bookkeeping) every half second
    stop, blocked, released = threading.Event(), threading.Event(), threading.Event()
    calls: list[int] = []

    def bookkeeping() -> None:
        calls.append(len(calls))
        if len(calls) == 1:
            blocked.set()
            released.wait(10)
        elif len(calls) == 2:
            raise RuntimeError("database gone")

    thread = heartbeats.start(lambda: WorkerInfo("slow-db@host", "cpu"), stop, then=bookkeeping)
    try:
        # Then the worker is seen alive while its bookkeeping waits: the beat came first, and the
        # beats go on meanwhile (a worker whose database stalls is not taken for dead)
        assert blocked.wait(5)
        assert [w.name for w in heartbeats.live()] == ["slow-db@host"]
        first = client.zscore(keys.workers, "slow-db@host")
        for _ in range(100):
            if client.zscore(keys.workers, "slow-db@host") != first:
                break
            stop.wait(0.05)
        assert client.zscore(keys.workers, "slow-db@host") != first and not released.is_set()
        # And once it is released, beats and bookkeeping go on, a failure of it included
        released.set()
        for _ in range(200):  # a beat every half second
            if len(calls) >= 3:
                break
            stop.wait(0.05)
        assert len(calls) >= 3 and thread.is_alive()
    finally:
        stop.set()
        released.set()
        thread.join(timeout=5)
        client.delete(keys.workers, keys.worker("slow-db@host"))


def _calls(client: redis.Redis, command: str) -> int:
    stats = cast("dict[str, object]", client.info("commandstats"))
    entry = stats.get(f"cmdstat_{command}")
    return int(entry["calls"]) if isinstance(entry, dict) else 0


def test_a_recorded_task_dropped_unfinished_is_let_go_at_the_next_beat() -> None:
    # Given three messages received and recorded as held, and one received since
    leases = Leases()
    for task_id in ("a", "b", "c"):
        leases.hold(task_id)
    assert leases.take_unrecorded() == ["a", "b", "c"]
    leases.hold("d")
    # When two of the recorded and the unrecorded one leave this worker (sent back over their key's
    # share, or ended), and one of those comes back to it at once (its message delivered here again)
    for task_id in ("a", "b", "d"):
        leases.drop(task_id)
    leases.hold("b")
    # Then the next beat lets go of the row of the one recorded and gone, only (the one back is held
    # again, the unrecorded one's row never said this worker), once unless letting go failed
    let_go = leases.take_let_go()
    assert let_go == ["a"] and leases.take_let_go() == []
    leases.let_go_later(let_go)
    assert leases.take_let_go() == ["a"]


def test_held_tasks_are_recorded_once_unless_recording_failed() -> None:
    # Given three messages received
    leases = Leases()
    for task_id in ("a", "b", "c"):
        leases.hold(task_id)
    # When the beat takes what to record (its UPDATE skips rows a thread claimed meanwhile)
    first = leases.take_unrecorded()
    # Then all three, once: the next beat has nothing to record
    assert first == ["a", "b", "c"] and leases.take_unrecorded() == []
    # And when writing them failed, those still held (not the one finished since) come back
    leases.drop("c")
    leases.unrecord(first)
    assert leases.take_unrecorded() == ["a", "b"] and sorted(leases.held()) == ["a", "b"]


def test_a_lost_broker_connection_lets_go_of_the_tasks_not_running(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a worker holding a running task and two received but not started (an ETA, a countdown)
    leases = Leases()
    for task_id in ("running", "eta", "countdown"):
        leases.hold(task_id)
    monkeypatch.setattr(worker_leases, "running_task_ids", lambda: {"running"})
    step = worker_leases.leases_on_reconnect(leases)
    # When the consumer stops (its connection lost: Celery drops the unstarted ones)
    step.stop(cast(Any, None), cast(Any, None))
    # Then only the running task's lease is still renewed; the others lapse for the sweep
    assert leases.held() == ["running"] and leases.take_unrecorded() == ["running"]


def test_the_worker_app_carries_the_reconnect_step(redis_url: str) -> None:
    # Given the worker's Celery app
    from tests.support import QUEUE_PREFIX
    from tts_queue.settings import Settings
    from workers.factory import make_celery

    app = make_celery(Settings.from_env({"TTS_REDIS_URL": redis_url, "TTS_QUEUE_PREFIX": QUEUE_PREFIX}))
    # Then its consumer blueprint runs the step that lets leases go on a lost connection
    assert any(step.__name__ == "LeasesOnReconnect" for step in app.steps["consumer"])
