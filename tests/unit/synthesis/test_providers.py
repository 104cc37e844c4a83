"""Provider options for CUDA and TensorRT sessions, checked as data (no GPU needed), and the path
from the settings to the options ONNX Runtime is really given."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from piper.phoneme_ids import DEFAULT_PHONEME_ID_MAP

from tests.conftest import CPU_SESSION
from tests.support.tiny_voice import HOP_LENGTH, VoiceFiles, build_model
from tts_queue.errors import ConfigError
from tts_queue.settings import SessionConfig, Settings
from tts_queue.synthesis.frontend.text import to_ids
from tts_queue.synthesis.inference import Scales
from tts_queue.synthesis.piper_model import PiperModel
from tts_queue.synthesis.providers import (
    CPU,
    CUDA,
    TENSORRT,
    SessionPlan,
    Shapes,
    declared_inputs,
    max_sentence_ids,
    profile_shapes,
    provider_options,
)
from tts_queue.synthesis.registry import VoiceRegistry, discover_specs

PIPER_INPUTS = [("input", (None, None)), ("input_lengths", (None,)), ("scales", (3,))]
MULTI_INPUTS = [*PIPER_INPUTS, ("sid", (None,))]


# --- the longest sentence -------------------------------------------------------------------


def test_max_sentence_ids_is_what_piper_makes_of_the_longest_sentence() -> None:
    # Given the most phonemes a sentence keeps after splitting
    # When it is turned into ids the way the worker does (BOS, PAD, each phoneme and a PAD, EOS)
    longest = to_ids(["a"] * 400, DEFAULT_PHONEME_ID_MAP)
    # Then the bound is exactly that length: 2 * 400 + 3
    assert max_sentence_ids(400, DEFAULT_PHONEME_ID_MAP) == len(longest) == 803


def test_max_sentence_ids_counts_phonemes_that_map_to_several_ids() -> None:
    # Given an id map where one phoneme becomes two ids
    id_map = {"^": [1], "_": [0], "$": [2], "a": [5], "b": [6, 7]}
    # Then the bound assumes every phoneme is the widest one
    assert max_sentence_ids(10, id_map) == 1 + 1 + 10 * (2 + 1) + 1
    assert len(to_ids(["b"] * 10, id_map)) == max_sentence_ids(10, id_map)


def test_plan_follows_the_pool_and_the_sentence_limit(tmp_path: Path) -> None:
    # Given a GPU worker's settings
    settings = Settings.from_env({"TTS_DATA_DIR": str(tmp_path), "TTS_WORKER_POOL": "gpu",
                                  "TTS_GPU_MAX_BATCH": "16", "TTS_MAX_SENTENCE_PHONEMES": "200"})
    # When its session plan is made
    plan = SessionPlan.from_settings(settings)
    # Then the batch bound is the pool's, the ids bound follows the sentence limit, and engines
    # live under the data directory unless TTS_TRT_CACHE_DIR says otherwise
    assert plan.shapes(DEFAULT_PHONEME_ID_MAP) == Shapes(max_batch=16, max_ids=403)
    assert plan.engine_dir == tmp_path / "trt-engines"
    moved = settings.replace(**{"onnx.trt_cache_dir": tmp_path / "elsewhere"})
    assert SessionPlan.from_settings(moved).engine_dir == tmp_path / "elsewhere"


# --- optimization profiles ------------------------------------------------------------------


def test_profile_covers_batch_and_ids_of_every_piper_input() -> None:
    # Given Piper's inputs: ids [batch, ids], lengths [batch], scales [3]
    # When a profile is made for batches of up to 32 sentences of up to 803 ids
    profile = profile_shapes(PIPER_INPUTS, Shapes(max_batch=32, max_ids=803))
    # Then every dynamic input has min, opt and max shapes; scales is fixed and left out
    assert profile == {
        "trt_profile_min_shapes": "input:1x1,input_lengths:1",
        "trt_profile_opt_shapes": "input:32x256,input_lengths:32",
        "trt_profile_max_shapes": "input:32x803,input_lengths:32",
    }


def test_profile_of_a_multi_speaker_voice_bounds_sid_by_the_batch() -> None:
    profile = profile_shapes(MULTI_INPUTS, Shapes(max_batch=8, max_ids=100))
    assert profile["trt_profile_max_shapes"] == "input:8x100,input_lengths:8,sid:8"
    assert profile["trt_profile_min_shapes"] == "input:1x1,input_lengths:1,sid:1"
    # A short sentence limit caps the opt length too
    assert profile["trt_profile_opt_shapes"] == "input:8x100,input_lengths:8,sid:8"


def test_a_dynamic_scales_input_is_pinned_to_three_values() -> None:
    profile = profile_shapes([("input", (None, None)), ("scales", (None,))], Shapes(4, 50))
    assert profile["trt_profile_max_shapes"] == "input:4x50,scales:3"
    assert profile["trt_profile_min_shapes"] == "input:1x1,scales:3"


def test_a_dynamic_axis_no_setting_bounds_is_a_config_error() -> None:
    # Given a model with an extra dynamic axis the worker knows nothing about
    with pytest.raises(ConfigError, match="'input' has a dynamic axis 2"):
        profile_shapes([("input", (None, None, None))], Shapes())


def test_declared_inputs_read_from_the_tiny_voice_graph() -> None:
    assert declared_inputs(build_model()) == PIPER_INPUTS
    assert declared_inputs(build_model(multi_speaker=True)) == MULTI_INPUTS


# --- options per provider -------------------------------------------------------------------


def test_cuda_options_from_the_settings() -> None:
    # Given the default session settings
    (name, options), (cpu, none) = provider_options([CUDA, CPU], SessionConfig(), PIPER_INPUTS,
                                                     Shapes(), None)
    # Then CUDA gets the options that matter for this model, CPU none
    assert name == CUDA and cpu == CPU and none == {}
    assert options == {"device_id": 0, "arena_extend_strategy": "kSameAsRequested",
                       "cudnn_conv_algo_search": "HEURISTIC", "do_copy_in_default_stream": True}


@pytest.mark.parametrize(("setting", "value"),
                         [("heuristic", "HEURISTIC"), ("exhaustive", "EXHAUSTIVE"), ("default", "DEFAULT")])
def test_cudnn_search_and_device_are_settings(setting: str, value: str) -> None:
    settings = Settings.from_env({"TTS_CUDNN_CONV_ALGO_SEARCH": setting, "TTS_CUDA_DEVICE": "1"})
    [(_, options)] = provider_options([CUDA], settings.onnx, PIPER_INPUTS, Shapes(), None)
    assert options["cudnn_conv_algo_search"] == value
    assert options["device_id"] == 1


@pytest.mark.parametrize("env", [{"TTS_CUDNN_CONV_ALGO_SEARCH": "fastest"}, {"TTS_CUDA_DEVICE": "-1"}])
def test_bad_gpu_settings_are_config_errors(env: dict[str, str]) -> None:
    with pytest.raises(ConfigError):
        Settings.from_env(env)


def test_tensorrt_options_cache_engines_and_carry_the_profile(tmp_path: Path) -> None:
    # Given TensorRT first, CUDA next, an engine folder and fp16 turned off
    config = SessionConfig(trt_fp16=False, cuda_device=2)
    entries = provider_options([TENSORRT, CUDA, CPU], config, PIPER_INPUTS, Shapes(16, 403), tmp_path)
    # Then the order is kept and TensorRT's options name the cache folder and the profile
    assert [name for name, _ in entries] == [TENSORRT, CUDA, CPU]
    trt = entries[0][1]
    assert trt["device_id"] == 2 and entries[1][1]["device_id"] == 2
    assert trt["trt_fp16_enable"] is False
    assert trt["trt_engine_cache_enable"] is True and trt["trt_timing_cache_enable"] is True
    assert trt["trt_engine_cache_path"] == trt["trt_timing_cache_path"] == str(tmp_path)
    assert trt["trt_profile_max_shapes"] == "input:16x403,input_lengths:16"


def test_tensorrt_without_an_engine_folder_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="engine cache"):
        provider_options([TENSORRT, CPU], SessionConfig(), PIPER_INPUTS, Shapes(), None)


# --- what the session is really given -------------------------------------------------------


class SessionSpy:
    """Records the ``providers`` ONNX Runtime is given, then builds the session on CPU."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, available: list[str]) -> None:
        import onnxruntime as ort

        self.calls: list[Any] = []
        real = ort.InferenceSession

        def build(model: Any, sess_options: Any = None, providers: Any = None) -> Any:
            self.calls.append(providers)
            return real(model, sess_options=sess_options, providers=[CPU])

        monkeypatch.setattr(ort, "get_available_providers", lambda: available)
        monkeypatch.setattr(ort, "InferenceSession", build)


def test_a_tensorrt_worker_builds_its_profile_from_the_voice_and_the_pool(
    voices_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given an onnxruntime offering TensorRT and a GPU worker's settings
    spy = SessionSpy(monkeypatch, [TENSORRT, CUDA, CPU])
    settings = Settings.from_env({"TTS_DATA_DIR": str(tmp_path), "TTS_WORKER_POOL": "gpu",
                                  "TTS_VOICES_DIR": str(voices_dir), "TTS_GPU_MAX_BATCH": "8",
                                  "TTS_MAX_SENTENCE_PHONEMES": "100", "TTS_PROVIDERS": "auto"})
    registry = VoiceRegistry.from_settings(settings)
    # When the registry loads a voice the way a worker does
    registry.load("multi")
    # Then ONNX Runtime was asked for TensorRT with a profile for this pool and this voice, and
    # the engines go to a folder of this model under the data directory, which now exists
    [providers] = spy.calls
    assert [name for name, _ in providers] == [TENSORRT, CUDA, CPU]
    trt = providers[0][1]
    assert trt["trt_profile_max_shapes"] == "input:8x203,input_lengths:8,sid:8"
    engine_dir = Path(trt["trt_engine_cache_path"])
    assert engine_dir.parent == tmp_path / "trt-engines" and engine_dir.is_dir()
    # And the session really ran on CPU here, which the model reports
    assert registry.providers() == {"multi": CPU}


def test_engine_folders_differ_per_model(tiny_files: VoiceFiles, voices_dir: Path, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    spy = SessionSpy(monkeypatch, [TENSORRT, CPU])
    for model in (tiny_files.model_path, voices_dir / "multi.onnx", tiny_files.model_path):
        PiperModel.load(model, SessionConfig(), HOP_LENGTH, Shapes(), tmp_path)
    folders = [call[0][1]["trt_engine_cache_path"] for call in spy.calls]
    assert folders[0] == folders[2] != folders[1]


# --- I/O binding ----------------------------------------------------------------------------


def test_io_binding_is_used_only_where_the_session_runs_on_a_gpu(
    tiny_files: VoiceFiles, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a CUDA that falls back to CPU: no binding on a CPU session
    SessionSpy(monkeypatch, [CUDA, CPU])
    model = PiperModel.load(tiny_files.model_path, SessionConfig(providers="cuda,cpu"), HOP_LENGTH)
    assert model.provider == CPU and model.io_binding is False


@pytest.mark.parametrize("multi", [False, True])
def test_the_io_binding_path_gives_the_same_audio(voices_dir: Path, multi: bool) -> None:
    # Given the same voice loaded twice on CPU, once with I/O binding forced on
    path = voices_dir / ("multi.onnx" if multi else "tiny.onnx")
    plain = PiperModel.load(path, CPU_SESSION, HOP_LENGTH)
    bound = PiperModel.load(path, CPU_SESSION, HOP_LENGTH)
    bound.io_binding = True
    ids = [[1, 0, 20, 0, 2], [1, 0, *range(14, 40), 2], [1, 0, 25, 0, 26, 0, 2]]
    scales = Scales(0.0, 1.3, 0.0)
    # When a mixed-length batch runs through both paths
    # Then every item has the same samples and phoneme lengths, bit for bit
    for a, b in zip(plain.run_batch(ids, scales, 1 if multi else None),
                    bound.run_batch(ids, scales, 1 if multi else None), strict=True):
        assert np.array_equal(a.samples, b.samples)
        assert np.array_equal(a.phoneme_samples, b.phoneme_samples)


def test_the_io_binding_path_fails_as_a_synthesis_error(tiny_files: VoiceFiles) -> None:
    from tts_queue.errors import SynthesisError

    model = PiperModel.load(tiny_files.model_path, CPU_SESSION, HOP_LENGTH)
    model.io_binding = True
    model.multi_speaker = True  # feeds a sid the graph does not have
    with pytest.raises(SynthesisError):
        model.run_batch([[1, 0, 2]], Scales(0.0, 1.0, 0.0))


def test_registry_from_settings_uses_the_plan(voices_dir: Path, tmp_path: Path) -> None:
    # A CPU registry from the settings still loads (the plan changes nothing on CPU)
    settings = Settings.from_env({"TTS_DATA_DIR": str(tmp_path), "TTS_VOICES_DIR": str(voices_dir),
                                  "TTS_PROVIDERS": "cpu"})
    registry = VoiceRegistry(discover_specs(voices_dir), loader=VoiceRegistry.from_settings(settings)._loader,
                             default="tiny")
    assert registry.load(None).model.provider == CPU
    assert not (tmp_path / "trt-engines").exists()


def test_declared_inputs_skip_initializers() -> None:
    model = build_model()
    model.graph.initializer.append(onnx.helper.make_tensor("input_lengths", onnx.TensorProto.INT64, [1], [1]))
    assert [name for name, _ in declared_inputs(model)] == ["input", "scales"]
