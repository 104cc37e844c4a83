"""The raw model for the scenarios that measure ONNX Runtime itself: a voice's sentences as its
model's ids, a session of its model with a given thread count or spin, and one call."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.harness.run import Run
from bench.harness.texts import SENTENCES

if TYPE_CHECKING:
    from tts_queue.synthesis.voice import LoadedVoice


def voice_ids(run: Run, voice: str, sentences: int = len(SENTENCES)) -> tuple[LoadedVoice, list[list[int]]]:
    """``voice`` loaded and the first ``sentences`` of ``SENTENCES`` as its model's ids, one call each."""
    from tts_queue.settings import Settings
    from tts_queue.synthesis.registry import VoiceRegistry

    settings = Settings.from_env(run.env(voice))
    loaded = VoiceRegistry.from_settings(settings).load(None)
    limit = settings.request.max_sentence_phonemes
    return loaded, [ids for text in SENTENCES[:sentences] for ids in loaded.sentence_ids(text, limit)]


def session(model: Path, intra_op_threads: int = 0, spin: str = "") -> Any:
    """A CPU session of ``model``: ``intra_op_threads`` (0: one per core), no memory patterns (as the
    service's sessions); with ``spin``, the service's own options with that spinning (``default``:
    ONNX Runtime's own, ``off``: none, a number: that many microseconds)."""
    import onnxruntime as ort

    if spin:
        from tts_queue.settings import SessionConfig
        from tts_queue.synthesis.inference import session_options

        config = (SessionConfig(allow_spinning=False) if spin == "off"
                  else SessionConfig(spin_us=0 if spin == "default" else int(spin)))
        return ort.InferenceSession(str(model), session_options(config), providers=["CPUExecutionProvider"])
    options = ort.SessionOptions()
    options.intra_op_num_threads = intra_op_threads
    options.inter_op_num_threads = 1
    options.enable_mem_pattern = False
    return ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])


def call(model: Any, ids: Sequence[int]) -> None:
    """One call of a Piper-shaped model on ``ids`` with its usual scales."""
    import numpy as np

    model.run(None, {"input": np.array([ids], dtype=np.int64),
                     "input_lengths": np.array([len(ids)], dtype=np.int64),
                     "scales": np.array([0.667, 1.0, 0.8], dtype=np.float32)})
