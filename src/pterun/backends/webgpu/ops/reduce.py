"""Reductions over dimensions: sum, mean, amax, amin (shaders/reduce.wgsl); argmax, argmin
(shaders/arg_reduce.wgsl)."""

from __future__ import annotations

import math

from pterun.backends.webgpu.builder import NodeBuilder
from pterun.backends.webgpu.ops.common import (
    contiguous_strides,
    grid,
    norm_dim,
    padded,
    require_f32,
    row_dispatches,
)
from pterun.errors import DelegateInvalidCompatibility

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


def build_arg_reduce(b: NodeBuilder, op) -> None:
    args = op.args
    x = b.tensor(args[0])
    require_f32(b, x)
    rank = b.rank(args[0])
    whole = b.value(args[1]) is None
    dim = 0 if whole else norm_dim(b.scalar(args[1]), rank)
    keepdim = bool(b.scalar(args[2], False)) if len(args) > 3 else False

    def shape():
        if whole:
            return tuple(1 for _ in x.shape) if keepdim else ()
        if keepdim:
            return tuple(1 if d == dim else s for d, s in enumerate(x.shape))
        return tuple(s for d, s in enumerate(x.shape) if d != dim)

    y = b.out(args[-1], shape)
    if y.elem != "i32":
        raise DelegateInvalidCompatibility(f"{op.name}: the result must be an integer tensor")

    def layout():
        if whole:
            return 1, x.numel, 1
        length = x.shape[dim]
        return (x.numel // length if length else 0), length, math.prod(x.shape[dim + 1 :])

    b.dispatch("arg_reduce", {"MAX": "true" if op.name == "aten.argmax.default" else "false"}, [x, y],
               lambda: list(layout()), lambda: grid(layout()[0] if layout()[1] else 0))


OPS = {name: build_reduce for name in KINDS}
OPS["aten.argmax.default"] = build_arg_reduce
OPS["aten.argmin.default"] = build_arg_reduce
