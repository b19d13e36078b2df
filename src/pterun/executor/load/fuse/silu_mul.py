"""A SwiGLU MLP's SiLU-product between its products, as one call on the CPU (``kernels.fused.SiluMulInto``).

Where the MLP's products run in a delegate (an 8da4w program's XNNPACK blobs), the method keeps the three steps
between them, ``sigmoid(g)``, ``g * sigmoid(g)`` and its product with ``u``, each with an out the executor empties
before it and restores after it. The fused call makes the same three torch calls into the same outs, which it
sizes only when the shape changes.
"""

from __future__ import annotations

from pterun.executor.load.fuse.common import Chain, Graph, contiguous
from pterun.kernels import Binding
from pterun.kernels import fused as kernels

ENDS = "aten::mul.out"  # the operator of the step a chain ends at, which becomes its fused call

NAME = "pterun::silu_mul"
_MUL, _SIGMOID = "aten::mul.out", "aten::sigmoid.out"


def match(g: Graph, n: int) -> Chain | None:
    """(gate * sigmoid(gate)) * up ending at the ``mul`` at step ``n``, its three steps one after the other."""
    if not g.runs(n, ENDS):
        return None
    silu = g.maker.get(g.arg(n, 0))
    if silu is None or silu >= n or not g.runs(silu, _MUL):
        return None
    gate, sig = g.arg(silu, 0), g.arg(silu, 1)
    sigmoid = g.maker.get(sig)
    if sigmoid is None or sigmoid >= silu or not g.runs(sigmoid, _SIGMOID) or g.arg(sigmoid, 0) != gate:
        return None
    if any(g.steps[k] is not None for k in (*range(sigmoid + 1, silu), *range(silu + 1, n))):
        return None
    up, prod, out = g.arg(n, 1), g.arg(n, 0), g.made_value(n)
    specs = [g.tensor(v) for v in (gate, up, sig, prod, out)]
    if any(s is None or not contiguous(s) or s.scalar_type != specs[0].scalar_type  # type: ignore[union-attr]
           or s.sizes != specs[0].sizes for s in specs):  # type: ignore[union-attr]
        return None
    binding = Binding(kernels.SiluMulInto(), (0, 1), (("sig", 2), ("prod", 3), ("out", 4)), writes=(2, 3, 4),
                      sizes_outs=True)
    return Chain(NAME, frozenset((sigmoid, silu, n)), binding, (gate, up, sig, prod, out), (gate, up))
