"""Text to finished audio: the pipeline every entry point (CLI, worker) calls.

``Synthesizer.synthesize`` cleans nothing (the request is already validated), phonemizes the
text into sentences, runs them through the ``BatchEngine`` (so sentences of concurrent requests
share ONNX calls), and joins the exact per-sentence audio with short silences.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from tts_queue.synthesis.audio import Audio
from tts_queue.synthesis.engine import BatchEngine, BatchKey, SentenceResult
from tts_queue.synthesis.registry import VoiceRegistry
from tts_queue.synthesis.request import SynthesisRequest


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
    """Audio for a whole request, its alignment and the largest batch its sentences ran in."""

    audio: Audio
    alignment: Alignment
    batch_size: int
    sentences: int
    text_s: float = 0.0  # phonemization
    inference_s: float = 0.0  # from the first sentence queued in the engine to the last one done


class Synthesizer:
    """Turns validated requests into audio with a registry and a batch engine."""

    def __init__(self, registry: VoiceRegistry, engine: BatchEngine) -> None:
        self.registry = registry
        self.engine = engine

    def synthesize(self, request: SynthesisRequest, priority: int = 0,
                   on_audio: Callable[[np.ndarray[Any, Any], int], None] | None = None) -> SynthesisResult:
        """Synthesize one request (blocking); ``priority`` 1 (bulk) lets interactive work overtake.

        ``on_audio(samples, sample_rate)`` receives the request's audio piece by piece, in order,
        as sentences finish: each sentence, preceded (after the first) by the silence between
        sentences, so the pieces joined are exactly the result's audio (streaming)."""
        voice = self.registry.load(request.voice)
        started = time.perf_counter()
        sentences = voice.sentence_ids(request.text, request.max_sentence_phonemes)
        phonemized = time.perf_counter()
        scales = voice.scales(request.speed, request.noise_scale, request.noise_w)
        key = BatchKey(voice=voice.spec.id, scales=scales, speaker=request.speaker)
        gap = int(voice.sample_rate * request.sentence_silence_ms / 1000)

        def piece(index: int, result: SentenceResult) -> None:
            assert on_audio is not None
            if index:
                on_audio(np.zeros(gap, dtype=np.float32), voice.sample_rate)
            on_audio(result.audio.samples.astype(np.float32, copy=False), voice.sample_rate)

        results = self.engine.run_sentences(key, sentences, priority=priority,
                                            on_result=piece if on_audio is not None else None)
        inferred = time.perf_counter()
        parts = [r.audio.samples for r in results]
        audio = Audio.join(parts, voice.sample_rate, request.sentence_silence_ms)
        starts, position = [], 0
        for part in parts:
            starts.append(position)
            position += len(part) + gap
        alignment = Alignment(
            sentence_starts=tuple(starts),
            phoneme_samples=tuple(tuple(int(x) for x in r.audio.phoneme_samples) for r in results),
            phoneme_ids=tuple(tuple(int(i) for i in ids) for ids in sentences),
        )
        return SynthesisResult(
            audio=audio,
            alignment=alignment,
            batch_size=max(r.batch_size for r in results),
            sentences=len(results),
            text_s=phonemized - started,
            inference_s=inferred - phonemized,
        )
