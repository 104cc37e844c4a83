"""Readiness proves consumption, with real processes: a worker that stays alive (it still answers
pings) but stops taking tasks off its queues makes ``/readyz`` fail within the window."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from api import create_app
from tests.support import QUEUE_PREFIX, WorkerProcess, flush_queues, service_settings, wait_until
from tts_queue.tasks.keys import worker_queues
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
