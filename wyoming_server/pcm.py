"""A task's WAV, as it arrives in pieces, turned into the raw PCM that Wyoming's ``audio-chunk``
events carry: the header is read for the rate, width and channels (a streamed WAV's 44 bytes, a
stored one's chunks, whatever their order), and what follows is cut into chunks of whole samples
(``PcmReader``), sent as ``audio-start``, ``audio-chunk``s and ``audio-stop`` (``AudioEvents``).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.event import Event

from tts_queue.errors import SynthesisError

SAMPLES_PER_CHUNK = 1024  # per audio-chunk event (about 46 ms at 22,050 Hz), as Wyoming's servers send
MAX_HEADER_BYTES = 64 * 1024  # a WAV whose samples start later than this is not one the encoder wrote


@dataclass(frozen=True)
class PcmFormat:
    """What ``audio-start`` announces: samples per second, bytes per sample, channels."""

    rate: int
    width: int
    channels: int


class PcmReader:
    """Pieces of one WAV in, ``(format, chunk)`` out: nothing until the header is whole, then
    chunks of at most ``SAMPLES_PER_CHUNK`` whole samples (a piece's odd byte waits for the next)."""

    def __init__(self, samples_per_chunk: int = SAMPLES_PER_CHUNK) -> None:
        self.samples_per_chunk = samples_per_chunk
        self.format: PcmFormat | None = None
        self._held = b""

    def feed(self, piece: bytes) -> list[bytes]:
        """The PCM chunks ``piece`` completes (after the header: ``format`` is then known)."""
        self._held += piece
        if self.format is None:
            found = _header(self._held)
            if found is None:
                if len(self._held) > MAX_HEADER_BYTES:
                    raise SynthesisError("the audio is not a WAV this service wrote")
                return []
            self.format, start = found
            self._held = self._held[start:]
        frame = self.format.width * self.format.channels
        size = self.samples_per_chunk * frame
        whole = len(self._held) - len(self._held) % frame
        chunks = [self._held[at:min(at + size, whole)] for at in range(0, whole, size)]
        self._held = self._held[whole:]
        return chunks


class AudioEvents:
    """One audio stream's events from its WAV's pieces, each chunk stamped with its start (ms)."""

    def __init__(self, samples_per_chunk: int = SAMPLES_PER_CHUNK) -> None:
        self.pcm = PcmReader(samples_per_chunk)
        self.samples = 0

    def feed(self, piece: bytes) -> list[Event]:
        """The events ``piece`` completes: ``audio-start`` before the first chunk, then chunks."""
        events: list[Event] = []
        for chunk in self.pcm.feed(piece):
            fmt = self.pcm.format
            assert fmt is not None
            if self.samples == 0:
                events.append(AudioStart(fmt.rate, fmt.width, fmt.channels, timestamp=0).event())
            events.append(AudioChunk(fmt.rate, fmt.width, fmt.channels, chunk,
                                     timestamp=self.samples * 1000 // fmt.rate).event())
            self.samples += len(chunk) // (fmt.width * fmt.channels)
        return events

    def end(self) -> list[Event]:
        """``audio-stop`` (after an ``audio-start`` if there were no samples at all)."""
        fmt = self.pcm.format
        if fmt is None:
            raise SynthesisError("the audio ended before its header")
        stop = AudioStop(timestamp=self.samples * 1000 // fmt.rate).event()
        if self.samples:
            return [stop]
        return [AudioStart(fmt.rate, fmt.width, fmt.channels, timestamp=0).event(), stop]


def _header(data: bytes) -> tuple[PcmFormat, int] | None:
    """The format and where the samples start, once the header is all in ``data``."""
    if len(data) < 12:
        return None
    if data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        raise SynthesisError("the audio is not a WAV")
    at, found = 12, None
    while at + 8 <= len(data):
        kind, size = data[at:at + 4], struct.unpack("<I", data[at + 4:at + 8])[0]
        if kind == b"data":
            return (found, at + 8) if found is not None else None
        if kind == b"fmt ":
            if at + 8 + 16 > len(data):
                return None
            _, channels, rate, _, _, bits = struct.unpack("<HHIIHH", data[at + 8:at + 24])
            found = PcmFormat(rate, bits // 8, channels)
        at += 8 + size + size % 2
    return None
