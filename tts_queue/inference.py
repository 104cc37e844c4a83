"""The ONNX Runtime session of a voice: providers, threads, and exact batched inference.

``VoiceModel.load`` patches the graph in memory so it also returns the per-phoneme frame counts
(the output of its one ``Ceil`` node), then ``run_batch`` pads many id sequences into one call
and cuts the padded output back into exact per-item audio with those counts. Nothing else in the
project calls ``session.run``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from tts_queue.errors import ConfigError, ModelLoadError, SynthesisError

log = logging.getLogger(__name__)

PREFERENCE = ("TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider")
_ALIASES = {
    "tensorrt": "TensorrtExecutionProvider",
    "trt": "TensorrtExecutionProvider",
    "cuda": "CUDAExecutionProvider",
    "cpu": "CPUExecutionProvider",
}
_OPT_LEVELS = {"disable": 0, "basic": 1, "extended": 2, "all": 99}


@dataclass(frozen=True)
class SessionConfig:
    """How to build an ONNX Runtime session: providers, thread counts and graph optimization."""

    providers: str = "auto"
    intra_op_threads: int = 0
    inter_op_threads: int = 1
    graph_optimization: str = "all"
    allow_spinning: bool = True


@dataclass(frozen=True)
class Scales:
    """The model's three synthesis scales; one value serves a whole batch."""

    noise_scale: float
    length_scale: float
    noise_w: float

    def as_array(self) -> npt.NDArray[np.float32]:
        """The ``scales`` input tensor."""
        return np.array([self.noise_scale, self.length_scale, self.noise_w], dtype=np.float32)


@dataclass(frozen=True)
class ItemAudio:
    """One batch item cut out of the padded output: exact samples and samples per phoneme id."""

    samples: npt.NDArray[np.float32]
    phoneme_samples: npt.NDArray[np.int64]


def choose_providers(requested: str, available: Sequence[str]) -> list[str]:
    """Execution providers to try, best first, from ``auto`` or a comma list like ``cuda,cpu``.

    ``auto`` prefers TensorRT, then CUDA, then CPU among those ONNX Runtime reports available;
    named providers that are not available are dropped with a warning, and CPU is always last.
    """
    if requested.strip().lower() == "auto":
        wanted = list(PREFERENCE)
    else:
        wanted = []
        for name in requested.split(","):
            key = name.strip()
            if not key:
                continue
            full = _ALIASES.get(key.lower(), key)
            if full not in PREFERENCE:
                raise ConfigError(f"unknown execution provider {key!r}: use auto, tensorrt, cuda or cpu")
            wanted.append(full)
    chosen = [p for p in wanted if p in available]
    for missing in (p for p in wanted if p not in available):
        if requested.strip().lower() != "auto":
            log.warning("execution provider %s is not available here; skipping it", missing)
    # CPU never fails to load, so anything after it would never be tried: it goes last.
    return [p for p in chosen if p != "CPUExecutionProvider"] + ["CPUExecutionProvider"]


def session_options(config: SessionConfig) -> Any:
    """``onnxruntime.SessionOptions`` from a ``SessionConfig``."""
    import onnxruntime as ort

    if config.graph_optimization not in _OPT_LEVELS:
        raise ConfigError(f"graph optimization must be one of {sorted(_OPT_LEVELS)}")
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel(
        _OPT_LEVELS[config.graph_optimization]
    )
    options.intra_op_num_threads = config.intra_op_threads
    options.inter_op_num_threads = config.inter_op_threads
    if not config.allow_spinning:
        # Idle ONNX threads otherwise busy-wait after each run, taking CPU from the API and
        # the other processes sharing the machine.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.add_session_config_entry("session.inter_op.allow_spinning", "0")
    return options


def _patched_model_bytes(model_path: Path) -> bytes:
    """The model with its ``Ceil`` (frames per phoneme) tensor added to the outputs."""
    import onnx
    from piper.patch_voice_with_alignment import add_alignment_output

    try:
        model = onnx.load(str(model_path))
    except Exception as exc:
        raise ModelLoadError(f"cannot read ONNX model {model_path.name}: {exc}") from exc
    try:
        add_alignment_output(model)
    except ValueError as exc:
        if "already marked" not in str(exc):
            raise ModelLoadError(
                f"{model_path.name} has no single Ceil node; cannot cut batches exactly: {exc}"
            ) from exc
    return bytes(model.SerializeToString())


class VoiceModel:
    """An ONNX voice session that synthesizes padded batches and trims them exactly."""

    def __init__(self, session: Any, provider: str, hop_length: int, multi_speaker: bool) -> None:
        self.session = session
        self.provider = provider
        self.hop_length = hop_length
        self.multi_speaker = multi_speaker

    @classmethod
    def load(
        cls, model_path: Path, config: SessionConfig, hop_length: int = 256
    ) -> VoiceModel:
        """Build the session, falling back provider by provider down to CPU."""
        import onnxruntime as ort

        model_bytes = _patched_model_bytes(model_path)
        options = session_options(config)
        last_error: Exception | None = None
        for provider in choose_providers(config.providers, ort.get_available_providers()):
            try:
                session = ort.InferenceSession(model_bytes, sess_options=options, providers=[provider])
            except Exception as exc:  # a GPU provider can fail at session creation
                log.warning("provider %s failed for %s: %s", provider, model_path.name, exc)
                last_error = exc
                continue
            inputs = {i.name for i in session.get_inputs()}
            if not {"input", "input_lengths", "scales"} <= inputs or len(session.get_outputs()) < 2:
                raise ModelLoadError(f"{model_path.name} does not have a Piper voice's signature")
            log.info("loaded %s with %s", model_path.name, provider)
            return cls(session, provider, hop_length, "sid" in inputs)
        raise ModelLoadError(f"no execution provider could load {model_path.name}: {last_error}")

    def run_batch(
        self, ids: Sequence[Sequence[int]], scales: Scales, speaker_id: int | None = None
    ) -> list[ItemAudio]:
        """Synthesize every id sequence in one ONNX call; return exact per-item audio."""
        if not ids:
            return []
        lengths = np.array([len(seq) for seq in ids], dtype=np.int64)
        padded = np.zeros((len(ids), int(lengths.max())), dtype=np.int64)
        for row, seq in enumerate(ids):
            padded[row, : len(seq)] = seq
        feeds: dict[str, Any] = {
            "input": padded,
            "input_lengths": lengths,
            "scales": scales.as_array(),
        }
        if self.multi_speaker:
            feeds["sid"] = np.full(len(ids), speaker_id or 0, dtype=np.int64)
        try:
            audio, frames = self.session.run(None, feeds)[:2]
        except Exception as exc:
            raise SynthesisError(f"the model failed on a batch of {len(ids)}: {exc}") from exc
        frames = np.asarray(frames).reshape(len(ids), -1).astype(np.int64)
        audio = np.asarray(audio, dtype=np.float32).reshape(len(ids), -1)
        items = []
        for row, length in enumerate(lengths):
            per_phoneme = frames[row, :length] * self.hop_length
            n = min(int(per_phoneme.sum()), audio.shape[1])
            items.append(ItemAudio(samples=audio[row, :n].copy(), phoneme_samples=per_phoneme))
        return items
