"""Graph rewrites applied at load, before compiling.

SwiGLU: ExecuTorch 1.5.1's exporter leaves ``silu(gate) * up`` as
``sigmoid(gate)``, ``gate * sigmoid``, ``that * up`` (three dispatches and two
intermediate tensors). When the intermediates have no other reader and
``gate`` and ``up`` are float32 tensors of the same shape, the three become
one ``silu_mul_fused`` operator, computed by the same kernel as the
``et_vk.swiglu`` operator newer exporters emit. ``silu`` followed by ``mul``
is fused the same way.
"""

from __future__ import annotations

from collections import defaultdict

from pterun.backends.webgpu.graph import DType, Graph, Op, TensorValue, ValueList
from pterun.backends.webgpu.ops.swiglu import FUSED

SIGMOID = "aten.sigmoid.default"
SILU = "aten.silu.default"
MUL = "aten.mul.Tensor"


def _readers(graph: Graph) -> dict[int, set[int]]:
    """Value id -> indices of the operators that read it (an operator's last argument is what it writes)."""
    readers: dict[int, set[int]] = defaultdict(set)
    for i, op in enumerate(graph.chain):
        for vid in op.args[:-1]:
            readers[vid].add(i)
            value = graph.values[vid]
            if isinstance(value, ValueList):
                for item in value.items:
                    readers[item].add(i)
    for vid in graph.outputs:
        readers[vid].add(-1)
    return readers


def _fp32(graph: Graph, vid: int) -> TensorValue | None:
    v = graph.values[vid]
    return v if isinstance(v, TensorValue) and v.dtype == DType.FLOAT32 else None


def fuse_swiglu(graph: Graph) -> int:
    """Rewrites every fusable SwiGLU in ``graph.chain``; returns how many were fused."""
    readers = _readers(graph)
    producer = {op.args[-1]: i for i, op in enumerate(graph.chain) if op.args}
    drop: set[int] = set()
    replace: dict[int, Op] = {}
    for i, op in enumerate(graph.chain):
        if op.name != MUL or len(op.args) != 3:
            continue
        for h, up in ((op.args[0], op.args[1]), (op.args[1], op.args[0])):
            p = producer.get(h)
            if p is None or p in drop or p in replace or readers[h] != {i}:
                continue
            first = graph.chain[p]
            gate = None
            removed = [p]
            if first.name == SILU:
                gate = first.args[0]
            elif first.name == MUL and len(first.args) == 3:
                for g, s in ((first.args[0], first.args[1]), (first.args[1], first.args[0])):
                    q = producer.get(s)
                    if (
                        q is not None
                        and q not in drop
                        and q not in replace
                        and graph.chain[q].name == SIGMOID
                        and graph.chain[q].args[0] == g
                        and readers[s] == {p}
                    ):
                        gate = g
                        removed.append(q)
                        break
            if gate is None:
                continue
            tg, tu, to = _fp32(graph, gate), _fp32(graph, up), _fp32(graph, op.args[-1])
            if tg is None or tu is None or to is None or tg.dims != tu.dims:
                continue
            drop.update(removed)
            # The fused operator computes the last multiply's output, so it keeps that one's debug identifier.
            replaced = tuple(graph.chain[k].name for k in sorted([*removed, i]))
            replace[i] = Op(FUSED, [gate, up, op.args[-1]], op.node_id, replaced)
            break
    if replace:
        graph.chain = [replace.get(i, op) for i, op in enumerate(graph.chain) if i not in drop]
    return len(replace)
