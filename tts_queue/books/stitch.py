"""A chapter's audio from its sentences: pauses by kind, fades at the joins, even loudness.

Pure numpy. Each sentence gets a gain toward the chapter's median speech level (bounded, so a
whispered line is not pumped up into noise), reduced where needed so no sample passes the peak
ceiling; then short raised-cosine fades at both of its ends, so every join starts and ends near
zero and no seam clicks. Pauses are silence: heading > paragraph > sentence by default.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tts_queue.books.segment import PauseKind
from tts_queue.errors import InvalidRequest
from tts_queue.synthesis.audio import Audio

Samples = npt.NDArray[np.float32]
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
    if sample_rate <= 0:
        raise InvalidRequest("sample_rate must be positive")
    clean = [np.nan_to_num(np.asarray(p, dtype=np.float32).reshape(-1)) for p in parts]
    gains = loudness_gains(clean, sample_rate, settings)
    gaps = [settings.pause_samples(kind, sample_rate) for kind in pauses[:-1]] + [0] * bool(pauses)
    total = sum(len(p) for p in clean) + sum(gaps)
    out = np.zeros(total, dtype=np.float32)
    offsets: list[tuple[int, int]] = []
    position = 0
    fade = int(round(sample_rate * settings.fade_ms / 1000))
    for part, gain, gap in zip(clean, gains, gaps, strict=True):
        end = position + len(part)
        out[position:end] = apply_fades(part * np.float32(gain), fade)
        offsets.append((position, end))
        position = end + gap
    return StitchedChapter(audio=Audio(samples=out, sample_rate=sample_rate), offsets=tuple(offsets))


def speech_rms(samples: Samples, sample_rate: int) -> float | None:
    """RMS over the frames louder than -50 dBFS, or ``None`` when there are none."""
    frame = max(1, sample_rate * FRAME_MS // 1000)
    usable = len(samples) // frame * frame
    if usable == 0:
        return None
    power = np.mean(np.square(samples[:usable].astype(np.float64)).reshape(-1, frame), axis=1)
    active = power[power > SILENCE_RMS**2]
    return float(np.sqrt(np.mean(active))) if len(active) else None


def loudness_gains(parts: Sequence[Samples], sample_rate: int, settings: StitchSettings) -> list[float]:
    """Per-part gains toward the median (or target) speech RMS, bounded and peak-limited."""
    levels = [speech_rms(part, sample_rate) for part in parts]
    known = [level for level in levels if level is not None]
    target = settings.target_rms or (float(np.median(known)) if known else None)
    bound = 10 ** (settings.max_gain_db / 20)
    gains: list[float] = []
    for part, level in zip(parts, levels, strict=True):
        gain = 1.0 if target is None or level is None else float(np.clip(target / level, 1 / bound, bound))
        peak = float(np.max(np.abs(part))) if len(part) else 0.0
        if peak * gain > settings.peak:
            gain = settings.peak / peak
        gains.append(gain)
    return gains


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
