"""Plain float products in place of a dynamically quantized graph's integer ones (an ``onnx`` edit).

``onnxruntime.quantization.quantize_dynamic`` writes each product as ``DynamicQuantizeLinear(x) ->
MatMulInteger / ConvInteger -> [+ bias rounded to x_scale * w_scale steps] -> Cast -> Mul by
x_scale * w_scale``. ``x_scale`` is one range over the whole input tensor, so with a batch each
item's rounding (``dequantize`` keeps it: bias steps and ``x / x_scale``) depends on the others.
This edit gives each product what the weights mean in float: ``MatMul(x, (W_q - W_zp) * w_scale)``
and ``Conv(x, (W_q - W_zp) * w_scale, bias)`` with the bias as exported, so an item's product no
longer sees the batch. The weights (and so the audio: about 50 dB SNR from ``dequantize``'s form of
one sentence) differ from the rounded form by float rounding only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from tts_queue.errors import ModelLoadError

_PRODUCTS = {"MatMulInteger": "MatMul", "ConvInteger": "Conv"}
_PASSING = ("Reshape", "Cast", "Floor", "Round")  # what a rounded bias goes through on its way


def plain_products(model: Any) -> Any:
    """``model`` (an ``onnx.ModelProto``, edited in place and returned) with every integer product
    made a float one; the quantizers left without a consumer are removed."""
    from onnx import helper, numpy_helper

    graph = model.graph
    constant = constants(graph)
    producer = {out: node for node in graph.node for out in node.output}
    consumers: dict[str, list[Any]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)

    replaced: dict[int, Any] = {}
    added = []
    for node in graph.node:
        if node.op_type not in _PRODUCTS:
            continue
        quantizer = producer.get(node.input[0])
        if quantizer is None or quantizer.op_type != "DynamicQuantizeLinear":
            raise ModelLoadError(f"{node.name}: its input does not come from DynamicQuantizeLinear")
        bias, final, scales = _chain(node, consumers, producer, constant)
        scale = _weight_scale(producer.get(scales), quantizer.output[1], constant)
        weight = constant(node.input[1]) - _zero(constant(node.input[3]), node.op_type)
        if node.op_type == "ConvInteger":
            weight = weight * scale.reshape(-1, *([1] * (weight.ndim - 1)))
        else:
            weight = weight * scale.reshape(1, -1) if scale.ndim else weight * scale
        name = f"{node.input[1]}_plain"
        added.append(numpy_helper.from_array(weight.astype(np.float32), name))
        inputs = [quantizer.input[0], name]
        if bias is not None:
            added.append(numpy_helper.from_array(bias.astype(np.float32), f"{name}_bias"))
            inputs.append(f"{name}_bias")
        plain = helper.make_node(_PRODUCTS[node.op_type], inputs, [final.output[0]],
                                 name=f"{node.name or node.output[0]}_plain")
        if node.op_type == "ConvInteger":
            plain.attribute.extend(node.attribute)
        replaced[id(final)] = plain
    kept = [replaced.get(id(node), node) for node in graph.node]
    del graph.node[:]
    graph.node.extend(kept)
    graph.initializer.extend(added)
    return prune(model)


def prune(model: Any) -> Any:
    """``model`` without the nodes and initializers its outputs do not need (edited in place)."""
    graph = model.graph
    needed = {out.name for out in graph.output}
    kept = []
    for node in reversed(graph.node):
        if needed.intersection(node.output):
            kept.append(node)
            needed.update(name for name in node.input if name)
            needed.update(outer_names(node))
    del graph.node[:]
    graph.node.extend(reversed(kept))
    initializers = [i for i in graph.initializer if i.name in needed]
    del graph.initializer[:]
    graph.initializer.extend(initializers)
    del graph.value_info[:]
    return model


def outer_names(node: Any) -> set[str]:
    """The names a node's subgraphs (a Loop's body) read from the graph around them."""
    names: set[str] = set()
    for attribute in node.attribute:
        if attribute.g.node:
            inner = {out for sub in attribute.g.node for out in sub.output}
            inner.update(i.name for i in attribute.g.input)
            inner.update(i.name for i in attribute.g.initializer)
            for sub in attribute.g.node:
                names.update(n for n in sub.input if n and n not in inner)
                names.update(outer_names(sub))
    return names


def constants(graph: Any) -> Callable[[str], npt.NDArray[np.float32]]:
    """A reader of the graph's constant tensors (initializers and ``Constant`` nodes) as float32;
    ``ModelLoadError`` for a name that is not one."""
    from onnx import numpy_helper

    values = {i.name: i for i in graph.initializer}
    nodes = {node.output[0]: node for node in graph.node if node.op_type == "Constant"}

    def read(name: str) -> npt.NDArray[np.float32]:
        if name in values:
            return np.asarray(numpy_helper.to_array(values[name]), dtype=np.float32)
        if name in nodes:
            return np.asarray(numpy_helper.to_array(nodes[name].attribute[0].t), dtype=np.float32)
        raise ModelLoadError(f"cannot make plain products: {name} is not a constant")

    return read


def _zero(zero: npt.NDArray[np.float32], op_type: str) -> npt.NDArray[np.float32]:
    """A weight zero point shaped to broadcast over the weight (per output channel for a Conv)."""
    if op_type == "ConvInteger" and zero.ndim == 1:
        return zero.reshape(-1, 1, 1)
    return zero


def _only(consumers: dict[str, list[Any]], name: str) -> Any:
    """The one node that reads ``name``."""
    found = consumers.get(name, [])
    if len(found) != 1:
        raise ModelLoadError(f"cannot make plain products: {name} is read by {len(found)} nodes, not one")
    return found[0]


def _chain(node: Any, consumers: dict[str, list[Any]], producer: dict[str, Any],
           constant: Callable[[str], npt.NDArray[np.float32]]) -> tuple[Any, Any, str]:
    """The float bias added to an integer product (``None`` if none), the ``Mul`` that scales it
    and the scale it multiplies by."""
    bias = None
    step = _only(consumers, node.output[0])
    if step.op_type == "Add":
        rounded = step.input[1] if step.input[0] == node.output[0] else step.input[0]
        source = producer.get(rounded)
        while source is not None and source.op_type in _PASSING:
            source = producer.get(source.input[0])
        if source is None or source.op_type != "Div":
            raise ModelLoadError(f"cannot make plain products: {node.name}'s bias is not a divided constant")
        bias = constant(source.input[0])
        step = _only(consumers, step.output[0])
    if step.op_type != "Cast":
        raise ModelLoadError(f"cannot make plain products: {node.name} is not cast to float")
    final = _only(consumers, step.output[0])
    if final.op_type != "Mul":
        raise ModelLoadError(f"cannot make plain products: {node.name} is not scaled by a Mul")
    return bias, final, final.input[1] if final.input[0] == step.output[0] else final.input[0]


def _weight_scale(scales: Any, x_scale: str, constant: Callable[[str], npt.NDArray[np.float32]]
                  ) -> npt.NDArray[np.float32]:
    """``w_scale`` of a product scaled by ``scales`` (``Mul(x_scale, w_scale)``)."""
    if scales is None or scales.op_type != "Mul" or x_scale not in scales.input:
        raise ModelLoadError("cannot make plain products: a product is not scaled by x_scale * w_scale")
    other = scales.input[1] if scales.input[0] == x_scale else scales.input[0]
    return constant(other)
