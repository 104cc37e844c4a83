"""Audio values: float samples -> int16 -> WAV/FLAC/OGG bytes, and atomic files on disk."""

from __future__ import annotations

import io
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import soundfile

from tts_queue.errors import UnsupportedFormat

# format name -> (soundfile format, subtype, MIME type)
FORMATS: dict[str, tuple[str, str, str]] = {
    "wav": ("WAV", "PCM_16", "audio/wav"),
    "flac": ("FLAC", "PCM_16", "audio/flac"),
    "ogg": ("OGG", "VORBIS", "audio/ogg"),
}


def check_format(name: str | None, default: str = "wav") -> str:
    """A supported format name (lower case), or ``UnsupportedFormat``."""
    fmt = (name or default).lower()
    if fmt not in FORMATS:
        raise UnsupportedFormat(f"unsupported format {name!r}; use one of {', '.join(FORMATS)}")
    return fmt


def mime_type(fmt: str) -> str:
    """The MIME type served for ``fmt``."""
    return FORMATS[check_format(fmt)][2]


@dataclass(frozen=True)
class Audio:
    """Mono float32 samples in [-1, 1] at a sample rate."""

    samples: npt.NDArray[np.float32]
    sample_rate: int

    @property
    def duration_s(self) -> float:
        """Length in seconds."""
        return len(self.samples) / self.sample_rate

    @classmethod
    def join(
        cls, parts: Sequence[npt.NDArray[np.float32]], sample_rate: int, silence_ms: int
    ) -> Audio:
        """Concatenate sentence audio with ``silence_ms`` of silence between sentences."""
        gap = np.zeros(int(sample_rate * silence_ms / 1000), dtype=np.float32)
        pieces: list[npt.NDArray[np.float32]] = []
        for index, part in enumerate(parts):
            if index:
                pieces.append(gap)
            pieces.append(part.astype(np.float32, copy=False))
        samples = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.float32)
        return cls(samples=samples, sample_rate=sample_rate)

    def to_int16(self) -> npt.NDArray[np.int16]:
        """Clipped 16-bit PCM samples."""
        return (np.clip(self.samples, -1.0, 1.0) * 32767.0).astype(np.int16)

    def encode(self, fmt: str = "wav") -> bytes:
        """The audio as a complete file in ``fmt``."""
        container, subtype, _ = FORMATS[check_format(fmt)]
        buffer = io.BytesIO()
        soundfile.write(buffer, self.to_int16(), self.sample_rate, format=container, subtype=subtype)
        return buffer.getvalue()


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so readers see the whole file or nothing.

    The bytes go to a temporary file in the same directory, are fsynced, then renamed over
    ``path``; a crash or a full disk leaves at most a ``.tmp`` file that is never served.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o644)  # mkstemp's 0600 would make downloaded files private to their writer
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
