"""Fault injection for the worker processes some tests start: a worker plugin
(``TTS_WORKER_PLUGINS=tests.hooks.faults:plugin``, which ``tests.support.hooked`` sets) that wraps
the worker's voice loader and synthesizer through their seams (``tts_queue.app.plugins``). The
wrappers subclass the real classes with their exact signatures, so mypy fails them when those
change. Nothing else loads this module.

- ``TTS_TEST_BATCH_DELAY_MS``: every model call also waits this long, so the tiny voice behaves
  like a slow model (tasks take time, workers hold them when killed) without loading the CPU; the
  wait stops as ONNX Runtime's would when its ``RunOptions`` say terminate.
- ``TTS_TEST_POISON``: a request whose text contains this word kills the worker process
  (``os._exit(137)``) whenever it is synthesized, as a segfault in a native library would.
- ``TTS_TEST_SLOW_LOAD``: ``voice=seconds``: loading that voice also sleeps this long, as a
  TensorRT engine build does.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from tts_queue.synthesis.inference import ItemAudio, Preempted, Scales, VoiceModel
from tts_queue.synthesis.registry import Loader
from tts_queue.synthesis.request import SynthesisRequest
from tts_queue.synthesis.synthesizer import SynthesisResult, Synthesizer
from tts_queue.synthesis.voice import LoadedVoice, Voice, VoiceSpec


class SlowModel(VoiceModel):
    """The voice's model, each call made ``delay_s`` slower."""

    def __init__(self, model: VoiceModel, delay_s: float) -> None:
        self.__dict__.update(model.__dict__)  # the same session and outputs: a copy, not a load
        self.delay_s = delay_s

    def run_batch(self, ids: Sequence[Sequence[int]], scales: Scales, speaker_id: int | None = None,
                  run_options: Any = None, narrow: bool = False) -> list[ItemAudio]:
        """Wait ``delay_s`` (stopping as ONNX Runtime does on ``terminate``), then run the batch."""
        until = time.monotonic() + self.delay_s
        while time.monotonic() < until:
            if run_options is not None and run_options.terminate:
                raise Preempted("stopped by the fault plugin's RunOptions")
            time.sleep(min(0.005, max(0.0, until - time.monotonic())))
        return super().run_batch(ids, scales, speaker_id, run_options, narrow)


class PoisonedSynthesizer(Synthesizer):
    """The worker's synthesizer; a text containing ``word`` kills the process."""

    def __init__(self, synthesizer: Synthesizer, word: str) -> None:
        super().__init__(synthesizer.registry, synthesizer.engine)
        self.word = word

    def synthesize(self, request: SynthesisRequest, priority: int = 0,
                   on_audio: Callable[[np.ndarray[Any, Any], int], None] | None = None,
                   owner: str = "") -> SynthesisResult:
        """Die on the poison word, else synthesize."""
        if self.word in request.text:
            os._exit(137)
        return super().synthesize(request, priority, on_audio, owner)


class Faults:
    """The plugin, configured from the environment the test gave the worker."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self.delay_s = float(environ.get("TTS_TEST_BATCH_DELAY_MS", "0")) / 1000
        self.poison = environ.get("TTS_TEST_POISON", "")
        voice, _, seconds = environ.get("TTS_TEST_SLOW_LOAD", "").partition("=")
        self.slow_voice, self.slow_s = voice, float(seconds or 0)

    def loader(self, load: Loader) -> Loader:
        """Slow loads of one voice; slow model calls of every voice."""
        def faulty(spec: VoiceSpec) -> LoadedVoice:
            if spec.id == self.slow_voice:
                time.sleep(self.slow_s)
            voice = load(spec)
            if self.delay_s and isinstance(voice, Voice):  # a Piper voice: its own model
                voice.model = SlowModel(voice.model, self.delay_s)
            return voice

        return faulty

    def synthesizer(self, synthesizer: Synthesizer) -> Synthesizer:
        """The poison word's synthesizer."""
        return PoisonedSynthesizer(synthesizer, self.poison) if self.poison else synthesizer


plugin = Faults(os.environ)
