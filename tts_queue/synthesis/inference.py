"""What every voice's ONNX Runtime sessions share: their options (``session_options``), the process's
one CPU arena, a graph's part that computes one output, the batch item's exact audio
(``ItemAudio``), the synthesis scales, and the signal of a call stopped on purpose (``Preempted``).
Piper's model is ``tts_queue.synthesis.piper_model``, Kokoro's graph ``tts_queue.synthesis.kokoro.graph``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from tts_queue.enums import GRAPH_OPTIMIZATION
from tts_queue.errors import ConfigError
from tts_queue.settings import SessionConfig
from tts_queue.synthesis.providers import (
    choose_providers,
)

__all__ = ["ItemAudio", "Scales", "choose_providers", "session_options"]

log = logging.getLogger(__name__)
_ARENA = threading.Lock()
_arena_registered = False


def shared_cpu_arena(ort: Any, options: Any) -> None:
    """Make ``options``' session allocate from the process's one shared CPU arena (registered with
    ONNX Runtime's environment on first use). A voice's session on every core and its
    single-threaded twin never run a call at once beyond the engine's one-largest-call bound, so
    one arena serves both: with an arena each, the twin cost 470 MB more once the longest sentence
    had run on both; with the shared one, 55 MB (its weights)."""
    global _arena_registered
    with _ARENA:
        if not _arena_registered:
            info = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0,
                                     ort.OrtMemType.DEFAULT)
            ort.create_and_register_allocator(info, None)
            _arena_registered = True
    options.add_session_config_entry("session.use_env_allocators", "1")


class Preempted(Exception):  # noqa: N818 - a signal between the model and the engine, not an error
    """A model call stopped on purpose (its ``RunOptions.terminate``): run it again later."""


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


def session_options(config: SessionConfig) -> Any:
    """``onnxruntime.SessionOptions`` from a ``SessionConfig``."""
    import onnxruntime as ort

    if config.graph_optimization not in GRAPH_OPTIMIZATION:
        raise ConfigError(f"graph optimization must be one of {sorted(GRAPH_OPTIMIZATION)}")
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel(
        GRAPH_OPTIMIZATION[config.graph_optimization]
    )
    options.intra_op_num_threads = config.intra_op_threads
    options.inter_op_num_threads = config.inter_op_threads
    # Every sentence has its own input shape, and ONNX Runtime keeps a memory pattern per shape it
    # has seen: a worker's RSS crept by the book (the session_memory benchmark: 642 -> 741 MB over
    # 400 sentences with patterns, 637 -> 648 MB without, the same CPU time; no arena at all would
    # stay near 440 MB but cost 14% more CPU).
    options.enable_mem_pattern = False
    if not config.allow_spinning:
        # Idle ONNX threads otherwise busy-wait after each run, taking CPU from the API and
        # the other processes sharing the machine.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.add_session_config_entry("session.inter_op.allow_spinning", "0")
    elif config.spin_us:
        # ONNX Runtime's own spin outlasts the gaps between one call's operators by far: a lone call
        # burnt about 30% more CPU than with a short spin, for the same latency (the spin benchmark).
        options.add_session_config_entry("session.intra_op.spin_duration_us", str(config.spin_us))
    return options


def graph_part(model_bytes: bytes, output: str | None = None) -> bytes:
    """The part of a graph that computes ``output`` (default: its second output) from its inputs
    (``onnx.utils.Extractor``): ONNX Runtime runs the whole graph even for one output."""
    import onnx
    from onnx.utils import Extractor

    model = onnx.load_from_string(model_bytes)
    inputs = [i.name for i in model.graph.input]
    wanted = output or model.graph.output[1].name
    return bytes(Extractor(model).extract_model(inputs, [wanted]).SerializeToString())


class BuiltOnce:
    """A value built on its first use, by one thread (the others wait for it)."""

    def __init__(self, build: Callable[[], Any]) -> None:
        self._build = build
        self._value: Any = None
        self._lock = threading.Lock()

    def get(self) -> Any:
        with self._lock:
            if self._value is None:
                self._value = self._build()
            return self._value
