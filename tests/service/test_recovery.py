"""At-least-once delivery: a worker killed mid-task loses nothing; the task runs again."""

from __future__ import annotations

from pathlib import Path

import pytest

from api import create_app
from tests.service.conftest import QUEUE_PREFIX, WorkerProcess, flush_queues, wait_until
from tts_queue.db import Database, TaskRow
from tts_queue.migrate import upgrade
from tts_queue.settings import Settings
from tts_queue.status import TaskStatus
from workers.factory import make_celery

pytestmark = pytest.mark.integration

LONG_TEXT = " ".join(f"This is sentence number {n} of a long request." for n in range(1, 11))


def test_worker_crash_mid_task_is_redelivered(tmp_path: Path, redis_url: str) -> None:
    # Given a service whose broker redelivers unacknowledged tasks after 5 seconds
    flush_queues(redis_url)
    settings = Settings.from_env({
        "TTS_DATA_DIR": str(tmp_path), "TTS_REDIS_URL": redis_url,
        "TTS_VISIBILITY_TIMEOUT_S": "5", "TTS_CPU_MAX_BATCH": "1", "TTS_QUEUE_PREFIX": QUEUE_PREFIX,
    })
    upgrade(settings.database_url)
    app = make_celery(settings)
    db = Database(settings.database_url)
    env = {"TTS_VISIBILITY_TIMEOUT_S": "5"}
    first = WorkerProcess(settings, "crash-1@localhost", tmp_path / "w1.log", **env)
    second: WorkerProcess | None = None
    try:
        first.wait_ready(app)
        client = create_app(settings).test_client()

        # When a long task is running and its worker is killed with SIGKILL
        task_id = client.post("/v1/tts", json={"text": LONG_TEXT}).get_json()["task_id"]

        def status() -> TaskStatus:
            with db.read() as session:
                row = session.get(TaskRow, task_id)
                assert row is not None
                return row.status

        wait_until(lambda: status() is TaskStatus.RUNNING, timeout=60)
        first.kill()
        assert status() is TaskStatus.RUNNING

        # And a new worker starts
        second = WorkerProcess(settings, "crash-2@localhost", tmp_path / "w2.log", **env)
        second.wait_ready(app)

        # Then the task is delivered again and finishes, with both attempts counted
        wait_until(lambda: status() is TaskStatus.DONE, timeout=120, interval=0.2)
    finally:
        first.stop()
        if second is not None:
            second.stop()
    with db.read() as session:
        row = session.get(TaskRow, task_id)
        assert row is not None
    assert row.attempts == 2 and row.worker == "crash-2@localhost"
    assert client.get(f"/v1/tasks/{task_id}/audio").status_code == 200
