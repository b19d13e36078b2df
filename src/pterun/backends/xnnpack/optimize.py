"""Graph rewrites XNNPACK applies before running a graph, where they change results.

Clamps: XNNPACK folds a clamp node into the node producing its input when that node
can clamp its own output (convolutions, fully connected, pooling, another
clamp) and nothing else reads the value in between. The producer then writes
the clamp's output value directly: for 8-bit values it requantizes straight
to the clamp output's quantization and rounds once, where running the two
nodes would round twice. Matching XNNPACK's results needs the same folding.

Padding: XNNPACK folds a zero constant pad of the spatial dimensions into the
convolution reading it (only faster: the padding is the same zeros).

Empty pads: a constant pad of nothing on every side (transformers' "same" padding
before stride-1 convolutions) is a copy; its readers read its input instead
(only faster).

Pointwise convolutions: XNNPACK runs a 1x1, stride 1, unpadded, ungrouped
convolution as a fully connected node, and when its input is quantized at run
time it quantizes that input per pixel (as fully connected inputs are) rather
than per image as the graph says.
"""

from __future__ import annotations

import copy
import dataclasses
from collections import Counter

import numpy as np

from pterun.backends.xnnpack.graph import INVALID_ID, DynamicRows, Graph, Node, PerTensor

# Node types whose kernels apply output_min/output_max themselves.
_CLAMPING = {
    "XNNConv2d", "XNNDepthwiseConv2d", "XNNConvTranspose2d", "XNNFullyConnected",
    "XNNAvgPooling2d", "XNNMaxPooling2d", "XNNClamp",
}


def inputs_of(node: Node) -> list[int]:
    return [v for k, v in vars(node.p).items()
            if k.endswith("_id") and not k.startswith("output") and v != INVALID_ID]


def outputs_of(node: Node) -> list[int]:
    return [v for k, v in vars(node.p).items() if k.startswith("output") and k.endswith("_id")]


def merge_clamps(graph: Graph) -> Graph:
    nodes = [copy.copy(n) for n in graph.nodes]
    for n in nodes:
        n.p = copy.copy(n.p)
    changed = True
    while changed:
        changed = False
        consumers = Counter(v for n in nodes for v in set(inputs_of(n)))
        for v in graph.outputs:
            consumers[v.id] += 1
        producer = {v: n for n in nodes for v in outputs_of(n)}
        for clamp in nodes:
            if clamp.kind != "XNNClamp":
                continue
            source = clamp.p.input_id
            prod = producer.get(source)
            if prod is None or prod.kind not in _CLAMPING or consumers[source] != 1:
                continue
            f32 = np.float32
            lo, hi = f32(clamp.output_min), f32(clamp.output_max)
            prod.output_min = float(min(max(f32(prod.output_min), lo), hi))
            prod.output_max = float(min(max(f32(prod.output_max), lo), hi))
            prod.p.output_id = clamp.p.output_id
            prod.fused = (*prod.fused, clamp, *clamp.fused)
            nodes.remove(clamp)
            changed = True
            break
    return Graph(graph.values, nodes, graph.num_externs, graph.inputs, graph.outputs)


def pointwise_rows(graph: Graph) -> Graph:
    values = dict(graph.values)
    for n in graph.nodes:
        p = n.p
        if n.kind != "XNNConv2d" or not _is_pointwise(p):
            continue
        source = values.get(p.input1_id)
        if source is not None and isinstance(source.quant, DynamicRows):
            values[source.id] = dataclasses.replace(source, quant=DynamicRows(1))
    return Graph(values, graph.nodes, graph.num_externs, graph.inputs, graph.outputs)


def _is_pointwise(p) -> bool:
    return (p.groups == 1 and p.kernel_height == p.kernel_width == 1
            and p.subsampling_height == p.subsampling_width == 1
            and not (p.padding_top or p.padding_right or p.padding_bottom or p.padding_left)
            and p.group_input_channels + p.group_output_channels > 2)


def fuse_pads(graph: Graph) -> Graph:
    nodes = [copy.copy(n) for n in graph.nodes]
    for n in nodes:
        n.p = copy.copy(n.p)
    consumers = Counter(v for n in nodes for v in set(inputs_of(n)))
    for v in graph.outputs:
        consumers[v.id] += 1
    readers = {v: n for n in nodes for v in inputs_of(n)}
    for pad in list(nodes):
        if pad.kind != "XNNStaticConstantPad" or consumers[pad.p.output_id] != 1:
            continue
        conv = readers.get(pad.p.output_id)
        if conv is None or conv.kind not in ("XNNConv2d", "XNNDepthwiseConv2d") or _is_pointwise(conv.p):
            continue
        if conv.p.input1_id != pad.p.output_id or not _zero_spatial_padding(graph, pad):
            continue
        pre, post = pad.p.pre_paddings, pad.p.post_paddings
        conv.p.padding_top += pre[1]
        conv.p.padding_bottom += post[1]
        conv.p.padding_left += pre[2]
        conv.p.padding_right += post[2]
        conv.p.input1_id = pad.p.input_id
        conv.fused = (*conv.fused, pad, *pad.fused)
        nodes.remove(pad)
    return Graph(graph.values, nodes, graph.num_externs, graph.inputs, graph.outputs)


def _zero_spatial_padding(graph: Graph, pad: Node) -> bool:
    pre, post = pad.p.pre_paddings, pad.p.post_paddings
    if len(pre) != 4 or len(post) != 4 or pre[0] or pre[3] or post[0] or post[3]:
        return False
    out = graph.values.get(pad.p.output_id)
    if out is None:
        return False
    if out.quant is None:
        return pad.p.padding_value == 0.0
    if not isinstance(out.quant, PerTensor):
        return False
    # An 8-bit pad fills with the quantized padding value; zeros are the zero point.
    return pad.p.padding_value == 0.0


def drop_empty_pads(graph: Graph) -> Graph:
    outputs = {v.id for v in graph.outputs}
    source: dict[int, int] = {}  # a dropped pad's output -> the value its readers read instead
    dropped: dict[int, tuple[Node, ...]] = {}  # a dropped pad's output -> the pads no reader stands for yet
    nodes = []
    for n in graph.nodes:
        if n.kind == "XNNStaticConstantPad" and _empty(graph, n) and n.p.output_id not in outputs:
            source[n.p.output_id] = source.get(n.p.input_id, n.p.input_id)
            dropped[n.p.output_id] = (*dropped.pop(n.p.input_id, ()), n)
            continue
        read = {k: v for k in vars(n.p) if k.endswith("_id") and not k.startswith("output")
                and (v := getattr(n.p, k)) in source}
        if read:
            n = copy.copy(n)
            n.p = copy.copy(n.p)
            vars(n.p).update({k: source[v] for k, v in read.items()})
            n.fused = (*n.fused, *(pad for v in read.values() for pad in dropped.pop(v, ())))
        nodes.append(n)
    return Graph(graph.values, nodes, graph.num_externs, graph.inputs, graph.outputs)


def _empty(graph: Graph, pad: Node) -> bool:
    x, y = graph.values.get(pad.p.input_id), graph.values.get(pad.p.output_id)
    pre, post = list(pad.p.pre_paddings), list(pad.p.post_paddings)
    return (x is not None and y is not None and x.datatype == y.datatype and x.quant == y.quant
            and len(pre) == len(post) == len(x.dims) and not any(pre) and not any(post))


def optimize(graph: Graph) -> Graph:
    return merge_clamps(fuse_pads(pointwise_rows(drop_empty_pads(graph))))
