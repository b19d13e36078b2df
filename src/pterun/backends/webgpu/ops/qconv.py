"""Quantized 2-d convolutions: et_vk.q8ta_conv2d, q8ta_conv2d_pw, q8ta_conv2d_dw, q8ta_conv2d_transposed
(shaders/qconv2d.wgsl), int8 in and out, summed exactly in integers.

Arguments, as the Vulkan partitioner writes them: input, input scale, input zero point, weights, weight
sums (unused: the kernel subtracts the zero point from each input), weight scales, output scale, output
zero point, bias, kernel size, stride, padding, (transposed: output padding), dilation, groups,
activation.
"""

from __future__ import annotations

from pterun.backends.webgpu.builder import NodeBuilder
from pterun.backends.webgpu.ops.common import grid, pairs, per_dim
from pterun.backends.webgpu.ops.quantized import inverse
from pterun.errors import DelegateInvalidCompatibility, InvalidArgument


def build_qconv(b: NodeBuilder, op) -> None:
    args = op.args
    transposed = op.name == "et_vk.q8ta_conv2d_transposed.default"
    depthwise = op.name == "et_vk.q8ta_conv2d_dw.default"
    x = b.tensor(args[0])
    in_scale, in_zp = float(b.scalar(args[1])), int(b.scalar(args[2], 0))
    w = b.packed_constant(args[3])
    scales = b.tensor(args[5])
    out_scale, out_zp = float(b.scalar(args[6])), int(b.scalar(args[7], 0))
    bias = b.tensor(args[8]) if b.is_tensor(args[8]) else None
    kernel = per_dim(b.static_ints(args[9]), [1, 1])
    stride = per_dim(b.static_ints(args[10]), [1, 1])
    padding = per_dim(b.static_ints(args[11]), [0, 0])
    rest = 13 if transposed else 12
    out_pad = per_dim(b.static_ints(args[12]), [0, 0]) if transposed else [0, 0]
    dilation = per_dim(b.static_ints(args[rest]), [1, 1])
    groups = int(b.scalar(args[rest + 1], 1))
    activation = b.value(args[rest + 2]) if len(args) > rest + 3 else "none"
    if activation not in ("none", "relu", None):
        raise DelegateInvalidCompatibility(f"{op.name}: activation {activation!r} is not supported")
    if x.elem != "i32" or x.ndim != 4 or scales.elem != "f32" or groups < 1:
        raise DelegateInvalidCompatibility(f"{op.name}: needs an int8 [N, C, H, W] input")
    kh, kw = kernel
    row = w.shape[-1]
    oc_count = b.graph.tensor(args[-1]).dims[1]
    if depthwise:
        if tuple(w.shape[:2]) != (kh, kw) or row < oc_count:
            raise DelegateInvalidCompatibility(f"{op.name}: weight {list(w.shape)} for a {kh}x{kw} kernel")
    elif w.ndim != 2 or w.shape[0] < oc_count or oc_count % groups:
        raise DelegateInvalidCompatibility(f"{op.name}: weight {list(w.shape)} for {oc_count} channels")

    def geometry():
        n, c, h, wd = x.shape
        if c % groups or (not depthwise and kh * kw * (c // groups) > row):
            raise InvalidArgument(f"{op.name}: input {list(x.shape)} for weight {list(w.shape)}")
        if transposed:
            oh = (h - 1) * stride[0] - 2 * padding[0] + dilation[0] * (kh - 1) + out_pad[0] + 1
            ow = (wd - 1) * stride[1] - 2 * padding[1] + dilation[1] * (kw - 1) + out_pad[1] + 1
        else:
            oh = (h + 2 * padding[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
            ow = (wd + 2 * padding[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
        return n, c, h, wd, max(oh, 0), max(ow, 0)

    y = b.out(args[-1], lambda: (geometry()[0], oc_count, *geometry()[4:]))

    def params():
        _, c, h, wd, oh, ow = geometry()
        return [y.numel, c, h, wd, oc_count, oh, ow, kh, kw, *pairs(stride, padding, dilation), groups, row,
                in_zp, in_scale, inverse(out_scale), out_zp, int(bias is not None), int(activation == "relu")]

    b.dispatch(
        "qconv2d",
        {"DEPTHWISE": "true" if depthwise else "false", "TRANSPOSED": "true" if transposed else "false"},
        [x, w, scales, bias if bias is not None else scales, y],
        params,
        lambda: grid(y.numel),
    )


OPS = {
    name: build_qconv
    for name in (
        "et_vk.q8ta_conv2d.default",
        "et_vk.q8ta_conv2d_pw.default",
        "et_vk.q8ta_conv2d_dw.default",
        "et_vk.q8ta_conv2d_transposed.default",
    )
}
