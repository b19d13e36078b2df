"""Rotary position embedding in the rotate-half form, as transformers writes it (``q * cos + rotate_half(q) *
sin``, ``rotate_half(x) = cat(-x2, x1)``) and the exporter decomposes it, run as one call
(``kernels.fused.RotateHalfInto``).

Seven steps: the product with cos, the two halves of the last dimension, the second negated, the two
concatenated, the product with sin and the sum. The fused call does the two products and the sum, each
rounded as the chain rounds it (the negation and the concatenation are exact), on CUDA in one Triton kernel.
"""

from __future__ import annotations

from pterun.executor.load.fuse.common import Chain, Graph, last_dim, scalar
from pterun.format import TensorSpec
from pterun.kernels import Binding, Functional
from pterun.kernels import fused as kernels

ENDS = "aten::add.out"  # the operator of the step a chain ends at, which becomes its fused call

NAME = "pterun::rotate_half"
_MUL = "aten::mul.out"
_SLICE = "aten::slice_copy.Tensor_out"


def match(g: Graph, n: int) -> Chain | None:
    """x * cos + cat([-x[..., h:], x[..., :h]], -1) * sin ending at the ``add`` at step ``n`` (either product
    first, either factor of each first: IEEE products and sums are commutative)."""
    if not g.runs(n, ENDS) or scalar(g, g.arg(n, 2)) != 1:
        return None
    first, second = g.maker_of(n, 0), g.maker_of(n, 1)
    if not (g.runs(first, _MUL) and g.runs(second, _MUL)):
        return None
    found = _rotated(g, first)
    by_sin, by_cos = first, second
    if found is None:
        found, by_sin, by_cos = _rotated(g, second), second, first
    if found is None or _rotated(g, by_cos) is not None:
        return None
    cat, sin, x, parts = found
    factors = (g.arg(by_cos, 0), g.arg(by_cos, 1))
    if x not in factors or factors[0] == factors[1]:
        return None
    cos = factors[1] if factors[0] == x else factors[0]
    out = g.made_value(n)
    specs = [g.tensor(v) for v in (x, out, g.made_value(by_cos), g.made_value(by_sin), g.made_value(cat))]
    halves = [g.tensor(g.made_value(k)) for k in parts]
    tables = [g.tensor(cos), g.tensor(sin)]
    if not _specs_fit(specs, halves, tables):
        return None
    steps = frozenset((n, by_cos, by_sin, cat, *parts))
    binding = Binding(kernels.RotateHalfInto(), (0, 1, 2), (("out", 3),), writes=(3,), strided=True,
                      functional=Functional(kernels.rotate_half, outputs=(3,)), sizes_outs=True)
    return Chain(NAME, steps, binding, (x, cos, sin, out), (x, cos, sin))


def _rotated(g: Graph, product: int) -> tuple[int, int, int, tuple[int, ...]] | None:
    """Of cat([-x[..., h:], x[..., :h]], -1) * sin at step ``product``: the cat's step, sin, x and the steps
    that made the halves (slice, negation, slice)."""
    for pos in (0, 1):
        cat = g.maker_of(product, pos)
        if not g.runs(cat, "aten::cat.out"):
            continue
        items = getattr(g.plan.values[g.arg(cat, 0)], "items", None)
        made = g.made_value(cat)
        if items is None or len(items) != 2 or g.tensor(made) is None or not last_dim(g, made, g.value(g.arg(cat, 1))):
            return None
        neg, low = (g.maker.get(v, cat) for v in items)
        if not (neg < cat and low < cat and g.runs(neg, "aten::neg.out") and g.runs(low, _SLICE)):
            return None
        high = g.maker_of(neg, 0)
        if not g.runs(high, _SLICE):
            return None
        x = g.arg(low, 0)
        spec = g.tensor(x)
        size = spec.sizes[-1] if spec is not None and spec.sizes else 0
        if (g.arg(high, 0) != x or not size or size % 2 or _half(g, low, x) != (0, size // 2)
                or _half(g, high, x) != (size // 2, size)):
            return None
        return cat, g.arg(product, 1 - pos), x, (high, neg, low)
    return None


def _half(g: Graph, sliced: int, x: int) -> tuple[int, int] | None:
    """[start, end) of x's last dimension that the slice at step ``sliced`` takes (the end clipped to its
    size), or None for a slice of another dimension or a step other than 1."""
    if not last_dim(g, x, g.value(g.arg(sliced, 1))):
        return None
    start, end, step = (g.value(g.arg(sliced, p)) for p in (2, 3, 4))
    spec = g.tensor(x)
    if spec is None or not spec.sizes:
        return None
    size = spec.sizes[-1]
    if step != 1 or not isinstance(start, int) or not isinstance(end, int) or not 0 <= start <= size:
        return None
    return start, min(end, size)


def _specs_fit(specs: list, halves: list, tables: list) -> bool:
    """x, the result, both products and the rotated x of one shape, the halves of half its last dimension, the
    tables no larger than x: one dtype throughout (no promotion the fused call would skip)."""
    if None in specs or None in halves or None in tables:
        return False
    x: TensorSpec = specs[0]
    dtype, sizes = x.scalar_type, tuple(x.sizes)
    half = (*sizes[:-1], sizes[-1] // 2)
    return (all(s.scalar_type == dtype and tuple(s.sizes) == sizes for s in specs)
            and all(s.scalar_type == dtype and tuple(s.sizes) == half for s in halves)
            and all(t.scalar_type == dtype and len(t.sizes) <= len(sizes) for t in tables))
