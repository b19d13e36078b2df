"""2-d (and 1-d) convolution, plain, transposed, and with a fused output clamp (shaders/conv2d.wgsl)."""

from __future__ import annotations

import math

from pterun.backends.webgpu.builder import NodeBuilder
from pterun.backends.webgpu.ops.common import grid, pairs, per_dim, require_f32
from pterun.errors import DelegateInvalidCompatibility, InvalidArgument


def build_conv(b: NodeBuilder, op) -> None:
    args = op.args
    x, w = b.tensor(args[0]), b.tensor(args[1])
    bias = b.tensor(args[2]) if b.is_tensor(args[2]) else None
    spatial = w.ndim - 2
    if spatial not in (1, 2) or x.ndim != w.ndim:
        raise DelegateInvalidCompatibility(f"{op.name}: only 1-d and 2-d convolutions are supported")
    stride = per_dim(b.static_ints(args[3]), [1] * spatial)
    padding = per_dim(b.static_ints(args[4]), [0] * spatial)
    dilation = per_dim(b.static_ints(args[5]), [1] * spatial)
    transposed = bool(b.scalar(args[6], False))
    out_pad = per_dim(b.static_ints(args[7]), [0] * spatial)
    groups = int(b.scalar(args[8], 1))
    lo, hi = -math.inf, math.inf
    if op.name == "et_vk.conv_with_clamp.default":
        lo = -math.inf if b.value(args[9]) is None else float(b.scalar(args[9]))
        hi = math.inf if b.value(args[10]) is None else float(b.scalar(args[10]))
    require_f32(b, x, w, *((bias,) if bias else ()))
    if spatial == 1:
        stride, padding, dilation, out_pad = [1] + stride, [0] + padding, [1] + dilation, [0] + out_pad

    def geometry():
        n, c = x.shape[0], x.shape[1]
        h, wd = (1, x.shape[2]) if spatial == 1 else (x.shape[2], x.shape[3])
        kh, kw = (1, w.shape[2]) if spatial == 1 else (w.shape[2], w.shape[3])
        if transposed:
            if w.shape[0] != c:
                raise InvalidArgument(f"{op.name}: weight {list(w.shape)} for input {list(x.shape)}")
            oc = w.shape[1] * groups
            oh = (h - 1) * stride[0] - 2 * padding[0] + dilation[0] * (kh - 1) + out_pad[0] + 1
            ow = (wd - 1) * stride[1] - 2 * padding[1] + dilation[1] * (kw - 1) + out_pad[1] + 1
        else:
            if w.shape[1] * groups != c:
                raise InvalidArgument(f"{op.name}: weight {list(w.shape)} for input {list(x.shape)}")
            oc = w.shape[0]
            oh = (h + 2 * padding[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
            ow = (wd + 2 * padding[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
        return n, c, h, wd, oc, max(oh, 0), max(ow, 0), kh, kw

    def shape():
        n, _, _, _, oc, oh, ow, _, _ = geometry()
        return (n, oc, ow) if spatial == 1 else (n, oc, oh, ow)

    y = b.out(args[-1], shape)

    def params():
        _, c, h, wd, oc, oh, ow, kh, kw = geometry()
        words = [y.numel, c, h, wd, oc, oh, ow, kh, kw, *pairs(stride, padding, dilation)]
        return [*words, groups, int(bias is not None), lo, hi]

    b.dispatch(
        "conv2d",
        {"TRANSPOSED": "true" if transposed else "false"},
        [x, w, bias or w, y],
        params,
        lambda: grid(y.numel),
    )


OPS = {
    "aten.convolution.default": build_conv,
    "et_vk.conv_with_clamp.default": build_conv,
}
