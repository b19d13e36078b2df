"""A residual add and the fused RMSNorm that reads its sum next, as one call (``kernels.fused.AddRmsNormInto``).

A decoder layer adds each block's result to its residual stream and normalises the sum for the next block: an
``aten::add.out`` and the ``pterun::rms_norm`` rms_norm.py made, one after the other. The fused call writes the sum
where the add wrote it (later layers read it: the next residual add) and the norm where the norm did, with the
same operations, so only the add's operands need to be plain: two float tensors of one shape, added whole.
"""

from __future__ import annotations

from pterun.executor.load.fuse.common import Chain, Graph, contiguous, scalar
from pterun.kernels import Binding
from pterun.kernels import fused as kernels

ENDS = "pterun::rms_norm"  # the operator of the step a chain ends at, which becomes its fused call

NAME = "pterun::add_rms_norm"
_FLOAT = 6  # ScalarType Float: where the native call runs


def match(g: Graph, n: int) -> Chain | None:
    """add(a, b, alpha=1) then rms_norm of the sum at step ``n``, with no step between them."""
    if not g.runs(n, ENDS) or not isinstance(g.steps[n].binding.fn, kernels.RmsNormInto):
        return None
    x, weight, eps, out = g.steps[n].args
    add = g.maker.get(x)
    if add is None or add >= n or not g.runs(add, "aten::add.out") or scalar(g, g.arg(add, 2)) != 1:
        return None
    if any(g.steps[k] is not None for k in range(add + 1, n)):
        return None
    a, b = g.arg(add, 0), g.arg(add, 1)
    specs = [g.tensor(v) for v in (a, b, x)]
    if any(s is None or s.scalar_type != _FLOAT or not contiguous(s) for s in specs):
        return None
    if not specs[0].sizes or specs[0].sizes != specs[1].sizes or specs[1].sizes != specs[2].sizes:  # type: ignore[union-attr]
        return None
    rms = g.steps[n].binding
    binding = Binding(kernels.AddRmsNormInto(), (0, 1, 2, 3), (("total", 4), ("out", 5)), convert=tuple(
        (pos + 1, fn) for pos, fn in rms.convert), writes=(4, 5), sizes_outs=True)
    return Chain(NAME, frozenset((add, n)), binding, (a, b, weight, eps, x, out), (a, b, weight), kept=frozenset((x,)))
