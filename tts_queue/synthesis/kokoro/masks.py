"""Frame masks in a padded decoder batch (an ``onnx`` edit): each item sees only its own frames.

Kokoro's decoder pads nothing by itself: every instance norm averages over the whole time axis and
every convolution reads past an item's end into the next item's padding. Run alone, an item's norms
average its own frames and its convolutions read zeros past its end. This edit restores both in a
batch padded to the longest item:

- each ``ReduceMean`` over time becomes ``ReduceSum(x * mask) / frames``, the item's own mean (its
  variance too: the second mean of each norm is of ``(x - mean)^2``, masked the same way);
- each convolution that reads a neighbourhood (kernel, stride or padding beyond 1) reads
  ``x * mask``, zeros past the item's end, as its zero padding gives alone.

A tensor's time axis (axis 2) runs at a rate of the decoder's frames: ``k * frames + c`` samples
(``frame_rates``: 1 for the text, 2 for F0, 20 and 120 + 1 in the generator), found once from the
graph's own operators, so each mask is built once per rate from the items' frame counts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from tts_queue.errors import ModelLoadError

Rate = tuple[int, int]  # a time axis of k * frames + c samples
NO_TIME: Rate = (0, 0)  # a tensor without a time axis (styles, statistics, constants)
_UNKNOWN = None
_SAME = {"Add", "Sub", "Mul", "Div", "Pow", "Where", "LeakyRelu", "Sin", "Cos", "Exp", "Sqrt", "Cast",
         "Tanh", "Atan", "Greater", "Less", "Equal", "Floor", "Identity", "Neg", "Abs", "Relu"}
_CHANNELS = {"Concat", "Split", "Slice"}  # along the channel axis they keep the time axis
_FLAT = {"MatMul", "Gemm", "Unsqueeze", "Squeeze", "Reshape", "Transpose", "Shape", "Gather"}


@dataclass(frozen=True)
class Masking:
    """Which masks ``add_masks`` puts in: on the norms, on the convolutions' inputs."""

    norms: bool = True
    convs: bool = True


def frame_rates(graph: Any, known: Mapping[str, Rate],
                constant: Callable[[str], Any]) -> dict[str, Rate | None]:
    """Every tensor's time rate (``None`` where it cannot be told) from the inputs' ``known`` ones;
    ``constant(name)`` reads a constant input (a Resize's scales, a Slice's axes) or ``None``."""
    rates: dict[str, Rate | None] = dict(known)

    def rate(name: str) -> Rate | None:
        return rates.get(name, NO_TIME) if name else NO_TIME

    for node in graph.node:
        inputs = [rate(name) for name in node.input]
        result = _rate(node, inputs, constant)
        for out in node.output:
            if out not in known:
                rates[out] = result
    return rates


def _rate(node: Any, inputs: list[Rate | None], constant: Callable[[str], Any]) -> Rate | None:
    """The time rate of ``node``'s outputs from its inputs' (see ``frame_rates``)."""
    timed = [r for r in inputs if r != NO_TIME]
    if _UNKNOWN in timed:
        return _UNKNOWN
    if not timed:
        return NO_TIME
    attrs = _attributes(node)
    first = inputs[0]
    if node.op_type in _SAME:
        return timed[0] if all(r == timed[0] for r in timed) else _UNKNOWN
    if node.op_type in _CHANNELS:
        axes = constant(node.input[3]) if node.op_type == "Slice" and len(node.input) > 3 else None
        axis = int(axes[0]) if axes is not None and len(axes) == 1 else int(attrs.get("axis", 0))
        same = all(r == timed[0] for r in timed)
        return timed[0] if axis == 1 and same else _UNKNOWN
    if node.op_type == "Unsqueeze":  # F0 and noise [batch, time] -> [batch, 1, time]
        axes = constant(node.input[1]) if len(node.input) > 1 else None
        return timed[0] if axes is not None and list(np.ravel(axes)) == [1] else _UNKNOWN
    if node.op_type == "ReduceMean":
        axes = constant(node.input[1]) if len(node.input) > 1 else attrs.get("axes")
        return NO_TIME if axes is not None and list(np.ravel(axes)) == [2] else _UNKNOWN
    if first is None or first == NO_TIME:
        return _UNKNOWN
    return _resampled(node, first, attrs, constant)


def _resampled(node: Any, rate: Rate, attrs: Mapping[str, Any],
               constant: Callable[[str], Any]) -> Rate | None:
    """The time rate after an operator that changes the time axis' length (a convolution, a
    resize, a pad) of a tensor at ``rate``."""
    k, c = rate
    if node.op_type == "Conv":
        stride, (low, high), reach = _geometry(attrs)
        if k % stride:
            return _UNKNOWN
        return k // stride, (c + low + high - reach - 1) // stride + 1
    if node.op_type == "ConvTranspose":
        stride, (low, high), reach = _geometry(attrs)
        extra = int(attrs.get("output_padding", [0])[0])
        return stride * k, stride * (c - 1) + extra + reach + 1 - low - high
    if node.op_type == "Resize":
        scales = constant(node.input[2]) if len(node.input) > 2 and node.input[2] else None
        if scales is None or len(scales) != 3 or float(scales[2]) != int(scales[2]):
            return _UNKNOWN
        factor = int(scales[2])
        return factor * k, factor * c
    if node.op_type == "Pad":
        pads = constant(node.input[1])
        if pads is None or len(pads) != 6:
            return _UNKNOWN
        return k, c + int(pads[2]) + int(pads[5])
    return _UNKNOWN


def _attributes(node: Any) -> dict[str, Any]:
    """``node``'s attributes by name."""
    from onnx import helper

    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _geometry(attrs: Mapping[str, Any]) -> tuple[int, tuple[int, int], int]:
    """A 1-D convolution's stride, padding (before, after) and reach (``dilation * (kernel - 1)``)."""
    stride = int(attrs.get("strides", [1])[0])
    pads = attrs.get("pads", [0, 0])
    dilation = int(attrs.get("dilations", [1])[0])
    kernel = int(attrs["kernel_shape"][0])
    return stride, (int(pads[0]), int(pads[1])), dilation * (kernel - 1)


def _reads_neighbours(node: Any) -> bool:
    """Whether a convolution's output at a frame reads other frames than its own."""
    stride, (low, high), reach = _geometry(_attributes(node))
    return stride != 1 or low != 0 or high != 0 or reach != 0


def add_masks(graph: Any, rates: Mapping[str, Rate | None], frames: str, longest: str,
              masking: Masking = Masking()) -> int:
    """Put in the masks (module docstring) from ``frames`` (int64 ``[batch]``, each item's frames) and
    ``longest`` (an int64 scalar, the batch's padded frames); how many were put in."""
    from onnx import helper

    built: dict[Rate, tuple[str, str]] = {}
    masked: dict[str, str] = {}
    added: list[Any] = []

    def mask(rate: Rate | None, name: str) -> tuple[str, str]:
        if rate is None or rate == NO_TIME:
            raise ModelLoadError(f"cannot mask the Kokoro decoder: {name}'s frame rate is unknown")
        if rate not in built:
            built[rate] = _mask_nodes(helper, rate, frames, longest, added)
        return built[rate]

    def masked_input(name: str) -> str:
        if name not in masked:
            masked[name] = f"{name}_masked"
            added.append(helper.make_node("Mul", [name, mask(rates.get(name), name)[0]], [masked[name]]))
        return masked[name]

    nodes = []
    count = 0
    for node in graph.node:
        if masking.norms and node.op_type == "ReduceMean" and rates.get(node.output[0]) == NO_TIME \
                and rates.get(node.input[0]) not in (NO_TIME, None):
            total = f"{node.output[0]}_sum"
            nodes.append(helper.make_node("ReduceSum", [masked_input(node.input[0]), node.input[1]],
                                          [total], keepdims=1))
            nodes.append(helper.make_node("Div", [total, mask(rates.get(node.input[0]), node.input[0])[1]],
                                          [node.output[0]]))
            count += 1
            continue
        if masking.convs and node.op_type in ("Conv", "ConvTranspose") and _reads_neighbours(node):
            node.input[0] = masked_input(node.input[0])
            count += 1
        nodes.append(node)
    del graph.node[:]
    graph.node.extend(added)  # the masks read only graph inputs and their own nodes
    graph.node.extend(nodes)
    return count


def _mask_nodes(helper: Any, rate: Rate, frames: str, longest: str, added: list[Any]) -> tuple[str, str]:
    """Nodes for the mask ``[batch, 1, k * longest + c]`` of a rate ``(k, c)`` and each item's length
    there as a float ``[batch, 1, 1]``; the names of both."""
    k, c = rate
    tag = f"frame_mask_{k}_{c}"

    def const(name: str, value: int) -> str:
        added.append(helper.make_node("Constant", [], [f"{tag}_{name}"],
                                      value=helper.make_tensor(f"{tag}_{name}", 7, [], [value])))
        return f"{tag}_{name}"

    k_name, c_name, zero, one = const("k", k), const("c", c), const("zero", 0), const("one", 1)
    axes = f"{tag}_axes"
    added.append(helper.make_node("Constant", [], [axes], value=helper.make_tensor(axes, 7, [2], [1, 2])))
    added.extend([
        helper.make_node("Mul", [longest, k_name], [f"{tag}_scaled"]),
        helper.make_node("Add", [f"{tag}_scaled", c_name], [f"{tag}_length"]),
        helper.make_node("Range", [zero, f"{tag}_length", one], [f"{tag}_range"]),
        helper.make_node("Mul", [frames, k_name], [f"{tag}_items_scaled"]),
        helper.make_node("Add", [f"{tag}_items_scaled", c_name], [f"{tag}_items"]),
        helper.make_node("Unsqueeze", [f"{tag}_items", axes], [f"{tag}_column"]),
        helper.make_node("Less", [f"{tag}_range", f"{tag}_column"], [f"{tag}_bool"]),
        helper.make_node("Cast", [f"{tag}_bool"], [tag], to=1),
        helper.make_node("Cast", [f"{tag}_column"], [f"{tag}_count"], to=1),
    ])
    return tag, f"{tag}_count"
