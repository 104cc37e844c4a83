"""A chapter's audio from its sentences: pauses by kind, fades at the joins, even loudness.

Pure numpy. Each sentence gets a gain toward the chapter's median speech level (bounded, so a
whispered line is not pumped up into noise), reduced where needed so no sample passes the peak
ceiling; then short raised-cosine fades at both of its ends, so every join starts and ends near
zero and no seam clicks. Pauses are silence: heading > paragraph > sentence by default.

It works one sentence at a time, so a chapter of any length streams: ``Loudness`` gathers a few
numbers per sentence in a first pass and then gives each sentence's gain; ``Layout`` places the
sentences one by one in a second pass (the silence before each, its samples with gain and fades,
its offsets). ``stitch`` is the same two passes over a list in memory.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tts_queue.books.sources.segment import PauseKind
from tts_queue.errors import InvalidRequest
from tts_queue.synthesis.audio import Audio, Samples

SILENCE_RMS = 10 ** (-50 / 20)  # frames quieter than -50 dBFS are not speech
FRAME_MS = 20


@dataclass(frozen=True)
class StitchSettings:
    """Pause lengths, fade length and loudness bounds for assembling a chapter."""

    sentence_ms: int = 300
    paragraph_ms: int = 750
    heading_ms: int = 1200
    fade_ms: float = 5.0
    max_gain_db: float = 6.0
    peak: float = 0.95
    target_rms: float | None = None

    def __post_init__(self) -> None:
        if min(self.sentence_ms, self.paragraph_ms, self.heading_ms) < 0 or self.fade_ms < 0:
            raise InvalidRequest("pauses and fades must not be negative")
        if not 0 < self.peak <= 1 or self.max_gain_db < 0:
            raise InvalidRequest("peak must be in (0, 1] and max_gain_db at least 0")

    def pause_samples(self, kind: PauseKind, sample_rate: int) -> int:
        """Length in samples of the silence after a sentence of this kind."""
        ms = {"sentence": self.sentence_ms, "paragraph": self.paragraph_ms, "heading": self.heading_ms}[kind]
        return int(round(sample_rate * ms / 1000))


@dataclass(frozen=True)
class StitchedChapter:
    """The chapter audio and, per sentence, its (start, end) sample in it (end exclusive)."""

    audio: Audio
    offsets: tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class PartLevel:
    """What a part's gain depends on: its speech RMS (``None`` when silent) and its peak."""

    speech: float | None
    peak: float


@dataclass(frozen=True)
class Placed:
    """One part laid out: the silence before it, its samples (gain and fades applied), where it is."""

    silence: int
    samples: Samples
    offsets: tuple[int, int]


def clean_part(part: npt.ArrayLike) -> Samples:
    """A part as the stitcher takes it: flat float32, NaN and infinities made finite."""
    return np.nan_to_num(np.asarray(part, dtype=np.float32).reshape(-1))


def stitch(
    parts: Sequence[Samples],
    pauses: Sequence[PauseKind],
    sample_rate: int,
    settings: StitchSettings | None = None,
) -> StitchedChapter:
    """Join sentence audio in order with the pause after each (none after the last)."""
    settings = settings or StitchSettings()
    if len(parts) != len(pauses):
        raise InvalidRequest(f"{len(parts)} audio parts but {len(pauses)} pause kinds")
    layout = Layout(sample_rate, settings)
    clean = [clean_part(p) for p in parts]
    pieces: list[Samples] = []
    offsets: list[tuple[int, int]] = []
    for part, gain, pause in zip(clean, loudness_gains(clean, sample_rate, settings), pauses, strict=True):
        placed = layout.place(part, gain, pause)
        pieces += [np.zeros(placed.silence, dtype=np.float32), placed.samples]
        offsets.append(placed.offsets)
    out = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.float32)
    return StitchedChapter(audio=Audio(samples=out, sample_rate=sample_rate), offsets=tuple(offsets))


class Layout:
    """Places a chapter's parts one at a time: the pause owed by the previous part goes before
    each (so none follows the last), then the part with its gain and fades."""

    def __init__(self, sample_rate: int, settings: StitchSettings) -> None:
        if sample_rate <= 0:
            raise InvalidRequest("sample_rate must be positive")
        self.sample_rate = sample_rate
        self.settings = settings
        self.fade = int(round(sample_rate * settings.fade_ms / 1000))
        self.position = 0  # samples laid out so far: the chapter's length once the last is placed
        self._pause: PauseKind | None = None

    def place(self, part: Samples, gain: float, pause: PauseKind) -> Placed:
        """Lay out the next (clean) part, to be followed by a ``pause`` if another part comes."""
        silence = 0 if self._pause is None else self.settings.pause_samples(self._pause, self.sample_rate)
        samples = apply_fades(part * np.float32(gain), self.fade)
        start = self.position + silence
        self.position = start + len(samples)
        self._pause = pause
        return Placed(silence, samples, (start, self.position))


class Loudness:
    """Each part's gain from a few numbers per part, gathered one part at a time (``measure``),
    so a first pass over a long chapter keeps no audio."""

    def __init__(self, sample_rate: int, settings: StitchSettings) -> None:
        self.sample_rate = sample_rate
        self.settings = settings
        self.speech = array("d")  # NaN where a part has no speech
        self.peaks = array("d")
        self.lengths = array("q")

    def measure(self, part: Samples) -> PartLevel:
        """Record the level of the next (clean) part."""
        level = part_level(part, self.sample_rate)
        self.speech.append(math.nan if level.speech is None else level.speech)
        self.peaks.append(level.peak)
        self.lengths.append(len(part))
        return level

    def gains(self) -> Iterator[float]:
        """The gain of every measured part, in order."""
        target = gain_target((s for s in self.speech if not math.isnan(s)), self.settings)
        for speech, peak in zip(self.speech, self.peaks, strict=True):
            yield part_gain(PartLevel(None if math.isnan(speech) else speech, peak), target, self.settings)


def speech_rms(samples: Samples, sample_rate: int) -> float | None:
    """RMS over the frames louder than -50 dBFS, or ``None`` when there are none."""
    frame = max(1, sample_rate * FRAME_MS // 1000)
    usable = len(samples) // frame * frame
    if usable == 0:
        return None
    power = np.mean(np.square(samples[:usable].astype(np.float64)).reshape(-1, frame), axis=1)
    active = power[power > SILENCE_RMS**2]
    return float(np.sqrt(np.mean(active))) if len(active) else None


def part_level(part: Samples, sample_rate: int) -> PartLevel:
    """The speech RMS and the peak of one part."""
    return PartLevel(speech_rms(part, sample_rate), float(np.max(np.abs(part))) if len(part) else 0.0)


def gain_target(speech_levels: Iterable[float], settings: StitchSettings) -> float | None:
    """The speech RMS every part moves toward: the configured target, else the median of the
    parts' speech levels (``None`` when no part has speech)."""
    known = np.fromiter(speech_levels, dtype=np.float64)
    return settings.target_rms or (float(np.median(known)) if len(known) else None)


def part_gain(level: PartLevel, target: float | None, settings: StitchSettings) -> float:
    """A part's gain toward ``target``, bounded by ``max_gain_db`` and lowered to keep its peak
    under the ceiling."""
    bound = 10 ** (settings.max_gain_db / 20)
    gain = 1.0
    if target is not None and level.speech is not None:
        gain = float(np.clip(target / level.speech, 1 / bound, bound))
    if level.peak * gain > settings.peak:
        gain = settings.peak / level.peak
    return gain


def loudness_gains(parts: Sequence[Samples], sample_rate: int, settings: StitchSettings) -> list[float]:
    """Per-part gains toward the median (or target) speech RMS, bounded and peak-limited."""
    loudness = Loudness(sample_rate, settings)
    for part in parts:
        loudness.measure(part)
    return list(loudness.gains())


def apply_fades(samples: Samples, fade: int) -> Samples:
    """A copy with raised-cosine fade-in and fade-out of ``fade`` samples (at most half each)."""
    out = samples.astype(np.float32, copy=True)
    length = min(fade, len(out) // 2)
    if length > 0:
        ramp = (0.5 - 0.5 * np.cos(np.pi * np.arange(1, length + 1) / (length + 1))).astype(np.float32)
        out[:length] *= ramp
        out[len(out) - length:] *= ramp[::-1]
    return out


def max_seam_jump(audio: Audio, offsets: Sequence[tuple[int, int]], radius: int = 64) -> float:
    """The largest sample-to-sample step within ``radius`` samples of any sentence start or end."""
    samples = audio.samples
    worst = 0.0
    for start, end in offsets:
        for edge in (start, end):
            window = samples[max(0, edge - radius): min(len(samples), edge + radius)]
            if len(window) > 1:
                worst = max(worst, float(np.max(np.abs(np.diff(window)))))
    return worst
