"""Content-addressed audio files on disk, written atomically."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from tts_queue.audio import write_atomic


class AudioStore:
    """Audio files under ``root/<key[:2]>/<key>.<format>``, plus an alignment sidecar."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def relative_path(self, key: str, fmt: str) -> str:
        """Where ``key`` lives, relative to the root (what the database records)."""
        return f"{key[:2]}/{key}.{fmt}"

    def path(self, relative: str) -> Path:
        """Absolute path of a recorded relative path."""
        return self.root / relative

    def write(self, key: str, fmt: str, data: bytes, alignment: dict[str, Any] | None = None) -> str:
        """Store audio (and its alignment) atomically; return the relative path."""
        relative = self.relative_path(key, fmt)
        target = self.path(relative)
        if alignment is not None:
            write_atomic(target.with_suffix(".align.json"), json.dumps(alignment).encode("utf-8"))
        write_atomic(target, data)
        return relative

    def exists(self, relative: str) -> bool:
        """Whether the file is there (a cache row without its file is a miss)."""
        return self.path(relative).is_file()

    def delete(self, relative: str) -> int:
        """Remove a file and its sidecar; return the bytes freed."""
        target = self.path(relative)
        freed = 0
        for path in (target, target.with_suffix(".align.json")):
            try:
                freed += path.stat().st_size
                os.unlink(path)
            except FileNotFoundError:
                pass
        return freed
