"""The voices a scenario speaks with: the real default voice (``default``), the tiny generated voice
(``tiny``, ``tests/support/tiny_voice.py``: its model runs in well under a millisecond, so what is
measured is the service around it; quick forms use it), or any voice by its id (the Kokoro pack's
from ``.venv/voices`` unless ``TTS_VOICES_DIR`` names another folder)."""

from __future__ import annotations

import atexit
import functools
import json
import os
import shutil
import tempfile
from pathlib import Path

from bench.harness.tree import ROOT

# A folder that already holds the tiny voice: an A/B run writes it once, with this checkout's
# generator, and hands it to the runs of both trees.
TINY_VOICES = "TTS_BENCH_TINY_VOICES"


def tiny_voices() -> Path:
    """A folder with the tiny voice and an empty manifest (``TTS_BENCH_TINY_VOICES``, or written
    once per process into a temporary folder)."""
    given = os.environ.get(TINY_VOICES)
    return Path(given) if given else _written()


@functools.cache
def _written() -> Path:
    from tests.support.tiny_voice import write_voice

    folder = Path(tempfile.mkdtemp(prefix="tts-bench-voices-"))
    atexit.register(shutil.rmtree, folder, True)
    write_voice(folder, "tiny")
    (folder / "empty-manifest.json").write_text(json.dumps({"voices": []}), encoding="utf-8")
    return folder


def packs_dir() -> Path:
    """Where the Kokoro voice pack is installed (``TTS_VOICES_DIR``, else ``.venv/voices``, where
    ``scripts/check`` installs it)."""
    return Path(os.environ.get("TTS_VOICES_DIR") or ROOT / ".venv" / "voices")


def voice_env(voice: str) -> dict[str, str]:
    """The settings that make ``voice`` the default one: ``tiny`` as the only voice, ``default``
    as shipped, any other id from the installed packs."""
    if voice == "tiny":
        folder = tiny_voices()
        return {"TTS_VOICES_DIR": str(folder), "TTS_DEFAULT_VOICE": "tiny",
                "TTS_MANIFEST": str(folder / "empty-manifest.json")}
    if voice == "default":
        return {}
    return {"TTS_VOICES_DIR": str(packs_dir()), "TTS_DEFAULT_VOICE": voice}
