"""Readiness proves consumption, with real processes: a worker that stays alive (its heartbeat goes
on) but stops taking tasks off its queues makes ``/readyz`` fail within the window. Liveness is
the heartbeat, never a broadcast ping: readiness answers in milliseconds, and a worker that
only has a heartbeat (it could answer no ping) counts."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
import redis

from api import create_app
from tests.support import (
    QUEUE_PREFIX,
    WorkerProcess,
    announce_idle_worker,
    flush_queues,
    service_settings,
    wait_until,
)
from tts_queue.broker.connection import client_url
from tts_queue.broker.names import RedisKeys, worker_queues
from workers.factory import make_celery

pytestmark = pytest.mark.integration
WINDOW_S = 3


def test_a_worker_that_stops_consuming_makes_readiness_fail(tmp_path: Path, redis_url: str,
                                                           voices_dir: Path) -> None:
    # Given a worker, an API, and a short consumption window
    flush_queues(redis_url)
    settings = service_settings(tmp_path, redis_url, voices_dir, TTS_CONSUMED_WINDOW_S=str(WINDOW_S))
    app = make_celery(settings)
    client = create_app(settings).test_client()
    name = f"ready-{uuid.uuid4().hex[:6]}@localhost"
    worker = WorkerProcess(settings, name, tmp_path / "worker.log")
    try:
        worker.wait_ready(app)
        # And a task it took off its queue, so it is ready
        task = client.post("/v1/tts", json={"text": "Ready when you are."}).get_json()
        assert client.get(f"/v1/tasks/{task['task_id']}?wait=60").get_json()["status"] == "done"
        ready = client.get("/readyz")
        assert ready.status_code == 200, ready.get_json()
        assert ready.get_json()["checks"]["pools"]["cpu"] == [name]

        # When it stops consuming its queues (as workers stuck after a broker restart do)
        for queue in worker_queues("cpu", QUEUE_PREFIX):
            app.control.cancel_consumer(queue, destination=[name], reply=True, timeout=5)
        # And a task waits for it
        client.post("/v1/tts", json={"text": "Nobody takes this one."})

        # Then within the window readiness fails, saying no worker consumes, while the worker
        # is alive and still answers pings
        def not_ready() -> bool:
            return client.get("/readyz").status_code == 503

        wait_until(not_ready, timeout=WINDOW_S + 10, interval=0.25)
        body = client.get("/readyz").get_json()
        assert body["error"]["code"] == "not_ready"
        assert body["checks"]["consuming"].startswith("error")
        assert body["checks"]["workers"] == [name] and worker.process.poll() is None
    finally:
        worker.stop()


def test_readiness_comes_from_heartbeats_and_the_consumed_marker(tmp_path: Path, redis_url: str,
                                                                 voices_dir: Path) -> None:
    # Given a worker known only by its heartbeat (no process: it could answer no ping) and the
    # marker a worker sets when it takes a task off a queue
    flush_queues(redis_url)
    settings = service_settings(tmp_path, redis_url, voices_dir)
    client = create_app(settings).test_client()
    readiness = client.application.extensions["tts"].readiness
    broker = redis.Redis.from_url(client_url(redis_url))
    heartbeat = announce_idle_worker(redis_url, QUEUE_PREFIX, "cpu")
    name = heartbeat.rsplit(":", 1)[-1]
    broker.set(RedisKeys(QUEUE_PREFIX).consumed, "1", ex=60)
    # When readiness is asked, again and again
    first = client.get("/readyz")
    started = time.monotonic()
    again = [client.get("/readyz") for _ in range(100)]
    per_call = (time.monotonic() - started) / len(again)
    # Then it is ready, with the worker in its pool, and answers in well under a millisecond or
    # so each (no ping waits for replies; the checks ran once)
    body = first.get_json()
    assert first.status_code == 200, body
    assert body["checks"]["workers"] == [name] and body["checks"]["pools"] == {"cpu": [name], "gpu": []}
    assert all(r.status_code == 200 for r in again) and per_call < 0.05

    # When the worker's heartbeat goes (it died) and the report is refreshed
    broker.delete(heartbeat)
    readiness.checks_ttl_s = 0.0
    # Then readiness fails on the workers, saying so without any exception text
    gone = client.get("/readyz")
    assert gone.status_code == 503
    assert gone.get_json()["checks"]["workers"] == "error: no live worker (no heartbeat)"
