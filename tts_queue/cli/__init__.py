"""The application shell: the ``tts-queue`` command, its HTTP client and the ``up`` launcher.

Unlike the core, the shell starts processes and speaks HTTP; nothing in the core imports it.
"""

from __future__ import annotations

from tts_queue.cli.main import main

__all__ = ["main"]
