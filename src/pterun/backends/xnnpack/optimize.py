"""Graph rewrites XNNPACK applies before running a graph, where they change results.

Clamps: XNNPACK folds a clamp node into the node producing its input when that node
can clamp its own output (convolutions, fully connected, pooling, another
clamp) and nothing else reads the value in between. The producer then writes
the clamp's output value directly: for 8-bit values it requantizes straight
to the clamp output's quantization and rounds once, where running the two
nodes would round twice. Matching XNNPACK's results needs the same folding.

Padding: XNNPACK folds a zero constant pad of the spatial dimensions into the
convolution reading it (only faster: the padding is the same zeros).

Round trips: 8-bit values dequantized, padded with zeros or not, and quantized again (the exporter leaves a
float pad between two quantized nodes it does not quantize, the second with a quantization of its own) are a
table of XNNPACK's two converts' result for each of the 256 values, computed at load in its float32 arithmetic,
and an 8-bit pad with the new zero point: the same bits (only faster). Where every value the input can hold
(its type's range, narrowed by its producer's clamp) comes back with the same q - zero point and the same scale,
not even the table: the output value takes the input's quantization, which, where the zero points differ, only
nodes that read q - zero point (convolutions, fully connected) may read. The pad is then folded into the
convolution reading it, as above.

Empty pads: a constant pad of nothing on every side (transformers' "same" padding
before stride-1 convolutions) is a copy; its readers read its input instead
(only faster).

Row quantizations: converts quantizing the same value's rows at run time alike become one (only faster:
the same bits).

Pointwise convolutions: XNNPACK runs a 1x1, stride 1, unpadded, ungrouped
convolution as a fully connected node, and when its input is quantized at run
time it quantizes that input per pixel (as fully connected inputs are) rather
than per image as the graph says.
"""

from __future__ import annotations

import dataclasses
import functools
from collections import Counter
from types import SimpleNamespace
from typing import TypeVar

import numpy as np

from pterun.backends.xnnpack.graph import INVALID_ID, Datatype, DynamicRows, Graph, Node, PerTensor

T = TypeVar("T")

# Node types whose kernels apply output_min/output_max themselves.
_CLAMPING = {
    "XNNConv2d", "XNNDepthwiseConv2d", "XNNConvTranspose2d", "XNNFullyConnected",
    "XNNAvgPooling2d", "XNNMaxPooling2d", "XNNClamp",
}


def inputs_of(node: Node) -> list[int]:
    p = vars(node.p)
    return [v for k in _id_fields(tuple(p))[0] if (v := p[k]) != INVALID_ID]


def outputs_of(node: Node) -> list[int]:
    p = vars(node.p)
    return [p[k] for k in _id_fields(tuple(p))[1]]


def _copy(obj: T) -> T:
    """A shallow copy of a node or its parameters: ``copy.copy``'s, without its generic path (``__reduce_ex__``),
    which costs a microsecond more an object, for every node of every pass."""
    new = type(obj).__new__(type(obj))
    new.__dict__.update(obj.__dict__)
    return new


def _input_fields(node: Node) -> tuple[str, ...]:
    return _id_fields(tuple(vars(node.p)))[0]


@functools.cache
def _id_fields(names: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Of a node's parameters (by name, in order), those naming the values it reads and those naming the values it
    writes: a graph's passes ask this of every node, and its nodes have a few dozen kinds of parameters."""
    inputs = tuple(k for k in names if k.endswith("_id") and not k.startswith("output"))
    outputs = tuple(k for k in names if k.startswith("output") and k.endswith("_id"))
    return inputs, outputs


def merge_clamps(graph: Graph) -> Graph:
    nodes = [_copy(n) for n in graph.nodes]
    for n in nodes:
        n.p = _copy(n.p)
    consumers = Counter(v for n in nodes for v in set(inputs_of(n)))
    for v in graph.outputs:
        consumers[v.id] += 1
    producer = {v: n for n in nodes for v in outputs_of(n)}
    # One pass in node order: a merge changes who produces the clamp's output (a clamping kernel either way) and
    # leaves its input unread, so no other clamp's merge is allowed or refused by it.
    kept = []
    for clamp in nodes:
        if clamp.kind != "XNNClamp":
            kept.append(clamp)
            continue
        source = clamp.p.input_id
        prod = producer.get(source)
        if prod is None or prod.kind not in _CLAMPING or consumers[source] != 1:
            kept.append(clamp)
            continue
        f32 = np.float32
        lo, hi = f32(clamp.output_min), f32(clamp.output_max)
        prod.output_min = float(min(max(f32(prod.output_min), lo), hi))
        prod.output_max = float(min(max(f32(prod.output_max), lo), hi))
        prod.p.output_id = clamp.p.output_id
        prod.fused = (*prod.fused, clamp, *clamp.fused)
        del producer[source]
        consumers[source] -= 1
        producer[clamp.p.output_id] = prod
    return Graph(graph.values, kept, graph.num_externs, graph.inputs, graph.outputs)


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
    nodes = [_copy(n) for n in graph.nodes]
    for n in nodes:
        n.p = _copy(n.p)
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


_EIGHT_BITS = {Datatype.QINT8: (-128, 127), Datatype.QUINT8: (0, 255)}
# Nodes whose results depend on an 8-bit input only through (q - zero point) and its scale.
_CENTERED_READERS = {"XNNConv2d", "XNNDepthwiseConv2d", "XNNFullyConnected"}


def drop_round_trips(graph: Graph) -> Graph:
    values, outputs = dict(graph.values), {v.id for v in graph.outputs}
    consumers = Counter(v for n in graph.nodes for v in set(inputs_of(n)))
    readers: dict[int, list[Node]] = {}
    for n in graph.nodes:
        for v in set(inputs_of(n)):
            readers.setdefault(v, []).append(n)
    producer = {v: n for n in graph.nodes for v in outputs_of(n)}
    stand_in: dict[int, Node] = {}  # a chain's node's index -> the node that takes its place there
    gone: set[int] = set()  # the indices of the chains' other nodes
    source: dict[int, int] = {}  # a dropped chain's output -> its input, which its readers read instead
    dropped: dict[int, tuple[Node, ...]] = {}  # such an output -> the chain's nodes, until a reader stands for them
    next_id = max(values, default=-1) + 1
    for close in graph.nodes:
        chain = _round_trip(graph, close, consumers, readers, producer, outputs)
        if chain is None:
            continue
        opening, pad, table = chain
        q, q2 = values[opening.p.input_id], values[close.p.output_id]
        assert isinstance(q.quant, PerTensor)  # as _round_trip found
        gone.add(opening.index)
        if table is not None:  # the values requantized by a table, then padded with the new zero point
            lookup = _copy(close)
            lookup.p = SimpleNamespace(input_id=q.id, output_id=q2.id, flags=0, lookup=table)
            lookup.fused = (opening, *opening.fused, *close.fused)
            if pad is None:
                stand_in[close.index] = lookup
                continue
            values[next_id] = dataclasses.replace(q2, id=next_id, dims=q.dims)  # internal, as q2 is
            lookup.p.output_id = next_id
            padded = _copy(pad)
            padded.p = _copy(pad.p)
            padded.p.input_id, padded.p.output_id = next_id, q2.id
            stand_in[pad.index], stand_in[close.index] = lookup, padded
            next_id += 1
            continue
        values[q2.id] = dataclasses.replace(q2, quant=q.quant)  # the same (q - zero point) on every value
        if pad is None:
            gone.add(close.index)
            source[q2.id] = source.get(q.id, q.id)
            dropped[q2.id] = (*dropped.pop(q.id, ()), opening, *opening.fused, close, *close.fused)
            continue
        node = _copy(pad)
        node.p = _copy(pad.p)
        node.p.input_id, node.p.output_id = q.id, q2.id
        node.fused = (*pad.fused, opening, *opening.fused, close, *close.fused)
        gone.add(pad.index)
        stand_in[close.index] = node
    if not gone:
        return graph
    nodes = []
    for n in graph.nodes:
        if n.index in gone and n.index not in stand_in:
            continue
        n = stand_in.get(n.index, n)
        read = {k: v for k in _input_fields(n) if (v := getattr(n.p, k)) in source}
        if read:
            n = _copy(n)
            n.p = _copy(n.p)
            vars(n.p).update({k: source[v] for k, v in read.items()})
            n.fused = (*n.fused, *(m for v in read.values() for m in dropped.pop(v, ())))
        nodes.append(n)
    return Graph(values, nodes, graph.num_externs, graph.inputs, graph.outputs)


def _round_trip(graph: Graph, close: Node, consumers, readers, producer, outputs):
    """(the opening convert, the pad between or None, a table or None) where ``close`` quantizes what they
    dequantized and padded with zeros, nothing else reading the float values in between: without a table where
    every value the 8-bit input can take comes back with the same (q - zero point) and the readers may read it
    so, else with XNNPACK's two converts as a table of each 8-bit value's result; None for no such chain."""
    values = graph.values
    if close.kind != "XNNConvert":
        return None
    q2, f2 = values.get(close.p.output_id), values.get(close.p.input_id)
    if q2 is None or f2 is None or f2.datatype != Datatype.FP32 or f2.quant is not None or q2.id in outputs:
        return None
    pad = producer.get(f2.id)
    if pad is not None and pad.kind == "XNNStaticConstantPad":
        if pad.p.padding_value != 0.0 or consumers[f2.id] != 1 or f2.id in outputs:
            return None
        opening = producer.get(pad.p.input_id)
    else:
        opening, pad = pad, None
    if opening is None or opening.kind != "XNNConvert":
        return None
    q, f = values.get(opening.p.input_id), values.get(opening.p.output_id)
    if (q is None or f is None or f.datatype != Datatype.FP32 or f.quant is not None or consumers[f.id] != 1
            or f.id in outputs or q.datatype != q2.datatype or q.datatype not in _EIGHT_BITS
            or not isinstance(q.quant, PerTensor) or not isinstance(q2.quant, PerTensor)):
        return None
    table = _requantized(q.quant, q2.quant, *_EIGHT_BITS[q.datatype])
    if table is None:
        return None
    lo, hi = _EIGHT_BITS[q.datatype]
    first, last = _reach(q, producer.get(q.id))
    centered = np.arange(first, last + 1) - int(q.quant.zero_point)
    if (np.float32(q.quant.scale) == np.float32(q2.quant.scale)
            and np.array_equal(table[first - lo:last - lo + 1] - int(q2.quant.zero_point), centered)
            and (q.quant == q2.quant or all(r.kind in _CENTERED_READERS for r in readers.get(q2.id, [])))):
        return opening, pad, None
    return opening, pad, table


def _reach(value, node: Node | None) -> tuple[int, int]:
    """The 8-bit values ``value`` can hold: its type's range, narrowed by its producer's clamp."""
    lo, hi = _EIGHT_BITS[value.datatype]
    if node is None or node.kind not in _CLAMPING:
        return lo, hi
    from pterun.backends.xnnpack.nodes.qmath import quantize_bound

    scale, zp = float(np.float32(value.quant.scale)), int(value.quant.zero_point)
    return (quantize_bound(node.output_min, scale, zp, lo, hi), quantize_bound(node.output_max, scale, zp, lo, hi))


def _requantized(a: PerTensor, b: PerTensor, lo: int, hi: int) -> np.ndarray | None:
    """What XNNPACK's dequantize with ``a``, then quantize with ``b`` (times 1 / scale, rounded half to even,
    saturated), gives each 8-bit value of [lo, hi], in order (None for scales it does not take)."""
    f32 = np.float32
    sa, za, sb, zb = f32(a.scale), int(a.zero_point), f32(b.scale), int(b.zero_point)
    if not (np.isfinite(sa) and sa > 0 and np.isfinite(sb) and sb > 0):
        return None
    q = np.arange(lo, hi + 1, dtype=np.int64)
    with np.errstate(over="ignore", invalid="ignore"):
        real = (q - za).astype(f32) * sa
        back = np.minimum(real * (f32(1.0) / sb), f32(32767.0))
    back = np.nan_to_num(back, nan=32767.0)
    return np.clip(np.rint(np.maximum(back, f32(-32768.0))).astype(np.int64) + zb, lo, hi)


def drop_empty_pads(graph: Graph) -> Graph:
    outputs = {v.id for v in graph.outputs}
    source: dict[int, int] = {}  # a dropped pad's output -> the value its readers read instead
    dropped: dict[int, tuple[Node, ...]] = {}  # a dropped pad's output -> the pads no reader stands for yet
    nodes = []
    for n in graph.nodes:
        if n.kind == "XNNStaticConstantPad" and _empty(graph, n) and n.p.output_id not in outputs:
            source[n.p.output_id] = source.get(n.p.input_id, n.p.input_id)
            dropped[n.p.output_id] = (*dropped.pop(n.p.input_id, ()), n, *n.fused)
            continue
        read = {k: v for k in _input_fields(n) if (v := getattr(n.p, k)) in source}
        if read:
            n = _copy(n)
            n.p = _copy(n.p)
            vars(n.p).update({k: source[v] for k, v in read.items()})
            n.fused = (*n.fused, *(pad for v in read.values() for pad in dropped.pop(v, ())))
        nodes.append(n)
    return Graph(graph.values, nodes, graph.num_externs, graph.inputs, graph.outputs)


def _empty(graph: Graph, pad: Node) -> bool:
    x, y = graph.values.get(pad.p.input_id), graph.values.get(pad.p.output_id)
    pre, post = list(pad.p.pre_paddings), list(pad.p.post_paddings)
    return (x is not None and y is not None and x.datatype == y.datatype and x.quant == y.quant
            and len(pre) == len(post) == len(x.dims) and not any(pre) and not any(post))


def share_row_quantizations(graph: Graph) -> Graph:
    """One convert where several quantize the same value's rows at run time alike (the query, key and value
    projections of a layer, each a delegate of their own in the exporter's graph, then one blob): the first's
    result stands for the others', which computed the same bits."""
    outputs = {v.id for v in graph.outputs}
    first: dict[tuple, Node] = {}  # (input, what the result is) -> the convert that computes it
    source: dict[int, int] = {}  # a dropped convert's output -> the one its readers read instead
    nodes: list[Node] = []
    for n in graph.nodes:
        read = {k: v for k in _input_fields(n) if (v := getattr(n.p, k)) in source}
        n = _copy(n)
        if read:
            n.p = _copy(n.p)
            vars(n.p).update({k: source[v] for k, v in read.items()})
        y = graph.values.get(n.p.output_id) if n.kind == "XNNConvert" else None
        if y is not None and isinstance(y.quant, DynamicRows) and y.id not in outputs:
            key = (n.p.input_id, y.datatype, y.dims, y.quant.num_nonbatch_dims, n.output_min, n.output_max)
            kept = first.setdefault(key, n)
            if kept is not n:
                source[y.id] = kept.p.output_id
                kept.fused = (*kept.fused, n, *n.fused)
                continue
        nodes.append(n)
    return Graph(graph.values, nodes, graph.num_externs, graph.inputs, graph.outputs)


def optimize(graph: Graph) -> Graph:
    return share_row_quantizations(
        merge_clamps(fuse_pads(pointwise_rows(drop_empty_pads(drop_round_trips(graph))))))
