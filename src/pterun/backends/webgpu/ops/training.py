"""Operators of on-device training the Vulkan partitioner lowers: et_vk.fused_ce (cross-entropy and its
gradient, shaders/fused_ce.wgsl) and et_vk.linear_dW (a linear layer's weight gradient, d_out^T @ x: a
transposing copy, then the GEMM of linear.py)."""

from __future__ import annotations

import math

from pterun.backends.webgpu.builder import NodeBuilder
from pterun.backends.webgpu.ops.common import grid, require_f32
from pterun.backends.webgpu.ops.linear import gemm
from pterun.backends.webgpu.ops.shape import copy
from pterun.errors import DelegateInvalidCompatibility, InvalidArgument


def build_fused_ce(b: NodeBuilder, op) -> None:
    args = op.args
    logits, labels = b.tensor(args[0]), b.tensor(args[1])
    require_f32(b, logits)
    n_valid = float(b.scalar(args[2]))
    if logits.ndim != 2 or labels.elem != "i32":
        raise DelegateInvalidCompatibility(f"{op.name}: needs [M, V] logits and integer labels")
    outs = b.outputs(args[-1])

    def rows():
        if labels.numel != logits.shape[0]:
            raise InvalidArgument(f"{op.name}: {labels.numel} labels for logits {list(logits.shape)}")
        return logits.shape[0]

    loss = b.out(outs[0], lambda: ())
    dlogits = b.out(outs[1], lambda: logits.shape)
    per_row = b.scratch(max(1, b.graph.tensor(args[0]).dims[0]))
    bindings = [logits, labels, dlogits, per_row, loss]
    b.dispatch("fused_ce", {"STAGE": "0"}, bindings, lambda: [rows(), logits.shape[1], n_valid, rows()],
               lambda: grid(rows()))
    b.dispatch("fused_ce", {"STAGE": "1"}, bindings, lambda: [1, logits.shape[1], n_valid, rows()],
               lambda: grid(1))


def build_linear_dw(b: NodeBuilder, op) -> None:
    d_out, x = b.tensor(op.args[0]), b.tensor(op.args[1])
    require_f32(b, d_out, x)
    serialized = b.graph.tensor(op.args[0]).dims
    transposed = b.scratch(max(1, math.prod(serialized)))

    def dims():
        n, k = d_out.shape[-1], x.shape[-1]
        m = d_out.numel // n if n else 0
        if m * k != x.numel:
            raise InvalidArgument(f"{op.name}: d_out {list(d_out.shape)} and x {list(x.shape)} have other rows")
        return m, n, k

    def plan():
        m, n, _ = dims()
        return (n, m), [1, n], 0, [m, 1], 0

    copy(b, d_out, transposed, plan)
    y = b.out(op.args[-1], lambda: (dims()[1], dims()[2]))

    def gemm_dims():
        m, n, k = dims()
        return 1, n, k, m, 0, 0, 0, 0

    gemm(b, transposed, x, None, y, False, gemm_dims)


OPS = {
    "et_vk.fused_ce.default": build_fused_ce,
    "et_vk.linear_dW.default": build_linear_dw,
}
