"""Execution providers for a voice's ONNX session: which ones, in what order, with which options.

``choose_providers`` turns ``TTS_PROVIDERS`` into an ordered list; ``provider_options`` gives each
chosen provider the options that matter for a Piper (VITS) voice:

- CUDA: the device, an arena that grows by what is asked (``kSameAsRequested``: sentence lengths
  vary, so powers of two would strand memory), the cuDNN convolution search
  (``TTS_CUDNN_CONV_ALGO_SEARCH``), and copies on the default stream;
- TensorRT: the device, fp16, an engine cache and a timing cache in one folder per model under
  ``TTS_TRT_CACHE_DIR`` (engines survive restarts), and one optimization profile that covers every
  shape the worker can send (batch 1..the pool's ``max_batch``, ids 1..the most a sentence can
  have after splitting), so a new shape never triggers an engine build in the middle of a request.

Nothing here needs a GPU: the options are plain data, built from the settings and the model's
declared inputs, and the tests check them as such.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tts_queue.enums import PROVIDERS
from tts_queue.errors import ConfigError
from tts_queue.settings import SessionConfig, Settings

if TYPE_CHECKING:
    import onnx

log = logging.getLogger(__name__)

CPU = PROVIDERS["cpu"]
CUDA = PROVIDERS["cuda"]
TENSORRT = PROVIDERS["tensorrt"]
PREFERENCE = tuple(dict.fromkeys(PROVIDERS.values()))  # TensorRT, CUDA, CPU
GPU = (TENSORRT, CUDA)
CONV_SEARCH = {"heuristic": "HEURISTIC", "exhaustive": "EXHAUSTIVE", "default": "DEFAULT"}
# What Piper's exporter names the inputs: ids [batch, ids], lengths [batch], scales [3], sid [batch].
IDS_INPUT = "input"
SCALES_INPUT = "scales"

# A provider as ONNX Runtime takes it: a name, or a name with its options.
ProviderOptions = dict[str, str | int | bool]
ProviderEntry = tuple[str, ProviderOptions]
InputShape = tuple[str, tuple[int | None, ...]]  # name, dimensions (None: dynamic)


def choose_providers(requested: str, available: Sequence[str]) -> list[str]:
    """Execution providers to pass to ONNX Runtime, best first, from ``auto`` or a list like ``cuda,cpu``.

    ``auto`` takes TensorRT, then CUDA, among those ONNX Runtime reports available, then CPU. A
    list is taken in its order with CPU moved last (CPU never fails, so nothing after it would be
    tried). A list that names ``cpu`` drops unavailable providers with a warning; a list without
    ``cpu`` is a demand: a provider it names that is not available raises ``ConfigError``.
    """
    if requested.strip().lower() == "auto":
        return [p for p in PREFERENCE[:-1] if p in available] + [CPU]
    wanted: list[str] = []
    for name in requested.split(","):
        key = name.strip()
        if not key:
            continue
        full = PROVIDERS.get(key.lower(), key)
        if full not in PREFERENCE:
            raise ConfigError(f"unknown execution provider {key!r}: use auto, tensorrt, cuda or cpu")
        wanted.append(full)
    missing = [p for p in wanted if p not in available and p != CPU]
    if missing and CPU not in wanted:
        raise ConfigError(f"TTS_PROVIDERS={requested!r} demands {', '.join(missing)}, which this "
                          f"onnxruntime does not have (available: {', '.join(available) or 'none'})")
    for name in missing:
        log.warning("execution provider %s is not available here; skipping it", name)
    chosen = [p for p in wanted if p not in missing and p != CPU]
    return chosen + [CPU] if CPU in wanted else chosen


def max_sentence_ids(max_phonemes: int, id_map: Mapping[str, Sequence[int]]) -> int:
    """The most ids a sentence of ``max_phonemes`` phonemes can become (Piper's ``phonemes_to_ids``:
    BOS, PAD, then each phoneme's ids and a PAD, then EOS), for this voice's id map."""
    def width(symbol: str) -> int:
        return len(id_map.get(symbol, (0,)))

    widest = max((len(ids) for ids in id_map.values()), default=1)
    return width("^") + width("_") + max_phonemes * (widest + width("_")) + width("$")


@dataclass(frozen=True)
class Shapes:
    """Bounds of the dynamic axes a session must serve without a rebuild: sentences per call and
    ids per sentence (after splitting)."""

    max_batch: int = 32
    max_ids: int = 803  # 400 phonemes with Piper's default id map

    @property
    def opt_batch(self) -> int:
        """The batch size TensorRT tunes for: a full batch (batches fill up under load)."""
        return self.max_batch

    @property
    def opt_ids(self) -> int:
        """The sentence length TensorRT tunes for: a typical sentence (about 120 phonemes), not
        the longest one."""
        return max(1, min(self.max_ids, 256))


@dataclass(frozen=True)
class SessionPlan:
    """What a worker's sessions need beyond ``SessionConfig``: the pool's batch bounds, the longest
    sentence, and where TensorRT engines are cached."""

    max_batch: int = 32
    max_phonemes: int = 400
    engine_dir: Path | None = None
    max_frames: int = 8000  # padded frames per call of a model that pads by frames (Kokoro's)

    @classmethod
    def from_settings(cls, settings: Settings) -> SessionPlan:
        """The plan of a worker serving ``settings.worker.pool``."""
        pool = settings.pool(settings.worker.pool)
        return cls(pool.max_batch, settings.request.max_sentence_phonemes, settings.trt_cache_dir,
                   pool.max_padded_frames)

    def shapes(self, id_map: Mapping[str, Sequence[int]]) -> Shapes:
        """The dynamic axes' bounds for a voice with this id map."""
        return Shapes(self.max_batch, max_sentence_ids(self.max_phonemes, id_map))


def declared_inputs(model: onnx.ModelProto) -> list[InputShape]:
    """Each graph input of an ``onnx.ModelProto`` with its declared dimensions (None where dynamic)."""
    initializers = {i.name for i in model.graph.initializer}
    found = []
    for value in model.graph.input:
        if value.name in initializers:
            continue
        dims = tuple(d.dim_value if d.HasField("dim_value") else None
                     for d in value.type.tensor_type.shape.dim)
        found.append((value.name, dims))
    return found


def profile_shapes(inputs: Sequence[InputShape], shapes: Shapes) -> dict[str, str]:
    """TensorRT's ``trt_profile_{min,opt,max}_shapes`` for every input with a dynamic axis.

    A dynamic first axis is the batch (1..max_batch); the ids input's second axis is the sentence
    (1..max_ids); ``scales`` holds 3 values. Any other dynamic axis cannot be bounded from the
    settings: ``ConfigError`` rather than a profile that would rebuild engines mid-request.
    """
    bounds: dict[str, list[str]] = {"min": [], "opt": [], "max": []}
    for name, dims in inputs:
        if all(d is not None for d in dims):
            continue
        per_kind: dict[str, list[int]] = {"min": [], "opt": [], "max": []}
        for axis, dim in enumerate(dims):
            if dim is not None:
                low = opt = high = dim
            elif axis == 0 and name != SCALES_INPUT:
                low, opt, high = 1, shapes.opt_batch, shapes.max_batch
            elif axis == 1 and name == IDS_INPUT:
                low, opt, high = 1, shapes.opt_ids, shapes.max_ids
            elif name == SCALES_INPUT:
                low = opt = high = 3
            else:
                raise ConfigError(f"input {name!r} has a dynamic axis {axis} that no setting bounds; "
                                  f"TensorRT needs a profile for it")
            for kind, value in (("min", low), ("opt", opt), ("max", high)):
                per_kind[kind].append(value)
        for kind, values in per_kind.items():
            bounds[kind].append(f"{name}:{'x'.join(str(v) for v in values)}")
    if not bounds["max"]:
        return {}
    return {f"trt_profile_{kind}_shapes": ",".join(items) for kind, items in bounds.items()}


def cuda_options(config: SessionConfig) -> ProviderOptions:
    """The CUDA provider's options."""
    return {
        "device_id": config.cuda_device,
        "arena_extend_strategy": "kSameAsRequested",
        "cudnn_conv_algo_search": CONV_SEARCH[config.cudnn_conv_algo_search],
        "do_copy_in_default_stream": True,
    }


def tensorrt_options(config: SessionConfig, inputs: Sequence[InputShape], shapes: Shapes,
                     engine_dir: Path) -> ProviderOptions:
    """The TensorRT provider's options: fp16, engine and timing caches in ``engine_dir``, a profile."""
    return {
        "device_id": config.cuda_device,
        "trt_fp16_enable": config.trt_fp16,
        "trt_engine_cache_enable": True,
        "trt_engine_cache_path": str(engine_dir),
        "trt_timing_cache_enable": True,
        "trt_timing_cache_path": str(engine_dir),
        **profile_shapes(inputs, shapes),
    }


def provider_options(chosen: Sequence[str], config: SessionConfig, inputs: Sequence[InputShape],
                     shapes: Shapes, engine_dir: Path | None) -> list[ProviderEntry]:
    """``chosen`` as ONNX Runtime's ``providers`` argument: each with its options (CPU has none).

    TensorRT needs ``engine_dir`` (a folder for this model alone: engines are only valid for the
    graph they were built from); without one it is a ``ConfigError``.
    """
    entries: list[ProviderEntry] = []
    for name in chosen:
        if name == CUDA:
            entries.append((name, cuda_options(config)))
        elif name == TENSORRT:
            if engine_dir is None:
                raise ConfigError("TensorRT needs an engine cache folder (TTS_TRT_CACHE_DIR)")
            entries.append((name, tensorrt_options(config, inputs, shapes, engine_dir)))
        else:
            entries.append((name, {}))
    return entries
