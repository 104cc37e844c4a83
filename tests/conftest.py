"""Shared fixtures: the tiny generated voice, a registry over it, and settings in a temp dir."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest

from tests.tiny_voice import HOP_LENGTH, VoiceFiles, write_voice
from tts_queue.settings import SessionConfig, Settings
from tts_queue.synthesis.inference import VoiceModel
from tts_queue.synthesis.registry import VoiceRegistry, discover_specs
from tts_queue.synthesis.voice import Voice, VoiceSpec

CPU_SESSION = SessionConfig(providers="cpu", intra_op_threads=1)


def load_voice(spec: VoiceSpec) -> Voice:
    """The registry loader the tests use: CPU only, one thread."""
    return Voice.load(spec, CPU_SESSION)


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
def tiny_model(tiny_files: VoiceFiles) -> VoiceModel:
    """The tiny voice's ONNX session."""
    return VoiceModel.load(tiny_files.model_path, CPU_SESSION, hop_length=HOP_LENGTH)


@pytest.fixture(scope="session")
def multi_model(voices_dir: Path) -> VoiceModel:
    """The three-speaker tiny voice's ONNX session."""
    return VoiceModel.load(voices_dir / "multi.onnx", CPU_SESSION, hop_length=HOP_LENGTH)


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
    import os

    candidates = [os.environ.get("TTS_TEST_EPUB", ""),
                  str(Path(__file__).resolve().parents[2] / "shared" / "data" / "sherlock-holmes.epub"),
                  "/work/shared/data/sherlock-holmes.epub"]
    for candidate in candidates:
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    message = "the Sherlock Holmes EPUB is not here; set TTS_TEST_EPUB to its path"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message)
    pytest.skip(message)


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
    import os
    import socket
    import subprocess
    import sys
    import time

    import requests

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = open(tmp_path_factory.mktemp("moto") / "moto.log", "wb")  # noqa: SIM115 - closed below
    process = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                               stdout=log, stderr=subprocess.STDOUT)
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            requests.get(endpoint, timeout=1)
            break
        except requests.ConnectionError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                pytest.fail(f"moto's S3 server did not start; see {log.name}")
            time.sleep(0.1)
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
    import uuid

    import boto3

    name = f"tts-{uuid.uuid4().hex[:12]}"
    boto3.client("s3").create_bucket(Bucket=name)
    return name
