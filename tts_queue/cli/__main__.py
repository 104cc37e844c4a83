"""``python -m tts_queue.cli``: the ``tts-queue`` command."""

from __future__ import annotations

import sys

from tts_queue.cli.main import main

sys.exit(main())
