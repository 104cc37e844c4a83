"""A broker restart that loses every queued message loses no accepted job, and workers keep
consuming after it. Uses its own embedded redis-server without persistence, so it can be
restarted without touching the machine's Redis."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import redis

from api import create_app
from tests.service.conftest import WorkerProcess, announce_idle_worker, wait_until
from tts_queue.cli.embedded_redis import EmbeddedRedis
from tts_queue.db import Database
from tts_queue.enums import TaskStatus
from tts_queue.migrate import upgrade
from tts_queue.settings import Settings
from tts_queue.tables import TaskRow
from tts_queue.tasks.keys import RedisKeys, queue_name
from workers.factory import make_celery

pytestmark = pytest.mark.integration


def test_restart_of_a_forgetful_broker_loses_no_accepted_job(tmp_path: Path) -> None:
    # Given a broker that keeps nothing on disk, a cpu worker, and no gpu worker yet
    broker = EmbeddedRedis(tmp_path / "broker", persist=False)
    settings = Settings.from_env({
        "TTS_DATA_DIR": str(tmp_path), "TTS_REDIS_URL": broker.start(),
    })
    upgrade(settings.database_url)
    app = make_celery(settings)
    db = Database(settings.database_url)
    client = create_app(settings).test_client()
    cpu = WorkerProcess(settings, "cpu-1@localhost", tmp_path / "cpu.log")
    gpu: WorkerProcess | None = None

    def status(task_id: str) -> TaskStatus:
        with db.read() as session:
            row = session.get(TaskRow, task_id)
            assert row is not None
            return row.status

    try:
        cpu.wait_ready(app)
        # And a task accepted for the gpu pool (whose worker is busy elsewhere: it announces
        # itself but consumes nothing), waiting in the broker
        announce_idle_worker(settings.services.redis_url or "", settings.services.queue_prefix)
        waiting = client.post("/v1/tts", json={"text": "Waiting for a GPU.", "pool": "gpu"})
        waiting_id = waiting.get_json()["task_id"]
        assert waiting.status_code == 202

        # And a long task running on the cpu worker
        long_text = " ".join(f"Sentence number {n} keeps the worker busy." for n in range(1, 13))
        running = client.post("/v1/tts", json={"text": long_text}).get_json()["task_id"]
        wait_until(lambda: status(running) is TaskStatus.RUNNING, timeout=60, interval=0.02)

        # When the broker restarts and forgets every message
        broker.stop()
        broker.start()
        # (workers reconnect within milliseconds and re-declare their bindings, so the database is
        # not empty for long: check that the queued message and the recovery marker are gone)
        forgotten = redis.Redis.from_url(broker.url)
        assert forgotten.llen(queue_name("gpu")) == 0
        assert not forgotten.exists(RedisKeys().broker_marker)

        # Then the worker survives the lost connection and finishes the running task
        wait_until(lambda: status(running) is TaskStatus.DONE, timeout=120, interval=0.2)
        assert cpu.process.poll() is None

        # And it reconnects and serves new requests (once its next heartbeat says it is there, a
        # few seconds: the broker forgot the old one; meanwhile submissions get 503 no_worker)
        def accepted() -> Any:
            response = client.post("/v1/tts", json={"text": "After the restart."})
            assert response.status_code in (202, 503), response.get_json()
            return response.get_json()["task_id"] if response.status_code == 202 else None

        fresh = wait_until(accepted, timeout=60, interval=0.5)
        wait_until(lambda: status(fresh) is TaskStatus.DONE, timeout=120, interval=0.2)

        # And a starting worker dispatches the lost task again from its row, and it completes
        # (the "gpu" worker runs on the CPU here: providers fall back when no GPU is present)
        assert status(waiting_id) is TaskStatus.QUEUED
        gpu = WorkerProcess(settings, "gpu-1@localhost", tmp_path / "gpu.log", TTS_WORKER_POOL="gpu")
        wait_until(lambda: status(waiting_id) is TaskStatus.DONE, timeout=120, interval=0.2)
    finally:
        cpu.stop()
        if gpu is not None:
            gpu.stop()
        broker.stop()
