"""tts-queue: an asynchronous, batched text-to-speech job system (framework-free core)."""

from __future__ import annotations

__version__ = "0.1.0"
