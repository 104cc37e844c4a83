"""``python -m wyoming_server``: the Wyoming server as a process of its own, its settings read
from the environment (``tts-queue wyoming`` and ``tts-queue up --wyoming-port`` start it)."""

from __future__ import annotations

import logging
import os
import sys

from tts_queue.errors import TTSQueueError
from tts_queue.redact import redacted
from tts_queue.settings import Settings
from wyoming_server.listener import serve


def main() -> int:
    """Serve until SIGTERM or Ctrl-C (0), or refuse to start with the reason (2)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return serve(Settings.from_env(os.environ))
    except TTSQueueError as exc:
        print(f"error [{exc.code}]: {redacted(exc.message)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
