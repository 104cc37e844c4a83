"""Fault injection for the worker processes some tests start: a worker plugin
(``TTS_WORKER_PLUGINS=tests.hooks.faults:plugin``, which ``tests.support.hooked`` sets) that wraps
the worker's voice loader and synthesizer through their seams (``tts_queue.wiring.plugins``). The
wrappers subclass the real classes with their exact signatures, so mypy fails them when those
change. Nothing else loads this module.

- ``TTS_TEST_BATCH_DELAY_MS``: every model call also waits this long, so the tiny voice behaves
  like a slow model (tasks take time, workers hold them when killed) without loading the CPU; the
  wait stops as ONNX Runtime's would when its ``RunOptions`` say terminate.
- ``TTS_TEST_POISON``: a request whose text contains this word kills the worker process
  (``os._exit(137)``) whenever it is synthesized, as a segfault in a native library would.
- ``TTS_TEST_SLOW_LOAD``: ``voice=seconds``: loading that voice also sleeps this long, as a
  TensorRT engine build does.
- ``TTS_TEST_HANG``: ``sentence=seconds``: the first model call (of this process) that has that
  sentence in it waits this much longer, as a model stuck for a while would (a stall).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from tts_queue.synthesis.inference import ItemAudio, Preempted, Scales
from tts_queue.synthesis.piper_model import PiperModel
from tts_queue.synthesis.registry import Loader
from tts_queue.synthesis.request import SynthesisRequest
from tts_queue.synthesis.synthesizer import SynthesisResult, Synthesizer
from tts_queue.synthesis.voice import LoadedVoice, PiperVoice, VoiceSpec


class SlowModel(PiperModel):
    """The voice's model, each call made ``delay_s`` slower (and the first call with ``hang_ids``
    in it ``hang_s`` more)."""

    def __init__(self, model: PiperModel, delay_s: float, hang_ids: Sequence[int] = (),
                 hang_s: float = 0.0) -> None:
        self.__dict__.update(model.__dict__)  # the same session and outputs: a copy, not a load
        self.delay_s = delay_s
        self.hang_ids, self.hang_s = tuple(hang_ids), hang_s
        self.hung = threading.Event()

    def run_batch(self, ids: Sequence[Sequence[int]], scales: Scales, speaker_id: int | None = None,
                  run_options: Any = None, narrow: bool = False) -> list[ItemAudio]:
        """Wait ``delay_s`` (stopping as ONNX Runtime does on ``terminate``), then run the batch."""
        extra = 0.0
        if self.hang_ids and not self.hung.is_set() and any(tuple(row) == self.hang_ids for row in ids):
            self.hung.set()
            extra = self.hang_s
        until = time.monotonic() + self.delay_s + extra
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
        sentence, _, hang = environ.get("TTS_TEST_HANG", "").rpartition("=")
        self.hang_sentence, self.hang_s = sentence, float(hang or 0)

    def loader(self, load: Loader) -> Loader:
        """Slow loads of one voice; slow model calls of every voice."""
        def faulty(spec: VoiceSpec) -> LoadedVoice:
            if spec.id == self.slow_voice:
                time.sleep(self.slow_s)
            voice = load(spec)
            if (self.delay_s or self.hang_s) and isinstance(voice, PiperVoice):  # its own model
                hang = voice.sentence_ids(self.hang_sentence, 400)[0] if self.hang_sentence else ()
                voice.model = SlowModel(voice.model, self.delay_s, hang, self.hang_s)
            return voice

        return faulty

    def synthesizer(self, synthesizer: Synthesizer) -> Synthesizer:
        """The poison word's synthesizer."""
        return PoisonedSynthesizer(synthesizer, self.poison) if self.poison else synthesizer


plugin = Faults(os.environ)
