"""The API in process, as gunicorn builds it, for what counts or profiles inside it (the ``heap``
scenario, ``tools/profile_overhead.py``): ``api.create_app`` with its real services (a migrated
SQLite database, an embedded redis-server, the Celery client, the status board) on the tiny voice;
one text already in the cache, and the cpu pool announced as served (no worker process: a miss's
worker part runs inline, ``InProcessApi.miss``)."""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.harness.voice import voice_env

WAV = b"RIFF" + bytes(4000)


def announce_worker(redis_url: str, prefix: str, pool: str = "cpu", ttl_s: int = 600) -> None:
    """Make ``pool`` look served by a live worker that consumes nothing (a heartbeat, no process)."""
    import redis

    from tts_queue.broker.connection import client_url
    from tts_queue.broker.names import RedisKeys

    name = f"idle-{pool}-{uuid.uuid4().hex[:6]}@bench"
    keys = RedisKeys(prefix)
    client = redis.Redis.from_url(client_url(redis_url))
    client.set(keys.worker(name), json.dumps({"name": name, "pool": pool, "providers": {}}), ex=ttl_s)
    client.zadd(keys.workers, {name: time.time()})


@dataclass
class InProcessApi:
    """The app's test client and services, and the text whose audio is cached."""

    client: Any  # flask.testing.FlaskClient
    services: Any  # api.services.Services
    settings: Any  # tts_queue.settings.Settings
    text: str
    redis_socket: Path  # the embedded redis-server's unix socket

    def hit(self) -> None:
        """``POST /v1/tts`` of the cached text: answered from the cache."""
        response = self.client.post("/v1/tts", json={"text": self.text})
        assert response.status_code == 200 and response.get_json()["cache_hit"], response.data

    def worker(self, task_id: str) -> None:
        """What a worker does between the submission and the long-poll (not the API's)."""
        row = self.services.tasks.rows.claim(task_id, "inprocess@bench")
        assert row is not None
        self.services.tasks.cache.put(row.cache_key, "wav", "tiny", WAV, 0.125)
        self.services.tasks.ends.done(task_id, 1, seconds=0.125)

    def miss(self) -> None:
        """A new text submitted, the worker's part inline, then the long-poll and the download."""
        posted = self.client.post("/v1/tts", json={"text": f"A miss {os.urandom(6).hex()}."})
        task_id = posted.get_json()["task_id"]
        self.worker(task_id)
        done = self.client.get(f"/v1/tasks/{task_id}?wait=30").get_json()
        assert done["status"] == "done", done
        assert self.client.get(f"/v1/tasks/{task_id}/audio").status_code == 200


@contextmanager
def in_process_api(folder: Path, text: str) -> Iterator[InProcessApi]:
    """The API over ``folder`` (data, broker), ``text``'s audio cached; stopped after."""
    from api import create_app
    from tts_queue.cli.embedded_redis import EmbeddedRedis
    from tts_queue.migrate import upgrade
    from tts_queue.settings import Settings
    from tts_queue.synthesis.request import build_request

    embedded = EmbeddedRedis(folder / "broker", persist=False)
    embedded.start()
    try:
        settings = Settings.from_env({**voice_env("tiny"), "TTS_DATA_DIR": str(folder / "data"),
                                      "TTS_REDIS_URL": embedded.url})
        upgrade(settings.database_url)
        app = create_app(settings)
        services = app.extensions["tts"]
        key = services.tasks.key_of(build_request({"text": text}, services.registry, settings))
        services.tasks.cache.put(key, "wav", "tiny", WAV, 0.125)
        announce_worker(embedded.url, settings.services.queue_prefix, pool="cpu")
        yield InProcessApi(app.test_client(), services, settings, text, embedded.socket)
    finally:
        embedded.stop()
