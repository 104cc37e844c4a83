"""Text to finished audio: the pipeline every entry point (CLI, worker) calls.

``Synthesizer.synthesize`` cleans nothing (the request is already validated and its text already
turned into a frontend script), phonemizes the script into sentences, runs them through the
``BatchEngine`` (so sentences of concurrent requests share ONNX calls; SSML rate changes make one
call per run of equal rate), and joins the exact per-sentence audio with short silences (an SSML
break's length where it set one). A sentence that would cost more than one call may hold
(``BatchEngine.call_cap``, ``TTS_MAX_CALL_S`` of its voice's model time) is cut at its clause
marks (``clauses``; pieces of at least ``MIN_PIECE`` symbols), its pieces joined with no added
silence: no single sentence, of any family, length or speed, holds the model for long while
others wait. The voice stays loaded while the request runs (``VoiceRegistry.using``).

``measured_seconds`` is the length of that audio without making it, from the model's durations
alone: the tests of the estimate measure a corpus with it. Both follow one ``Plan`` of the
request.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from tts_queue.synthesis.audio import Audio
from tts_queue.synthesis.engine import BatchEngine, BatchKey, SentenceResult
from tts_queue.synthesis.estimate.duration import effective_speed
from tts_queue.synthesis.frontend.text import SpokenSentence, clauses
from tts_queue.synthesis.inference import Scales
from tts_queue.synthesis.registry import VoiceRegistry
from tts_queue.synthesis.request import SynthesisRequest
from tts_queue.synthesis.voice import LoadedVoice


@dataclass(frozen=True)
class Alignment:
    """Where each sentence starts in the audio and how many samples each phoneme id covers."""

    sentence_starts: tuple[int, ...]
    phoneme_samples: tuple[tuple[int, ...], ...]
    phoneme_ids: tuple[tuple[int, ...], ...] = ()

    def to_dict(self) -> dict[str, object]:
        """JSON-safe form, kept beside the audio for captions."""
        return {
            "sentence_starts": list(self.sentence_starts),
            "phoneme_samples": [list(p) for p in self.phoneme_samples],
            "phoneme_ids": [list(p) for p in self.phoneme_ids],
        }


@dataclass(frozen=True)
class SynthesisResult:
    """A whole request's audio (empty when it went piece by piece to ``on_audio``), its length,
    alignment and the largest batch its sentences ran in."""

    audio: Audio
    alignment: Alignment
    batch_size: int
    sentences: int
    text_s: float = 0.0  # phonemization
    inference_s: float = 0.0  # from the first sentence queued in the engine to the last one done
    duration_s: float = 0.0  # the audio's length, streamed or not



MIN_PIECE = 24  # symbols: a clause cut shorter than this would be said without its prosody
Cap = Callable[[Scales], "float | None"]  # the most cost one call of these scales may hold


def _shifted(piece: Callable[[int, SentenceResult], None], offset: int, index: int,
             result: SentenceResult) -> None:
    """``piece`` of the request's sentence ``offset + index`` (one engine call runs a slice)."""
    piece(offset + index, result)


def _runs(rates: list[float]) -> list[tuple[int, int, float]]:
    """(start, end, rate) of each run of neighbouring sentences with the same rate."""
    runs: list[tuple[int, int, float]] = []
    for index, rate in enumerate(rates):
        if runs and runs[-1][2] == rate:
            runs[-1] = (runs[-1][0], index + 1, rate)
        else:
            runs.append((index, index + 1, rate))
    return runs


@dataclass(frozen=True)
class Plan:
    """How a request is said: each sentence's spoken form and ids, the silence after each (in
    samples; the last one's is not said), and each run of sentences at one speed with its scales."""

    spoken: list[tuple[list[int], SpokenSentence]]
    gaps: list[int]
    runs: list[tuple[int, int, Scales]]

    @classmethod
    def of(cls, voice: LoadedVoice, request: SynthesisRequest, cap: Cap | None = None) -> Plan:
        """The plan of ``request``; ``cap``: its sentences that would cost more than one call may
        hold are cut at their clause marks."""
        script = request.script or (("text", request.text),)
        spoken = voice.script_sentences(script, request.max_sentence_phonemes)
        if cap is not None:
            spoken = [part for sentence in spoken for part in _within(voice, request, sentence, cap)]
        gaps = [int(voice.sample_rate * (request.sentence_silence_ms if s.pause_ms is None else s.pause_ms)
                    / 1000) for _, s in spoken]
        runs = [(start, end, voice.scales(effective_speed(request.speed, rate), request.noise_scale,
                                          request.noise_w))
                for start, end, rate in _runs([s.rate for _, s in spoken])]  # one rate per engine call
        return cls(spoken, gaps, runs)


def _within(voice: LoadedVoice, request: SynthesisRequest, sentence: tuple[list[int], SpokenSentence],
            cap: Cap) -> list[tuple[list[int], SpokenSentence]]:
    """``sentence``, or its pieces cut at clause marks when it would cost more than ``cap`` allows
    one call (cost: ids times length scale, as ``BatchEngine`` counts it); the pieces but the last
    are followed by no silence, the last by the sentence's own."""
    ids, spoken = sentence
    scales = voice.scales(effective_speed(request.speed, spoken.rate), request.noise_scale, request.noise_w)
    budget = cap(scales)
    if budget is None or len(ids) * scales.length_scale <= budget or not spoken.phonemes:
        return [sentence]
    ids_per_symbol = len(ids) / len(spoken.phonemes)
    limit = max(MIN_PIECE, int(budget / scales.length_scale / ids_per_symbol))
    pieces = clauses(spoken.phonemes, limit)
    if len(pieces) <= 1:
        return [sentence]
    return [(voice.ids_of(piece), SpokenSentence(piece, spoken.pause_ms if last else 0, spoken.rate))
            for last, piece in ((n == len(pieces) - 1, piece) for n, piece in enumerate(pieces))]


def measured_seconds(voice: LoadedVoice, request: SynthesisRequest) -> float:
    """Seconds of the audio ``Synthesizer.synthesize`` makes of ``request``, from the model's
    durations alone (``sentence_samples``: Kokoro's in 1/45-1/70 of the synthesis' CPU, exactly;
    Piper's in 1/7, exactly with ``noise_w`` 0, else drawn as each synthesis draws them;
    ``python -m bench run measure``)."""
    plan = Plan.of(voice, request)
    sentences = [ids for ids, _ in plan.spoken]
    lengths = [n for start, end, scales in plan.runs
               for n in voice.model.sentence_samples(sentences[start:end], scales, request.speaker)]
    return (sum(lengths) + sum(plan.gaps[:len(lengths) - 1])) / voice.sample_rate


class Synthesizer:
    """Turns validated requests into audio with a registry and a batch engine."""

    def __init__(self, registry: VoiceRegistry, engine: BatchEngine) -> None:
        self.registry = registry
        self.engine = engine

    def _cap(self, voice: str, scales: Scales) -> float | None:
        """The most cost one call of ``voice`` at ``scales`` may hold (``None``: no cap known)."""
        return self.engine.call_cap(BatchKey(voice=voice, scales=scales, speaker=None))

    def synthesize(self, request: SynthesisRequest, priority: int = 0,
                   on_audio: Callable[[np.ndarray[Any, Any], int], None] | None = None,
                   owner: str = "") -> SynthesisResult:
        """Synthesize one request (blocking); ``priority`` 1 (bulk) lets interactive work overtake;
        ``owner``: the key whose fair share of the engine it runs in.

        ``on_audio(samples, sample_rate)`` receives the request's audio piece by piece, in order,
        as sentences finish: each sentence, preceded (after the first) by the silence between
        sentences, so the pieces joined are exactly the audio; then nothing of it is kept here (the
        result's ``audio`` is empty), so memory does not grow with the request's length. Without
        it, the result holds the audio joined."""
        with self.registry.using(request.voice) as voice:
            return self._synthesize(voice, request, priority, on_audio, owner)

    def _synthesize(self, voice: LoadedVoice, request: SynthesisRequest, priority: int,
                    on_audio: Callable[[np.ndarray[Any, Any], int], None] | None,
                    owner: str) -> SynthesisResult:
        started = time.perf_counter()
        plan = Plan.of(voice, request, functools.partial(self._cap, voice.spec.id))
        phonemized = time.perf_counter()
        sentences, gaps = [ids for ids, _ in plan.spoken], plan.gaps
        joined: list[np.ndarray[Any, Any]] = []

        def keep(samples: np.ndarray[Any, Any], rate: int) -> None:
            joined.append(samples)

        sink = on_audio if on_audio is not None else keep
        starts: list[int] = []
        phoneme_samples: list[tuple[int, ...]] = []
        position, batch_size = 0, 0

        def piece(index: int, result: SentenceResult) -> None:
            nonlocal position, batch_size
            if index:
                sink(np.zeros(gaps[index - 1], dtype=np.float32), voice.sample_rate)
                position += gaps[index - 1]
            starts.append(position)
            phoneme_samples.append(tuple(result.audio.phoneme_samples.tolist()))  # Python ints, at C speed
            sink(result.audio.samples.astype(np.float32, copy=False), voice.sample_rate)
            position += len(result.audio.samples)
            batch_size = max(batch_size, result.batch_size)

        for start, end, scales in plan.runs:
            key = BatchKey(voice=voice.spec.id, scales=scales, speaker=request.speaker,
                           max_batch=voice.model.max_batch, alone=not voice.model.has_narrow)
            self.engine.run_sentences(key, sentences[start:end], priority=priority,
                                      on_result=functools.partial(_shifted, piece, start), owner=owner)
        inferred = time.perf_counter()
        audio = Audio(np.concatenate(joined) if joined else np.zeros(0, np.float32), voice.sample_rate)
        alignment = Alignment(
            sentence_starts=tuple(starts),
            phoneme_samples=tuple(phoneme_samples),
            phoneme_ids=tuple(tuple(int(i) for i in ids) for ids in sentences),
        )
        return SynthesisResult(
            audio=audio,
            alignment=alignment,
            batch_size=batch_size,
            sentences=len(starts),
            text_s=phonemized - started,
            inference_s=inferred - phonemized,
            duration_s=position / voice.sample_rate,
        )
