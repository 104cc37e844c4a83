"""Audio to files: soundfile for PCM formats, PyAV (FFmpeg's libraries, in the ``av`` wheel) for the rest.

One encoder for ordinary requests and books alike: ``encode`` turns an ``Audio`` into the bytes of
a WAV, FLAC or Ogg Vorbis file (soundfile, exact and fast) or an MP3, Ogg Opus or AAC (ADTS or M4A)
file (PyAV); ``write_m4b`` writes an audiobook (AAC in MP4) with one chapter mark per chapter. No
system ffmpeg is needed. ``FORMATS`` is the one table of formats, MIME types and suffixes.
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
import soundfile
from av.audio.stream import AudioStream

from tts_queue.enums import REQUEST_FORMATS
from tts_queue.errors import InvalidRequest, UnsupportedFormat
from tts_queue.synthesis.audio import Audio

BLOCK_SAMPLES = 16384  # samples per frame handed to the encoder


@dataclass(frozen=True)
class AudioFormat:
    """How one output format is written: MIME type and suffix, then either soundfile's format and
    subtype (exact and fast: WAV, FLAC, Ogg Vorbis) or PyAV's container, codec and bit rate."""

    name: str
    mime_type: str
    suffix: str
    soundfile: tuple[str, str] | None = None  # (format, subtype)
    container: str = ""
    codec: str = ""
    bit_rate: int | None = None
    sample_rate: int | None = None  # fixed output rate (Opus runs at 48 kHz), else the input's
    options: tuple[tuple[str, str], ...] = ()  # muxer options
    codec_options: tuple[tuple[str, str], ...] = ()  # encoder options


FORMATS: dict[str, AudioFormat] = {
    "wav": AudioFormat("wav", "audio/wav", ".wav", soundfile=("WAV", "PCM_16")),
    "flac": AudioFormat("flac", "audio/flac", ".flac", soundfile=("FLAC", "PCM_16")),
    "ogg": AudioFormat("ogg", "audio/ogg", ".ogg", soundfile=("OGG", "VORBIS")),
    # LAME quality 7 ("fast, ok quality"): 1.75x the speed of FFmpeg's default (quality 3) here,
    # with no audible difference on speech at 64 kb/s.
    "mp3": AudioFormat("mp3", "audio/mpeg", ".mp3", container="mp3", codec="libmp3lame", bit_rate=64_000,
                       codec_options=(("compression_level", "7"),)),
    "opus": AudioFormat("opus", "audio/ogg", ".opus", container="ogg", codec="libopus", bit_rate=32_000,
                        sample_rate=48_000),
    "aac": AudioFormat("aac", "audio/aac", ".aac", container="adts", codec="aac", bit_rate=64_000),
    "m4a": AudioFormat("m4a", "audio/mp4", ".m4a", container="ipod", codec="aac", bit_rate=64_000),
}
# Audiobook brand, and the index moved to the front so players can seek before the file is all there.
M4B = AudioFormat("m4b", "audio/mp4", ".m4b", container="ipod", codec="aac", bit_rate=64_000,
                  options=(("brand", "M4B "), ("movflags", "+faststart")))


@dataclass(frozen=True)
class ChapterMark:
    """Where one chapter of an M4B starts and ends, in seconds, and its title."""

    title: str
    start_s: float
    end_s: float


def check_format(name: str | None, default: str = "wav",
                 allowed: tuple[str, ...] = REQUEST_FORMATS) -> str:
    """A format name among ``allowed`` (lower case), or ``UnsupportedFormat`` listing them."""
    fmt = (name or default).lower()
    if fmt not in allowed:
        raise UnsupportedFormat(f"unsupported format {name!r}; use one of {', '.join(allowed)}")
    return fmt


def audio_format(name: str) -> AudioFormat:
    """The format called ``name`` (any case), or ``UnsupportedFormat``."""
    return FORMATS[check_format(name, allowed=tuple(FORMATS))]


def mime_type(fmt: str) -> str:
    """The MIME type served for a format."""
    return audio_format(fmt).mime_type


def encode(audio: Audio, fmt: str, bit_rate: int | None = None) -> bytes:
    """``audio`` as a complete file in format ``fmt`` (see ``FORMATS``)."""
    spec = audio_format(fmt)
    if len(audio.samples) == 0:
        raise InvalidRequest("there is no audio to encode")
    buffer = io.BytesIO()
    if spec.soundfile is not None:
        container, subtype = spec.soundfile
        soundfile.write(buffer, audio.to_int16(), audio.sample_rate, format=container, subtype=subtype)
        return buffer.getvalue()
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
        for start in range(0, len(data), BLOCK_SAMPLES):
            chunk = np.ascontiguousarray(data[start:start + BLOCK_SAMPLES]).reshape(1, -1)
            frame = av.AudioFrame.from_ndarray(chunk, format="flt", layout="mono")
            frame.sample_rate = self.rate
            self._encode(frame)

    def _encode(self, frame: Any) -> None:
        """Resample one frame (``None`` flushes) and mux what the encoder gives back."""
        for resampled in self.resampler.resample(frame):
            self.container.mux(self.stream.encode(resampled))
        if frame is None:
            self.container.mux(self.stream.encode(None))
