"""TensorRT for Kokoro's batched decoder, where ONNX Runtime finds its libraries.

The decoder's inputs are sized by frames and batch (``decoder``): ``asr [batch, 512, frames]``,
F0 and noise ``[batch, 2 * frames]``, ``style [batch, 256]``, ``frames [batch]``. TensorRT builds
an engine for one optimization profile, a box of shapes, and reserves memory for its far corner;
a call outside the box would fail. So ``DecoderProfile`` is the box the pool's budgets fill: a
full batch (``TTS_GPU_MAX_BATCH``) of its share of the padded frames (``TTS_GPU_MAX_PADDED_FRAMES``
/ batch, at least ``MIN_FRAMES``), tuned for a full batch of typical sentences (``OPT_FRAMES``);
a call of fewer, longer sentences than the box holds runs on the CUDA session beside it
(``DecoderSessions``, the same graph in fp32), as does everything when TensorRT does not load
(logged once, as a warning).

Engines are kept under ``TTS_TRT_CACHE_DIR`` in a folder named by the edited decoder's digest, the
profile and the precision, so a changed graph, budget or precision never reads another's engine.

fp16 (``TTS_TRT_FP16``, on by default) is kept only where it is measured within tolerance at load:
a check batch runs through the fp16 engine and the fp32 CUDA session, and the fp16 engine stays
when every item's log spectrum is within ``FP16_SIMILARITY`` of fp32's, frame by frame (the phase
of near-silent bins is chaotic, so samples are not compared). Otherwise, or when the check cannot
be measured (it fails or gives no finite audio), the engine is built again in fp32 and a warning
says why.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from tts_queue.settings import SessionConfig
from tts_queue.synthesis.inference import session_options
from tts_queue.synthesis.providers import CPU, PREFERENCE, TENSORRT, ProviderEntry, Shapes, provider_options

log = logging.getLogger(__name__)

MIN_FRAMES = 256  # the profile's frames per item at least (6.4 s of audio)
OPT_FRAMES = 160  # a typical sentence (4 s), at which TensorRT tunes its kernels
FP16_SIMILARITY = 0.98  # fp16's log spectra against fp32's, frame by frame, at least
CHANNELS = 512  # the decoder's asr input: channels per frame


@dataclass(frozen=True)
class DecoderProfile:
    """The box of decoder shapes a TensorRT engine is built for: batch 1..``max_batch``, padded
    frames 1..``max_frames``, tuned at ``opt_batch`` x ``opt_frames``."""

    max_batch: int
    max_frames: int
    opt_batch: int
    opt_frames: int

    @classmethod
    def for_pool(cls, max_batch: int, max_padded_frames: int) -> DecoderProfile:
        """The box a pool's budgets fill (module docstring)."""
        batch = max(1, max_batch)
        frames = max(MIN_FRAMES, max_padded_frames // batch) + 1  # the frame beyond the longest
        return cls(batch, frames, batch, min(frames, OPT_FRAMES))

    def covers(self, batch: int, frames: int) -> bool:
        """Whether a call of ``batch`` items padded to ``frames`` is inside the box."""
        return 1 <= batch <= self.max_batch and 1 <= frames <= self.max_frames

    @property
    def key(self) -> str:
        """A short name of the box (part of the engine folder's)."""
        return f"b{self.max_batch}-f{self.max_frames}-opt{self.opt_batch}x{self.opt_frames}"

    def shapes(self) -> dict[str, str]:
        """TensorRT's ``trt_profile_{min,opt,max}_shapes`` for the decoder's five inputs."""
        corners = {"min": (1, 1), "opt": (self.opt_batch, self.opt_frames),
                   "max": (self.max_batch, self.max_frames)}
        return {f"trt_profile_{kind}_shapes": ",".join([
            f"asr:{batch}x{CHANNELS}x{frames}", f"f0:{batch}x{2 * frames}", f"n:{batch}x{2 * frames}",
            f"style:{batch}x256", f"frames:{batch}"]) for kind, (batch, frames) in corners.items()}


def engine_folder(root: Path, model: bytes, profile: DecoderProfile, fp16: bool) -> Path:
    """Where the engines of ``model`` (the edited decoder's bytes) for ``profile`` are kept."""
    digest = hashlib.sha256(model).hexdigest()[:16]
    return root / f"kokoro-decoder-{digest}" / f"{profile.key}-{'fp16' if fp16 else 'fp32'}"


def decoder_providers(chosen: Sequence[str], config: SessionConfig, profile: DecoderProfile,
                      folder: Path, fp16: bool) -> list[ProviderEntry]:
    """ONNX Runtime's providers for the TensorRT decoder: TensorRT with the profile, the engine
    folder and ``fp16``, then the others ``chosen`` (nodes TensorRT cannot take run there)."""
    others = [p for p in chosen if p != TENSORRT]
    entries = provider_options([TENSORRT, *others], config, [], Shapes(), folder)  # (no Piper inputs)
    name, options = entries[0]
    options.update(profile.shapes())
    options["trt_fp16_enable"] = fp16
    return [(name, options), *entries[1:]]


def spectral_similarity(a: npt.NDArray[np.float32], b: npt.NDArray[np.float32]) -> float:
    """The mean cosine of two equally long signals' log spectra, frame by frame (512 samples, hop
    256, mean removed): 1 for the same sound, whatever the phases."""
    if len(a) != len(b) or len(a) < 512 or not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        return 0.0

    def spectrum(x: npt.NDArray[np.float32]) -> Any:
        frames = np.lib.stride_tricks.sliding_window_view(x.astype(np.float64), 512)[::256] * np.hanning(512)
        logs = np.log(np.abs(np.fft.rfft(frames)) + 1e-4)
        logs -= logs.mean(axis=1, keepdims=True)
        return logs / (np.linalg.norm(logs, axis=1, keepdims=True) + 1e-9)

    return float(np.mean(np.sum(spectrum(a) * spectrum(b), axis=1)))


class DecoderSessions:
    """The decoder on TensorRT for the calls inside its profile, else on the fp32 session (CUDA);
    runs like an ONNX Runtime session (``run(None, feeds, run_options)``)."""

    def __init__(self, fallback: Any, engine: Any = None, profile: DecoderProfile | None = None,
                 fp16: bool = False) -> None:
        self.fallback = fallback
        self.engine = engine
        self.profile = profile
        self.fp16 = fp16
        self.outside = 0  # calls the profile did not cover (run on the fallback)

    def run(self, outputs: Any, feeds: Mapping[str, Any], run_options: Any = None) -> Any:
        """One decoder call, on the session whose shapes cover it."""
        session = self.fallback
        if self.engine is not None and self.profile is not None:
            batch, frames = feeds["asr"].shape[0], feeds["asr"].shape[2]
            if self.profile.covers(batch, frames):
                session = self.engine
            else:
                if not self.outside:
                    log.warning("a Kokoro decoder call of %d x %d frames is outside the TensorRT profile "
                                "(%s): it and the next ones like it run on %s", batch, frames,
                                self.profile.key, self.fallback.get_providers()[0])
                self.outside += 1
        if run_options is not None:
            return session.run(outputs, feeds, run_options)
        return session.run(outputs, feeds)


def open_decoder(ort: Any, model: bytes, chosen: Sequence[str], config: SessionConfig,
                 profile: DecoderProfile, root: Path | None,
                 check: Callable[[], dict[str, Any]] | None = None) -> DecoderSessions:
    """The decoder's sessions: the fp32 one on ``chosen`` without TensorRT, and, where TensorRT is
    ``chosen``, loads and has an engine folder, its engine (module docstring); ``check()`` gives
    the fp16 check's feeds (a batch inside the profile)."""
    wanted = [p for p in chosen if p != TENSORRT] or [CPU]
    fallback = ort.InferenceSession(model, sess_options=session_options(config),
                                    providers=provider_options(wanted, config, [], Shapes(), None))
    if TENSORRT not in chosen or root is None:
        return DecoderSessions(fallback)
    fp16 = config.trt_fp16
    engine = _engine(ort, model, chosen, config, profile, root, fp16)
    if engine is None:
        return DecoderSessions(fallback)
    if fp16:
        similarity = _fp16_check(engine, fallback, check)
        if similarity < FP16_SIMILARITY:
            log.warning("the Kokoro decoder's fp16 TensorRT engine is not within tolerance (log-spectral "
                        "similarity %.4f < %.2f against fp32, or not measured): building it in fp32",
                        similarity, FP16_SIMILARITY)
            fp16 = False
            engine = _engine(ort, model, chosen, config, profile, root, fp16)
            if engine is None:
                return DecoderSessions(fallback)
        else:
            log.info("the Kokoro decoder runs TensorRT fp16 (log-spectral similarity %.4f against fp32)",
                     similarity)
    return DecoderSessions(fallback, engine, profile, fp16)


def _engine(ort: Any, model: bytes, chosen: Sequence[str], config: SessionConfig,
            profile: DecoderProfile, root: Path, fp16: bool) -> Any:
    """The decoder's TensorRT session, or ``None`` (logged) where it does not load on TensorRT."""
    folder = engine_folder(root, model, profile, fp16)
    folder.mkdir(parents=True, exist_ok=True)
    try:
        session = ort.InferenceSession(model, sess_options=session_options(config),
                                       providers=decoder_providers(chosen, config, profile, folder, fp16))
    except Exception as exc:  # noqa: BLE001 - the CUDA session serves instead, and the log says so
        log.warning("TensorRT could not load the Kokoro decoder (%s): it runs on CUDA", exc)
        return None
    landed = [p for p in session.get_providers() if p in PREFERENCE]
    if not landed or landed[0] != TENSORRT:
        log.warning("the Kokoro decoder asked for TensorRT and landed on %s: it runs there",
                    landed[0] if landed else CPU)
        return None
    return session


def _fp16_check(engine: Any, fallback: Any, check: Callable[[], dict[str, Any]] | None) -> float:
    """The fp16 engine's worst item's similarity to fp32 on the check batch (0: not measured)."""
    if check is None:
        return 0.0
    try:
        feeds = check()
        (fast,) = engine.run(None, feeds)
        (exact,) = fallback.run(None, feeds)
    except Exception as exc:  # noqa: BLE001 - not measured: fp32 is built instead
        log.warning("the Kokoro decoder's fp16 check failed to run: %s", exc)
        return 0.0
    fast, exact = np.asarray(fast), np.asarray(exact)
    hop = exact.shape[1] // int(feeds["asr"].shape[2])  # samples per frame
    return min(spectral_similarity(fast[row, : int(n) * hop], exact[row, : int(n) * hop])
               for row, n in enumerate(feeds["frames"]))
