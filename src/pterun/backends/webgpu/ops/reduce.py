"""Reductions over dimensions: sum, mean, amax, amin (shaders/reduce.wgsl)."""

from __future__ import annotations

import math

from pterun.backends.webgpu.builder import NodeBuilder
from pterun.backends.webgpu.ops.common import (
    contiguous_strides,
    norm_dim,
    padded,
    require_f32,
    row_dispatches,
)

KINDS = {
    "aten.sum.dim_IntList": 0,
    "aten.mean.dim": 1,
    "aten.amax.default": 2,
    "aten.amin.default": 3,
}


def build_reduce(b: NodeBuilder, op) -> None:
    args = op.args
    x = b.tensor(args[0])
    require_f32(b, x)
    rank = b.rank(args[0])
    listed = b.static_ints(args[1]) if b.value(args[1]) is not None else []
    dims = sorted({norm_dim(d, rank) for d in listed}) if listed else list(range(rank))
    keepdim = bool(b.scalar(args[2], False)) if len(args) > 3 else False

    def shape():
        if keepdim:
            return tuple(1 if d in dims else s for d, s in enumerate(x.shape))
        return tuple(s for d, s in enumerate(x.shape) if d not in dims)

    y = b.out(args[-1], shape)

    def params():
        st = contiguous_strides(x.shape)
        kept = [d for d in range(x.ndim) if d not in dims]
        red_sizes = [x.shape[d] for d in dims]
        return [
            math.prod(x.shape[d] for d in kept),
            math.prod(red_sizes),
            len(kept),
            len(dims),
            0,
            0,
            0,
            0,
            *padded([x.shape[d] for d in kept], 1),
            *padded([st[d] for d in kept]),
            *padded(red_sizes, 1),
            *padded([st[d] for d in dims]),
        ]

    row_dispatches(
        b,
        "reduce",
        {"OP": str(KINDS[op.name])},
        [x, y],
        params,
        lambda: (y.numel, math.prod(x.shape[d] for d in dims)),
    )


OPS = {name: build_reduce for name in KINDS}
