"""The float graph made from a dynamically quantized one: on a small generated graph with the three
kinds of quantized node Kokoro's int8 graph has (MatMul, Conv with a bias, bidirectional LSTM),
quantized by onnxruntime's own ``quantize_dynamic``."""

from __future__ import annotations

import collections
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from tts_queue.errors import ModelLoadError
from tts_queue.synthesis.kokoro.dequantize import dequantize

HIDDEN, CHANNELS, STEPS = 16, 8, 12


def float_model() -> onnx.ModelProto:
    """x [1, STEPS, CHANNELS] -> Conv1d (bias) -> MatMul -> bidirectional LSTM -> y."""
    rng = np.random.default_rng(7)

    def weight(name: str, *shape: int) -> onnx.TensorProto:
        return numpy_helper.from_array(rng.normal(0, 0.3, shape).astype(np.float32), name)

    nodes = [
        helper.make_node("Transpose", ["x"], ["xt"], perm=[0, 2, 1]),
        helper.make_node("Conv", ["xt", "conv_w", "conv_b"], ["c"], kernel_shape=[3], pads=[1, 1]),
        helper.make_node("Transpose", ["c"], ["ct"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["ct", "mm_w"], ["m"]),
        helper.make_node("Transpose", ["m"], ["seq"], perm=[1, 0, 2]),
        helper.make_node("LSTM", ["seq", "lstm_w", "lstm_r", "lstm_b"], ["y"], direction="bidirectional",
                         hidden_size=HIDDEN),
    ]
    initializers = [weight("conv_w", CHANNELS, CHANNELS, 3), weight("conv_b", CHANNELS),
                    weight("mm_w", CHANNELS, HIDDEN), weight("lstm_w", 2, 4 * HIDDEN, HIDDEN),
                    weight("lstm_r", 2, 4 * HIDDEN, HIDDEN), weight("lstm_b", 2, 8 * HIDDEN)]
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                            [1, STEPS, CHANNELS])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, onnx.ModelProto]:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    folder = tmp_path_factory.mktemp("dequantize")
    source, target = folder / "float.onnx", folder / "int8.onnx"
    onnx.save(float_model(), source)
    quantize_dynamic(source, target, weight_type=QuantType.QInt8,
                     op_types_to_quantize=["MatMul", "Conv", "LSTM"])
    return {"float": onnx.load(source), "int8": onnx.load(target)}


def run(model: onnx.ModelProto, x: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return np.asarray(session.run(None, {"x": x})[0])


def test_the_quantized_graph_has_the_integer_kernels_kokoro_has(models: dict[str, onnx.ModelProto]) -> None:
    kinds = collections.Counter(node.op_type for node in models["int8"].graph.node)
    assert kinds["MatMulInteger"] and kinds["ConvInteger"] and kinds["DynamicQuantizeLSTM"]


def test_the_float_graph_has_no_integer_kernel_and_computes_the_same(
        models: dict[str, onnx.ModelProto]) -> None:
    # Given the quantized graph, edited into a float one
    edited = dequantize(onnx.load_from_string(models["int8"].SerializeToString()))
    kinds = collections.Counter(node.op_type for node in edited.graph.node)
    # Then no integer kernel is left, and no integer weight
    assert not {"MatMulInteger", "ConvInteger", "DynamicQuantizeLSTM"} & set(kinds)
    assert all(i.data_type == TensorProto.FLOAT or not i.dims for i in edited.graph.initializer
               if i.name.endswith("_float") or "_float_" in i.name)
    onnx.checker.check_model(edited)
    # And on random inputs it is as close to the original float graph as the int8 graph is (its
    # weights are the int8 ones; only activation rounding is gone), and close to the int8 graph
    x = np.random.default_rng(3).normal(0, 1, (1, STEPS, CHANNELS)).astype(np.float32)
    reference, quantized, dequantized = run(models["float"], x), run(models["int8"], x), run(edited, x)
    assert dequantized.shape == reference.shape
    assert np.abs(dequantized - quantized).max() < 0.05
    assert np.abs(dequantized - reference).max() <= np.abs(quantized - reference).max() + 0.02


def test_a_weight_that_is_not_a_constant_is_refused(models: dict[str, onnx.ModelProto]) -> None:
    broken = onnx.load_from_string(models["int8"].SerializeToString())
    matmul = next(n for n in broken.graph.node if n.op_type == "MatMulInteger")
    matmul.input[1] = "not_a_constant"
    with pytest.raises(ModelLoadError, match="not a constant"):
        dequantize(broken)
