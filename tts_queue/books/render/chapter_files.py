"""An assembled chapter's files: their names in the books storage (``ChapterFiles``: audio,
captions, and the manifest written last), the manifest's shape, and the scratch files beside the
storage that each is made as before it is moved in (``Scratch``).
"""

from __future__ import annotations

import json
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

from tts_queue.synthesis.formats import audio_format


class ManifestSentence(TypedDict):
    """One sentence of an assembled chapter: its text as shown, where it is, its audio's key."""

    text: str
    start_s: float
    end_s: float
    cache_key: str


class ChapterManifest(TypedDict):
    """An assembled chapter's manifest file (``Scratch.finish_manifest`` writes it)."""

    duration_s: float
    sample_rate: int
    sentences: list[ManifestSentence]


@dataclass(frozen=True)
class ChapterFiles:
    """The names of an assembled chapter's files in the books storage."""

    audio: str
    srt: str
    vtt: str
    manifest: str  # written last: its presence means the chapter is complete

    @classmethod
    def of(cls, digest: str, fmt: str) -> ChapterFiles:
        """The files of the chapter with ``digest``."""
        base = f"chapters/{digest[:2]}/{digest}"
        return cls(base + audio_format(fmt).suffix, base + ".srt", base + ".vtt", base + ".json")


@dataclass(frozen=True)
class Scratch:
    """A chapter's files while they are made, beside the storage (so each is a rename away)."""

    audio: Path
    srt: Path
    vtt: Path
    sentences: Path  # the manifest's sentence list, then copied into the manifest
    manifest: Path

    @classmethod
    def under(cls, directory: Path, files: ChapterFiles) -> Scratch:
        """Unique names in ``directory`` for the files of ``files``."""
        stem = f"{Path(files.manifest).stem}-{uuid.uuid4().hex[:8]}"
        suffixes = (Path(files.audio).suffix, ".srt", ".vtt", ".sentences.json", ".json")
        return cls(*(directory / f"{stem}{suffix}" for suffix in suffixes))

    def finish_manifest(self, total: int, rate: int) -> None:
        """The manifest, exactly ``json.dumps`` of duration, rate and the sentence list."""
        head = f'{{"duration_s": {json.dumps(total / rate)}, "sample_rate": {rate}, "sentences": ['
        with open(self.manifest, "wb") as out, open(self.sentences, "rb") as body:
            out.write(head.encode("utf-8"))
            shutil.copyfileobj(body, out)
            out.write(b"]}")

    def remove(self) -> None:
        """Delete whatever is left (moved files are gone already)."""
        for path in (self.audio, self.srt, self.vtt, self.sentences, self.manifest):
            path.unlink(missing_ok=True)

