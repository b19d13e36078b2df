"""RMSNorm as the exporter decomposes it, run as ``torch.rms_norm``."""

from __future__ import annotations

import torch

from pterun.executor.fuse.common import Chain, Graph, last_dim, operand, scalar
from pterun.kernels import Binding, Functional
from pterun.kernels import fused as kernels


def match(g: Graph, n: int) -> Chain | None:
    """weight * (x * rsqrt(mean(x^2, -1, keepdim) + eps)) ending at the ``mul`` at step ``n`` (x^2: pow or x * x)."""
    if g.op(n) != "aten::mul.out":
        return None
    y, weight = operand(g, n, "aten::mul.out")
    if y is None:
        return None
    r, x = operand(g, y, "aten::rsqrt.out")
    if r is None:
        return None
    a = g.maker_of(r, 0)
    if g.op(a) != "aten::add.out" or scalar(g, g.arg(a, 2)) != 1:
        return None
    eps = g.value(g.arg(a, 1))
    m = g.maker_of(a, 0)
    if not isinstance(eps, torch.Tensor) or eps.numel() != 1 or g.op(m) != "aten::mean.out":
        return None
    sq = g.maker_of(m, 0)
    squares = ((g.op(sq) == "aten::pow.Tensor_Scalar_out" and scalar(g, g.arg(sq, 1)) == 2)
               or (g.op(sq) == "aten::mul.out" and g.arg(sq, 1) == x))
    if not squares or g.arg(sq, 0) != x or g.value(g.arg(m, 2)) is not True or g.value(g.arg(m, 3)) is not None:
        return None
    dims = g.value(g.arg(m, 1))
    xspec, wspec, ospec = g.spec(x), g.spec(weight), g.spec(g.arg(n, 2))
    if None in (xspec, wspec, ospec) or not isinstance(dims, (list, tuple)) or len(dims) != 1:
        return None
    espec = g.spec(g.arg(a, 1))
    if (espec is None or not xspec.sizes or not last_dim(g, x, dims[0])
            or tuple(wspec.sizes) != tuple(xspec.sizes[-1:]) or ospec.sizes != xspec.sizes
            or len({xspec.scalar_type, wspec.scalar_type, ospec.scalar_type, espec.scalar_type}) != 1):
        return None
    binding = Binding(kernels.rms_norm_out, (0, 1, 2), (("out", 3),), convert=((2, _eps),), writes=(3,),
                      strided=True, functional=Functional(kernels.rms_norm, outputs=(3,)))
    return Chain("pterun::rms_norm", frozenset((n, y, r, a, m, sq)), binding,
                 (x, weight, g.arg(a, 1), g.arg(n, 2)), (x, weight))


def _eps(tensor: torch.Tensor) -> float:
    return float(tensor.item())
