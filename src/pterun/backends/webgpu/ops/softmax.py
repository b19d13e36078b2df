"""Softmax and log-softmax along any dimension (shaders/softmax.wgsl)."""

from __future__ import annotations

import math

from pterun.backends.webgpu.builder import NodeBuilder
from pterun.backends.webgpu.ops.common import norm_dim, require_f32, row_dispatches


def build_softmax(b: NodeBuilder, op) -> None:
    args = op.args
    x = b.tensor(args[0])
    require_f32(b, x)
    rank = b.rank(args[0])
    dim = norm_dim(b.scalar(args[1]), rank)
    y = b.out(args[-1], lambda: x.shape)

    def layout():
        if not x.shape:
            return 1, 1, 1
        length = x.shape[dim]
        inner = math.prod(x.shape[dim + 1 :])
        return math.prod(x.shape[:dim]) * inner, length, inner

    row_dispatches(
        b,
        "softmax",
        {"LOG": "true" if op.name == "aten._log_softmax.default" else "false"},
        [x, y],
        lambda: list(layout()),
        lambda: layout()[:2],
    )


OPS = {
    "aten._softmax.default": build_softmax,
    "aten._log_softmax.default": build_softmax,
}
