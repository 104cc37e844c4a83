"""What a request costs the pool that runs it, known at submission: its estimated audio times
the voice's CPU real-time factor (``pace.rtf``, calibrated on the reference 2-core machine and
shipped in ``models/voices.json``).

A pool can do, per request, what fits within half of ``TTS_VISIBILITY_TIMEOUT_S``: past the
timeout the broker hands an unacknowledged task to another worker, so a request that takes
longer would run twice. A request over it is refused with ``audio_too_long``, naming the pool's
limit. The rate measured on CPUs bounds a GPU pool's work from above too. ``longest_task_s``
is the work of the longest request the settings admit, for a worker to check at start.
"""

from __future__ import annotations

from collections.abc import Iterable

from tts_queue.errors import AudioTooLong, TTSQueueError
from tts_queue.settings import Settings
from tts_queue.synthesis.estimate.duration import audio_seconds, estimated_seconds, pace_of
from tts_queue.synthesis.formats import audio_format
from tts_queue.synthesis.request import SynthesisRequest
from tts_queue.synthesis.voice import VoiceSpec


def work_seconds(audio_s: float, spec: VoiceSpec) -> float:
    """CPU seconds ``spec`` takes to make ``audio_s`` seconds of audio on the reference machine."""
    return audio_s * pace_of(spec).rtf


def pool_limit_s(settings: Settings) -> float:
    """The most work (CPU seconds) one request may cost a pool: half the visibility timeout."""
    return settings.worker.visibility_timeout_s / 2


def longest_task_s(settings: Settings, specs: Iterable[VoiceSpec]) -> float:
    """CPU seconds of the longest request the settings admit: ``TTS_MAX_AUDIO_S`` at the largest
    real-time factor among ``specs`` (0 without voices)."""
    return settings.request.max_audio_s * max((pace_of(spec).rtf for spec in specs), default=0.0)


def estimate_of(request: SynthesisRequest, spec: VoiceSpec) -> float | None:
    """A request's exact audio estimate in seconds (phonemized: about a millisecond per sentence
    of English on two cores), or ``None`` when the frontend cannot read it (it fails before any
    audio is made). What a task row keeps for the backlog (``tasks.backlog``)."""
    script = request.script or (("text", request.text),)
    try:
        return estimated_seconds(script, spec, request.speed, request.sentence_silence_ms,
                                 request.max_sentence_phonemes)
    except TTSQueueError:
        return None


def pinned_estimate(request: SynthesisRequest, spec: VoiceSpec) -> int:
    """Bytes a pinned (``keep``) request will store, estimated before it runs: its exact audio
    estimate at its format's bit rate, or 16-bit PCM at the format's (else the voice's) rate for
    the lossless formats."""
    seconds = estimate_of(request, spec)
    if seconds is None:  # the frontend cannot read it: it fails before storing anything
        return 0
    fmt = audio_format(request.format)
    per_s = fmt.bit_rate / 8 if fmt.bit_rate else 2 * (fmt.sample_rate or spec.sample_rate)
    return int(seconds * per_s)


def check_work(request: SynthesisRequest, spec: VoiceSpec, pool: str, settings: Settings) -> None:
    """Raise ``AudioTooLong`` when ``pool`` cannot do ``request`` (by ``spec``) within its limit."""
    limit, rtf = pool_limit_s(settings), pace_of(spec).rtf
    if rtf <= 0:
        return
    script = request.script or (("text", request.text),)
    seconds = audio_seconds(script, spec, request.speed, request.sentence_silence_ms,
                            request.max_sentence_phonemes, within=limit / rtf)
    work = work_seconds(seconds, spec)
    if work > limit:
        raise AudioTooLong(f"this text would take about {work:.0f} s of synthesis (about "
                           f"{seconds / 60:.0f} minutes of audio at speed {request.speed:g} with voice "
                           f"{spec.id}); the {pool} pool's limit is {limit:g} s per request (half of "
                           "TTS_VISIBILITY_TIMEOUT_S): send it in parts, or as a book")
