"""Content-addressed audio in a storage (local directory or bucket), written atomically.

Every write of a key gets a name of its own (``ab/<key>.<version>.<format>``): the row says which
version is live, so a cleanup deleting an expired version can never delete a newer one written
for the same key meanwhile (the purge deletes the row it read, with its path, then that file).
Superseded versions are removed by drift repair.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO, TypedDict

from tts_queue.settings import Settings
from tts_queue.storage import open_storage
from tts_queue.storage.backend import Storage


class AlignmentJSON(TypedDict, total=False):
    """An alignment sidecar as read back (``synthesizer.Alignment.to_dict``); a reader takes what
    is there."""

    sentence_starts: list[int]  # samples from the audio's start
    phoneme_samples: list[list[int]]  # per sentence, samples per phoneme id
    phoneme_ids: list[list[int]]

SIDECAR = ".align.json"


class AudioStore:
    """Audio under ``<key[:2]>/<key>.<version>.<format>``, plus an alignment sidecar
    ``<key>.<version>.align.json``."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    @classmethod
    def at(cls, location: str | Path) -> AudioStore:
        """The store at a directory or a storage URL (``s3://bucket/prefix``)."""
        return cls(open_storage(str(location)))

    @classmethod
    def from_settings(cls, settings: Settings, root: Storage | None = None) -> AudioStore:
        """The ``audio/`` part of the storage ``TTS_STORAGE_URL`` names (``root``, when opened)."""
        return cls((root or open_storage(settings.storage_url)).child("audio"))

    @property
    def local_root(self) -> Path | None:
        """The directory on disk, or ``None`` when the audio lives in a bucket."""
        return self.storage.local_root

    @property
    def verifies_hits(self) -> bool:
        """Whether a cache hit checks its file is there: on disk a ``stat``; a bucket is not asked
        (a hit must not cost a storage round trip), a missing object shows at download instead."""
        return self.storage.local_root is not None

    def relative_path(self, key: str, fmt: str) -> str:
        """A new name for audio of ``key``, relative to the root (what the database records)."""
        return f"{key[:2]}/{key}.{secrets.token_hex(4)}.{fmt}"

    def write(self, key: str, fmt: str, data: bytes, alignment: Mapping[str, object] | None = None,
              content_type: str | None = None) -> str:
        """Store audio (and its alignment first) atomically; return the relative path."""
        relative = self.relative_path(key, fmt)
        if alignment is not None:
            self.storage.put(sidecar(relative), json.dumps(alignment).encode("utf-8"), "application/json")
        self.storage.put(relative, data, content_type)
        return relative

    def write_file(self, key: str, fmt: str, source: Path, alignment: Mapping[str, object] | None = None,
                   content_type: str | None = None) -> str:
        """Store a finished audio file made in ``scratch()`` (moved, not copied, on disk; its
        alignment first, one directory fsync for both); return the relative path."""
        relative = self.relative_path(key, fmt)
        beside = {sidecar(relative): json.dumps(alignment).encode("utf-8")} if alignment is not None else None
        self.storage.put_file(relative, source, content_type, beside)
        return relative

    def scratch(self) -> Path:
        """Where audio is made before ``write_file`` stores it (the same filesystem on disk)."""
        return self.storage.scratch()

    def exists(self, relative: str) -> bool:
        """Whether the audio is there (a cache row without its file is a miss)."""
        return self.storage.size(relative) is not None

    def open(self, relative: str, start: int = 0) -> IO[bytes]:
        """A seekable reader of the audio at ``start``; ``FileNotFoundError`` when it is gone."""
        return self.storage.open(relative, start)

    def read(self, relative: str) -> bytes:
        """The whole audio file."""
        return self.storage.read(relative)

    def alignment(self, relative: str) -> AlignmentJSON | None:
        """The alignment sidecar of the audio, or ``None``."""
        try:
            data: AlignmentJSON = json.loads(self.storage.read(sidecar(relative)))
        except (FileNotFoundError, ValueError):
            return None
        return data

    def delete(self, relatives: Iterable[str]) -> None:
        """Remove audio files and their sidecars (missing ones are fine)."""
        self.storage.delete(name for relative in relatives for name in (relative, sidecar(relative)))


def sidecar(relative: str) -> str:
    """The alignment sidecar's name of an audio file."""
    return relative.rsplit(".", 1)[0] + SIDECAR
