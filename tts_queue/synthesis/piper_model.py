"""Piper's model: the ONNX Runtime session of a Piper voice, and exact batched inference.

``PiperModel.load`` patches the graph in memory so it also returns the per-phoneme frame counts
(the output of its one ``Ceil`` node), then ``run_batch`` pads many id sequences into one call
and cuts the padded output back into exact per-item audio with those counts. The sessions' options
are ``tts_queue.synthesis.inference``'s (read from that module when a session is built).
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from tts_queue.errors import ConfigError, ModelLoadError, SynthesisError
from tts_queue.settings import SessionConfig
from tts_queue.synthesis import inference
from tts_queue.synthesis.inference import BuiltOnce, ItemAudio, Preempted, Scales
from tts_queue.synthesis.providers import (
    CPU,
    GPU,
    PREFERENCE,
    TENSORRT,
    Shapes,
    choose_providers,
    declared_inputs,
    provider_options,
)

log = logging.getLogger(__name__)


def _patched_model(model_path: Path) -> tuple[bytes, list[tuple[str, tuple[int | None, ...]]]]:
    """The model with its ``Ceil`` (frames per phoneme) tensor added to the outputs, as bytes, and
    its declared inputs (TensorRT's optimization profile is built from them)."""
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
    return bytes(model.SerializeToString()), declared_inputs(model)


def _preload_cuda(ort: Any) -> None:
    """Load the CUDA and cuDNN libraries that ``onnxruntime-gpu[cuda,cudnn]`` installed as pip
    wheels (ONNX Runtime 1.21+), which the CUDA provider would not find on its own and would then
    fall back to CPU; a no-op on CPU builds, on older releases and where they are already loaded."""
    preload = getattr(ort, "preload_dlls", None)
    if preload is None:
        return
    try:
        preload()
    except Exception as exc:  # noqa: BLE001 - the session then reports where it really landed
        log.warning("could not preload the CUDA libraries: %s", exc)


class PiperModel:
    """An ONNX voice session that synthesizes padded batches and trims them exactly.

    With ``io_binding`` (CUDA and TensorRT sessions, ``TTS_IO_BINDING``) a batch runs through ONNX
    Runtime's I/O binding: inputs are bound from host memory and both outputs are bound to host
    memory, so ONNX Runtime writes the audio once, straight from the device into the array this
    class reads; the plain ``session.run`` path is used otherwise. Both give the same samples.

    A CPU session on every core (``TTS_INTRA_OP_THREADS=0``) also has a narrow twin: the same graph
    on one intra-op thread, built on its first ``narrow`` call (``make_narrow``); both allocate
    from the process's one CPU arena (``shared_cpu_arena``), so the twin costs its weights, not a
    second arena as large as the longest call's. The engine runs calls side by side on it under
    load and a lone call on the wide session (``python -m bench run runners`` measures both).
    """

    max_batch = 0  # a dynamic batch axis: the pool's budget decides

    def __init__(self, session: Any, providers: Sequence[str], hop_length: int, multi_speaker: bool,
                 io_binding: bool = False, make_narrow: Callable[[], Any] | None = None,
                 make_durations: Callable[[], Any] | None = None) -> None:
        self.session = session
        self.providers = list(providers)
        self.hop_length = hop_length
        self.multi_speaker = multi_speaker
        self.io_binding = io_binding
        self.load_s = 0.0  # how long building the session took (a TensorRT engine build shows here)
        self._make_narrow = make_narrow
        self._narrow: Any = None
        self._narrow_lock = threading.Lock()
        self._durations = BuiltOnce(make_durations) if make_durations is not None else None

    @property
    def has_narrow(self) -> bool:
        """Whether ``narrow`` calls run on a single-threaded twin (else on the one session)."""
        return self._make_narrow is not None

    def narrow_session(self) -> Any:
        """The single-threaded twin (built on first use: its weights again in memory), or the one
        session when there is none."""
        if self._make_narrow is None:
            return self.session
        with self._narrow_lock:
            if self._narrow is None:
                started = time.perf_counter()
                try:
                    self._narrow = self._make_narrow()
                except Exception as exc:  # noqa: BLE001 - side-by-side calls share the one session
                    log.warning("no single-threaded session for side-by-side calls (they share the "
                                "one session): %s", exc)
                    self._narrow = self.session
                else:
                    log.info("built the single-threaded session for side-by-side calls in %.2f s",
                             time.perf_counter() - started)
            return self._narrow

    @property
    def provider(self) -> str:
        """The execution provider the session actually runs on (read back from the session)."""
        return self.providers[0]

    @classmethod
    def load(
        cls, model_path: Path, config: SessionConfig, hop_length: int = 256,
        shapes: Shapes | None = None, engine_dir: Path | None = None,
    ) -> PiperModel:
        """Build the session with the ordered provider list and report where it really landed.

        Each provider gets its options (``providers.provider_options``: ``shapes`` bound
        TensorRT's optimization profile, ``engine_dir`` holds its engines, in a folder per model).
        ONNX Runtime does not raise when a GPU provider fails to initialize: it logs and runs on
        CPU. So the providers are read back from the session; a demanded provider (a list without
        ``cpu``) that did not load raises ``ConfigError``, and ``auto`` says where it landed.
        """
        import onnxruntime as ort

        started = time.perf_counter()
        model_bytes, inputs = _patched_model(model_path)
        wanted = choose_providers(config.providers, ort.get_available_providers())
        if any(p in GPU for p in wanted):
            _preload_cuda(ort)
        if TENSORRT in wanted and engine_dir is not None:
            # Engines are valid only for the graph they were built from: one folder per model.
            engine_dir = engine_dir / hashlib.sha256(model_bytes).hexdigest()[:16]
            engine_dir.mkdir(parents=True, exist_ok=True)
        providers = provider_options(wanted, config, inputs, shapes or Shapes(), engine_dir)
        options = inference.session_options(config)
        twin = wanted[0] == CPU and config.intra_op_threads == 0  # see make_narrow below
        if twin:
            inference.shared_cpu_arena(ort, options)
        try:
            session = ort.InferenceSession(model_bytes, sess_options=options, providers=providers)
        except Exception as exc:
            raise ModelLoadError(f"ONNX Runtime could not load {model_path.name} with "
                                 f"{', '.join(wanted)}: {exc}") from exc
        actual = [p for p in session.get_providers() if p in PREFERENCE] or [CPU]
        if actual[0] != wanted[0]:
            if CPU not in wanted:
                raise ConfigError(f"{model_path.name}: {wanted[0]} was demanded (TTS_PROVIDERS="
                                     f"{config.providers}) but the session fell back to {actual[0]}")
            log.warning("%s: asked for %s, running on %s", model_path.name, wanted[0], actual[0])
        names = {i.name for i in session.get_inputs()}
        if not {"input", "input_lengths", "scales"} <= names or len(session.get_outputs()) < 2:
            raise ModelLoadError(f"{model_path.name} does not have a Piper voice's signature")
        narrow = None
        if twin and actual[0] == CPU:
            one_thread = inference.session_options(replace(config, intra_op_threads=1))
            inference.shared_cpu_arena(ort, one_thread)

            def narrow() -> Any:
                return ort.InferenceSession(_patched_model(model_path)[0], sess_options=one_thread,
                                            providers=[CPU])

        def durations() -> Any:
            single = inference.session_options(replace(config, intra_op_threads=1))
            return ort.InferenceSession(inference.graph_part(_patched_model(model_path)[0]),
                                        sess_options=single, providers=[CPU])

        model = cls(session, actual, hop_length, "sid" in names,
                    io_binding=config.io_binding and actual[0] in GPU, make_narrow=narrow,
                    make_durations=durations)
        model.load_s = time.perf_counter() - started
        log.info("loaded %s on %s (asked for %s) in %.2f s", model_path.name, actual[0],
                 ", ".join(wanted), model.load_s)
        return model

    def _feeds(self, ids: Sequence[Sequence[int]], scales: Scales,
               speaker_id: int | None) -> dict[str, Any]:
        """One call's inputs: the id sequences padded into one batch, their lengths, the scales."""
        lengths = np.array([len(seq) for seq in ids], dtype=np.int64)
        padded = np.zeros((len(ids), int(lengths.max())), dtype=np.int64)
        for row, seq in enumerate(ids):
            padded[row, : len(seq)] = seq
        feeds: dict[str, Any] = {"input": padded, "input_lengths": lengths, "scales": scales.as_array()}
        if self.multi_speaker:
            feeds["sid"] = np.full(len(ids), speaker_id or 0, dtype=np.int64)
        return feeds

    def sentence_samples(self, ids: Sequence[Sequence[int]], scales: Scales,
                         speaker_id: int | None = None) -> list[int]:
        """Each id sequence's length in samples as ``run_batch`` gives it, from the part of the
        graph that computes the frames per phoneme (the encoder and the duration predictor), cut
        out of it on the first call: a seventh of the synthesis' CPU (``python -m bench run measure``).
        The predictor draws its noise (``noise_w``) anew on every call, as ``run_batch`` does: the
        lengths are exact with ``noise_w`` 0, and otherwise drawn as a synthesis draws them."""
        if not ids:
            return []
        if self._durations is None:
            raise SynthesisError("this model was not loaded from a file: no durations")
        feeds = self._feeds(ids, scales, speaker_id)
        lengths = feeds["input_lengths"]
        try:
            (frames,) = self._durations.get().run(None, feeds)
        except Exception as exc:
            raise SynthesisError(f"the model's durations failed on a batch of {len(ids)}: {exc}") from exc
        frames = np.asarray(frames).reshape(len(ids), -1).astype(np.int64)
        totals = [int(frames[row, :length].sum()) * self.hop_length for row, length in enumerate(lengths)]
        return [min(total, max(totals)) for total in totals]  # as run_batch cuts the padded audio

    def sentence_frames(self, ids: Sequence[Sequence[int]], scales: Scales) -> list[int] | None:
        """``None``: a batch pads by ids (VITS masks them with ``input_lengths``)."""
        return None

    shared = ""  # one voice and one set of scales a call: ``scales`` and ``sid`` serve the batch

    def run_shared(self, models: Sequence[Any], ids: Sequence[Sequence[int]], scales: Sequence[Scales],
                   run_options: Any = None) -> list[ItemAudio]:
        """Never called: a Piper voice shares no call with other voices (``shared`` is empty)."""
        raise NotImplementedError("a Piper voice's calls hold one voice and one set of scales")

    def run_batch(
        self, ids: Sequence[Sequence[int]], scales: Scales, speaker_id: int | None = None,
        run_options: Any = None, narrow: bool = False,
    ) -> list[ItemAudio]:
        """Synthesize every id sequence in one ONNX call; return exact per-item audio.
        ``run_options`` (``onnxruntime.RunOptions``): setting its ``terminate`` from another
        thread stops the call, which raises ``Preempted``. ``narrow``: on the single-threaded
        twin, for a call beside others (the same samples)."""
        if not ids:
            return []
        feeds = self._feeds(ids, scales, speaker_id)
        lengths = feeds["input_lengths"]
        try:
            if self.io_binding:
                outputs = self._run_bound(feeds, run_options)
            else:
                session = self.narrow_session() if narrow else self.session
                outputs = (session.run(None, feeds) if run_options is None
                           else session.run(None, feeds, run_options))
            audio, frames = outputs[:2]
        except Exception as exc:
            if run_options is not None and run_options.terminate:
                raise Preempted("the batch was stopped to run interactive work first") from exc
            raise SynthesisError(f"the model failed on a batch of {len(ids)}: {exc}") from exc
        frames = np.asarray(frames).reshape(len(ids), -1).astype(np.int64)
        audio = np.asarray(audio, dtype=np.float32).reshape(len(ids), -1)
        items = []
        for row, length in enumerate(lengths):
            per_phoneme = frames[row, :length] * self.hop_length
            n = min(int(per_phoneme.sum()), audio.shape[1])
            items.append(ItemAudio(samples=audio[row, :n].copy(), phoneme_samples=per_phoneme))
        return items

    def _run_bound(self, feeds: dict[str, Any], run_options: Any = None) -> list[Any]:
        """One run through I/O binding: host inputs in, every output bound to host memory."""
        binding = self.session.io_binding()
        for name, value in feeds.items():
            binding.bind_cpu_input(name, value)
        for output in self.session.get_outputs():
            binding.bind_output(output.name, "cpu")
        self.session.run_with_iobinding(binding, run_options)
        return [value.numpy() for value in binding.get_outputs()]
