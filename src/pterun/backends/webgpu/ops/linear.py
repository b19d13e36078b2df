"""Matrix products: linear, mm, bmm, addmm (shaders/matmul.wgsl, one tiled GEMM)."""

from __future__ import annotations

import math

from pterun.backends.webgpu.builder import NodeBuilder
from pterun.backends.webgpu.slots import TSlot
from pterun.errors import DelegateInvalidCompatibility, InvalidArgument

BLOCK = 4  # each invocation computes a BLOCK x BLOCK piece of the output
GROUP = 8  # invocations per workgroup along each of the two output dimensions


def gemm(
    b: NodeBuilder,
    a: TSlot,
    w: TSlot,
    bias: TSlot | None,
    y: TSlot,
    transposed: bool,
    dims,
    alpha=1.0,
    beta=1.0,
) -> None:
    """``dims()`` -> (batch, M, N, K, a batch stride, b batch stride, bias mode, bias batch stride)."""
    for t in (a, w, y) + ((bias,) if bias is not None else ()):
        if t.elem != "f32":
            raise DelegateInvalidCompatibility(f"{b.op.name}: only float32 matrix products are supported")

    def params():
        _, m, n, k, sa, sb, mode, sbias = dims()
        return [m, n, k, sa, sb, m * n, float(alpha), float(beta), mode, sbias]

    def work():
        batch, m, n, *_ = dims()
        if m == 0 or n == 0 or batch == 0:
            return (0, 0, 0)
        span = BLOCK * GROUP
        return (-(-n // span), -(-m // span), batch)

    b.dispatch(
        "matmul",
        {"B_TRANSPOSED": "true" if transposed else "false"},
        [a, w, bias if bias is not None else w, y],
        params,
        work,
    )


def build_linear(b: NodeBuilder, op) -> None:
    args = op.args
    x, w = b.tensor(args[0]), b.tensor(args[1])
    bias = b.tensor(args[2]) if len(args) > 3 and b.is_tensor(args[2]) else None
    if w.ndim != 2:
        raise DelegateInvalidCompatibility(f"linear weight of rank {w.ndim}")

    def shape():
        if x.shape[-1] != w.shape[1]:
            raise InvalidArgument(f"linear: input {list(x.shape)} does not match weight {list(w.shape)}")
        return (*x.shape[:-1], w.shape[0])

    y = b.out(args[-1], shape)

    def dims():
        n, k = w.shape
        m = math.prod(x.shape[:-1])
        return 1, m, n, k, 0, 0, (0 if bias is None else (1 if bias.numel == n else 2)), 0

    gemm(b, x, w, bias, y, True, dims)


def build_mm(b: NodeBuilder, op) -> None:
    args = op.args
    a, c = b.tensor(args[0]), b.tensor(args[1])
    batched = op.name == "aten.bmm.default"

    def shape():
        if batched:
            if a.shape[0] != c.shape[0] or a.shape[2] != c.shape[1]:
                raise InvalidArgument(f"bmm: {list(a.shape)} x {list(c.shape)}")
            return (a.shape[0], a.shape[1], c.shape[2])
        if a.shape[1] != c.shape[0]:
            raise InvalidArgument(f"mm: {list(a.shape)} x {list(c.shape)}")
        return (a.shape[0], c.shape[1])

    y = b.out(args[-1], shape)

    def dims():
        if batched:
            z, m, k = a.shape
            n = c.shape[2]
            return z, m, n, k, m * k, k * n, 0, 0
        m, k = a.shape
        return 1, m, c.shape[1], k, 0, 0, 0, 0

    gemm(b, a, c, None, y, False, dims)


def build_addmm(b: NodeBuilder, op) -> None:
    args = op.args
    bias, a, c = b.tensor(args[0]), b.tensor(args[1]), b.tensor(args[2])
    beta = b.scalar(args[3], 1) if len(args) > 4 else 1
    alpha = b.scalar(args[4], 1) if len(args) > 5 else 1
    y = b.out(args[-1], lambda: (a.shape[0], c.shape[1]))

    def dims():
        m, k = a.shape
        n = c.shape[1]
        if bias.numel == n and (bias.ndim == 1 or bias.shape[0] == 1):
            mode = 1
        elif bias.numel == m * n:
            mode = 2
        else:
            raise DelegateInvalidCompatibility(f"addmm bias {list(bias.shape)} for a [{m}, {n}] product")
        return 1, m, n, k, 0, 0, mode, 0

    gemm(b, a, c, bias, y, False, dims, alpha, beta)


OPS = {
    "aten.linear.default": build_linear,
    "aten.mm.default": build_mm,
    "aten.bmm.default": build_mm,
    "aten.addmm.default": build_addmm,
}
