"""The voice manifest: which voices tts-queue knows, where their files are, and their digests."""

from __future__ import annotations

from pathlib import Path

MANIFEST_PATH = Path(__file__).with_name("voices.json")
