"""A tiny Piper-shaped ONNX voice, built with ``onnx.helper``, for fast tests.

It has a real Piper voice's signature (``input``, ``input_lengths``, ``scales`` [, ``sid``] ->
``output`` [batch, 1, 1, samples]) and, like VITS, exactly one ``Ceil`` node whose output is the
per-phoneme frame count ``w_ceil`` [batch, 1, phonemes], zero on padding.

Each id lasts ``ceil(((id % 3) + 1) * length_scale)`` frames of ``hop_length`` samples. A sample's
value depends only on the id it belongs to, its position and the speaker, through integer
arithmetic (so batched and single runs agree bit for bit). Beyond an item's own length the batch
is padded with junk (``JUNK``), not silence, as Piper's batched output is: cutting a batch wrongly
shows up in the samples. ``reference_audio`` computes the same samples with numpy.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import onnx
from onnx import TensorProto, helper
from piper.phoneme_ids import DEFAULT_PHONEME_ID_MAP

HOP_LENGTH = 4
SAMPLE_RATE = 16000
JUNK = 0.031  # off the grid of real sample values (multiples of 0.01)
MODULUS = 17
SPEAKERS = ("alice", "bob", "carol")
OPSET = 17


@dataclass(frozen=True)
class VoiceFiles:
    """The two files of a voice written by ``write_voice``."""

    name: str
    model_path: Path
    config_path: Path


def _const(name: str, value: Any, dtype: int) -> onnx.NodeProto:
    array = np.array(value)
    tensor = helper.make_tensor(name + "_t", dtype, array.shape, array.flatten().tolist())
    return helper.make_node("Constant", [], [name], value=tensor)


def build_model(hop_length: int = HOP_LENGTH, multi_speaker: bool = False) -> onnx.ModelProto:
    """The tiny voice graph (see the module docstring for what it computes)."""
    i64, f32 = TensorProto.INT64, TensorProto.FLOAT
    n = helper.make_node
    nodes = [
        _const("zero", 0, i64),
        _const("one", 1, i64),
        _const("three", 3, i64),
        _const("five", 5, i64),
        _const("modulus", MODULUS, i64),
        _const("eight", 8, i64),
        _const("hop", hop_length, i64),
        _const("step", 0.01, f32),
        _const("junk", JUNK, f32),
        _const("axis1", [1], i64),
        _const("axis2", [2], i64),
        _const("axes01", [0, 1], i64),
        _const("axes12", [1, 2], i64),
        _const("cum_axis", 1, i64),
        # mask[b, t] = t < input_lengths[b]
        n("Shape", ["input"], ["in_shape"]),
        n("Gather", ["in_shape", "one"], ["num_phonemes"], axis=0),
        n("Range", ["zero", "num_phonemes", "one"], ["positions"]),
        n("Unsqueeze", ["input_lengths", "axis1"], ["lengths_col"]),
        n("Less", ["positions", "lengths_col"], ["mask_bool"]),
        n("Cast", ["mask_bool"], ["mask"], to=f32),
        # w = ((id % 3) + 1) * length_scale * mask; w_ceil = Ceil(w) as [batch, 1, phonemes]
        n("Mod", ["input", "three"], ["id_mod3"]),
        n("Add", ["id_mod3", "one"], ["dur_int"]),
        n("Cast", ["dur_int"], ["dur"], to=f32),
        n("Gather", ["scales", "one"], ["length_scale"], axis=0),
        n("Mul", ["dur", "length_scale"], ["w_scaled"]),
        n("Mul", ["w_scaled", "mask"], ["w_masked"]),
        n("Unsqueeze", ["w_masked", "axis1"], ["w"]),
        n("Ceil", ["w"], ["w_ceil"]),
        # frame ends per phoneme, frames per item, samples in the padded output
        n("Squeeze", ["w_ceil", "axis1"], ["frames_f"]),
        n("Cast", ["frames_f"], ["frames"], to=i64),
        n("CumSum", ["frames", "cum_axis"], ["ends"]),
        n("ReduceSum", ["frames", "axis1"], ["total_frames"], keepdims=0),
        n("ReduceMax", ["total_frames"], ["max_frames"], keepdims=0),
        n("Mul", ["max_frames", "hop"], ["num_samples"]),
        n("Range", ["zero", "num_samples", "one"], ["sample_index"]),
        # which phoneme each sample belongs to: the count of phonemes ending at or before its frame
        n("Div", ["sample_index", "hop"], ["frame_index"]),
        n("Unsqueeze", ["frame_index", "axes01"], ["frame_row"]),
        n("Unsqueeze", ["ends", "axis2"], ["ends_col"]),
        n("GreaterOrEqual", ["frame_row", "ends_col"], ["ended_bool"]),
        n("Cast", ["ended_bool"], ["ended"], to=i64),
        n("ReduceSum", ["ended", "axis1"], ["phoneme_of"], keepdims=0),
        n("Sub", ["num_phonemes", "one"], ["last_phoneme"]),
        n("Min", ["phoneme_of", "last_phoneme"], ["phoneme_clamped"]),
        n("GatherElements", ["input", "phoneme_clamped"], ["sample_id"], axis=1),
        # value = ((s * (id % 5 + 1) + 3 * id + 5 * sid) % 17 - 8) * 0.01
        n("Mod", ["sample_id", "five"], ["id_mod5"]),
        n("Add", ["id_mod5", "one"], ["rate"]),
        n("Mul", ["rate", "sample_index"], ["ramp"]),
        n("Mul", ["sample_id", "three"], ["id_offset"]),
        n("Add", ["ramp", "id_offset"], ["phase_no_speaker"]),
    ]
    if multi_speaker:
        nodes += [
            n("Mul", ["sid", "five"], ["sid_offset"]),
            n("Unsqueeze", ["sid_offset", "axis1"], ["sid_col"]),
            n("Add", ["phase_no_speaker", "sid_col"], ["phase"]),
        ]
    else:
        nodes.append(n("Identity", ["phase_no_speaker"], ["phase"]))
    nodes += [
        n("Mod", ["phase", "modulus"], ["phase_mod"]),
        n("Sub", ["phase_mod", "eight"], ["level_int"]),
        n("Cast", ["level_int"], ["level"], to=f32),
        n("Mul", ["level", "step"], ["value"]),
        # junk beyond each item's own length, as in a padded Piper batch
        n("Mul", ["total_frames", "hop"], ["item_samples"]),
        n("Unsqueeze", ["item_samples", "axis1"], ["item_samples_col"]),
        n("Less", ["sample_index", "item_samples_col"], ["valid"]),
        n("Where", ["valid", "value", "junk"], ["audio"]),
        n("Unsqueeze", ["audio", "axes12"], ["output"]),
    ]
    inputs = [
        helper.make_tensor_value_info("input", i64, ["batch", "phonemes"]),
        helper.make_tensor_value_info("input_lengths", i64, ["batch"]),
        helper.make_tensor_value_info("scales", f32, [3]),
    ]
    if multi_speaker:
        inputs.append(helper.make_tensor_value_info("sid", i64, ["batch"]))
    outputs = [helper.make_tensor_value_info("output", f32, ["batch", 1, 1, "samples"])]
    graph = helper.make_graph(nodes, "tiny_piper_voice", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def piper_config(
    hop_length: int = HOP_LENGTH, speakers: tuple[str, ...] = (), language: str = "en_US"
) -> dict[str, Any]:
    """A Piper ``.onnx.json`` config for the tiny voice."""
    id_map = {k: list(v) for k, v in DEFAULT_PHONEME_ID_MAP.items()}
    return {
        "audio": {"sample_rate": SAMPLE_RATE, "quality": "x_low"},
        "espeak": {"voice": "en-us"},
        "inference": {"noise_scale": 0.667, "length_scale": 1.0, "noise_w": 0.8},
        "phoneme_type": "espeak",
        "phoneme_id_map": id_map,
        "num_symbols": max(max(v) for v in id_map.values()) + 1,
        "num_speakers": max(1, len(speakers)),
        "speaker_id_map": {name: index for index, name in enumerate(speakers)},
        "hop_length": hop_length,
        "language": {"code": language},
    }


def write_voice(
    directory: Path,
    name: str = "tiny",
    multi_speaker: bool = False,
    hop_length: int = HOP_LENGTH,
    language: str = "en_US",
) -> VoiceFiles:
    """Write ``NAME.onnx`` and ``NAME.onnx.json`` into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    model_path = directory / f"{name}.onnx"
    config_path = directory / f"{name}.onnx.json"
    onnx.save(build_model(hop_length, multi_speaker), str(model_path))
    speakers = SPEAKERS if multi_speaker else ()
    config = piper_config(hop_length, speakers, language)
    config_path.write_text(json.dumps(config, ensure_ascii=False), encoding="utf-8")
    return VoiceFiles(name=name, model_path=model_path, config_path=config_path)


def frames_per_id(
    ids: list[int] | tuple[int, ...], length_scale: float = 1.0
) -> npt.NDArray[np.int64]:
    """The tiny voice's ``w_ceil`` for one item (no padding)."""
    durations = (np.asarray(ids, dtype=np.int64) % 3 + 1).astype(np.float32)
    frames: npt.NDArray[np.int64] = np.ceil(durations * np.float32(length_scale)).astype(np.int64)
    return frames


def reference_audio(
    ids: list[int] | tuple[int, ...],
    length_scale: float = 1.0,
    speaker: int = 0,
    hop_length: int = HOP_LENGTH,
) -> npt.NDArray[np.float32]:
    """What the tiny voice outputs for ``ids`` alone, computed with numpy."""
    id_array = np.asarray(ids, dtype=np.int64)
    frames = frames_per_id(ids, length_scale)
    owner = np.repeat(np.arange(len(id_array)), frames * hop_length)
    sample_index = np.arange(len(owner), dtype=np.int64)
    sample_id = id_array[owner]
    phase = sample_index * (sample_id % 5 + 1) + 3 * sample_id + 5 * speaker
    level = (phase % MODULUS - 8).astype(np.float32)
    return level * np.float32(0.01)
