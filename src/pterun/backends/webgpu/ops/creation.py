"""Tensors made from scalars: full/zeros/ones (and their _like forms), arange, scalar_tensor.

Kernel: shaders/fill.wgsl (start + i * step; step 0 for a constant).
"""

from __future__ import annotations

import math

from pterun.backends.webgpu.builder import NodeBuilder
from pterun.backends.webgpu.ops.common import grid
from pterun.errors import DelegateInvalidCompatibility


def _fill(b: NodeBuilder, out_vid: int, shape, start, step=lambda: 0) -> None:
    y = b.out(out_vid, shape)

    def typed(v):
        if y.elem == "f32":
            return float(v)
        if isinstance(v, float):
            if math.isinf(v) or math.isnan(v):
                raise DelegateInvalidCompatibility(f"cannot fill an integer tensor with {v}")
            return int(v)
        return int(v)

    b.dispatch(
        "fill", {"TO": y.elem}, [y], lambda: [y.numel, typed(start()), typed(step())], lambda: grid(y.numel)
    )


def _const(value):
    return lambda: value


def build_full(b: NodeBuilder, op) -> None:
    name, args = op.name, op.args
    if name.endswith("_like.default"):
        x = b.tensor(args[0])
        shape = lambda: x.shape  # noqa: E731
    else:
        sizes = b.ints(args[0])
        shape = lambda: tuple(sizes())  # noqa: E731
    if name.startswith("aten.zeros"):
        value = 0
    elif name.startswith("aten.ones"):
        value = 1
    else:
        value = b.scalar(args[1])
    _fill(b, args[-1], shape, _const(value))


def build_scalar_tensor(b: NodeBuilder, op) -> None:
    _fill(b, op.args[-1], lambda: (), _const(b.scalar(op.args[0])))


def _number(b: NodeBuilder, vid: int, default):
    v = b.value(vid)
    if v is None:
        return _const(default)
    if isinstance(v, float):
        return _const(v)
    return b.int(vid)


def build_arange(b: NodeBuilder, op) -> None:
    args = op.args
    if op.name == "aten.arange.start_step":
        start, end, step = _number(b, args[0], 0), _number(b, args[1], 0), _number(b, args[2], 1)
    else:
        start, end, step = _const(0), _number(b, args[0], 0), _const(1)

    def length():
        s, e, st = start(), end(), step()
        if st == 0:
            raise DelegateInvalidCompatibility("arange with step 0")
        return (max(0, math.ceil((e - s) / st)),)

    _fill(b, args[-1], length, start, step)


OPS = {
    "aten.full.default": build_full,
    "aten.full_like.default": build_full,
    "aten.zeros.default": build_full,
    "aten.zeros_like.default": build_full,
    "aten.ones.default": build_full,
    "aten.ones_like.default": build_full,
    "aten.scalar_tensor.default": build_scalar_tensor,
    "aten.arange.start_step": build_arange,
    "aten.arange.default": build_arange,
}
