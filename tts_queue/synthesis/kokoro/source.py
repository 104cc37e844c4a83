"""The decoder's harmonic source run per item, in a ``Loop`` (an ``onnx`` edit).

Kokoro's generator makes a harmonic source from F0 (nearest ``Resize`` x300, nine harmonics, a
linear ``Resize`` down and up again around a ``CumSum`` of the phase, ``Sin``, a linear layer and
``Tanh``), pads it by reflection and takes its ``STFT``; magnitude and phase (``atan2``) feed the
noise convolutions. The phase of near-silent bins is essentially random, so a difference of 1e-7
anywhere before it comes out as different audio. In a padded batch three such differences come in:
the linear resizes interpolate across an item's end into the padding, ONNX Runtime's batched linear
``Resize`` rounds rows differently, and the reflection is taken at the batch's end, not the
item's. So this branch (about 5% of the decoder's CPU) runs per item at its own length inside a
``Loop``, exactly as alone; each item's magnitude and phase are padded with zeros to the batch's
longest and stacked.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tts_queue.errors import ModelLoadError
from tts_queue.synthesis.kokoro.masks import Rate

PREFIX = "item/"


def source_per_item(graph: Any, f0: str, f0_rate: Rate, frames: str, longest: str, hop: int,
                    constant: Callable[[str], Any]) -> Rate:
    """Move the branch from ``f0`` (``[batch, k * frames]``) to the noise convolutions' input into a
    ``Loop`` over the items (module docstring); the time rate of that input."""
    from onnx import TensorProto, helper

    nodes = list(graph.node)
    stft = [node for node in nodes if node.op_type == "STFT"]
    if len(stft) != 1:
        raise ModelLoadError(f"the Kokoro decoder has {len(stft)} STFT nodes, not one")
    end = _convolved(nodes, stft[0].output[0])
    chain = _between(nodes, f0, end)
    rate, padded = _frames_of_stft(helper, stft[0], chain, hop, longest, constant)
    body = _body(helper, TensorProto, chain, f0, f0_rate, frames, end, padded)
    inside = {id(node) for node in chain}
    outside = {name for node in nodes if id(node) not in inside for name in node.input}
    kept = [node for node in nodes if id(node) not in inside or
            (end not in node.output and outside.intersection(node.output))]
    batch = [
        helper.make_node("Shape", [frames], ["source/batch_shape"]),
        helper.make_node("Constant", [], ["source/zero"], value=helper.make_tensor("z", 7, [], [0])),
        helper.make_node("Gather", ["source/batch_shape", "source/zero"], ["source/batch"]),
        helper.make_node("Loop", ["source/batch", ""], ["source/stacked"], body=body),
        helper.make_node("Constant", [], ["source/axis"], value=helper.make_tensor("a", 7, [1], [1])),
        helper.make_node("Squeeze", ["source/stacked", "source/axis"], [end]),
    ]
    del graph.node[:]
    graph.node.extend([*padded[1], *batch, *kept])  # the caller orders them
    return rate


def _convolved(nodes: list[Any], start: str) -> str:
    """The first tensor after ``start`` that a convolution reads (the noise convolutions' input)."""
    frontier = [start]
    seen = set(frontier)
    while frontier:
        name = frontier.pop(0)
        readers = [node for node in nodes if name in node.input]
        if any(node.op_type == "Conv" for node in readers):
            return name
        for node in readers:
            for out in node.output:
                if out not in seen:
                    seen.add(out)
                    frontier.append(out)
    raise ModelLoadError("no convolution reads the Kokoro decoder's STFT")


def _between(nodes: list[Any], start: str, end: str) -> list[Any]:
    """The nodes on a path from ``start`` to ``end``, in graph order."""
    after = {start}
    downstream = []
    for node in nodes:
        if after.intersection(node.input):
            after.update(node.output)
            downstream.append(node)
    before = {end}
    chain = []
    for node in reversed(downstream):
        if before.intersection(node.output):
            before.update(node.input)
            chain.append(node)
    return list(reversed(chain))


def _frames_of_stft(helper: Any, stft: Any, chain: list[Any], hop: int, longest: str,
                    constant: Callable[[str], Any]) -> tuple[Rate, tuple[str, list[Any]]]:
    """The STFT's time rate (``hop`` source samples a frame, its step, its reflection pad) and the
    nodes computing the batch's longest STFT length (name, nodes)."""
    step, length = int(constant(stft.input[1])), int(constant(stft.input[3]))
    pads = [node for node in chain if node.op_type == "Pad"]
    if len(pads) != 1 or pads[0].input[1] == "":
        raise ModelLoadError("the Kokoro decoder's source has no single padding before its STFT")
    pad = [int(v) for v in constant(pads[0].input[1])]
    margin = pad[len(pad) // 2 - 1] + pad[-1] - length
    if hop % step or margin % step:
        raise ModelLoadError("the Kokoro decoder's STFT frames are not a whole rate of its frames")
    rate = (hop // step, margin // step + 1)
    name = "source/longest_stft"
    return rate, (name, [
        helper.make_node("Constant", [], ["source/k"], value=helper.make_tensor("k", 7, [1], [rate[0]])),
        helper.make_node("Constant", [], ["source/c"], value=helper.make_tensor("c", 7, [1], [rate[1]])),
        helper.make_node("Mul", [longest, "source/k"], ["source/longest_scaled"]),
        helper.make_node("Add", ["source/longest_scaled", "source/c"], [name]),
    ])


def _body(helper: Any, tensor_proto: Any, chain: list[Any], f0: str, f0_rate: Rate, frames: str,
          end: str, padded: tuple[str, list[Any]]) -> Any:
    """The Loop's body: item ``i``'s F0 at its own length through ``chain``, padded to the longest."""
    produced = {out for node in chain for out in node.output}

    def renamed(name: str) -> str:
        if name == f0:
            return f"{PREFIX}f0"
        return f"{PREFIX}{name}" if name in produced else name

    def const(name: str, values: list[int]) -> Any:
        return helper.make_node("Constant", [], [f"{PREFIX}{name}"],
                                value=helper.make_tensor(name, 7, [len(values)], values))

    nodes = [
        const("k", [f0_rate[0]]), const("c", [f0_rate[1]]), const("one", [1]), const("origin", [0]),
        const("axes", [0, 1]), const("front", [0, 0, 0, 0, 0]), const("unsqueeze", [0]),
        helper.make_node("Unsqueeze", [f"{PREFIX}i", f"{PREFIX}unsqueeze"], [f"{PREFIX}row"]),
        helper.make_node("Add", [f"{PREFIX}row", f"{PREFIX}one"], [f"{PREFIX}next"]),
        helper.make_node("Gather", [frames, f"{PREFIX}row"], [f"{PREFIX}frames"]),
        helper.make_node("Mul", [f"{PREFIX}frames", f"{PREFIX}k"], [f"{PREFIX}scaled"]),
        helper.make_node("Add", [f"{PREFIX}scaled", f"{PREFIX}c"], [f"{PREFIX}length"]),
        helper.make_node("Concat", [f"{PREFIX}row", f"{PREFIX}origin"], [f"{PREFIX}starts"], axis=0),
        helper.make_node("Concat", [f"{PREFIX}next", f"{PREFIX}length"], [f"{PREFIX}ends"], axis=0),
        helper.make_node("Slice", [f0, f"{PREFIX}starts", f"{PREFIX}ends", f"{PREFIX}axes"], [f"{PREFIX}f0"]),
    ]
    for node in chain:
        copy = helper.make_node(node.op_type, [renamed(n) for n in node.input],
                                [renamed(n) for n in node.output], name=f"{PREFIX}{node.name}",
                                domain=node.domain or None)
        copy.attribute.extend(node.attribute)
        nodes.append(copy)
    out = renamed(end)
    nodes += [
        helper.make_node("Shape", [out], [f"{PREFIX}stft_length"], start=2, end=3),
        helper.make_node("Sub", [padded[0], f"{PREFIX}stft_length"], [f"{PREFIX}missing"]),
        helper.make_node("Concat", [f"{PREFIX}front", f"{PREFIX}missing"], [f"{PREFIX}pads"], axis=0),
        helper.make_node("Pad", [out, f"{PREFIX}pads"], [f"{PREFIX}padded"]),
        helper.make_node("Identity", [f"{PREFIX}cond"], [f"{PREFIX}cond_out"]),
    ]
    return helper.make_graph(
        nodes, "source_per_item",
        [helper.make_tensor_value_info(f"{PREFIX}i", tensor_proto.INT64, []),
         helper.make_tensor_value_info(f"{PREFIX}cond", tensor_proto.BOOL, [])],
        [helper.make_tensor_value_info(f"{PREFIX}cond_out", tensor_proto.BOOL, []),
         helper.make_tensor_value_info(f"{PREFIX}padded", tensor_proto.FLOAT, None)])
