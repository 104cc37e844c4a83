"""The voices themselves: real-time factors per family and language, the audio estimate against the
real audio, and speech heard back by a recognizer."""

from __future__ import annotations

from bench.scenarios.voices import chat_markdown, estimate, families, hearing, languages, reading  # noqa: F401
