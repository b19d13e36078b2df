"""Rotary position embedding of interleaved pairs, as ExecuTorch's Llama writes it and the exporter decomposes
it, run as one call (``kernels.fused.RotaryInto``).

The model views x [..., d] as pairs [..., d/2, 2] and unbinds them; the exporter makes each half a slice and a
squeeze, multiplies each by the cos and sin tables, subtracts and adds, unsqueezes both and concatenates them
again: thirteen steps. The fused call does the same four products, the difference and the sum, each rounded
as the chain rounds it, reading the halves where they are, and copies the pairs into the result.
"""

from __future__ import annotations

from pterun.executor.load.fuse.common import Chain, Graph, last_dim, scalar
from pterun.format import TensorSpec
from pterun.kernels import Binding, Functional
from pterun.kernels import fused as kernels

ENDS = "aten::cat.out"  # the operator of the step a chain ends at, which becomes its fused call

NAME = "pterun::rotary"
_MUL = "aten::mul.out"


def match(g: Graph, n: int) -> Chain | None:
    """cat([unsqueeze(x0 * cos - x1 * sin, -1), unsqueeze(x0 * sin + x1 * cos, -1)], -1) ending at the ``cat`` at
    step ``n``, x0 and x1 the two halves of the last dimension (of size 2) of one tensor x."""
    if not g.runs(n, ENDS):
        return None
    items = getattr(g.plan.values[g.arg(n, 0)], "items", None)
    out = g.made_value(n)
    ospec = g.tensor(out)
    if items is None or len(items) != 2 or ospec is None or not last_dim(g, out, g.value(g.arg(n, 1))):
        return None
    unsqueezes = [g.maker.get(v, n) for v in items]
    if not all(u < n and g.runs(u, "aten::unsqueeze_copy.out") and last_dim(g, out, g.value(g.arg(u, 1)))
               for u in unsqueezes):
        return None
    sub, add = (g.maker_of(u, 0) for u in unsqueezes)
    if not (g.runs(sub, "aten::sub.out") and g.runs(add, "aten::add.out")
            and scalar(g, g.arg(sub, 2)) == 1 and scalar(g, g.arg(add, 2)) == 1):
        return None
    products: list[int] = []
    for made in (g.maker_of(sub, 0), g.maker_of(sub, 1), g.maker_of(add, 0), g.maker_of(add, 1)):
        if not g.runs(made, _MUL):
            return None
        products.append(made)
    factors = [_half_and_table(g, p) for p in products]
    if None in factors:
        return None
    (h0, cos), (h1, sin), (h0b, sin_b), (h1b, cos_b) = factors  # type: ignore[misc]
    # sub: x0 * cos - x1 * sin; add: x0 * sin + x1 * cos, with one cos and one sin.
    if (h0, h1) != (h0b, h1b) or cos != cos_b or sin != sin_b or cos == sin:
        return None
    first, second = _half(g, h0), _half(g, h1)
    if first is None or second is None or first[0] != second[0] or (first[1], second[1]) != (0, 1):
        return None
    x = first[0]
    xspec = g.tensor(x)
    specs = [g.tensor(g.made_value(k)) for k in (*products, sub, add, h0, h1)]
    tables = [g.tensor(cos), g.tensor(sin)]
    if xspec is None or not _specs_fit(xspec, ospec, specs, tables):
        return None
    steps = frozenset((n, *unsqueezes, sub, add, *products, h0, h1, first[2], second[2]))
    binding = Binding(kernels.RotaryInto(), (0, 1, 2), (("out", 3),), writes=(3,), strided=True,
                      functional=Functional(kernels.rotary, outputs=(3,)), sizes_outs=True)
    return Chain(NAME, steps, binding, (x, cos, sin, out), (x, cos, sin))


def _specs_fit(xspec: TensorSpec, ospec: TensorSpec, specs: list, tables: list) -> bool:
    """x [..., 2] and the result of its sizes, the halves and their products [...], the tables no larger: one
    dtype throughout (no promotion the fused call would skip)."""
    if None in specs or None in tables:
        return False
    dtype, pairs = xspec.scalar_type, tuple(xspec.sizes[:-1])
    return (tuple(xspec.sizes[-1:]) == (2,) and tuple(ospec.sizes) == tuple(xspec.sizes)
            and ospec.scalar_type == dtype
            and all(s.scalar_type == dtype and tuple(s.sizes) == pairs for s in specs)
            and all(t.scalar_type == dtype and len(t.sizes) <= len(pairs) for t in tables))


def _half_and_table(g: Graph, n: int) -> tuple[int, int] | None:
    """Of a product at step ``n``: the step that made the half it multiplies (a squeeze) and the table's value."""
    for pos in (0, 1):
        made = g.maker_of(n, pos)
        if g.runs(made, "aten::squeeze_copy.dims_out"):
            return made, g.arg(n, 1 - pos)
    return None


def _half(g: Graph, squeeze: int) -> tuple[int, int, int] | None:
    """Of squeeze(x[..., i:i+1], -1) at step ``squeeze``: x, which half i (0 or 1), and the slice's step."""
    sliced = g.maker_of(squeeze, 0)
    dims = g.value(g.arg(squeeze, 1))
    if not g.runs(sliced, "aten::slice_copy.Tensor_out") or not isinstance(dims, (list, tuple)) or len(dims) != 1:
        return None
    x = g.arg(sliced, 0)
    if not last_dim(g, x, dims[0]) or not last_dim(g, x, g.value(g.arg(sliced, 1))):
        return None
    start, end, step = (g.value(g.arg(sliced, p)) for p in (2, 3, 4))
    if step != 1 or start not in (0, 1) or end != start + 1:
        return None
    return x, start, sliced
