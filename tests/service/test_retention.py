"""Retention on the real service: the real periodic cleanup task run through a real worker, the
cleanup command beside a running API, 410 for expired audio, keep pins, cache stats."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from api import create_app
from tests.support import QUEUE_PREFIX, served, wait_until
from tts_queue.broker.names import CLEANUP, queue_name
from tts_queue.cli.main import main
from tts_queue.enums import Lane
from tts_queue.migrate import upgrade
from tts_queue.settings import Settings, current_values

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory, redis_url: str,
            voices_dir: Path) -> Iterator[dict[str, Any]]:
    """An API and a worker whose cleanup deletes everything unpinned (ages of zero, no grace)."""
    with served(tmp_path_factory.mktemp("retention"), redis_url, voices_dir, TTS_DELETE_GRACE_S="0",
                worker_env={"TTS_AUDIO_TTL_DAYS": "0", "TTS_TASK_TTL_DAYS": "0"}) as stack:
        env = {k: v for k, v in current_values(stack.settings).items() if v}
        yield {"settings": stack.settings, "env": env, "app": stack.app,
               "client": create_app(stack.settings).test_client()}


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
    service["app"].send_task(CLEANUP, queue=queue_name("", Lane.MAINTENANCE, QUEUE_PREFIX))

    def ran() -> bool:
        return bool(client.get("/v1/cache/stats").get_json()["last_cleanup"] != before)

    wait_until(ran, timeout=60, interval=0.2)
    # Then the finished task rows are gone (404, as any unknown id) and their audio with them; only
    # the audio still pinned (the first test's kept task) remains, file and row
    missing = client.get(f"/v1/tasks/{kept}")
    assert missing.status_code == 404 and missing.get_json()["error"]["code"] == "task_not_found"
    stats = client.get("/v1/cache/stats").get_json()
    assert stats["entries"] == stats["pinned"] == 1
    assert len(list(Path(service["settings"].audio_dir).rglob("*.wav"))) == 1


@pytest.mark.parametrize("storage", ["local", "s3"])
def test_downloads_racing_a_cleanup_never_fail_or_truncate(tmp_path: Path, voices_dir: Path, storage: str,
                                                           request: pytest.FixtureRequest) -> None:
    """Many threads download while the cleanup, with an age and a grace of zero, runs again and again,
    with the audio on disk, then in a bucket."""
    import threading

    from api.services import Services
    from tests.support import FakeQueue
    from tts_queue.db import Database, utcnow
    from tts_queue.enums import TaskStatus
    from tts_queue.storage.cache import AudioCache
    from tts_queue.storage.retention import Cleaner
    from tts_queue.storage.store import AudioStore
    from tts_queue.tables import TaskRow

    # Given 20 finished tasks with 200 KB of audio each
    env = {"TTS_DATA_DIR": str(tmp_path), "TTS_VOICES_DIR": str(voices_dir), "TTS_DELETE_GRACE_S": "0"}
    if storage == "s3":
        env["TTS_STORAGE_URL"] = f"s3://{request.getfixturevalue('s3_bucket')}/race"
    settings = Settings.from_env(env)
    upgrade(settings.database_url)
    services = Services.build(settings, dispatcher=FakeQueue(), watch=FakeQueue())
    client = create_app(settings, services).test_client()
    cache = AudioCache(Database(settings.database_url), AudioStore.from_settings(settings))
    payload = b"RIFF" + bytes(range(256)) * 800
    ids = []
    for n in range(20):
        key = f"{n:064x}"
        cache.put(key, "wav", "tiny", payload, 1.0)
        task_id = str(uuid.uuid4())
        with cache.db.write() as session:
            session.add(TaskRow(id=task_id, status=TaskStatus.DONE, cache_key=key, attempts=1,
                                request={"format": "wav"}, pool="cpu", queue="tts.cpu",
                                created_at=utcnow(), finished_at=utcnow()))
        ids.append(task_id)
    outcomes: dict[str, int] = {"complete": 0, "expired": 0, "truncated": 0, "server_error": 0}
    lock = threading.Lock()
    stop = threading.Event()

    def download() -> None:
        while not stop.is_set():
            for task_id in ids:
                response = client.get(f"/v1/tasks/{task_id}/audio")
                kind = ("complete" if response.status_code == 200 and response.data == payload else
                        "expired" if response.status_code == 410 else
                        "server_error" if response.status_code >= 500 else "truncated")
                with lock:
                    outcomes[kind] += 1

    def resynthesize() -> None:  # identical requests keep storing the audio again
        while not stop.is_set():
            for n in range(20):
                cache.put(f"{n:064x}", "wav", "tiny", payload, 1.0)

    # When 8 threads download, one stores the audio again and again, and the cleanup runs repeatedly
    threads = [threading.Thread(target=download) for _ in range(8)] + [threading.Thread(target=resynthesize)]
    for thread in threads:
        thread.start()
    cleaner = Cleaner(cache, settings.cache)
    runs = 0
    from datetime import timedelta

    while runs < 12:
        cleaner.run(older_than=timedelta(0))
        runs += 1
    stop.set()
    for thread in threads:
        thread.join(timeout=60)
    # Then every download either completed whole or was a clean 410; none failed or was cut short
    print(f"\n{storage}: {runs} cleanups during {sum(outcomes.values())} downloads: {outcomes}")
    assert outcomes["truncated"] == 0 and outcomes["server_error"] == 0
    assert outcomes["complete"] > 0 and outcomes["expired"] > 0
