"""The whole service on real parts: Flask app, real Redis, a real worker process, SQLite and
PostgreSQL in turn (the module runs once per backend); the tiny voice by default, the real one
(``REAL``) where speech itself is checked."""

from __future__ import annotations

import io
import threading
import time
from typing import Any

import numpy as np
import pytest
import redis
import soundfile
from flask.testing import FlaskClient
from sqlalchemy import select

from api import create_app
from api.slots import SLOTS
from tests.support import WorkerProcess, announce_idle_worker, wait_done, wait_until
from tts_queue.broker.connection import client_url
from tts_queue.db import Database
from tts_queue.settings import PoolSettings, Settings
from tts_queue.synthesis.engine import BatchEngine
from tts_queue.synthesis.registry import VoiceRegistry
from tts_queue.synthesis.request import build_request
from tts_queue.synthesis.synthesizer import Synthesizer
from tts_queue.tables import TaskRow

pytestmark = pytest.mark.integration
REAL = "en_US-joe-medium"

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "It was a bright cold day in April.",
    "Call me Ishmael.",
    "Holmes leaned back in his chair and closed his eyes.",
    "The train was late again this morning.",
    "Please send the report before noon on Friday.",
    "A small boat drifted slowly toward the harbour lights.",
    "Nobody expected the meeting to last three hours.",
    "Rain fell softly on the old stone bridge.",
    "She counted the coins twice before paying.",
    "The library closes at eight in the evening.",
    "Two cups of tea, no sugar, thank you.",
    "Every winter the lake froze solid for weeks.",
    "He whistled a tune nobody could name.",
    "The committee approved the new budget yesterday.",
    "Stars appeared one by one above the quiet valley.",
]


@pytest.fixture(scope="module")
def client(backend_settings: Settings, worker: WorkerProcess) -> FlaskClient:
    """A test client of the real app (real Celery dispatcher) with a worker running."""
    return create_app(backend_settings).test_client()


def test_submit_poll_download(client: FlaskClient) -> None:
    # Given a running service
    # When a client submits text, polls, and downloads
    submitted = client.post("/v1/tts", json={"text": "Hello there. The meeting starts at nine.",
                                             "voice": REAL})
    assert submitted.status_code == 202
    body = submitted.get_json()
    assert body["status"] == "queued" and body["status_url"].endswith(body["task_id"])
    task = wait_done(client, body["task_id"])
    audio = client.get(f"/v1/tasks/{body['task_id']}/audio")

    # Then the task is done and the audio is a WAV of plausible length
    assert task["status"] == "done", task
    assert task["started_at"] and task["finished_at"]
    assert audio.status_code == 200 and audio.mimetype == "audio/wav"
    assert int(audio.headers["Content-Length"]) == len(audio.data)
    samples, rate = soundfile.read(io.BytesIO(audio.data))
    assert rate == 22050
    assert 1.5 < len(samples) / rate < 5.0
    assert abs(task["duration_s"] - len(samples) / rate) < 0.01
    # And a byte range is served as 206 with exactly those bytes
    part = client.get(f"/v1/tasks/{body['task_id']}/audio", headers={"Range": "bytes=0-43"})
    assert part.status_code == 206 and part.data == audio.data[:44]


def test_concurrent_requests_are_batched_and_exact(
    client: FlaskClient, backend_settings: Settings
) -> None:
    # Given 16 different sentences with noise off, submitted at once
    ids = []
    for text in SENTENCES:
        response = client.post("/v1/tts", json={"text": text, "noise_scale": 0, "noise_w": 0})
        assert response.status_code == 202
        ids.append(response.get_json()["task_id"])

    # When they finish
    for task_id in ids:
        assert wait_done(client, task_id)["status"] == "done"

    # Then the worker recorded batches larger than one
    db = Database(backend_settings.database_url)
    with db.read() as session:
        rows = session.scalars(select(TaskRow).where(TaskRow.id.in_(ids))).all()
    sizes = [row.batch_size for row in rows]
    assert all(size is not None and size >= 1 for size in sizes)
    assert max(size for size in sizes if size) > 1, sizes

    # And each task's audio equals its sentence synthesized alone
    registry = VoiceRegistry.from_settings(backend_settings)
    engine = BatchEngine(registry, PoolSettings(max_batch=1)).start()
    alone = Synthesizer(registry, engine)
    try:
        for text, task_id in zip(SENTENCES, ids, strict=True):
            queued = soundfile.read(io.BytesIO(client.get(f"/v1/tasks/{task_id}/audio").data),
                                    dtype="int16")[0]
            request = build_request({"text": text, "noise_scale": 0, "noise_w": 0}, registry,
                                    backend_settings)
            single = alone.synthesize(request).audio.to_int16()
            assert len(queued) == len(single), text
            assert np.max(np.abs(queued.astype(int) - single.astype(int))) <= 64, text
    finally:
        engine.stop()


def test_resubmission_is_a_cache_hit_that_needs_no_worker(
    client: FlaskClient, backend_settings: Settings
) -> None:
    # Given a finished request
    first = client.post("/v1/tts", json={"text": "Cached words are served at once."})
    assert wait_done(client, first.get_json()["task_id"])["status"] == "done"
    broker = redis.Redis.from_url(client_url(str(backend_settings.services.redis_url)))
    queued_before = broker.llen(f"{backend_settings.services.queue_prefix}.cpu")

    # When the same request comes again (text differing only in spacing)
    again = client.post("/v1/tts", json={"text": "  Cached words are   served at once. "})

    # Then it is done at once, nothing was queued, and no worker touched the new task
    body = again.get_json()
    assert again.status_code == 200 and body["status"] == "done" and body["cache_hit"] is True
    assert broker.llen(f"{backend_settings.services.queue_prefix}.cpu") == queued_before
    db = Database(backend_settings.database_url)
    with db.read() as session:
        row = session.get(TaskRow, body["task_id"])
    assert row is not None and row.worker is None and row.attempts == 0
    assert client.get(body["audio_url"]).status_code == 200
    # And read back later, the task still says it was a cache hit (the first one was not)
    assert client.get(f"/v1/tasks/{body['task_id']}").get_json()["cache_hit"] is True
    assert client.get(f"/v1/tasks/{first.get_json()['task_id']}").get_json()["cache_hit"] is False


def test_cache_survives_a_restart(client: FlaskClient, backend_settings: Settings) -> None:
    # Given a finished request
    first = client.post("/v1/tts", json={"text": "This survives a restart."})
    assert wait_done(client, first.get_json()["task_id"])["status"] == "done"

    # When a new app process starts on the same database and data directory
    fresh = create_app(backend_settings).test_client()
    again = fresh.post("/v1/tts", json={"text": "This survives a restart."})

    # Then the request is a hit with the same audio
    assert again.status_code == 200 and again.get_json()["cache_hit"] is True
    original = client.get(f"/v1/tasks/{first.get_json()['task_id']}/audio").data
    assert fresh.get(again.get_json()["audio_url"]).data == original


def test_sync_endpoint_returns_audio(client: FlaskClient) -> None:
    # When a client uses the synchronous form
    response = client.post("/tts", json={"text": "Synchronous speech, please.", "voice": REAL})
    # Then the WAV comes back in the response
    assert response.status_code == 200 and response.mimetype == "audio/wav"
    samples, rate = soundfile.read(io.BytesIO(response.data))
    assert rate == 22050 and len(samples) > rate // 2


def test_a_pool_without_a_live_worker_is_refused_with_no_worker(client: FlaskClient) -> None:
    # Given no worker serves the gpu pool here
    # When a request is routed there
    response = client.post("/v1/tts", json={"text": "Is anybody there?", "pool": "gpu"})
    # Then it is refused at once (instead of queueing for ever), with a hint when to retry
    assert response.status_code == 503, response.get_json()
    assert response.get_json()["error"]["code"] == "no_worker"
    assert response.headers["Retry-After"] == "10"


def test_cancel_a_queued_task_and_its_long_poll_wakes_at_once(backend_settings: Settings) -> None:
    # Given a task routed to the gpu pool, whose only worker consumes nothing, so it stays queued,
    # and an API that re-reads a waiting task's row only every 60 s (only a signal wakes a wait)
    client = create_app(backend_settings.replace(**{"api.wait_recheck_s": 60.0})).test_client()
    url = str(backend_settings.services.redis_url)
    idle = announce_idle_worker(url, backend_settings.services.queue_prefix)
    try:
        response = client.post("/v1/tts", json={"text": "Nobody will run this.", "pool": "gpu"})
    finally:
        redis.Redis.from_url(client_url(url)).delete(idle)
    task_id = response.get_json()["task_id"]
    assert response.status_code == 202
    # And a client long-polling it
    polled: dict[str, Any] = {}

    def poll() -> None:
        polled["body"] = client.get(f"/v1/tasks/{task_id}?wait=30").get_json()
        polled["at"] = time.monotonic()

    slots = client.application.extensions[SLOTS]
    free = slots.free
    poller = threading.Thread(target=poll)
    poller.start()
    wait_until(lambda: slots.free < free, timeout=10)  # the poll holds a slot: it waits now
    # When it is cancelled through the API, then again
    cancelled_at = time.monotonic()
    cancelled = client.delete(f"/v1/tasks/{task_id}")
    again = client.delete(f"/v1/tasks/{task_id}")
    poller.join(40)
    # Then the first cancels it and the second is a clear conflict
    assert cancelled.status_code == 200 and cancelled.get_json()["status"] == "cancelled"
    assert again.status_code == 409
    assert again.get_json()["error"]["code"] == "task_not_cancellable"
    assert client.get(f"/v1/tasks/{task_id}/audio").status_code == 409
    # And the long-poll answered cancelled well before its deadline: the cancel's signal woke it
    # (without it the answer waits for the 30 s deadline's re-read; the bound is far from both, as
    # a loaded CI machine took 1.8 s)
    assert polled["body"]["status"] == "cancelled"
    assert polled["at"] - cancelled_at < 10.0, polled["at"] - cancelled_at


def test_readiness_sees_the_worker(client: FlaskClient, worker: WorkerProcess) -> None:
    response = client.get("/readyz")
    body = response.get_json()
    assert response.status_code == 200, body
    assert body["checks"]["database"] == "ok" and body["checks"]["broker"] == "ok"
    assert body["checks"]["consuming"] == "ok"
    assert worker.name in body["checks"]["workers"]
    # the worker is known from its heartbeat: its pool and where its voices run
    assert worker.name in body["checks"]["pools"]["cpu"] and worker.name in body["checks"]["providers"]
    # and a probe in a loop is answered from the shared report, without checking again
    readiness = client.application.extensions["tts"].readiness
    refreshes: list[object] = []
    refresh = readiness._refresh  # noqa: SLF001 - counted, not changed

    def counted(last: Any) -> Any:
        refreshes.append(last)
        return refresh(last)

    readiness._refresh = counted  # noqa: SLF001
    assert all(client.get("/readyz").status_code == 200 for _ in range(20))
    assert len(refreshes) <= 1  # at most the one the report's 2 s lifetime allows


def test_long_poll_is_woken_by_the_workers_signal(backend_settings: Settings) -> None:
    # Given an API that re-reads a waiting task's row only every 60 s, so that within a 30 s
    # long-poll nothing but the worker's finished signal can wake it before the deadline
    api = create_app(backend_settings.replace(**{"api.wait_recheck_s": 60.0})).test_client()
    task_id = api.post("/v1/tts", json={"text": "Wake me when it is done."}).get_json()["task_id"]
    # When the client long-polls once
    started = time.monotonic()
    body = api.get(f"/v1/tasks/{task_id}?wait=30").get_json()
    waited = time.monotonic() - started
    # Then the single answer says done, and it came long before the 30 s deadline (without the
    # signal it would have come only at the deadline's final re-read)
    assert body["status"] == "done" and body["audio_url"]
    assert waited < 15, f"answered after {waited:.1f} s: the finished signal did not wake the wait"


def test_cancelling_a_running_task_is_a_conflict(client: FlaskClient, backend_settings: Settings) -> None:
    # Given a long task that a worker has started
    text = " ".join(f"Sentence number {n} keeps the worker busy for a while." for n in range(1, 7))
    task_id = client.post("/v1/tts", json={"text": text, "voice": REAL}).get_json()["task_id"]
    db = Database(backend_settings.database_url)

    def running() -> bool:
        with db.read() as session:
            row = session.get(TaskRow, task_id)
            return row is not None and row.status.value == "running"

    wait_until(running, timeout=60, interval=0.01)
    # When a client tries to cancel it
    response = client.delete(f"/v1/tasks/{task_id}")
    # Then it is a 409 conflict with a stable code, and the task still finishes
    assert response.status_code == 409, response.get_json()
    assert response.get_json()["error"]["code"] == "task_not_cancellable"
    assert wait_done(client, task_id)["status"] == "done"
