"""The ONNX wrapper: provider choice, loading, and exact batched inference on the tiny voice."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tests.conftest import CPU_SESSION
from tests.support.tiny_voice import HOP_LENGTH, JUNK, VoiceFiles, build_model, frames_per_id, reference_audio
from tts_queue.errors import ConfigError, ModelLoadError, SynthesisError
from tts_queue.settings import SessionConfig, Settings
from tts_queue.synthesis.inference import Scales, choose_providers, session_options
from tts_queue.synthesis.piper_model import PiperModel

TRT, CUDA, CPU = "TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"
SCALES = Scales(noise_scale=0.667, length_scale=1.0, noise_w=0.8)
# Mixed lengths (7 to 41 ids) in Piper's shape: BOS, PAD, (id, PAD)*, EOS.
SENTENCES = [
    [1, 0, 20, 0, 2],
    [1, 0, *sum(([i, 0] for i in range(14, 33)), []), 2],
    [1, 0, 25, 0, 26, 0, 27, 0, 2],
    [1, 0, *sum(([i, 0] for i in range(40, 52)), []), 2],
]


# --- choose_providers -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("available", "chosen"),
    [
        ([CPU], [CPU]),
        (["AzureExecutionProvider", CPU], [CPU]),
        ([CPU, CUDA], [CUDA, CPU]),
        ([CPU, CUDA, TRT], [TRT, CUDA, CPU]),
        ([TRT, CPU], [TRT, CPU]),
        ([], [CPU]),
    ],
)
def test_auto_prefers_tensorrt_then_cuda_then_cpu(available: list[str], chosen: list[str]) -> None:
    # Given what ONNX Runtime reports available, in any order
    # When providers are chosen automatically
    # Then the best available come first and CPU is always the last resort
    assert choose_providers("auto", available) == chosen
    assert choose_providers("  AUTO ", available) == chosen


@pytest.mark.parametrize(
    ("requested", "chosen"),
    [
        ("cuda", [CUDA]),
        ("trt,cuda", [TRT, CUDA]),
        ("tensorrt", [TRT]),
        ("cpu", [CPU]),
        ("CPU,cuda", [CUDA, CPU]),  # CPU never fails, so it cannot stand before CUDA
        ("CUDAExecutionProvider,,", [CUDA]),
    ],
)
def test_named_providers_keep_their_order_with_cpu_last(requested: str, chosen: list[str]) -> None:
    # Given a machine with every provider
    # When providers are named (aliases, full names, any case)
    # Then they are used in the given order, CPU last, and CPU only when named
    assert choose_providers(requested, [CPU, CUDA, TRT]) == chosen


def test_a_missing_provider_in_a_list_with_cpu_is_dropped_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given a CPU-only machine
    # When CUDA is asked for with CPU as the fallback
    with caplog.at_level(logging.WARNING, logger="tts_queue.synthesis.piper_model"):
        chosen = choose_providers("cuda,cpu", [CPU])
    # Then CPU alone is used and the missing provider is named in a warning
    assert chosen == [CPU]
    assert CUDA in caplog.text


def test_a_demanded_provider_that_is_missing_is_a_config_error() -> None:
    # Given a CPU-only machine
    # When CUDA is demanded (a list without cpu)
    # Then it fails loudly instead of running on CPU
    with pytest.raises(ConfigError, match="demands CUDAExecutionProvider"):
        choose_providers("cuda", [CPU])


def test_load_reports_the_provider_the_session_really_uses(
    tiny_files: VoiceFiles, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    # Given an onnxruntime that claims CUDA (as onnxruntime-gpu does without working CUDA libraries)
    import onnxruntime as ort

    monkeypatch.setattr(ort, "get_available_providers", lambda: [CUDA, CPU])
    # When the voice loads with auto
    with caplog.at_level(logging.WARNING, logger="tts_queue.synthesis.piper_model"):
        model = PiperModel.load(tiny_files.model_path, SessionConfig(providers="auto"), HOP_LENGTH)
    # Then the session was asked for CUDA first, but the model reports CPU, where it really runs
    assert model.provider == CPU
    assert "asked for CUDAExecutionProvider, running on CPUExecutionProvider" in caplog.text


def test_load_fails_when_a_demanded_provider_falls_back(
    tiny_files: VoiceFiles, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given an onnxruntime that claims CUDA but cannot run it
    import onnxruntime as ort

    monkeypatch.setattr(ort, "get_available_providers", lambda: [CUDA, CPU])
    # When CUDA is demanded
    # Then loading fails loudly instead of running on CPU
    with pytest.raises(ConfigError, match="fell back to CPUExecutionProvider"):
        PiperModel.load(tiny_files.model_path, SessionConfig(providers="cuda"), HOP_LENGTH)


@pytest.mark.parametrize("requested", ["rocm", "cuda,openvino", "gpu"])
def test_unknown_provider_is_a_config_error(requested: str) -> None:
    # Given a provider name the project does not know
    # When providers are chosen
    # Then ConfigError names it
    with pytest.raises(ConfigError, match="unknown execution provider"):
        choose_providers(requested, [CPU, CUDA])


def test_session_options_map_the_config() -> None:
    # Given a session config with thread counts and an optimization level
    options = session_options(SessionConfig(intra_op_threads=3, inter_op_threads=2,
                                            graph_optimization="basic"))
    # Then the ONNX Runtime options carry them
    assert options.intra_op_num_threads == 3
    assert options.inter_op_num_threads == 2
    assert int(options.graph_optimization_level) == 1
    # And an unknown optimization level is a config error
    with pytest.raises(ConfigError):
        session_options(SessionConfig(graph_optimization="max"))


def test_scales_tensor_is_noise_length_noise_w_in_float32() -> None:
    # Given scales
    # When they become the model's input tensor
    # Then the order is (noise_scale, length_scale, noise_w) in float32
    array = Scales(noise_scale=0.1, length_scale=1.5, noise_w=0.3).as_array()
    assert array.dtype == np.float32
    assert array.tolist() == pytest.approx([0.1, 1.5, 0.3])


# --- load ---------------------------------------------------------------------------------------


def test_tiny_voice_loads_on_cpu_with_the_alignment_output(tiny_model: PiperModel) -> None:
    # Given the tiny voice loaded through PiperModel.load
    # Then it runs on CPU, is single-speaker, and its session also returns w_ceil
    assert tiny_model.provider == CPU
    assert tiny_model.multi_speaker is False
    assert tiny_model.hop_length == HOP_LENGTH
    outputs = [o.name for o in tiny_model.session.get_outputs()]
    assert outputs == ["output", "w_ceil"]


def test_multi_speaker_voice_is_detected_by_its_sid_input(multi_model: PiperModel) -> None:
    # Given a voice graph with a ``sid`` input
    # Then the loaded model feeds speaker ids
    assert multi_model.multi_speaker is True


def test_a_model_already_patched_loads_too(tmp_path: Path) -> None:
    # Given a voice file whose w_ceil is already a graph output
    model = build_model()
    model.graph.output.append(helper.make_tensor_value_info("w_ceil", TensorProto.FLOAT, None))
    path = tmp_path / "patched.onnx"
    onnx.save(model, str(path))
    # When it is loaded
    voice = PiperModel.load(path, CPU_SESSION, hop_length=HOP_LENGTH)
    # Then it works as the unpatched one does
    item = voice.run_batch([SENTENCES[0]], SCALES)[0]
    np.testing.assert_array_equal(item.samples, reference_audio(SENTENCES[0]))


@pytest.mark.parametrize("fraction", [0.1, 0.5, 0.9, 0.99])
def test_truncated_model_file_is_a_model_load_error(tmp_path: Path, fraction: float) -> None:
    # Given a voice file cut short, as by an interrupted download
    data = build_model().SerializeToString()
    path = tmp_path / "truncated.onnx"
    path.write_bytes(data[: int(len(data) * fraction)])
    # When it is loaded
    # Then ModelLoadError is raised (a VoiceError, 503), not a protobuf or ORT exception
    with pytest.raises(ModelLoadError) as info:
        PiperModel.load(path, CPU_SESSION)
    assert info.value.http_status == 503


def test_garbage_model_file_is_a_model_load_error(tmp_path: Path) -> None:
    # Given a file that is not ONNX at all
    # When it is loaded
    # Then ModelLoadError is raised
    path = tmp_path / "garbage.onnx"
    path.write_bytes(b"\xff\x00not an onnx model" * 50)
    with pytest.raises(ModelLoadError):
        PiperModel.load(path, CPU_SESSION)


def _model_with_ceil_count(count: int) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("input", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("output", TensorProto.FLOAT, [2])
    nodes = [helper.make_node("Identity", ["input"], ["c0"])]
    for i in range(count):
        nodes.append(helper.make_node("Ceil", [f"c{i}"], [f"c{i + 1}"]))
    nodes.append(helper.make_node("Identity", [f"c{count}"], ["output"]))
    graph = helper.make_graph(nodes, "g", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("ceil_nodes", [0, 2])
def test_model_without_exactly_one_ceil_cannot_be_cut_exactly(
    tmp_path: Path, ceil_nodes: int
) -> None:
    # Given an ONNX graph with no Ceil node, or two
    path = tmp_path / "other.onnx"
    onnx.save(_model_with_ceil_count(ceil_nodes), str(path))
    # When it is loaded as a voice
    # Then ModelLoadError explains that batches cannot be cut
    with pytest.raises(ModelLoadError, match="Ceil"):
        PiperModel.load(path, CPU_SESSION)


def test_model_without_piper_inputs_is_a_model_load_error(tmp_path: Path) -> None:
    # Given a loadable graph with one Ceil but not a voice's inputs
    path = tmp_path / "not_a_voice.onnx"
    onnx.save(_model_with_ceil_count(1), str(path))
    # When it is loaded
    # Then the signature check rejects it
    with pytest.raises(ModelLoadError, match="signature"):
        PiperModel.load(path, CPU_SESSION)


# --- run_batch ----------------------------------------------------------------------------------


def test_padded_batch_is_cut_to_exactly_each_item_alone(tiny_model: PiperModel) -> None:
    # Given sentences of mixed lengths
    # When they run as one padded batch and each alone
    batched = tiny_model.run_batch(SENTENCES, SCALES)
    alone = [tiny_model.run_batch([ids], SCALES)[0] for ids in SENTENCES]
    # Then each batched item has exactly the samples and per-phoneme lengths it has alone
    assert len(batched) == len(SENTENCES)
    for ids, item, single in zip(SENTENCES, batched, alone, strict=True):
        np.testing.assert_array_equal(item.samples, single.samples)
        np.testing.assert_array_equal(item.phoneme_samples, single.phoneme_samples)
        # And they are what the voice computes for those ids
        np.testing.assert_array_equal(item.samples, reference_audio(ids))
        assert item.samples.dtype == np.float32
        # And the padding junk is gone
        assert not np.any(item.samples == np.float32(JUNK))


def test_phoneme_samples_sum_to_the_item_length(tiny_model: PiperModel) -> None:
    # Given a padded batch
    items = tiny_model.run_batch(SENTENCES, SCALES)
    # Then each item's samples per phoneme id add up to its length, one count per id
    for ids, item in zip(SENTENCES, items, strict=True):
        assert len(item.phoneme_samples) == len(ids)
        assert int(item.phoneme_samples.sum()) == len(item.samples)
        np.testing.assert_array_equal(item.phoneme_samples, frames_per_id(ids) * HOP_LENGTH)


def test_untrimmed_batch_output_has_junk_padding(tiny_model: PiperModel) -> None:
    # Given the raw session output for a short and a long item together
    # (this is what run_batch must cut away; the test shows the tiny voice makes it visible)
    short, long = SENTENCES[0], SENTENCES[1]
    padded = np.zeros((2, len(long)), dtype=np.int64)
    padded[0, : len(short)] = short
    padded[1] = long
    audio, frames = tiny_model.session.run(
        None,
        {"input": padded, "input_lengths": np.array([len(short), len(long)]),
         "scales": SCALES.as_array()},
    )
    # Then w_ceil is zero on padding and the short row is junk beyond its own length
    assert frames.shape == (2, 1, len(long))
    assert not frames[0, 0, len(short):].any()
    short_len = len(reference_audio(short))
    assert audio.shape[-1] == len(reference_audio(long)) > short_len
    assert np.all(audio[0, 0, 0, short_len:] == np.float32(JUNK))


def test_length_scale_stretches_every_item(tiny_model: PiperModel) -> None:
    # Given a slower speed (length_scale 2)
    slow = Scales(noise_scale=0.667, length_scale=2.0, noise_w=0.8)
    # When the batch runs
    items = tiny_model.run_batch(SENTENCES, slow)
    # Then each item is exactly twice as long as at normal speed
    for ids, item in zip(SENTENCES, items, strict=True):
        assert len(item.samples) == 2 * len(reference_audio(ids))
        np.testing.assert_array_equal(item.samples, reference_audio(ids, length_scale=2.0))


def test_empty_batch_returns_nothing(tiny_model: PiperModel) -> None:
    # Given no sequences
    # Then nothing runs and nothing comes back
    assert tiny_model.run_batch([], SCALES) == []


def test_speaker_id_reaches_the_model(multi_model: PiperModel) -> None:
    # Given the multi-speaker tiny voice
    # When the same ids run for speakers 0 and 2
    ids = SENTENCES[2]
    first = multi_model.run_batch([ids, SENTENCES[0]], SCALES, speaker_id=0)[0]
    third = multi_model.run_batch([ids, SENTENCES[0]], SCALES, speaker_id=2)[0]
    # Then each speaker's audio is its own
    np.testing.assert_array_equal(first.samples, reference_audio(ids, speaker=0))
    np.testing.assert_array_equal(third.samples, reference_audio(ids, speaker=2))
    assert not np.array_equal(first.samples, third.samples)


class _FailingSession:
    def run(self, outputs: Any, feeds: dict[str, Any]) -> Any:
        raise RuntimeError("[ONNXRuntimeError] out of memory")


def test_model_failure_is_a_synthesis_error() -> None:
    # Given a session that fails at run time
    model = PiperModel(_FailingSession(), [CPU], HOP_LENGTH, multi_speaker=False)
    # When a batch runs
    # Then SynthesisError names the batch size and keeps the cause
    with pytest.raises(SynthesisError, match="batch of 2") as info:
        model.run_batch(SENTENCES[:2], SCALES)
    assert isinstance(info.value.__cause__, RuntimeError)


def test_spinning_can_be_turned_off_for_shared_machines() -> None:
    from tts_queue.synthesis.inference import session_options

    quiet = session_options(SessionConfig(allow_spinning=False))
    assert quiet.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    default = session_options(SessionConfig())
    with pytest.raises(Exception, match="allow_spinning"):  # unset: ONNX Runtime's default
        default.get_session_config_entry("session.intra_op.allow_spinning")


def test_idle_threads_spin_briefly_by_default_and_as_onnx_runtime_would_with_zero() -> None:
    # Given the default settings, then a configured spin, then 0, then spinning off
    brief = session_options(Settings.from_env({}).onnx)
    assert brief.get_session_config_entry("session.intra_op.spin_duration_us") == "100"
    assert session_options(SessionConfig(spin_us=500)).get_session_config_entry(
        "session.intra_op.spin_duration_us") == "500"
    for config in (SessionConfig(spin_us=0), SessionConfig(allow_spinning=False)):
        with pytest.raises(Exception, match="spin_duration_us"):  # unset: ONNX Runtime's own
            session_options(config).get_session_config_entry("session.intra_op.spin_duration_us")
    # And a negative spin is refused with the variable's name
    with pytest.raises(ConfigError, match="TTS_SPIN_US"):
        Settings.from_env({"TTS_SPIN_US": "-1"})


def test_a_session_on_every_core_has_a_single_threaded_twin_that_makes_the_same_audio(
    tiny_files: VoiceFiles,
) -> None:
    # Given the tiny voice on every core (the default threads) and on one thread
    wide = PiperModel.load(tiny_files.model_path, SessionConfig(providers="cpu"), hop_length=HOP_LENGTH)
    single = PiperModel.load(tiny_files.model_path, CPU_SESSION, hop_length=HOP_LENGTH)
    # Then only the first has a twin, and it is built at its first narrow call, once
    assert wide.has_narrow and not single.has_narrow
    assert wide._narrow is None
    items = wide.run_batch(SENTENCES, SCALES, narrow=True)
    twin = wide.narrow_session()
    assert twin is not wide.session and wide.narrow_session() is twin
    assert twin.get_session_options().intra_op_num_threads == 1
    assert wide.session.get_session_options().intra_op_num_threads == 0
    # And both allocate from the process's one shared arena (the twin costs its weights, not an
    # arena of its own as large as the longest call's); a session without a twin keeps its own
    shared = "session.use_env_allocators"
    assert twin.get_session_options().get_session_config_entry(shared) == "1"
    assert wide.session.get_session_options().get_session_config_entry(shared) == "1"
    with pytest.raises(Exception, match="use_env_allocators"):
        single.session.get_session_options().get_session_config_entry(shared)
    # And a narrow call makes exactly the samples of a call on every core
    for ids, item in zip(SENTENCES, items, strict=True):
        np.testing.assert_array_equal(item.samples, reference_audio(ids))
    # And a session on one thread runs its narrow calls on itself
    assert single.narrow_session() is single.session


def test_a_twin_that_cannot_be_built_leaves_narrow_calls_on_the_one_session(
    tiny_files: VoiceFiles, caplog: pytest.LogCaptureFixture,
) -> None:
    # Given a model whose twin fails to build (say, out of memory)
    wide = PiperModel.load(tiny_files.model_path, SessionConfig(providers="cpu"), hop_length=HOP_LENGTH)

    def failing() -> Any:
        raise MemoryError("no room for a second session")

    wide._make_narrow = failing
    # When a narrow call runs
    with caplog.at_level(logging.WARNING):
        [item] = wide.run_batch(SENTENCES[:1], SCALES, narrow=True)
    # Then it ran on the one session, and the log says why
    np.testing.assert_array_equal(item.samples, reference_audio(SENTENCES[0]))
    assert wide.narrow_session() is wide.session
    assert "no single-threaded session" in caplog.text

