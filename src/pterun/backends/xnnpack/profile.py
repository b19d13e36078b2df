"""Per-node profiling of an XNNPACK delegate: the hooks a profiled translation puts around each node.

A profiled translation (``XnnpackDelegate.profiled``) is the graph's own
translation with two lines around each node's: a timestamp before, and after
it one report to the method's :class:`DelegateTracer`. The plain translation
is not touched; the profiled one is made only when profiling is asked for.

Each report stands for one node of the graph as it runs, after ``optimize.py``:

* ``debug_handle``: the blob's ``XNode.debug_handle``, which the exporter
  copies from the edge graph's node (the ``debug_handle`` of the node in the
  ETRecord's edge program: 1, 2, ... in graph order). The exporter writes 65535
  for nodes it made itself (the transposes XNNPACK's channels-last pass
  inserts) and an absent field reads 0; both are reported as -1 (no handle).
  Several nodes may carry one handle (a batched matrix product is written as
  reshapes around it). Before it serializes, the exporter folds batch norms and
  activations into the convolution or linear layer they follow: such a node
  carries the convolution's handle and computes the last folded operator's
  value (a comparison against the edge graph must compare it with that one).
* ``name``: the node's type and its number among the blob's nodes of that type,
  ``"XNNConv2d #3"``, as ExecuTorch's XNNPACK profiler numbers its operators.
  A node ``optimize.py`` folded others into reports once, named after all of
  them in graph order (``"XNNDepthwiseConv2d #1 + XNNClamp #1"``), under the
  debug handle of the last one: that node's output value is the one it writes
  (a clamp folded into its producer, a pad folded into the convolution reading
  it, an empty pad dropped before its first reader). So every node of the blob
  appears in exactly one report.
* ``outputs`` (only when the tracer logs values): the node's output values, as
  the exported graph's operator computes them, so they compare with eager
  PyTorch: 4-d values the graph keeps NHWC (after the convolutions and pooling
  of XNNPACK's channels-last pass) are logged as NCHW views, and 8-bit values
  are dequantized to float32, ``(q - zero_point) * scale``, as the float result of
  the operator the node stands for (but a Convert's output, the exported
  graph's quantize, is logged as its integers; values quantized per row at run
  time are logged as their integers too).
"""

from __future__ import annotations

from collections import Counter

import torch

from pterun.backends.interface import DelegateTracer
from pterun.backends.xnnpack.compiler import Builder
from pterun.backends.xnnpack.graph import Datatype, Graph, Node, PerTensor
from pterun.backends.xnnpack.optimize import inputs_of, outputs_of

# What the exporter writes for a node of no exported node (xnnpack_preprocess.DEFAULT_DEBUG_HANDLE), and
# what an absent field reads.
NO_DEBUG_HANDLE = (65535, 0)

# Node types XNNPACK's channels-last pass gives NHWC inputs, whose 4-d outputs are NHWC.
_NHWC_NODES = {
    "XNNConv2d", "XNNDepthwiseConv2d", "XNNConvTranspose2d", "XNNMaxPooling2d", "XNNAvgPooling2d",
    "XNNArgMaxPooling2d", "XNNGlobalAvgPooling2d", "XNNStaticResizeBilinear2D", "XNNPReLU",
}
# Node types the pass gives NCHW inputs.
_NCHW_NODES = {"XNNStaticReshape", "XNNFullyConnected"}
_TO_NHWC, _TO_NCHW = (0, 2, 3, 1), (0, 3, 1, 2)


def members(node: Node) -> list[Node]:
    """The blob's nodes ``node`` runs for, in graph order."""
    return sorted((node, *node.fused), key=lambda n: n.index)


def labels(graph: Graph) -> dict[int, tuple[int, str]]:
    """For each node of the graph, by index: the debug handle its report carries (-1: none) and its name."""
    numbers: dict[int, str] = {}
    count: Counter[str] = Counter()
    for n in sorted((m for node in graph.nodes for m in members(node)), key=lambda n: n.index):
        count[n.kind] += 1
        numbers[n.index] = f"{n.kind} #{count[n.kind]}"
    out = {}
    for node in graph.nodes:
        group = members(node)
        handle = group[-1].debug_handle
        out[node.index] = (-1 if handle in NO_DEBUG_HANDLE else handle, " + ".join(numbers[n.index] for n in group))
    return out


def nhwc_values(graph: Graph) -> set[int]:
    """The 4-d values the graph holds NHWC while the exported graph has them NCHW.

    Follows XNNPACK's channels-last pass: the nodes it runs NHWC (convolutions, pooling, ...) read and
    write NHWC values; the transposes it inserts (no debug handle) go from one layout to the other; a
    reshape or a fully connected node reads NCHW values; every other node reads and writes values of
    one layout, whichever it is (an argument the exported graph passed channels-last is NHWC)."""
    dims = {v.id: v.dims for v in graph.values.values() if len(v.dims) == 4 and v.data is None}
    parent: dict[int, int] = {}

    def root(v: int) -> int:
        while parent.get(v, v) != v:
            v = parent[v]
        return v

    nhwc: set[int] = set()
    for node in graph.nodes:
        ins, outs = [v for v in inputs_of(node) if v in dims], [v for v in outputs_of(node) if v in dims]
        if node.kind in _NHWC_NODES:
            nhwc.update(ins + outs)
        elif _inserted_transpose(node, _TO_NHWC):
            nhwc.update(outs)
        elif _inserted_transpose(node, _TO_NCHW):
            nhwc.update(ins)
        elif node.kind not in _NCHW_NODES:
            for v in ins[1:] + outs:
                parent[root(v)] = root(ins[0]) if ins else root(outs[0])
    tagged = {root(v) for v in nhwc}
    return {v for v in dims if root(v) in tagged}


def _inserted_transpose(node: Node, perm: tuple[int, ...]) -> bool:
    return (node.kind == "XNNStaticTranspose" and node.debug_handle in NO_DEBUG_HANDLE
            and tuple(node.p.perm) == perm)


class NodeHooks:
    """Times each node and reports it to ``tracer`` (``compiler.Hooks``)."""

    def __init__(self, graph: Graph, tracer: DelegateTracer) -> None:
        self.tracer = tracer
        self.labels = labels(graph)
        self.logs_values = bool(tracer.logs_values)
        self.nhwc = nhwc_values(graph) if self.logs_values else set()

    def before(self, node: Node, b: Builder) -> None:
        b.env["_now"] = self.tracer.now  # names no translator makes
        b.emit("_s = _now()")

    def after(self, node: Node, b: Builder) -> None:
        handle, name = self.labels[node.index]
        outputs = ""
        if self.logs_values:
            logged = [self._logged(node, vid, b) for vid in outputs_of(node)]
            outputs = f", outputs=({', '.join(logged)}{',' if len(logged) == 1 else ''})"
        b.env["_node"] = self.tracer.node
        b.emit(f"_node(_s, _now(), debug_handle={handle}, name={b.bind(name, 'name')}{outputs})")

    def _logged(self, node: Node, vid: int, b: Builder) -> str:
        """The expression logging value ``vid``, written by ``node``."""
        value = b.value(vid)
        rows = b.dynamic.get(vid)
        if rows is not None:  # its int8 rows, the product's operand (nodes/convert.py)
            name = b.reshaped(rows.int8_rows(b), b.shape(vid))
            return f"{b.permuted(name, _TO_NCHW) if vid in self.nhwc else name}.clone()"
        name = b.nchw(vid) if vid in self.nhwc else b.ref(vid)
        if (isinstance(value.quant, PerTensor) and value.datatype in (Datatype.QINT8, Datatype.QUINT8)
                and node.kind != "XNNConvert"):
            b.env["_dequantize"] = _dequantize
            scale = b.bind(torch.tensor(value.quant.scale, dtype=torch.float32), "scale")
            return f"_dequantize({name}, {scale}, {value.quant.zero_point})"
        return name


def _dequantize(q: torch.Tensor, scale: torch.Tensor, zero_point: int) -> torch.Tensor:
    """XNNPACK's dequantization: in float32."""
    return (q.float() - zero_point) * scale
