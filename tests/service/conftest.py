"""Fixtures for the service tests: a migrated service on SQLite and on PostgreSQL, and one real
worker process for it.

Integration tests run against the machine's Redis (``TTS_TEST_REDIS_URL``) or, when none answers,
an embedded redis-server; PostgreSQL (``TTS_TEST_POSTGRES_URL``) is skipped on a laptop without it
but fails under CI. Helpers (worker processes, private servers, waiting) are in ``tests/support/__init__.py``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import WorkerProcess, flush_queues, hooked, service_settings
from tts_queue.settings import Settings


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def backend_settings(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, redis_url: str,
    voices_dir: Path,
) -> Settings:
    """Settings for a whole service on one backend: temp data dir, real Redis, migrated database,
    the tiny voice by default (the service's mechanics), the real one when a test names it (speech
    itself)."""
    data_dir = tmp_path_factory.mktemp(f"data-{request.param}")
    flush_queues(redis_url)
    env: dict[str, str] = {"TTS_CPU_MAX_BATCH": "8", "TTS_SYNC_WAIT_S": "60",
                           "TTS_VOICES_DIR": str(voices_dir), "TTS_DEFAULT_VOICE": "tiny"}
    if request.param == "postgres":
        env["TTS_DATABASE_URL"] = request.getfixturevalue("postgres_url")
    return service_settings(data_dir, redis_url, None, **env)


@pytest.fixture(scope="module")
def worker(
    backend_settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WorkerProcess]:
    """One running worker for the module's backend."""
    from workers.factory import make_celery

    log_path = tmp_path_factory.mktemp("logs") / "worker.log"
    # model calls of 150 ms: the tiny voice then takes long enough for concurrent requests to batch
    process = WorkerProcess(backend_settings, f"test-{uuid.uuid4().hex[:6]}@localhost", log_path,
                            **hooked(TTS_TEST_BATCH_DELAY_MS="150"))
    process.wait_ready(make_celery(backend_settings))
    yield process
    process.stop()
