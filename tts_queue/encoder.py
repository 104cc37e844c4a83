"""Audio to compressed files through PyAV (FFmpeg's libraries, bundled in the ``av`` wheel).

One encoder for ordinary requests and books alike: ``encode`` turns an ``Audio`` into the bytes of
an MP3, Ogg Opus, AAC (ADTS or M4A), FLAC or WAV file; ``write_m4b`` writes an audiobook (AAC in
MP4) with one chapter mark per chapter. No system ffmpeg is needed.
"""

from __future__ import annotations

import io
import itertools
import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np
from av.audio.stream import AudioStream

from tts_queue.audio import Audio
from tts_queue.errors import InvalidRequest, UnsupportedFormat

CHUNK_SAMPLES = 16384


@dataclass(frozen=True)
class AudioFormat:
    """How one output format is written: container, codec, MIME type, suffix, default bit rate."""

    name: str
    container: str
    codec: str
    mime_type: str
    suffix: str
    bit_rate: int | None = None
    sample_rate: int | None = None  # fixed output rate (Opus runs at 48 kHz), else the input's
    options: tuple[tuple[str, str], ...] = ()  # muxer options
    codec_options: tuple[tuple[str, str], ...] = ()  # encoder options


FORMATS: dict[str, AudioFormat] = {
    # LAME quality 7 ("fast, ok quality"): 1.75x the speed of FFmpeg's default (quality 3) here,
    # with no audible difference on speech at 64 kb/s.
    "mp3": AudioFormat("mp3", "mp3", "libmp3lame", "audio/mpeg", ".mp3", 64_000,
                       codec_options=(("compression_level", "7"),)),
    "opus": AudioFormat("opus", "ogg", "libopus", "audio/ogg", ".opus", 32_000, 48_000),
    "aac": AudioFormat("aac", "adts", "aac", "audio/aac", ".aac", 64_000),
    "m4a": AudioFormat("m4a", "ipod", "aac", "audio/mp4", ".m4a", 64_000),
    "flac": AudioFormat("flac", "flac", "flac", "audio/flac", ".flac"),
    "wav": AudioFormat("wav", "wav", "pcm_s16le", "audio/wav", ".wav"),
}
# Audiobook brand, and the index moved to the front so players can seek before the file is all there.
M4B = AudioFormat("m4b", "ipod", "aac", "audio/mp4", ".m4b", 64_000,
                  options=(("brand", "M4B "), ("movflags", "+faststart")))


@dataclass(frozen=True)
class ChapterMark:
    """Where one chapter of an M4B starts and ends, in seconds, and its title."""

    title: str
    start_s: float
    end_s: float


# What a synthesis request may ask for: soundfile writes the first three (exact and fast), PyAV the rest.
REQUEST_FORMATS = ("wav", "flac", "ogg", "mp3", "opus", "aac")
_SOUNDFILE_FORMATS = ("wav", "flac", "ogg")


def check_format(name: str | None, default: str = "wav") -> str:
    """A format a request may ask for (lower case), or ``UnsupportedFormat`` listing them."""
    fmt = (name or default).lower()
    if fmt not in REQUEST_FORMATS:
        raise UnsupportedFormat(f"unsupported format {name!r}; use one of {', '.join(REQUEST_FORMATS)}")
    return fmt


def mime_type(fmt: str) -> str:
    """The MIME type served for a request format."""
    fmt = check_format(fmt)
    return "audio/ogg" if fmt == "ogg" else FORMATS[fmt].mime_type


def encode_request(audio: Audio, fmt: str) -> bytes:
    """A request's audio as a file in ``fmt`` (``REQUEST_FORMATS``)."""
    fmt = check_format(fmt)
    return audio.encode(fmt) if fmt in _SOUNDFILE_FORMATS else encode(audio, fmt)


def audio_format(name: str | None, default: str = "mp3") -> AudioFormat:
    """The format called ``name`` (case-insensitive), or ``UnsupportedFormat``."""
    key = (name or default).lower()
    if key not in FORMATS:
        raise UnsupportedFormat(f"unsupported format {name!r}; use one of {', '.join(FORMATS)}")
    return FORMATS[key]


def encode(audio: Audio, fmt: str, bit_rate: int | None = None) -> bytes:
    """``audio`` as a complete file in format ``fmt`` (see ``FORMATS``)."""
    spec = audio_format(fmt)
    if len(audio.samples) == 0:
        raise InvalidRequest("there is no audio to encode")
    buffer = io.BytesIO()
    with _Writer(buffer, spec, audio.sample_rate, bit_rate) as writer:
        writer.write(audio.samples)
    return buffer.getvalue()


def write_m4b(
    path: Path,
    chapters: Iterable[tuple[str, Audio]],
    *,
    title: str | None = None,
    author: str | None = None,
    bit_rate: int | None = None,
    chapter_gap_ms: int = 1000,
) -> list[ChapterMark]:
    """Write an audiobook to ``path`` atomically: chapters in order, each with a chapter mark.

    ``chapters`` may be a generator, so only one chapter's audio is in memory at a time; all must
    share one sample rate. ``chapter_gap_ms`` of silence ends every chapter but the last.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:  # FFmpeg writes by file name: moving the index to the front reopens the file
        marks = _write_chapters(tmp_name, chapters, title, author, bit_rate, chapter_gap_ms)
        with open(tmp_name, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    return marks


def _write_chapters(target: str, chapters: Iterable[tuple[str, Audio]], title: str | None,
                    author: str | None, bit_rate: int | None, gap_ms: int) -> list[ChapterMark]:
    """Encode chapters one after another into the file ``target``; returns their marks."""
    items = iter(chapters)
    first = next(items, None)
    if first is None:
        raise InvalidRequest("an M4B needs at least one chapter")
    rate = first[1].sample_rate
    metadata = {key: value for key, value in (("title", title), ("artist", author)) if value}
    marks: list[ChapterMark] = []
    with _Writer(target, M4B, rate, bit_rate, metadata) as writer:
        position = 0
        gap = np.zeros(int(rate * gap_ms / 1000), dtype=np.float32)
        for chapter_title, audio in itertools.chain([first], items):  # lazily, one at a time
            if audio.sample_rate != rate:
                raise InvalidRequest(f"chapter {chapter_title!r} is at {audio.sample_rate} Hz, not {rate} Hz")
            if marks:  # the silence between chapters belongs to the one it ends
                writer.write(gap)
                position += len(gap)
                marks[-1] = ChapterMark(marks[-1].title, marks[-1].start_s, position / rate)
            writer.write(audio.samples)
            marks.append(ChapterMark(chapter_title, position / rate, (position + len(audio.samples)) / rate))
            position += len(audio.samples)
        writer.chapters = [
            {"id": i, "start": round(m.start_s * rate), "end": round(m.end_s * rate),
             "time_base": Fraction(1, rate), "metadata": {"title": m.title}}
            for i, m in enumerate(marks, start=1)
        ]
    return marks


class _Writer:
    """One output container with one mono audio stream; float samples in, packets muxed out."""

    def __init__(self, target: Any, spec: AudioFormat, rate: int, bit_rate: int | None,
                 metadata: dict[str, str] | None = None) -> None:
        if rate <= 0:
            raise InvalidRequest("sample_rate must be positive")
        self.rate = rate
        self.chapters: list[Any] = []
        self.container = av.open(target, "w", format=spec.container, options=dict(spec.options))
        self.container.metadata.update(metadata or {})
        out_rate = spec.sample_rate or rate
        stream = self.container.add_stream(spec.codec, rate=out_rate)
        if not isinstance(stream, AudioStream):
            raise TypeError(f"{spec.codec} is not an audio codec")
        stream.layout = "mono"
        chosen_bit_rate = bit_rate or spec.bit_rate
        if chosen_bit_rate:
            stream.bit_rate = chosen_bit_rate
        self.stream = stream
        context = stream.codec_context
        if spec.codec_options:
            context.options = dict(spec.codec_options)
        self.resampler = av.AudioResampler(format=context.format, layout="mono", rate=out_rate,
                                           frame_size=context.frame_size or None)

    def __enter__(self) -> _Writer:
        return self

    def __exit__(self, exc_type: object, exc: object, traceback: object) -> None:
        try:
            if exc_type is None:
                self._encode(None)
                if self.chapters:
                    self.container.set_chapters(self.chapters)
        finally:
            self.container.close()

    def write(self, samples: np.ndarray[Any, Any]) -> None:
        """Encode float samples in [-1, 1] (clipped) at the writer's input rate."""
        data = np.clip(np.nan_to_num(np.asarray(samples, dtype=np.float32)), -1.0, 1.0)
        for start in range(0, len(data), CHUNK_SAMPLES):
            chunk = np.ascontiguousarray(data[start:start + CHUNK_SAMPLES]).reshape(1, -1)
            frame = av.AudioFrame.from_ndarray(chunk, format="flt", layout="mono")
            frame.sample_rate = self.rate
            self._encode(frame)

    def _encode(self, frame: Any) -> None:
        """Resample one frame (``None`` flushes) and mux what the encoder gives back."""
        for resampled in self.resampler.resample(frame):
            self.container.mux(self.stream.encode(resampled))
        if frame is None:
            self.container.mux(self.stream.encode(None))
