"""Retention on the real service: the real periodic cleanup task run through a real worker, the
cleanup command beside a running API, 410 for expired audio, keep pins, cache stats."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from api import create_app
from tests.service.conftest import QUEUE_PREFIX, WorkerProcess, flush_queues, wait_until
from tts_queue.broker import CLEANUP, MAINTENANCE, queue_name
from tts_queue.cli.main import main
from tts_queue.migrate import upgrade
from tts_queue.settings import Settings
from workers.factory import make_celery

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory, redis_url: str) -> Iterator[dict[str, Any]]:
    """An API and a worker whose cleanup deletes everything unpinned (ages of zero, no grace)."""
    data_dir = tmp_path_factory.mktemp("retention")
    flush_queues(redis_url)
    env = {"TTS_DATA_DIR": str(data_dir), "TTS_REDIS_URL": redis_url, "TTS_QUEUE_PREFIX": QUEUE_PREFIX,
           "TTS_DELETE_GRACE_S": "0"}
    settings = Settings.from_env(env)
    upgrade(settings.database_url)
    app = make_celery(settings)
    worker = WorkerProcess(settings, f"ret-{uuid.uuid4().hex[:6]}@localhost", data_dir / "worker.log",
                           TTS_DELETE_GRACE_S="0", TTS_AUDIO_TTL_DAYS="0", TTS_TASK_TTL_DAYS="0")
    worker.wait_ready(app)
    yield {"settings": settings, "env": env, "app": app, "client": create_app(settings).test_client()}
    worker.stop()


def submit_done(client: Any, text: str, **fields: Any) -> str:
    task = client.post("/v1/tts", json={"text": text, **fields}).get_json()
    body = client.get(f"/v1/tasks/{task['task_id']}?wait=60").get_json()
    assert body["status"] == "done", body
    return str(task["task_id"])


def test_cleanup_beside_a_running_api_expires_audio_at_once_and_keeps_pins(service: dict[str, Any]) -> None:
    client = service["client"]
    # Given two finished tasks, one asked to be kept
    plain = submit_done(client, "This audio may go.")
    kept = submit_done(client, "This audio must stay.", keep=True)
    assert client.get(f"/v1/tasks/{plain}/audio").status_code == 200  # in the API's hot cache now
    # When `tts-queue cleanup --older-than 0s` runs in another process's stead, service running
    assert main(["cleanup", "--older-than", "0s", "--data-dir", str(service["settings"].data_dir)],
                env=service["env"]) == 0
    # Then the running API stops serving the expired audio at once: 410, a JSON error
    gone = client.get(f"/v1/tasks/{plain}/audio")
    assert gone.status_code == 410 and gone.get_json()["error"]["code"] == "audio_expired"
    # And the kept task's audio is still served, its task row still there
    assert client.get(f"/v1/tasks/{kept}/audio").status_code == 200
    # And the same request again is synthesized anew (not a hit on the expired entry)
    again = client.post("/v1/tts", json={"text": "This audio may go."}).get_json()
    assert again["cache_hit"] is False
    # And the stats report the cleanup
    stats = client.get("/v1/cache/stats").get_json()
    assert stats["last_cleanup"]["entries"] >= 1 and stats["pinned"] == 1
    assert {"entries", "bytes", "hits", "misses", "hit_ratio", "pinned"} <= set(stats)


def test_the_periodic_task_through_a_real_worker_and_releasing_a_pin(service: dict[str, Any]) -> None:
    client = service["client"]
    # Given a kept task, then its pin released
    kept = submit_done(client, "Keep me for a while.", keep=True)
    released = client.delete(f"/v1/tasks/{kept}/keep")
    assert released.status_code == 200 and released.get_json()["keep"] is False
    # When the scheduler's cleanup task runs on the worker (ages of zero there)
    before = client.get("/v1/cache/stats").get_json()["last_cleanup"]
    service["app"].send_task(CLEANUP, queue=queue_name("", MAINTENANCE, QUEUE_PREFIX))

    def ran() -> bool:
        return client.get("/v1/cache/stats").get_json()["last_cleanup"] != before

    wait_until(ran, timeout=60, interval=0.2)
    # Then the finished task rows are gone (404, as any unknown id) and their audio with them; only
    # the audio still pinned (the first test's kept task) remains, file and row
    missing = client.get(f"/v1/tasks/{kept}")
    assert missing.status_code == 404 and missing.get_json()["error"]["code"] == "task_not_found"
    stats = client.get("/v1/cache/stats").get_json()
    assert stats["entries"] == stats["pinned"] == 1
    assert len(list(Path(service["settings"].audio_dir).rglob("*.wav"))) == 1
