"""RMSNorm as the exporter decomposes it, run as ``torch.rms_norm``.

Models that keep their activations in half precision normalise in float32
between two casts (Hugging Face's Llama: ``weight * x.float() * rsqrt(...)``
cast back before the weight's product); the chain then ends at the product of
the weight and the cast, and the fused call casts where the chain did.
Dynamic shapes are fused too: every dimension but the last may vary, as the
chain's own broadcasts require.
"""

from __future__ import annotations

import torch

from pterun.executor.load.fuse.common import Chain, Graph, last_dim, operand, plain_cast, scalar
from pterun.kernels import Binding, Functional
from pterun.kernels import fused as kernels

ENDS = "aten::mul.out"  # the operator of the step a chain ends at, which becomes its fused call

_CAST = "dim_order_ops::_to_dim_order_copy.out"


def match(g: Graph, n: int) -> Chain | None:
    """weight * [cast](x * rsqrt(mean(x^2, -1, keepdim) + eps)) ending at the ``mul`` at step ``n`` (x^2: pow
    or x * x)."""
    if not g.runs(n, ENDS):
        return None
    cast: int | None
    found = operand(g, n, _CAST)
    if found is not None:
        cast, weight = found
        y = g.maker_of(cast, 0)
        if not g.runs(y, "aten::mul.out") or not plain_cast(g, cast):
            return None
    else:
        cast, found = None, operand(g, n, "aten::mul.out")
        if found is None:
            return None
        y, weight = found
    found = operand(g, y, "aten::rsqrt.out")
    if found is None:
        return None
    r, x = found
    a = g.maker_of(r, 0)
    if not g.runs(a, "aten::add.out") or scalar(g, g.arg(a, 2)) != 1:
        return None
    eps = g.value(g.arg(a, 1))
    m = g.maker_of(a, 0)
    if not isinstance(eps, torch.Tensor) or eps.numel() != 1 or not g.runs(m, "aten::mean.out"):
        return None
    sq = g.maker_of(m, 0)
    if not ((g.runs(sq, "aten::pow.Tensor_Scalar_out") and scalar(g, g.arg(sq, 1)) == 2)
            or (g.runs(sq, "aten::mul.out") and g.arg(sq, 1) == x)):
        return None
    if g.arg(sq, 0) != x or g.value(g.arg(m, 2)) is not True or g.value(g.arg(m, 3)) is not None:
        return None
    dims = g.value(g.arg(m, 1))
    out = g.arg(n, 2)
    # The weight and eps are constants of fixed size; x and the result may be dynamic (sizes then bounds).
    xspec, ospec, wspec, espec = g.tensor(x), g.tensor(out), g.spec(weight), g.spec(g.arg(a, 1))
    if (xspec is None or ospec is None or wspec is None or espec is None
            or not isinstance(dims, (list, tuple)) or len(dims) != 1
            or not xspec.sizes or not last_dim(g, x, dims[0]) or tuple(wspec.sizes) != tuple(xspec.sizes[-1:])
            or ospec.sizes != xspec.sizes or xspec.scalar_type != espec.scalar_type
            or ospec.scalar_type != wspec.scalar_type):
        return None
    steps = {n, y, r, a, m, sq}
    if cast is None:
        if xspec.scalar_type != ospec.scalar_type:
            return None
        fused, functional, sizes_outs = kernels.RmsNormInto(), kernels.rms_norm, True
    else:
        cast_spec = g.tensor(g.made_value(cast))
        if cast_spec is None or cast_spec.scalar_type != ospec.scalar_type:
            return None
        steps.add(cast)
        fused, functional, sizes_outs = kernels.rms_norm_cast_out, kernels.rms_norm_cast, False  # torch's out=
    binding = Binding(fused, (0, 1, 2), (("out", 3),), convert=((2, _eps),), writes=(3,),
                      strided=True, functional=Functional(functional, outputs=(3,)), sizes_outs=sizes_outs)
    return Chain("pterun::rms_norm", frozenset(steps), binding, (x, weight, g.arg(a, 1), out), (x, weight))


def _eps(tensor: torch.Tensor) -> float:
    return float(tensor.item())
