"""A SwiGLU MLP's gate and up products and SiLU-product as one call, where the device has a kernel for it.

For one token these products are bound by reading the two weights, and the
exporter writes them as seven steps, SiLU in half precision as casts around
a float32 sigmoid and product:

    g = mm(x, Wg^T)    u = mm(x, Wu^T)
    a = _to_dim_order_copy(g, float32)    s = sigmoid(a)    t = mul(a, s)
    h = mul(_to_dim_order_copy(t, dtype of g), u)

Where the kernel registry holds ``pterun::swiglu.out`` for the method's
device (on CUDA with Triton, kernels/triton/gated.py: both weights read in one
pass), the seven steps become one call ``swiglu(x, Wg^T, Wu^T, out=h)``. The
kernel rounds as the steps do, so the result is theirs. It reads ``x`` while
it writes ``h``: the two may share no bytes.

Programs of a sequence (transformers' exports: ``x`` of [batch, tokens, K]
whose token count changes from call to call) reach the products through
``et_view`` steps, the rows flattened into a matrix and the products' results
viewed back: those views join the chain, and the call takes ``x`` and ``h`` as
they are, of any rank, their leading dimensions the rows. With ``compile=True`` the fused
step stays too: one token through the same kernel (an operator Inductor
launches from its code), other shapes as the steps, which Inductor fuses.
"""

from __future__ import annotations

import math
from functools import partial

import torch

from pterun.core.device import DeviceType
from pterun.core.dtype import to_torch
from pterun.executor.load.fuse.common import ET_VIEW, Chain, Graph, contiguous
from pterun.format import TensorSpec
from pterun.kernels import Binding, KernelRegistry

ENDS = "aten::mul.out"  # the operator of the step a chain ends at, which becomes its fused call

FUSED = "pterun::swiglu.out"
_MM, _MUL, _SIGMOID = "aten::mm.out", "aten::mul.out", "aten::sigmoid.out"
_CAST = "dim_order_ops::_to_dim_order_copy.out"


def matcher(kernels: KernelRegistry, device_type: DeviceType):
    """The pattern, bound to the registry's kernel for the device; None where the registry holds none."""
    if not kernels.holds(FUSED, device_type):
        return None
    return partial(_match, kernels.lookup(FUSED, device_type)(4))


def _match(binding: Binding, g: Graph, n: int) -> Chain | None:
    """h = cast(cast(g) * sigmoid(cast(g))) * u ending at the ``mul`` at step ``n``, g and u products of x."""
    if not g.runs(n, ENDS):
        return None
    outer = _factors(g, n, _CAST, _MM)
    if outer is None:
        return None
    (cast_down, up), views = outer
    mul_silu, more = g.maker_through_views(cast_down, 0)
    views += more
    if not g.runs(mul_silu, _MUL):
        return None
    silu = _factors(g, mul_silu, _SIGMOID, _CAST)
    if silu is None or silu[1]:
        return None
    sigmoid, cast_up = silu[0]
    if g.maker_through_views(sigmoid, 0) != (cast_up, ()):
        return None
    gate, more = g.maker_through_views(cast_up, 0)
    views += more
    if not g.runs(gate, _MM):
        return None
    (x, gate_views), (x_up, up_views) = _viewed(g, gate, 0), _viewed(g, up, 0)
    if x != x_up:
        return None
    views += gate_views + up_views
    wg, wu, h = g.arg(gate, 1), g.arg(up, 1), g.arg(n, 2)
    steps = (gate, up, cast_up, sigmoid, mul_silu, cast_down, n, *views)
    half = ({g.made_value(k) for k in (gate, up, cast_down, n)} | {g.arg(cast_up, 0), g.arg(n, 0), g.arg(n, 1)}
            | {g.made_value(k) for k in views} - {g.arg(gate, 0), g.arg(up, 0)})
    wide = ({g.made_value(k) for k in (cast_up, sigmoid, mul_silu)}
            | {g.arg(sigmoid, 0), g.arg(mul_silu, 0), g.arg(mul_silu, 1), g.arg(cast_down, 0)})
    rows = {g.arg(gate, 0), g.arg(up, 0)}
    if not _types(g, x, half, wide, rows):
        return None
    return Chain(FUSED, frozenset(steps), binding, (x, wg, wu, h), (x, wg, wu), apart=True)


def _viewed(g: Graph, n: int, pos: int) -> tuple[int, tuple[int, ...]]:
    """The value argument ``pos`` of step ``n`` views through ``et_view`` steps (itself where none), and those steps."""
    views: list[int] = []
    while g.runs(made := g.maker_of(n, pos), ET_VIEW):
        views.append(made)
        n, pos = made, 0
    return g.arg(n, pos), tuple(views)


def _factors(g: Graph, n: int, one: str, other: str) -> tuple[tuple[int, int], tuple[int, ...]] | None:
    """Of a product at step ``n``: the steps that made its factors, with operators ``one`` and ``other``, and the
    ``et_view`` steps between them and the product."""
    for pos in (0, 1):
        (a, va), (b, vb) = g.maker_through_views(n, pos), g.maker_through_views(n, 1 - pos)
        if g.runs(a, one) and g.runs(b, other):
            return (a, b), va + vb
    return None


def _types(g: Graph, x: int, half: set[int], wide: set[int], rows: set[int]) -> bool:
    """x and the products in bf16 or fp16, SiLU in float32, all contiguous, of one shape but for views of it that
    flatten the rows (of x too: ``rows``, x's views the products read, are x's rows and inputs as a matrix).

    The rows may be dynamic (every value then has them from x, through the products); sizes are then bounds."""
    xspec, halves, wides, flat = g.tensor(x), _tensors(g, half), _tensors(g, wide), _tensors(g, rows)
    if xspec is None or halves is None or wides is None or flat is None:
        return False
    dtype, n = xspec.scalar_type, halves[0].sizes[-1:]
    others = (*halves, *wides)
    return (to_torch(dtype) in (torch.bfloat16, torch.float16)
            and all(s.scalar_type == dtype for s in (*halves, *flat))
            and all(to_torch(s.scalar_type) == torch.float32 for s in wides)
            and all(_matrix(s) == _matrix(xspec)[:1] + n for s in others)
            and all(_matrix(s) == _matrix(xspec) for s in flat)
            and contiguous(xspec) and all(contiguous(s) for s in (*others, *flat)))


def _matrix(spec: TensorSpec) -> tuple[int, ...]:
    """A tensor's sizes as a matrix: its leading dimensions' product (the rows), and its last."""
    sizes = tuple(spec.sizes)
    return (math.prod(sizes[:-1]), *sizes[-1:]) if sizes else ()


def _tensors(g: Graph, values: set[int]) -> list[TensorSpec] | None:
    """The values' tensor specs, in the set's order; None where one is no tensor."""
    specs = [g.tensor(v) for v in values]
    known = [s for s in specs if s is not None]
    return known if len(known) == len(specs) else None
