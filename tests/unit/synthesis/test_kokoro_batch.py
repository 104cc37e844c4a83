"""Kokoro's batches without the real graph: the frames budget of the policy, the model's batch by
graph, the cut of a padded decoder batch back into items, the frame masks on a tiny graph, the
TensorRT profile and fallbacks (a fake ONNX Runtime), and the cache keys that do not name the
graph. The real graph's batches are in ``tests/real/test_real_kokoro_batch.py``."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from tts_queue.errors import SynthesisError
from tts_queue.settings import SessionConfig, Settings
from tts_queue.synthesis.batching import BatchPolicy, Entry
from tts_queue.synthesis.family import KOKORO, family
from tts_queue.synthesis.inference import Scales
from tts_queue.synthesis.kokoro.graph import HOP, KokoroGraph, batch_feeds
from tts_queue.synthesis.kokoro.masks import NO_TIME, Masking, add_masks, frame_rates
from tts_queue.synthesis.kokoro.tensorrt import (
    DecoderProfile,
    DecoderSessions,
    decoder_providers,
    engine_folder,
    open_decoder,
    spectral_similarity,
)
from tts_queue.synthesis.kokoro.voice import EDGE, KokoroModel
from tts_queue.synthesis.providers import CPU, CUDA, TENSORRT, SessionPlan

STYLES = np.arange(510 * 256, dtype=np.float32).reshape(510, 256) / 1e5


# --- the policy's budget in frames --------------------------------------------------------------


def framed(frames: int, first: int, arrived: float = 0.0) -> Entry:
    """A Kokoro float sentence of a few ids and ``frames`` frames."""
    return Entry(key="kokoro", ids=(0, first, 0), arrived=arrived, ticket=object(), frames=frames)


def test_a_batch_of_frames_is_budgeted_in_padded_frames_not_ids() -> None:
    # Given sentences of three ids each but 100, 90 and 400 frames, and room for 250 padded frames
    policy = BatchPolicy("eager", max_batch=8, max_padded=10, max_padded_frames=250)
    for index, frames in enumerate((100, 90, 400)):
        policy.append(framed(frames, first=index + 1))
    # When batches are asked for
    first = policy.next_batch(now=0.0)
    second = policy.next_batch(now=0.0)
    # Then the two close ones share a call (2 x 100 frames; the ids budget of 10 would have taken
    # all three), and the long one runs alone, over the budget as a lone sentence may
    assert first is not None and [e.frames for e in first.entries] == [100, 90]
    assert second is not None and [e.frames for e in second.entries] == [400]


def test_neighbours_are_the_closest_in_frames_and_a_slow_speed_counts_its_frames() -> None:
    # Given one sentence's ids at speed 1 (60 frames) and at speed 0.25 (four times the frames),
    # and a similar sentence of 64 frames arriving later
    policy = BatchPolicy("eager", max_batch=2, max_padded_frames=10_000)
    policy.append(framed(60, first=1))
    policy.append(framed(240, first=2))
    policy.append(framed(64, first=3, arrived=1.0))
    # When a batch of two is asked for
    batch = policy.next_batch(now=1.0)
    # Then the first sentence's neighbour is the one closest in frames, not in ids (equal here)
    assert batch is not None and [e.frames for e in batch.entries] == [60, 64]


def test_sentences_of_keys_that_share_calls_fill_one_batch_each_in_its_own_slot() -> None:
    # Given the same ids said by two voices whose model shares its calls, and a third sentence
    policy = BatchPolicy("eager", max_batch=8, max_padded_frames=10_000)
    for voice, ids, frames in (("alpha", (0, 1, 0), 30), ("kumo", (0, 1, 0), 32), ("alpha", (0, 2, 0), 40)):
        policy.append(Entry(key=voice, ids=ids, arrived=0.0, ticket=object(), frames=frames, share="graph"))
    # When a batch is asked for
    batch = policy.next_batch(now=0.0)
    # Then all three run in one call of the shared key, the same ids of two voices in two slots
    assert batch is not None and batch.key == "graph"
    assert batch.slots == [(0, 1, 0), (0, 1, 0), (0, 2, 0)] and batch.slot_keys == ["alpha", "kumo", "alpha"]


# --- the model's batch follows its graph --------------------------------------------------------


class FakeEncoder:
    """The encoder's outputs for a sentence: ``frames[len(ids)]`` frames per id."""

    def __init__(self, frames: dict[int, list[int]]) -> None:
        self.frames = frames

    def run(self, outputs: Any, feeds: dict[str, Any], run_options: Any = None) -> list[Any]:
        per_id = self.frames[feeds["tokens"].shape[1]]
        total = sum(per_id)
        return [np.full((1, 512, total), feeds["speed"][0], np.float32), np.zeros((1, 2 * total), np.float32),
                np.zeros((1, 2 * total), np.float32), np.asarray([per_id], np.float32)]


class FakeDecoder:
    """Audio whose row is its item's style's first value, padded frames x HOP long."""

    def __init__(self) -> None:
        self.feeds: list[dict[str, Any]] = []

    def run(self, outputs: Any, feeds: dict[str, Any], run_options: Any = None) -> list[Any]:
        self.feeds.append(feeds)
        rows, frames = feeds["asr"].shape[0], feeds["asr"].shape[2]
        return [np.repeat(feeds["style"][:, :1], frames * HOP, axis=1).reshape(rows, -1)]


def test_the_int8_graph_takes_one_sentence_a_call_and_the_float_graph_a_batch() -> None:
    int8 = KokoroModel(KokoroGraph(FakeEncoder({}), [CPU], "int8"), STYLES)
    floated = KokoroModel(KokoroGraph(FakeEncoder({}), [CPU], "float", decoder=FakeDecoder()), STYLES)
    assert int8.max_batch == 1 and floated.max_batch == 0
    assert int8.sentence_frames([[0, 1, 0]], Scales(0.0, 1.0, 0.0)) is None
    # (the family no longer says 1 for every Kokoro graph: its loaded model does)
    assert family(KOKORO).max_batch == 0


def test_a_float_batch_runs_longest_first_and_each_item_is_cut_to_its_own_frames() -> None:
    # Given a float graph whose sentences of 3 and 5 ids have 7 and 12 frames
    decoder = FakeDecoder()
    graph = KokoroGraph(FakeEncoder({3: [2, 3, 2], 5: [3, 2, 2, 2, 3]}), [CPU], "float", decoder=decoder)
    model = KokoroModel(graph, STYLES)
    # When both run in one call at speed 2, the short one first
    short, long = model.run_batch([[0, 5, 0], [0, 5, 6, 7, 0]], Scales(0.0, 0.5, 0.0))
    # Then the decoder got the longest in row 0, padded one frame beyond it, each with its own
    # style (its token count's row) and frame count
    [feeds] = decoder.feeds
    assert feeds["asr"].shape == (2, 512, 13) and feeds["f0"].shape == (2, 26)
    assert feeds["frames"].tolist() == [12, 7]
    assert np.array_equal(feeds["style"], np.stack([STYLES[2], STYLES[0]]))
    assert float(feeds["asr"][1, 0, 6]) == 2.0 and float(feeds["asr"][1, 0, 7]) == 0.0
    # And each item is its own row cut to its own frames, the pads' silence trimmed to EDGE
    assert short.phoneme_samples.tolist() == [EDGE, 3 * HOP, EDGE]
    assert len(short.samples) == 7 * HOP - 2 * (2 * HOP - EDGE)
    assert np.all(short.samples == STYLES[0, 0]) and np.all(long.samples == STYLES[2, 0])
    assert long.phoneme_samples.tolist() == [EDGE, 2 * HOP, 2 * HOP, 2 * HOP, EDGE]


def test_a_shared_call_gives_each_sentence_its_own_voice_and_speed() -> None:
    # Given two voices of one float graph, and a voice of another graph
    decoder = FakeDecoder()
    graph = KokoroGraph(FakeEncoder({3: [2, 3, 2], 5: [3, 2, 2, 2, 3]}), [CPU], "float", decoder=decoder)
    alpha, kumo = KokoroModel(graph, STYLES), KokoroModel(graph, STYLES * 2)
    other = KokoroModel(KokoroGraph(FakeEncoder({}), [CPU], "float", decoder=FakeDecoder()), STYLES)
    assert alpha.shared == kumo.shared != other.shared and alpha.shared
    # When one sentence of each voice runs in one call, at speeds 1 and 2
    first, second = alpha.run_shared([alpha, kumo], [[0, 5, 6, 7, 0], [0, 5, 0]],
                                     [Scales(0.0, 1.0, 0.0), Scales(0.0, 0.5, 0.0)])
    # Then each went through the encoder at its speed and the decoder with its voice's style
    [feeds] = decoder.feeds
    assert float(feeds["asr"][0, 0, 0]) == 1.0 and float(feeds["asr"][1, 0, 0]) == 2.0
    assert np.all(first.samples == STYLES[2, 0]) and np.all(second.samples == 2 * STYLES[0, 0])
    # And a voice of another graph cannot join the call
    with pytest.raises(SynthesisError):
        alpha.run_shared([alpha, other], [[0, 5, 0], [0, 5, 0]], [Scales(0.0, 1.0, 0.0)] * 2)


def test_batch_feeds_pad_with_zeros_one_frame_beyond_the_longest() -> None:
    encoded = [(np.ones((1, 512, f), np.float32), np.ones((1, 2 * f), np.float32),
                np.ones((1, 2 * f), np.float32), np.ones(f)) for f in (4, 2)]
    feeds = batch_feeds(encoded, [np.zeros(256, np.float32), np.ones(256, np.float32)])
    assert feeds["asr"].shape == (2, 512, 5) and feeds["frames"].tolist() == [4, 2]
    assert feeds["asr"][1, :, 2:].sum() == 0 and feeds["f0"][1, 4:].sum() == 0
    assert feeds["n"][0, 8:].sum() == 0


# --- masks on a tiny graph -----------------------------------------------------------------------


def tiny_norm_conv(masking: Masking | None) -> bytes:
    """An instance norm over time, then a convolution of kernel 3, on ``x [batch, 4, time]``; with
    ``masking``, the frame masks of ``frames`` put in."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(7)
    const: dict[str, npt.NDArray[Any]] = {"axes": np.array([2], np.int64), "eps": np.array(1e-5, np.float32),
             "w": rng.standard_normal((4, 4, 3)).astype(np.float32), "two": np.array(2, np.int64)}
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "two"], ["longest"]),
        helper.make_node("ReduceMean", ["x", "axes"], ["mean"], keepdims=1),
        helper.make_node("Sub", ["x", "mean"], ["centred"]),
        helper.make_node("Mul", ["centred", "centred"], ["squares"]),
        helper.make_node("ReduceMean", ["squares", "axes"], ["var"], keepdims=1),
        helper.make_node("Add", ["var", "eps"], ["var_eps"]),
        helper.make_node("Sqrt", ["var_eps"], ["std"]),
        helper.make_node("Div", ["centred", "std"], ["normed"]),
        helper.make_node("Conv", ["normed", "w"], ["y"], pads=[1, 1], kernel_shape=[3]),
    ]
    graph = helper.make_graph(
        nodes, "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4, "time"]),
         helper.make_tensor_value_info("frames", TensorProto.INT64, ["batch"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in const.items()])
    if masking is not None:
        rates = frame_rates(graph, {"x": (1, 0), "frames": NO_TIME}, lambda name: const.get(name))
        assert add_masks(graph, rates, "frames", "longest", masking) == (2 if masking.norms else 0) + \
            (1 if masking.convs else 0)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    return bytes(model.SerializeToString())


def run_tiny(model: bytes, x: npt.NDArray[np.float32], frames: list[int]) -> Any:
    import onnxruntime as ort

    session = ort.InferenceSession(model, providers=[CPU])
    return session.run(None, {"x": x, "frames": np.asarray(frames, np.int64)})[0]


def test_masks_make_a_padded_item_its_own_norm_and_convolution() -> None:
    # Given a short item (5 frames) and a long one (9), the short one zero-padded to 9
    rng = np.random.default_rng(3)
    short = rng.standard_normal((1, 4, 5)).astype(np.float32)
    long = rng.standard_normal((1, 4, 9)).astype(np.float32)
    batch = np.concatenate([np.pad(short, ((0, 0), (0, 0), (0, 4))), long])
    masked = tiny_norm_conv(Masking())
    # When the graph with masks runs the batch, then each item alone
    together = run_tiny(masked, batch, [5, 9])
    # Then each item of the batch is itself alone, within float noise
    assert np.allclose(together[0, :, :5], run_tiny(masked, short, [5])[0], atol=1e-5)
    assert np.allclose(together[1], run_tiny(masked, long, [9])[0], atol=1e-5)
    # And without either mask the short item is not
    for masking in (Masking(norms=False), Masking(convs=False)):
        partly = tiny_norm_conv(masking)
        alone = run_tiny(partly, short, [5])[0]
        assert float(np.max(np.abs(run_tiny(partly, batch, [5, 9])[0, :, :5] - alone))) > 1e-3, masking


def test_frame_rates_follow_the_generator_s_convolutions() -> None:
    from onnx import helper, numpy_helper

    const: dict[str, npt.NDArray[Any]] = {"pad": np.array([0, 0, 1, 0, 0, 0], np.int64),
                                          "scales": np.array([1, 1, 2], np.float32)}
    nodes = [
        helper.make_node("Conv", ["f0", "w"], ["f0_conv"], kernel_shape=[3], strides=[2], pads=[1, 1]),
        helper.make_node("ConvTranspose", ["asr", "w"], ["pooled"], kernel_shape=[3], strides=[2],
                         pads=[1, 1], output_padding=[1]),
        helper.make_node("Resize", ["asr", "", "scales"], ["upsampled"], mode="nearest"),
        helper.make_node("ConvTranspose", ["upsampled", "w"], ["ups0"], kernel_shape=[20], strides=[10],
                         pads=[5, 5]),
        helper.make_node("ConvTranspose", ["ups0", "w"], ["ups1"], kernel_shape=[12], strides=[6],
                         pads=[3, 3]),
        helper.make_node("Pad", ["ups1", "pad"], ["padded"], mode="reflect"),
        helper.make_node("Add", ["padded", "style"], ["styled"]),
        helper.make_node("Add", ["padded", "ups0"], ["mixed"]),
    ]
    graph = helper.make_graph(nodes, "rates", [], [],
                              [numpy_helper.from_array(v, k) for k, v in const.items()])
    rates = frame_rates(graph, {"asr": (1, 0), "f0": (2, 0), "style": NO_TIME},
                        lambda name: const.get(name))
    names = ("f0_conv", "pooled", "upsampled", "ups0", "ups1", "padded", "styled")
    assert [rates[name] for name in names] == [(1, 0), (2, 0), (2, 0), (20, 0), (120, 0), (120, 1), (120, 1)]
    assert rates["mixed"] is None  # two rates met: unknown, and a mask there would be refused


# --- TensorRT ------------------------------------------------------------------------------------


def test_the_profile_is_the_box_a_pool_s_budgets_fill() -> None:
    # Given the GPU pool's defaults: 32 sentences, 8,000 padded frames a call
    profile = DecoderProfile.for_pool(32, 8000)
    # Then the box is a full batch of its share of the frames (at least 256, plus the frame
    # beyond the longest), tuned at a full batch of four-second sentences
    assert (profile.max_batch, profile.max_frames) == (32, 257)
    assert (profile.opt_batch, profile.opt_frames) == (32, 160)
    assert profile.shapes() == {
        "trt_profile_min_shapes": "asr:1x512x1,f0:1x2,n:1x2,style:1x256,frames:1",
        "trt_profile_opt_shapes": "asr:32x512x160,f0:32x320,n:32x320,style:32x256,frames:32",
        "trt_profile_max_shapes": "asr:32x512x257,f0:32x514,n:32x514,style:32x256,frames:32",
    }
    assert profile.covers(32, 257) and not profile.covers(2, 1200) and not profile.covers(33, 10)
    assert DecoderProfile.for_pool(4, 8000).max_frames == 2001


def test_engine_folders_are_named_by_the_graph_the_profile_and_the_precision(tmp_path: Path) -> None:
    profile = DecoderProfile.for_pool(32, 8000)
    folder = engine_folder(tmp_path, b"graph", profile, fp16=True)
    assert folder.parent.parent == tmp_path and folder.name == "b32-f257-opt32x160-fp16"
    others = {engine_folder(tmp_path, b"other graph", profile, True),
              engine_folder(tmp_path, b"graph", DecoderProfile.for_pool(16, 8000), True),
              engine_folder(tmp_path, b"graph", profile, False)}
    assert folder not in others and len(others) == 3


def test_tensorrt_options_carry_the_profile_the_folder_and_the_precision(tmp_path: Path) -> None:
    profile = DecoderProfile.for_pool(8, 4000)
    entries = decoder_providers([TENSORRT, CUDA, CPU], SessionConfig(cuda_device=1), profile, tmp_path, False)
    assert [name for name, _ in entries] == [TENSORRT, CUDA, CPU]
    options = entries[0][1]
    assert options["trt_fp16_enable"] is False and options["device_id"] == 1
    assert options["trt_engine_cache_path"] == str(tmp_path) and options["trt_engine_cache_enable"] is True
    assert options["trt_profile_max_shapes"] == profile.shapes()["trt_profile_max_shapes"]


class FakeSession:
    """An ONNX Runtime session stand-in: lands on ``landed``, answers ``audio``, records calls."""

    def __init__(self, providers: list[Any], landed: str, audio: Any) -> None:
        self.providers, self.landed, self.audio, self.calls = providers, landed, audio, 0

    def get_providers(self) -> list[str]:
        return [self.landed, CPU]

    def run(self, outputs: Any, feeds: Any, run_options: Any = None) -> list[Any]:
        self.calls += 1
        return [self.audio]


class FakeOrt:
    """Builds fake sessions: TensorRT ones land on ``trt_lands`` and say ``fp16``/``fp32`` audio."""

    def __init__(self, trt_lands: str, fp16_audio: Any, fp32_audio: Any) -> None:
        self.trt_lands, self.fp16_audio, self.fp32_audio = trt_lands, fp16_audio, fp32_audio
        self.sessions: list[FakeSession] = []

    def InferenceSession(self, model: bytes, sess_options: Any = None, providers: Any = None) -> FakeSession:  # noqa: N802
        name, options = providers[0]
        if name == TENSORRT:
            audio = self.fp16_audio if options["trt_fp16_enable"] else self.fp32_audio
            session = FakeSession(providers, self.trt_lands, audio)
        else:
            session = FakeSession(providers, name, self.fp32_audio)
        self.sessions.append(session)
        return session


def speech(seed: int) -> npt.NDArray[np.float32]:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((2, 8 * HOP)) * np.linspace(0, 1, 8 * HOP)).astype(np.float32)


def check_feeds() -> dict[str, Any]:
    return {"asr": np.zeros((2, 512, 8), np.float32), "frames": np.array([7, 5])}


def open_fake(fake: FakeOrt, tmp_path: Path, fp16: bool = True) -> DecoderSessions:
    return open_decoder(fake, b"decoder", [TENSORRT, CUDA, CPU], SessionConfig(trt_fp16=fp16),
                        DecoderProfile.for_pool(32, 8000), tmp_path, check_feeds)


def test_fp16_is_kept_where_it_is_within_tolerance(tmp_path: Path) -> None:
    audio = speech(1)
    fake = FakeOrt(TENSORRT, audio * (1 + 1e-3), audio)
    sessions = open_fake(fake, tmp_path)
    assert sessions.fp16 and sessions.engine is not None and sessions.engine.landed == TENSORRT
    assert [s.providers[0][0] for s in fake.sessions] == [CUDA, TENSORRT]  # the fp32 one, the engine
    assert spectral_similarity(audio[0], audio[0] * (1 + 1e-3)) > 0.999


def test_fp16_out_of_tolerance_or_not_measured_is_built_again_in_fp32(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # Given fp16 audio that is other sound than fp32's, then fp16 audio that is not finite
    for fp16_audio in (speech(2), np.full((2, 8 * HOP), np.nan, np.float32)):
        fake = FakeOrt(TENSORRT, fp16_audio, speech(1))
        with caplog.at_level(logging.WARNING):
            sessions = open_fake(fake, tmp_path)
        # Then the engine is built again in fp32, in its own folder, and the log says why
        assert not sessions.fp16 and sessions.engine is not None
        assert [s.providers[0][1].get("trt_fp16_enable") for s in fake.sessions[1:]] == [True, False]
        assert "building it in fp32" in caplog.text
    # And with TTS_TRT_FP16=false no fp16 engine is built at all
    fake = FakeOrt(TENSORRT, speech(2), speech(1))
    assert not open_fake(fake, tmp_path, fp16=False).fp16 and len(fake.sessions) == 2


def test_a_decoder_that_does_not_land_on_tensorrt_runs_on_cuda_and_says_so(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeOrt(CUDA, speech(1), speech(1))
    with caplog.at_level(logging.WARNING):
        sessions = open_fake(fake, tmp_path)
    assert sessions.engine is None and sessions.fallback.landed == CUDA
    assert "landed on CUDAExecutionProvider" in caplog.text
    # (and without TensorRT among the providers, the fp32 session alone)
    plain = open_decoder(fake, b"decoder", [CUDA, CPU], SessionConfig(), DecoderProfile.for_pool(32, 8000),
                         tmp_path, check_feeds)
    assert plain.engine is None


def test_calls_outside_the_profile_run_on_the_fp32_session(tmp_path: Path,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    audio = speech(1)
    sessions = open_fake(FakeOrt(TENSORRT, audio, audio), tmp_path)
    assert sessions.engine is not None
    inside = {"asr": np.zeros((4, 512, 100), np.float32)}
    outside = {"asr": np.zeros((2, 512, 1200), np.float32)}
    engine_calls, fallback_calls = sessions.engine.calls, sessions.fallback.calls
    with caplog.at_level(logging.WARNING):
        sessions.run(None, inside)
        sessions.run(None, outside)
        sessions.run(None, outside)
    assert sessions.engine.calls == engine_calls + 1 and sessions.fallback.calls == fallback_calls + 2
    assert sessions.outside == 2 and caplog.text.count("outside the TensorRT profile") == 1


def test_the_plan_carries_the_pool_s_frames_budget(tmp_path: Path) -> None:
    settings = Settings.from_env({"TTS_DATA_DIR": str(tmp_path), "TTS_WORKER_POOL": "gpu",
                                  "TTS_GPU_MAX_PADDED_FRAMES": "6000"})
    assert SessionPlan.from_settings(settings).max_frames == 6000


# --- cache keys ----------------------------------------------------------------------------------


def test_the_graph_does_not_change_a_kokoro_voice_s_cache_keys(tmp_path: Path) -> None:
    from tts_queue.synthesis.registry import VoiceRegistry

    # Given the same Japanese voice under each of the graphs a worker may run
    digests = set()
    for graph in ("int8", "float", "auto"):
        settings = Settings.from_env({"TTS_DATA_DIR": str(tmp_path), "TTS_KOKORO_GRAPH": graph})
        registry = VoiceRegistry.from_settings(settings)
        digests.add(registry.voice_digest(registry.get("jf_alpha")))
    # Then its cache keys are the same: the graphs say the same speech (docs/voices.md, Cache)
    assert len(digests) == 1
