"""A float graph made from a dynamically quantized one, once, at load time (an ``onnx`` graph edit).

``onnxruntime.quantization.quantize_dynamic`` (how kokoro-onnx made the int8 Kokoro graph) turns
each MatMul into ``DynamicQuantizeLinear(x) -> MatMulInteger(x_q, W_q, x_zp, W_zp) -> Cast -> Mul
by x_scale * W_scale``, each Conv into the same with ``ConvInteger`` (and its bias rounded into
int32), and each LSTM into ``DynamicQuantizeLSTM``. This edit keeps every scale multiplication
where it is and replaces only the integer products:

- ``MatMulInteger`` -> ``MatMul(x / x_scale, W_q - W_zp)``, ``ConvInteger`` -> ``Conv`` with the
  same attributes: the same value as the integer op with ``x`` unrounded (what float activations
  give), the weights ``W_q - W_zp`` computed once here as float32;
- the int32 bias casts that meet those products -> float casts;
- ``DynamicQuantizeLSTM`` -> ``LSTM`` with ``(W_q - W_zp) * W_scale``, transposed to ONNX's layout.

The result has the same inputs and outputs and uses no integer kernels (so it runs on CUDA, where
``ConvInteger`` has none); its weights take four times the memory.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

from tts_queue.errors import ModelLoadError

_INTEGER_OPS = {"MatMulInteger": "MatMul", "ConvInteger": "Conv"}


def dequantize(model: Any) -> Any:
    """``model`` (an ``onnx.ModelProto``, edited in place and returned) without integer kernels."""
    from onnx import TensorProto, helper, numpy_helper

    graph = model.graph
    initializers = {i.name: i for i in graph.initializer}
    producer = {out: node for node in graph.node for out in node.output}

    def array(name: str) -> Any:
        if name not in initializers:
            raise ModelLoadError(f"cannot dequantize: {name} is not a constant weight")
        return numpy_helper.to_array(initializers[name]).astype(np.float32)

    added: dict[str, Any] = {}
    divided: dict[str, Any] = {}  # one x / x_scale per DynamicQuantizeLinear

    def unscaled(quantized: str) -> str:
        quantizer = producer[quantized]
        if quantizer.op_type != "DynamicQuantizeLinear":
            raise ModelLoadError(f"cannot dequantize: {quantized} does not come from DynamicQuantizeLinear")
        name = f"{quantizer.output[0]}_float"
        divided.setdefault(name, helper.make_node("Div", [quantizer.input[0], quantizer.output[1]], [name]))
        return name

    replaced: dict[int, Any] = {}
    products: set[str] = set()
    for node in graph.node:
        if node.op_type in _INTEGER_OPS:
            weight, zero = array(node.input[1]), array(node.input[3])
            if node.op_type == "ConvInteger" and zero.ndim == 1:
                zero = zero.reshape(-1, *([1] * (weight.ndim - 1)))
            name = f"{node.input[1]}_float_{node.input[3]}"
            added.setdefault(name, numpy_helper.from_array(weight - zero, name))
            edited = helper.make_node(_INTEGER_OPS[node.op_type], [unscaled(node.input[0]), name],
                                      list(node.output), name=f"{node.name or node.output[0]}_float")
            if node.op_type == "ConvInteger":
                edited.attribute.extend(node.attribute)
            replaced[id(node)] = edited
            products.add(node.output[0])
        elif node.op_type == "DynamicQuantizeLSTM":
            replaced[id(node)] = _lstm(node, array, added, helper, numpy_helper)
    _float_bias_casts(graph, producer, products, TensorProto)
    nodes = [*divided.values(), *(replaced.get(id(node), node) for node in graph.node)]
    del graph.node[:]
    graph.node.extend(_topological(nodes, {i.name for i in graph.input} | set(initializers) | set(added)))
    graph.initializer.extend(added.values())
    used = {name for node in graph.node for name in node.input}
    kept = [i for i in graph.initializer if i.name in used]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    del graph.value_info[:]  # the integer outputs' declared types no longer hold
    return model


def _lstm(node: Any, array: Any, added: dict[str, Any], helper: Any, numpy_helper: Any) -> Any:
    """``LSTM`` for a ``DynamicQuantizeLSTM`` (weights ``[dirs, in, 4h]`` -> ``[dirs, 4h, in]``)."""
    names = []
    for weight, scale, zero in ((1, 8, 9), (2, 10, 11)):
        scales = array(node.input[scale]).reshape(-1, 1, 1)
        zeros = array(node.input[zero]).reshape(-1, 1, 1)
        value = np.ascontiguousarray(((array(node.input[weight]) - zeros) * scales).transpose(0, 2, 1))
        name = f"{node.input[weight]}_float"
        added.setdefault(name, numpy_helper.from_array(value, name))
        names.append(name)
    inputs = [node.input[0], *names, *node.input[3:8]]
    while inputs and not inputs[-1]:
        inputs.pop()
    lstm = helper.make_node("LSTM", inputs, list(node.output), name=f"{node.name or node.output[0]}_float")
    lstm.attribute.extend(node.attribute)
    return lstm


def _float_bias_casts(graph: Any, producer: dict[str, Any], products: set[str], tensor_proto: Any) -> None:
    """The int32 casts of rounded biases that are added to a replaced product now cast to float."""
    for node in graph.node:
        if node.op_type != "Add" or not products.intersection(node.input):
            continue
        for name in node.input:
            source = producer.get(name)
            while source is not None and source.op_type == "Reshape":
                source = producer.get(source.input[0])
            if source is not None and source.op_type == "Cast":
                for attribute in source.attribute:
                    if attribute.name == "to" and attribute.i == tensor_proto.INT32:
                        attribute.i = tensor_proto.FLOAT


def _topological(nodes: list[Any], available: set[str]) -> list[Any]:
    """``nodes`` ordered so each comes after the producers of its inputs (ONNX requires it)."""
    consumers: dict[str, list[int]] = defaultdict(list)
    waiting = []
    for index, node in enumerate(nodes):
        missing = {name for name in node.input if name and name not in available}
        waiting.append(missing)
        for name in missing:
            consumers[name].append(index)
    ready = [index for index, missing in enumerate(waiting) if not missing]
    ordered = []
    while ready:
        index = ready.pop()
        ordered.append(nodes[index])
        for out in nodes[index].output:
            for consumer in consumers.pop(out, ()):
                waiting[consumer].discard(out)
                if not waiting[consumer]:
                    ready.append(consumer)
    if len(ordered) != len(nodes):
        raise ModelLoadError("cannot dequantize: the edited graph has unresolved inputs")
    return ordered
