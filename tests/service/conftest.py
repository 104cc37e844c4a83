"""Fixtures for the service tests: real Redis, real databases, real worker processes.

Integration tests run against the machine's Redis (``TTS_TEST_REDIS_URL``, default
``redis://127.0.0.1:6379/15``) or, when none answers, an embedded redis-server started here.
PostgreSQL (``TTS_TEST_POSTGRES_URL``) is skipped on a laptop without it but fails under CI.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import sqlalchemy

from tts_queue.cli.embedded_redis import EmbeddedRedis
from tts_queue.migrate import upgrade
from tts_queue.settings import Settings
from tts_queue.tasks.connection import client_url

IN_CI = os.environ.get("CI", "").lower() == "true"
ROOT = Path(__file__).resolve().parents[2]
# Queues unique to this test run, so a stray worker of another run never takes our tasks.
QUEUE_PREFIX = f"tts-test-{uuid.uuid4().hex[:8]}"
POSTGRES_URL = os.environ.get(
    "TTS_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)


def unavailable(reason: str) -> None:
    """Skip on a laptop, fail in CI: CI must exercise every real service."""
    if IN_CI:
        pytest.fail(reason)
    pytest.skip(reason)


def wait_until(check: Callable[[], Any], timeout: float = 60.0, interval: float = 0.05) -> Any:
    """Poll ``check`` until it returns something truthy, or fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"condition not met within {timeout} s: {check}")
        time.sleep(interval)


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Redis: the machine's, else an embedded redis-server (never a fake)."""
    url = os.environ.get("TTS_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
    try:
        redis.Redis.from_url(url, socket_timeout=2).ping()
    except redis.RedisError:
        embedded = EmbeddedRedis(tmp_path_factory.mktemp("broker"))
        yield embedded.start()
        embedded.stop()
        return
    yield url


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A fresh PostgreSQL database for this test session, dropped afterwards."""
    admin = sqlalchemy.create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT")
    name = f"tts_test_{uuid.uuid4().hex[:10]}"
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(f"CREATE DATABASE {name}")
    except Exception as exc:  # noqa: BLE001 - any failure means "no PostgreSQL here"
        unavailable(f"PostgreSQL not reachable at {POSTGRES_URL}: {exc}")
    yield POSTGRES_URL.rsplit("/", 1)[0] + "/" + name
    with admin.connect() as conn:
        conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    admin.dispose()


def flush_queues(url: str) -> None:
    """Empty the test Redis database (queues, unacked messages, kombu bindings)."""
    redis.Redis.from_url(client_url(url)).flushdb()


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def service_settings(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, redis_url: str
) -> Settings:
    """Settings for a whole service on one backend: temp data dir, real Redis, migrated DB."""
    data_dir = tmp_path_factory.mktemp(f"data-{request.param}")
    if request.param == "postgres":
        db_url = request.getfixturevalue("postgres_url")
    else:
        db_url = f"sqlite:///{data_dir / 'tts.db'}"
    flush_queues(redis_url)
    settings = Settings.from_env({
        "TTS_DATA_DIR": str(data_dir), "TTS_REDIS_URL": redis_url, "TTS_DATABASE_URL": db_url,
        "TTS_CPU_MAX_BATCH": "8", "TTS_SYNC_WAIT_S": "60", "TTS_QUEUE_PREFIX": QUEUE_PREFIX,
    })
    upgrade(settings.database_url)
    return settings


def settings_env(settings: Settings, **extra: str) -> dict[str, str]:
    """The environment a child process needs to share ``settings``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TTS_")}
    env.update({
        "TTS_DATA_DIR": str(settings.data_dir),
        "TTS_REDIS_URL": str(settings.services.redis_url),
        "TTS_DATABASE_URL": settings.database_url,
        "TTS_CPU_MAX_BATCH": str(settings.routing.cpu.max_batch),
        "TTS_QUEUE_PREFIX": settings.services.queue_prefix,
        "PYTHONPATH": str(ROOT),
    })
    env.update(extra)
    return env


class WorkerProcess:
    """A real ``celery worker`` child process (cpu pool unless ``TTS_WORKER_POOL`` says gpu)."""

    new_session = False  # GroupWorkerProcess leads its own process group

    def __init__(self, settings: Settings, name: str, log_path: Path, **env: str) -> None:
        from tts_queue.cli.launcher import worker_command

        self.name = name
        self.settings = settings
        self.log = open(log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            worker_command(env.get("TTS_WORKER_POOL", "cpu"), 16, name, settings.services.queue_prefix),
            env=settings_env(settings, **env), cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT,
            start_new_session=self.new_session,
        )

    def wait_ready(self, app: Any, timeout: float = 90.0) -> None:
        """Until the worker answers a ping (it has loaded and warmed its voice)."""
        def answered() -> bool:
            if self.process.poll() is not None:
                pytest.fail(f"worker exited with {self.process.returncode}; see {self.log.name}")
            return bool(app.control.ping(destination=[self.name], timeout=0.5))

        wait_until(answered, timeout=timeout, interval=0.2)

    def kill(self) -> None:
        """SIGKILL: a crash, no clean shutdown."""
        self.process.kill()
        self.process.wait(timeout=10)

    def stop(self) -> None:
        """SIGTERM and wait (warm shutdown)."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.log.close()


@pytest.fixture(scope="module")
def worker(
    service_settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WorkerProcess]:
    """One running worker for the module's backend."""
    from workers.factory import make_celery

    log_path = tmp_path_factory.mktemp("logs") / "worker.log"
    process = WorkerProcess(service_settings, f"test-{uuid.uuid4().hex[:6]}@localhost", log_path)
    process.wait_ready(make_celery(service_settings))
    yield process
    process.stop()


def python() -> str:
    """The interpreter running the tests (the project's venv)."""
    return sys.executable


def announce_idle_worker(redis_url: str, prefix: str, pool: str = "gpu", ttl_s: int = 600) -> str:
    """Make a pool look served by a live worker that consumes nothing (a heartbeat, no process):
    submissions to it are accepted and stay ``queued``. Returns the heartbeat key."""
    import json

    from tts_queue.tasks.keys import RedisKeys

    name = f"idle-{pool}-{uuid.uuid4().hex[:6]}@test"
    key = RedisKeys(prefix).worker(name)
    redis.Redis.from_url(client_url(redis_url)).set(
        key, json.dumps({"name": name, "pool": pool, "providers": {}}), ex=ttl_s)
    return key


def process_group(pgid: int) -> list[int]:
    """The pids whose process group is ``pgid`` (read from ``/proc``; zombies included)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # the process ended while we looked
        if int(fields[2]) == pgid:
            members.append(int(stat.parent.name))
    return members


class GroupWorkerProcess(WorkerProcess):
    """A worker leading its own process group (its own session, as a supervisor or a container
    runtime starts it), so a crash can take the whole group at once: ``kill_group``."""

    new_session = True

    def kill_group(self) -> list[int]:
        """SIGKILL every process of the worker's group at once (an OOM kill, a power cut) and wait
        until none is left; return the pids the group had."""
        import signal

        members = process_group(self.process.pid)
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)
        wait_until(lambda: not process_group(self.process.pid), timeout=10)
        return members
