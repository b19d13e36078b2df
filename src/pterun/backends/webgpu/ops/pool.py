"""2-d max and average pooling (shaders/max_pool2d.wgsl, shaders/avg_pool2d.wgsl)."""

from __future__ import annotations

from pterun.backends.webgpu.builder import NodeBuilder
from pterun.backends.webgpu.ops.common import grid, pairs, per_dim
from pterun.errors import DelegateInvalidCompatibility


def _out_size(size: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    span = size + 2 * p - d * (k - 1) - 1
    out = (-(-span // s) if ceil_mode else span // s) + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    return max(out, 0)


def _window(b: NodeBuilder, args) -> tuple[list[int], list[int], list[int]]:
    """The window's size, stride (the size unless given) and padding: arguments 1 to 3 of both poolings."""
    kernel = per_dim(b.static_ints(args[1]), [1, 1])
    return kernel, per_dim(b.static_ints(args[2]), kernel), per_dim(b.static_ints(args[3]), [0, 0])


def _pool(b: NodeBuilder, op, x, window, dilation, ceil_mode, out_vid: int):
    """The output, and the parameter words both kernels start with: numel, H, W, OH, OW, then the
    window's size, stride and padding as (h, w) pairs."""
    if x.elem != "f32" or x.ndim not in (3, 4):
        raise DelegateInvalidCompatibility(f"{op.name}: needs a float32 [N, C, H, W] or [C, H, W] input")
    kernel, stride, padding = window

    def geometry():
        h, w = x.shape[-2], x.shape[-1]
        oh = _out_size(h, kernel[0], stride[0], padding[0], dilation[0], ceil_mode)
        ow = _out_size(w, kernel[1], stride[1], padding[1], dilation[1], ceil_mode)
        return h, w, oh, ow

    def shape():
        _, _, oh, ow = geometry()
        return (*x.shape[:-2], oh, ow)

    y = b.out(out_vid, shape)
    return y, lambda: [y.numel, *geometry(), *pairs(kernel, stride, padding)]


def build_max_pool(b: NodeBuilder, op) -> None:
    args = op.args
    x = b.tensor(args[0])
    window = _window(b, args)
    dilation = per_dim(b.static_ints(args[4]), [1, 1])
    ceil_mode = bool(b.scalar(args[5], False)) if len(args) > 6 else False
    outs = b.outputs(args[-1])
    y, words = _pool(b, op, x, window, dilation, ceil_mode, outs[0])
    idx = b.out(outs[1], lambda: y.shape) if len(outs) > 1 else b.scratch(max(1, y.capacity), "i32")
    b.dispatch("max_pool2d", {}, [x, y, idx], lambda: [*words(), *pairs(dilation)], lambda: grid(y.numel))


def build_avg_pool(b: NodeBuilder, op) -> None:
    args = op.args
    x = b.tensor(args[0])
    window = _window(b, args)
    ceil_mode = bool(b.scalar(args[4], False))
    include_pad = bool(b.scalar(args[5], True))
    divisor = b.scalar(args[6], 0) if len(args) > 7 else 0
    y, words = _pool(b, op, x, window, [1, 1], ceil_mode, args[-1])

    def params():
        return [*words(), int(include_pad), int(divisor or 0)]

    b.dispatch("avg_pool2d", {}, [x, y], params, lambda: grid(y.numel))


OPS = {
    "aten.max_pool2d_with_indices.default": build_max_pool,
    "aten.max_pool2d.default": build_max_pool,
    "aten.avg_pool2d.default": build_avg_pool,
}
