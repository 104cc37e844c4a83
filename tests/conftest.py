"""Shared fixtures: the tiny generated voice, a registry over it, and settings in a temp dir."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest

from tests.tiny_voice import HOP_LENGTH, VoiceFiles, write_voice
from tts_queue.inference import VoiceModel
from tts_queue.registry import VoiceRegistry, discover_specs
from tts_queue.settings import SessionConfig, Settings
from tts_queue.voice import Voice, VoiceSpec

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
