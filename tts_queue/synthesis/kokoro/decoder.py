"""Kokoro's graph in two parts, the second one batched exactly (``onnx`` edits made at load time).

The graph's batch axis is fixed at 1 and nothing in it knows an item's length: every mask is the
tensor's own shape. So it is cut where the frames begin:

- ``encoder``: tokens, style and speed to the text aligned to frames (``asr [1, 512, F]``), F0 and
  noise (``[1, 2F]``) and the frames per token; about 5% of the FLOPs, run per sentence;
- ``decoder``: those (zero-padded to the batch's longest ``F``), each item's style and its frame
  count to audio ``[batch, HOP * F]``; 95% of the FLOPs, one call for the batch.

The decoder is made batchable by five edits, each needed for an item to come out as it does alone
(``tests/real/test_real_kokoro_batch.py``):

1. batch axes: the iSTFT's edge normalization (a ``ScatterND`` with batch index 0 baked in) becomes
   a division by the window envelope, and the output keeps its batch axis;
2. plain float products (``plain``): no product depends on the batch's range;
3. masks from the items' frame counts in every instance norm and on every convolution's input
   (``masks``);
4. the harmonic source per item in a ``Loop`` (``source``);
5. so its reflection pad is taken at each item's own end.

Run alone (a batch of one), the edited decoder is 50-54 dB SNR from the unedited float graph: edit 2
alone (its products are not rounded to the quantizer's steps); the encoder is unchanged.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from tts_queue.errors import ModelLoadError
from tts_queue.synthesis.kokoro.masks import NO_TIME, Masking, add_masks, frame_rates
from tts_queue.synthesis.kokoro.plain import constants, outer_names, plain_products, prune
from tts_queue.synthesis.kokoro.source import source_per_item

# Where the graph is cut: the tensors the decoder reads, as kokoro-onnx's export names them.
ASR = "/encoder/MatMul_1_output_0"  # [1, 512, frames]
F0 = "/encoder/Reshape_output_0"  # [1, 2 * frames]
NOISE = "/encoder/Reshape_1_output_0"  # [1, 2 * frames]
AUDIO = "audio"
CUT = {ASR: "asr", F0: "f0", NOISE: "n"}
FRAMES = "frames"  # the decoder's added input: each item's frames, int64 [batch]
LONGEST = "longest_frames"


@dataclass(frozen=True)
class Edits:
    """Which of the edits the decoder gets (all of them; tests leave one out to show it matters)."""

    plain_products: bool = True
    masking: Masking = Masking()


def encoder(model: Any, durations: str) -> Any:
    """The part of ``model`` (the int8 graph as shipped, an ``onnx.ModelProto``, untouched) from
    its inputs to the decoder's inputs and ``durations``, dequantized as the float graph is."""
    from tts_queue.synthesis.kokoro.dequantize import dequantize

    return dequantize(part(model, [i.name for i in model.graph.input], [ASR, F0, NOISE, durations]))


def durations_part(model: Any, durations: str) -> Any:
    """The part of ``model`` (as ``encoder`` takes it) that computes ``durations`` alone."""
    from tts_queue.synthesis.kokoro.dequantize import dequantize

    return dequantize(part(model, [i.name for i in model.graph.input], [durations]))


def decoder(model: Any, hop: int, edits: Edits = Edits()) -> Any:
    """The decoder of ``model`` (the int8 graph as shipped, untouched) made batchable."""
    from onnx import TensorProto, helper

    from tts_queue.synthesis.kokoro.dequantize import dequantize

    cut = part(model, [ASR, F0, NOISE, "style"], [AUDIO])
    graph = cut.graph
    for node in graph.node:
        for index, name in enumerate(node.input):
            node.input[index] = CUT.get(name, name)
    del graph.input[:]
    graph.input.extend([
        helper.make_tensor_value_info("asr", TensorProto.FLOAT, ["batch", 512, "frames"]),
        helper.make_tensor_value_info("f0", TensorProto.FLOAT, ["batch", "frames2"]),
        helper.make_tensor_value_info("n", TensorProto.FLOAT, ["batch", "frames2"]),
        helper.make_tensor_value_info("style", TensorProto.FLOAT, ["batch", 256]),
        helper.make_tensor_value_info(FRAMES, TensorProto.INT64, ["batch"]),
    ])
    cut = plain_products(cut) if edits.plain_products else dequantize(cut)
    graph = cut.graph
    _batch_axes(graph, helper)
    constant = constants(graph)

    def known(name: str) -> Any:  # a constant's value, or None
        try:
            return constant(name)
        except ModelLoadError:
            return None

    longest = [helper.make_node("Shape", ["asr"], ["asr_shape"]),
               helper.make_node("Constant", [], ["time_axis"], value=helper.make_tensor("t", 7, [], [2])),
               helper.make_node("Gather", ["asr_shape", "time_axis"], [LONGEST])]
    rate = source_per_item(graph, "f0", (2, 0), FRAMES, LONGEST, hop, known)
    graph.node.extend(longest)
    _ordered(graph)
    rates = frame_rates(graph, {"asr": (1, 0), "f0": (2, 0), "n": (2, 0), "style": NO_TIME,
                                FRAMES: NO_TIME, _stft_features(graph): rate}, known)
    add_masks(graph, rates, FRAMES, LONGEST, edits.masking)
    del graph.output[:]
    graph.output.append(helper.make_tensor_value_info(AUDIO, TensorProto.FLOAT, ["batch", "samples"]))
    _ordered(graph)
    return prune(cut)


def part(model: Any, inputs: list[str], outputs: list[str]) -> Any:
    """A new model of the nodes of ``model`` that compute ``outputs`` from ``inputs``."""
    from onnx import ModelProto, helper

    graph = model.graph
    producer = {out: node for node in graph.node for out in node.output}
    needed, wanted = set(outputs), list(outputs)
    chosen: set[int] = set()
    while wanted:
        name = wanted.pop()
        node = producer.get(name)
        if name in inputs or node is None or id(node) in chosen:
            continue
        chosen.add(id(node))
        for source in [*node.input, *outer_names(node)]:
            if source and source not in needed:
                needed.add(source)
                wanted.append(source)
    for name in outputs:
        if name not in producer:
            raise ModelLoadError(f"the Kokoro graph has no {name} tensor")
    declared = {value.name: value for value in [*graph.input, *graph.value_info, *graph.output]}

    def value(name: str) -> Any:
        return declared.get(name) or helper.make_tensor_value_info(name, 1, None)

    new = helper.make_graph(
        [node for node in graph.node if id(node) in chosen], graph.name,
        [value(name) for name in inputs], [value(name) for name in outputs],
        [i for i in graph.initializer if i.name in needed])
    cut = ModelProto()
    cut.CopyFrom(helper.make_model(new, opset_imports=list(model.opset_import)))
    cut.ir_version = model.ir_version
    return cut


def _batch_axes(graph: Any, helper: Any) -> None:
    """Edit 1: the iSTFT's edge normalization for every row, and the output's batch axis kept."""
    producer = {out: node for node in graph.node for out in node.output}
    scatter = [node for node in graph.node if node.op_type == "ScatterND"]
    nonzero = [node for node in graph.node if node.op_type == "NonZero"]
    if len(scatter) != 1 or len(nonzero) != 1 or producer[nonzero[0].input[0]].op_type != "Greater":
        raise ModelLoadError("the Kokoro decoder's iSTFT does not normalize its edge as expected")
    greater = producer[nonzero[0].input[0]]
    envelope, samples, out = greater.input[0], scatter[0].input[0], scatter[0].output[0]
    one = helper.make_tensor("one", 1, [], [1.0])
    edge = [
        helper.make_node("Constant", [], ["edge/one"], value=one),
        helper.make_node("Where", [greater.output[0], envelope, "edge/one"], ["edge/divisor"]),
        helper.make_node("Shape", [samples], ["edge/samples"], start=1, end=2),
        helper.make_node("Shape", [envelope], ["edge/window"]),
        helper.make_node("Sub", ["edge/samples", "edge/window"], ["edge/rest"]),
        helper.make_node("Constant", [], ["edge/zero"], value=helper.make_tensor("z", 7, [1], [0])),
        helper.make_node("Concat", ["edge/zero", "edge/rest"], ["edge/pads"], axis=0),
        helper.make_node("Pad", ["edge/divisor", "edge/pads", "edge/one"], ["edge/envelope"]),
        helper.make_node("Div", [samples, "edge/envelope"], [out]),
    ]
    last = producer[AUDIO]
    flat = producer.get(last.input[0])
    if last.op_type != "Gather" or flat is None or flat.op_type != "Reshape":
        raise ModelLoadError("the Kokoro decoder's output is not its batch's row 0")
    kept = [node for node in graph.node if node is not scatter[0] and node is not last]
    del graph.node[:]
    graph.node.extend([*edge, *kept, helper.make_node("Identity", [flat.input[0]], [AUDIO])])


def _stft_features(graph: Any) -> str:
    """The tensor the per-item source ``Loop`` stacks (its ``Squeeze``'s output)."""
    for node in graph.node:
        if node.op_type == "Squeeze" and node.input[0] == "source/stacked":
            return str(node.output[0])
    raise ModelLoadError("the Kokoro decoder has no per-item source")


def _ordered(graph: Any) -> None:
    """``graph``'s nodes in an order where each comes after what it reads (subgraphs included)."""
    available = {i.name for i in graph.input} | {i.name for i in graph.initializer}
    nodes = list(graph.node)
    readers: dict[str, list[int]] = defaultdict(list)
    missing = []
    for index, node in enumerate(nodes):
        needs = {name for name in [*node.input, *outer_names(node)] if name and name not in available}
        missing.append(needs)
        for name in needs:
            readers[name].append(index)
    ready = [index for index, needs in enumerate(missing) if not needs]
    ordered = []
    while ready:
        index = ready.pop(0)
        ordered.append(nodes[index])
        for out in nodes[index].output:
            for reader in readers.pop(out, ()):
                missing[reader].discard(out)
                if not missing[reader]:
                    ready.append(reader)
    if len(ordered) != len(nodes):
        raise ModelLoadError("the edited Kokoro decoder has unresolved inputs")
    del graph.node[:]
    graph.node.extend(ordered)
