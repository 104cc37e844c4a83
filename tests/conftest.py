"""Fixtures of every tier: the tiny generated voice, a registry over it, settings in a temp dir, a
moved clock, the real Redis and PostgreSQL of the machine, and a real S3-compatible server.
Helpers that are not fixtures live in ``tests/support/__init__.py``."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest
import redis
import sqlalchemy

from tests.support import free_port, unavailable, wait_until
from tests.support.tiny_voice import HOP_LENGTH, VoiceFiles, write_voice
from tts_queue.cli.embedded_redis import EmbeddedRedis
from tts_queue.settings import PoolSettings, SessionConfig, Settings
from tts_queue.synthesis.engine import BatchEngine
from tts_queue.synthesis.piper_model import PiperModel
from tts_queue.synthesis.registry import VoiceRegistry, discover_specs
from tts_queue.synthesis.voice import PiperVoice, VoiceSpec

CPU_SESSION = SessionConfig(providers="cpu", intra_op_threads=1)


# The pytest hooks (the longest modules first, a test process's quick exit, the timeline) live in
# tests/plugins/, one module each.
pytest_plugins = ["tests.plugins.order", "tests.plugins.quick_exit", "tests.plugins.timeline"]


def load_voice(spec: VoiceSpec) -> PiperVoice:
    """The registry loader the tests use: CPU only, one thread."""
    return PiperVoice.load(spec, CPU_SESSION)


@pytest.fixture(scope="session")
def voices_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory with the single-speaker ``tiny`` and the three-speaker ``multi`` voice.

    Shared by the whole session: tests that damage files write their own copies instead.
    """
    directory = tmp_path_factory.mktemp("voices")
    write_voice(directory, "tiny")
    write_voice(directory, "multi", multi_speaker=True)
    return directory


@pytest.fixture(scope="session")
def tiny_files(voices_dir: Path) -> VoiceFiles:
    """The files of the single-speaker tiny voice."""
    return VoiceFiles("tiny", voices_dir / "tiny.onnx", voices_dir / "tiny.onnx.json")


@pytest.fixture(scope="session")
def tiny_model(tiny_files: VoiceFiles) -> PiperModel:
    """The tiny voice's ONNX session."""
    return PiperModel.load(tiny_files.model_path, CPU_SESSION, hop_length=HOP_LENGTH)


@pytest.fixture(scope="session")
def multi_model(voices_dir: Path) -> PiperModel:
    """The three-speaker tiny voice's ONNX session."""
    return PiperModel.load(voices_dir / "multi.onnx", CPU_SESSION, hop_length=HOP_LENGTH)


@pytest.fixture
def registry(voices_dir: Path) -> VoiceRegistry:
    """A fresh registry of the two tiny voices (discovered, so unverified), default ``tiny``."""
    return VoiceRegistry(discover_specs(voices_dir), loader=load_voice, default="tiny")


@pytest.fixture
def settings(tmp_path: Path, voices_dir: Path) -> Settings:
    """Default settings with the data directory in a temp dir."""
    return Settings.from_env({"TTS_DATA_DIR": str(tmp_path / "data"), "TTS_VOICES_DIR": str(voices_dir)})


def sherlock_epub() -> Path:
    """The real public-domain EPUB of the project's shared data (``TTS_TEST_EPUB`` overrides).

    Looked for beside the checkout (``../shared/data``) and at the project machines' shared folder;
    a laptop without it skips, CI fails (``CI=true``): CI must exercise the real book.
    """
    candidates = [os.environ.get("TTS_TEST_EPUB", ""),
                  str(Path(__file__).resolve().parents[2] / "shared" / "data" / "sherlock-holmes.epub"),
                  "/work/shared/data/sherlock-holmes.epub"]
    for candidate in candidates:
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    unavailable("the Sherlock Holmes EPUB is not here; set TTS_TEST_EPUB to its path")
    raise AssertionError("unreachable")


def voice_packs() -> Path:
    """A voices directory with the Kokoro voice pack installed (``scripts/check`` installs it into
    ``.venv/voices``; ``TTS_TEST_VOICE_PACKS`` overrides): a laptop without it skips, CI fails."""
    from models import MANIFEST_PATH
    from tts_queue.synthesis.kokoro.packs import packs

    default = Path(__file__).resolve().parents[1] / ".venv" / "voices"
    folder = Path(os.environ.get("TTS_TEST_VOICE_PACKS", "") or default)
    if not packs(MANIFEST_PATH)["kokoro"].installed(folder):
        unavailable(f"the Kokoro voice pack is not installed in {folder}: "
                    f"TTS_VOICES_DIR={folder} tts-queue voices --install kokoro")
    return folder


START = datetime(2026, 1, 1, tzinfo=timezone.utc)


class Clock:
    """A clock the test moves (retention and cache take time as a parameter; nothing sleeps)."""

    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def clock() -> Clock:
    """A moved clock starting at ``START``."""
    return Clock()


def key(n: int) -> str:
    """A cache key made from a number."""
    return f"{n:064x}"


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real S3-compatible HTTP server (moto's standalone server, a child process) for this session.

    The ``AWS_*`` variables point boto3 at it, as an operator's would point at MinIO or AWS, so
    in-process code and the worker processes that inherit the environment find it the usual way.
    """
    import subprocess
    import sys

    import requests

    port = free_port()
    log = open(tmp_path_factory.mktemp("moto") / "moto.log", "wb")  # noqa: SIM115 - closed below
    process = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                               stdout=log, stderr=subprocess.STDOUT)
    endpoint = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        if process.poll() is not None:
            pytest.fail(f"moto's S3 server exited; see {log.name}")
        try:
            return requests.get(endpoint, timeout=5) is not None
        except (requests.ConnectionError, requests.Timeout):  # not listening yet, or still starting
            return False

    wait_until(answers, timeout=60, interval=0.1)
    variables = {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
                 "AWS_DEFAULT_REGION": "us-east-1"}
    saved = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    yield endpoint
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    process.terminate()
    process.wait(timeout=10)
    log.close()


@pytest.fixture
def s3_bucket(s3_endpoint: str) -> str:
    """A new, empty bucket on the test S3 server."""
    import boto3

    name = f"tts-{uuid.uuid4().hex[:12]}"
    boto3.client("s3").create_bucket(Bucket=name)
    return name


POSTGRES_URL = os.environ.get("TTS_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Redis: the machine's (``TTS_TEST_REDIS_URL``, default database 15, or 14, 13... for
    the second, third... pytest-xdist worker, since service tests flush their database), else an
    embedded redis-server (never a fake)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    url = os.environ.get("TTS_TEST_REDIS_URL", f"redis://127.0.0.1:6379/{15 - int(worker or 0)}")
    try:
        redis.Redis.from_url(url, socket_timeout=2).ping()
    except redis.RedisError:
        embedded = EmbeddedRedis(tmp_path_factory.mktemp("broker"))
        yield embedded.start()
        embedded.stop()
        return
    yield url


def _admin() -> sqlalchemy.Engine:
    return sqlalchemy.create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT")


def _database_url(name: str) -> str:
    return POSTGRES_URL.rsplit("/", 1)[0] + "/" + name


@pytest.fixture(scope="session")
def postgres_template() -> Iterator[str]:
    """The name of a PostgreSQL database migrated once for this session, that nothing connects to
    afterwards: each test database is a copy of it (``CREATE DATABASE ... TEMPLATE``). Skipped on
    a laptop without PostgreSQL, a failure in CI."""
    from tts_queue.db import make_engine
    from tts_queue.migrate import upgrade

    admin = _admin()
    name = f"tts_tmpl_{uuid.uuid4().hex[:10]}"
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(f"CREATE DATABASE {name}")
    except Exception as exc:  # noqa: BLE001 - any failure means "no PostgreSQL here"
        unavailable(f"PostgreSQL not reachable at {POSTGRES_URL}: {exc}")
    upgrade(_database_url(name))
    make_engine(_database_url(name)).dispose()
    yield name
    with admin.connect() as conn:
        conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    admin.dispose()


def _copy_of(template: str) -> str:
    name = f"tts_test_{uuid.uuid4().hex[:10]}"
    with _admin().connect() as conn:
        conn.exec_driver_sql(f"CREATE DATABASE {name} TEMPLATE {template}")
    return name


def _drop(name: str) -> None:
    with _admin().connect() as conn:
        conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture(scope="session")
def postgres_url(postgres_template: str) -> Iterator[str]:
    """A migrated PostgreSQL database shared by this session's service tests."""
    name = _copy_of(postgres_template)
    yield _database_url(name)
    _drop(name)


@pytest.fixture
def fresh_postgres_url(postgres_template: str) -> Iterator[str]:
    """A migrated PostgreSQL database of one test, copied from the template and dropped after."""
    name = _copy_of(postgres_template)
    yield _database_url(name)
    _drop(name)


@pytest.fixture
def make_engine(registry: VoiceRegistry) -> Iterator[Callable[..., BatchEngine]]:
    """Engines on the tiny voices, stopped after the test."""
    engines: list[BatchEngine] = []

    def make(policy: str = "eager", max_batch: int = 8, window_ms: float = 60_000.0,
             clock: Callable[[], float] | None = None, reg: VoiceRegistry | None = None,
             runners: int = 1, side_by_side: bool = False) -> BatchEngine:
        pool = PoolSettings(policy=policy, max_batch=max_batch, max_padded_phonemes=100_000,
                            window_ms=window_ms, runners=runners)
        engine = BatchEngine(reg or registry, pool, clock=clock or time.monotonic, side_by_side=side_by_side)
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        engine.stop()
