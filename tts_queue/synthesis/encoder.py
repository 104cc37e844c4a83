"""Audio to files: soundfile for PCM formats, PyAV (FFmpeg's libraries, in the ``av`` wheel) for the rest.

One encoder for ordinary requests and books alike: ``open_writer`` streams float samples, block by
block, into a WAV, FLAC or Ogg Vorbis file (soundfile, exact and fast) or an MP3, Ogg Opus or AAC
(ADTS or M4A) file (PyAV); ``encode`` is one ``Audio`` through it into bytes; ``decode_blocks``
reads any of these files back a frame at a time (a book's M4B is written with the same writer:
``books.render.m4b``). No system ffmpeg is needed. ``formats.FORMATS`` is the one table of formats,
MIME types and suffixes.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import IO, TYPE_CHECKING, Protocol

import av
import numpy as np
import numpy.typing as npt
import soundfile
from av.audio.frame import AudioFrame
from av.audio.stream import AudioStream

from tts_queue.enums import STREAM_FORMATS
from tts_queue.errors import InvalidRequest
from tts_queue.synthesis.audio import Audio, Samples
from tts_queue.synthesis.formats import FORMATS, STREAMED, AudioFormat, audio_format, check_format

if TYPE_CHECKING:
    from av.container import Chapter  # a TypedDict of av's stubs only

BLOCK_SAMPLES = 16384  # samples per frame handed to the encoder



class AudioWriter(Protocol):
    """Takes float samples in [-1, 1] (clipped), block after block, at the rate it was opened with."""

    def write(self, samples: npt.ArrayLike) -> None:
        """Append samples."""


def open_writer(target: str | Path | IO[bytes], fmt: str, sample_rate: int,
                bit_rate: int | None = None) -> AbstractContextManager[AudioWriter]:
    """A writer of one mono file in format ``fmt`` (see ``FORMATS``) to a path or a binary file
    object; leaving the ``with`` block finishes the file (after an error it is only closed). The
    encoder gets frames of ``BLOCK_SAMPLES`` however the caller splits the samples, so the file
    is the one ``encode`` makes of them all (Ogg's stream serial number aside: it is random)."""
    spec = audio_format(fmt)
    if sample_rate <= 0:
        raise InvalidRequest("sample_rate must be positive")
    where = str(target) if isinstance(target, Path) else target
    if spec.soundfile is not None:
        return _PcmWriter(where, spec, sample_rate)
    return ContainerWriter(where, spec, sample_rate, bit_rate)


def encode(audio: Audio, fmt: str, bit_rate: int | None = None) -> bytes:
    """``audio`` as a complete file in format ``fmt`` (see ``FORMATS``)."""
    audio_format(fmt)
    if len(audio.samples) == 0:
        raise InvalidRequest("there is no audio to encode")
    buffer = io.BytesIO()
    with open_writer(buffer, fmt, audio.sample_rate, bit_rate) as writer:
        writer.write(audio.samples)
    return buffer.getvalue()


class StreamEncoder:
    """Encodes audio as it arrives into ``store`` (a seekable binary file: the file to keep) and
    hands out the bytes made so far, so a client can play the start while the rest is synthesized,
    and nothing of it is held in memory. The bytes handed out, in order, are the stored file, except
    a WAV's header, which is sent with its sizes unknown (``0xFFFFFFFF``, as streaming servers do)
    and stored with the real ones (``close`` rewrites it). Samples are clipped and quantized exactly
    as ``encode`` does, so a streamed WAV or PCM carries the same samples as the stored file, and
    any other format the same encoder's output."""

    def __init__(self, fmt: str, sample_rate: int, store: IO[bytes]) -> None:
        self.format = check_format(fmt, allowed=STREAM_FORMATS)
        if sample_rate <= 0:
            raise InvalidRequest("sample_rate must be positive")
        self.rate = sample_rate
        self._store = store
        self._start = store.tell()
        self._sink = _Sink(store)
        self._writer: ContainerWriter | None = None
        self._pcm_bytes = 0  # WAV: the samples' bytes, for the stored file's header
        if self.format == "wav":
            self._sink.write(_wav_header(sample_rate, None))
        else:
            spec = STREAMED.get(self.format, FORMATS[self.format])
            self._writer = ContainerWriter(self._sink, spec, sample_rate, None)
            self._writer.rechunk = False  # a short first sentence leaves at once, not after 16,384 samples

    def write(self, samples: npt.ArrayLike) -> bytes:
        """Append float samples in [-1, 1]; the bytes of the file that are ready now."""
        if self._writer is not None:
            self._writer.write(samples)
        else:
            pcm = Audio(np.asarray(samples, dtype=np.float32).reshape(-1), self.rate).to_int16().tobytes()
            self._pcm_bytes += len(pcm)
            self._sink.write(pcm)
        return self._sink.take()

    def close(self) -> bytes:
        """Finish the file (a WAV's header gets its sizes); the bytes not handed out yet."""
        if self._writer is not None:
            self._writer.__exit__(None, None, None)
            return self._sink.take()
        tail = self._sink.take()
        end = self._store.tell()
        self._store.seek(self._start)
        self._store.write(_wav_header(self.rate, self._pcm_bytes))
        self._store.seek(end)
        return tail


class _Sink:
    """A forward-only binary file (no ``seek``: muxers then never rewrite what was sent) that writes
    through to ``store`` and keeps only what was not handed out yet."""

    def __init__(self, store: IO[bytes]) -> None:
        self._store = store
        self._fresh: list[bytes] = []

    def write(self, data: bytes) -> int:
        self._store.write(data)
        self._fresh.append(bytes(data))
        return len(data)

    def take(self) -> bytes:
        """The bytes written since the last ``take``."""
        fresh = b"".join(self._fresh)
        self._fresh.clear()
        return fresh


def _wav_header(rate: int, data_bytes: int | None) -> bytes:
    """The 44-byte header of a 16-bit mono PCM WAV; ``None``: sizes unknown (a stream)."""
    unknown = 0xFFFFFFFF
    riff = unknown if data_bytes is None else 36 + data_bytes
    data = unknown if data_bytes is None else data_bytes
    fmt = struct.pack("<IHHIIHH", 16, 1, 1, rate, rate * 2, 2, 16)  # PCM, mono, 16 bits
    return b"RIFF" + struct.pack("<I", riff) + b"WAVEfmt " + fmt + b"data" + struct.pack("<I", data)


def decode_blocks(source: str | Path | IO[bytes]) -> Iterator[Audio]:
    """Any file the encoder writes, decoded frame by frame to mono float32 blocks (PyAV)."""
    container = av.open(str(source) if isinstance(source, Path) else source, "r")
    with container:
        for frame in container.decode(audio=0):
            array = frame.to_ndarray().astype(np.float32)
            if frame.format.name.startswith("s16"):
                array /= 32768.0
            elif frame.format.name.startswith("s32"):
                array /= 2147483648.0
            # planar: one row per channel; packed: channels interleaved in one row (mono here)
            samples = array.reshape(-1) if array.shape[0] == 1 else array.mean(axis=0, dtype=np.float32)
            yield Audio(samples=samples, sample_rate=frame.sample_rate)


class _Blocked:
    """Hands samples on in blocks of ``BLOCK_SAMPLES`` whatever the caller's blocks (the rest waits
    for more or the end), so a file does not depend on how its samples were split."""

    def __init__(self) -> None:
        self._pending = np.zeros(0, dtype=np.float32)
        self.rechunk = True  # False: every write goes to the encoder at once (streaming)

    def write(self, samples: npt.ArrayLike) -> None:
        """Append float samples in [-1, 1] (clipped) at the writer's input rate."""
        data = np.asarray(samples, dtype=np.float32).reshape(-1)
        if not self.rechunk:
            if len(data):
                self._block(data)
            return
        if len(self._pending):
            data = np.concatenate([self._pending, data])
        whole = len(data) // BLOCK_SAMPLES * BLOCK_SAMPLES
        for start in range(0, whole, BLOCK_SAMPLES):
            self._block(data[start:start + BLOCK_SAMPLES])
        self._pending = data[whole:].copy()

    def _flush(self) -> None:
        if len(self._pending):
            self._block(self._pending)
        self._pending = np.zeros(0, dtype=np.float32)

    def _block(self, samples: Samples) -> None:
        raise NotImplementedError


class _PcmWriter(_Blocked):
    """One soundfile file (WAV, FLAC, Ogg Vorbis) written as 16-bit PCM, block by block."""

    def __init__(self, target: str | IO[bytes], spec: AudioFormat, rate: int) -> None:
        super().__init__()
        assert spec.soundfile is not None
        container, subtype = spec.soundfile
        self.rate = rate
        self.file = soundfile.SoundFile(target, "w", samplerate=rate, channels=1, format=container,
                                        subtype=subtype)

    def __enter__(self) -> _PcmWriter:
        return self

    def __exit__(self, exc_type: object, exc: object, traceback: object) -> None:
        try:
            if exc_type is None:
                self._flush()
        finally:
            self.file.close()

    def _block(self, samples: Samples) -> None:
        """Clipped and rounded to 16 bits as ``Audio.to_int16`` does."""
        self.file.write(Audio(samples, self.rate).to_int16())


class ContainerWriter(_Blocked):
    """One output container with one mono audio stream; float samples in, packets muxed out."""

    def __init__(self, target: str | IO[bytes] | _Sink, spec: AudioFormat, rate: int, bit_rate: int | None,
                 metadata: dict[str, str] | None = None) -> None:
        super().__init__()
        if rate <= 0:
            raise InvalidRequest("sample_rate must be positive")
        self.rate = rate
        self.chapters: list[Chapter] = []
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

    def __enter__(self) -> ContainerWriter:
        return self

    def __exit__(self, exc_type: object, exc: object, traceback: object) -> None:
        try:
            if exc_type is None:
                self._flush()
                self._encode(None)
                if self.chapters:
                    self.container.set_chapters(self.chapters)
        finally:
            self.container.close()

    def _block(self, samples: Samples) -> None:
        """One frame of clipped float samples to the encoder."""
        chunk = np.clip(np.nan_to_num(samples), -1.0, 1.0).reshape(1, -1)
        frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(chunk), format="flt", layout="mono")
        frame.sample_rate = self.rate
        self._encode(frame)

    def _encode(self, frame: AudioFrame | None) -> None:
        """Resample one frame (``None`` flushes) and mux what the encoder gives back."""
        for resampled in self.resampler.resample(frame):
            self.container.mux(self.stream.encode(resampled))
        if frame is None:
            self.container.mux(self.stream.encode(None))
