"""Linear layers with quantized weights (shaders/qlinear.wgsl) and dynamic activation scales
(torchao.choose_qparams_affine, shaders/qparams.wgsl).

What the Vulkan partitioner emits for quantized linear layers, with its packing:

- ``et_vk.linear_qcs4w``: 4-bit weights [N, ceil(K/2)] (even k in the high nibble), a scale per channel;
- ``et_vk.linear_q4gsw``: 4-bit weights [N, K/2] (even k in the low nibble), a scale per group of k,
  stored [groups, N padded];
- ``et_vk.linear_dq8ca_q4gsw``: the same weights, the input quantized per row with scales and zero points
  a ``choose_qparams_affine`` computed;
- ``et_vk.linear_q8ta_q8csw``, ``et_vk.q8ta_linear(_gemv)``: int8 inputs (a per-tensor scale and zero
  point) and int8 weights [N, K padded], summed exactly in integers; q8ta_linear quantizes its result;
- ``aten._weight_int8pack_mm``: float inputs, int8 weights, a scale per channel.

Weights stay packed on the GPU (their bytes, four to a word): a 4-bit model's weights take the memory
the file gives them.
"""

from __future__ import annotations

import math

from pterun.backends.webgpu.builder import NodeBuilder, groups
from pterun.backends.webgpu.ops.common import grid, require_f32, row_dispatches
from pterun.backends.webgpu.ops.quantized import inverse
from pterun.backends.webgpu.slots import TSlot
from pterun.errors import DelegateInvalidCompatibility, InvalidArgument

FLOAT_X, INT8_X, DYNAMIC_X = 0, 1, 2
INT8_W, INT4_HIGH_FIRST, INT4_LOW_FIRST = 0, 1, 2
SMALLEST_NORMAL = 1.1754943508222875e-38  # torch.finfo(torch.float32).smallest_normal: torchao's default eps


def qlinear(
    b: NodeBuilder,
    op,
    x: TSlot,
    weight_vid: int,
    scales: TSlot,
    *,
    x_mode: int,
    w_mode: int,
    group: int = 0,
    bias: TSlot | None = None,
    x_q: tuple[float, int] = (1.0, 0),
    row_q: tuple[TSlot, TSlot] | None = None,
    row_bounds: tuple[int, int] = (-128, 127),
    out_q: tuple[float, int] | None = None,
    relu: bool = False,
) -> None:
    w = b.packed_constant(weight_vid)
    if len(w.shape) != 2:
        raise DelegateInvalidCompatibility(f"{op.name}: weight of shape {list(w.shape)}, expected 2-d")
    n, row_bytes = w.shape
    per_byte = 1 if w_mode == INT8_W else 2
    if (x_mode == INT8_X) != (x.elem != "f32") or scales.elem != "f32" or (bias is not None and bias.elem != "f32"):
        raise DelegateInvalidCompatibility(f"{op.name}: operands of unexpected element types")
    scale_stride = scales.shape[-1] if group else 0
    if group and (scales.ndim != 2 or scale_stride < n):
        raise DelegateInvalidCompatibility(f"{op.name}: group scales {list(scales.shape)} for {n} channels")
    if not group and scales.numel < n:
        raise DelegateInvalidCompatibility(f"{op.name}: {scales.numel} scales for {n} channels")

    def shape():
        k = x.shape[-1] if x.shape else 1
        if k > row_bytes * per_byte or (group and -(-k // group) > scales.shape[0]):
            raise InvalidArgument(f"{op.name}: input {list(x.shape)} for weight {list(w.shape)}")
        return (*x.shape[:-1], n)

    y = b.out(op.args[-1], shape)
    if (out_q is None) != (y.elem == "f32"):
        raise DelegateInvalidCompatibility(f"{op.name}: output of unexpected element type")
    qmin, qmax = row_bounds
    inv, out_zp = out_q or (1.0, 0)

    def params():
        k = x.shape[-1]
        m = math.prod(x.shape[:-1])
        return [m * n, n, k, row_bytes, group, scale_stride, int(bias is not None), int(relu),
                int(x_q[1]), float(x_q[0]), float(inv), int(out_zp), qmin, qmax]

    xs, xz = row_q if row_q is not None else (scales, scales)
    subs = {"X_MODE": str(x_mode), "W_MODE": str(w_mode), "QUANTIZE": "true" if out_q else "false",
            "TX": x.elem, "TO": y.elem}

    def shared() -> bool:
        # A workgroup per output for one row of float inputs over a long k (decode); integer sums stay
        # serial, as they must be exact.
        return x_mode != INT8_X and math.prod(x.shape[:-1]) == 1 and x.shape[-1] > 64

    for variant in (True, False):

        def work(variant=variant):
            if not y.numel or shared() != variant:
                return (0, 0, 0)
            return groups(y.numel, 1) if variant else grid(y.numel)

        b.dispatch("qlinear", {**subs, "SERIAL": "false" if variant else "true"},
                   [x, xs, xz, w, scales, bias if bias is not None else scales, y], params, work)


def _bias(b: NodeBuilder, vid: int) -> TSlot | None:
    return b.tensor(vid) if b.is_tensor(vid) else None


def build_qcs4w(b: NodeBuilder, op) -> None:
    x, scales = b.tensor(op.args[0]), b.tensor(op.args[2])
    require_f32(b, x)
    qlinear(b, op, x, op.args[1], scales, x_mode=FLOAT_X, w_mode=INT4_HIGH_FIRST)


def build_int8pack_mm(b: NodeBuilder, op) -> None:
    x, scales = b.tensor(op.args[0]), b.tensor(op.args[2])
    require_f32(b, x)
    qlinear(b, op, x, op.args[1], scales, x_mode=FLOAT_X, w_mode=INT8_W)


def build_q4gsw(b: NodeBuilder, op) -> None:
    args = op.args
    x, scales = b.tensor(args[0]), b.tensor(args[2])
    require_f32(b, x)
    group = int(b.scalar(args[3]))
    bias = _bias(b, args[4]) if len(args) > 5 else None
    qlinear(b, op, x, args[1], scales, x_mode=FLOAT_X, w_mode=INT4_LOW_FIRST, group=group, bias=bias)


def build_dq8ca_q4gsw(b: NodeBuilder, op) -> None:
    args = op.args
    x, xs, xz, scales = b.tensor(args[0]), b.tensor(args[1]), b.tensor(args[2]), b.tensor(args[5])
    require_f32(b, x, xs)
    group = int(b.scalar(args[6]))
    bias = _bias(b, args[7]) if len(args) > 8 else None
    qlinear(b, op, x, args[3], scales, x_mode=DYNAMIC_X, w_mode=INT4_LOW_FIRST, group=group, bias=bias,
            row_q=(xs, xz))


def _x_q(b: NodeBuilder, scale_vid: int, zp_vid: int) -> tuple[float, int]:
    return float(b.scalar(scale_vid)), int(b.scalar(zp_vid, 0))


def build_q8ta_q8csw(b: NodeBuilder, op) -> None:
    args = op.args
    x, scales = b.tensor(args[0]), b.tensor(args[5])
    bias = _bias(b, args[6]) if len(args) > 7 else None
    qlinear(b, op, x, args[3], scales, x_mode=INT8_X, w_mode=INT8_W, bias=bias, x_q=_x_q(b, args[1], args[2]))


def build_q8ta_linear(b: NodeBuilder, op) -> None:
    args = op.args
    x, scales = b.tensor(args[0]), b.tensor(args[5])
    out_scale, out_zp = _x_q(b, args[6], args[7])
    bias = _bias(b, args[8]) if len(args) > 9 else None
    activation = b.value(args[9]) if len(args) > 10 else "none"
    if activation not in ("none", "relu", None):
        raise DelegateInvalidCompatibility(f"{op.name}: activation {activation!r} is not supported")
    qlinear(b, op, x, args[3], scales, x_mode=INT8_X, w_mode=INT8_W, bias=bias, x_q=_x_q(b, args[1], args[2]),
            out_q=(inverse(out_scale), out_zp), relu=activation == "relu")


def build_choose_qparams(b: NodeBuilder, op) -> None:
    args = op.args
    x = b.tensor(args[0])
    require_f32(b, x)
    mapping = b.value(args[1])
    if mapping != "ASYMMETRIC":
        raise DelegateInvalidCompatibility(f"{op.name}: mapping type {mapping!r} is not supported")
    block = b.static_ints(args[2])
    rank = b.rank(args[0])
    if len(block) != rank or any(s != 1 for s in block[:-1]):
        raise DelegateInvalidCompatibility(f"{op.name}: block size {block} is not blocks of the last dimension")
    length = block[-1]
    qmin, qmax = int(b.scalar(args[4])), int(b.scalar(args[5]))
    eps = b.scalar(args[6]) if len(args) > 7 else None
    eps = SMALLEST_NORMAL if eps is None else float(eps)
    outs = b.outputs(args[-1])
    if len(outs) != 2:
        raise DelegateInvalidCompatibility(f"{op.name} must return a scale and a zero point")

    def blocks():
        if not x.shape or length <= 0 or x.shape[-1] % length:
            raise InvalidArgument(f"{op.name}: blocks of {length} along the last dimension of {list(x.shape)}")
        return x.numel // length

    # torchao keeps a dimension of one block per row only when asked to (keepdim); the graph's ranks say.
    keep = len(b.graph.tensor(outs[0]).dims) == rank

    def stats_shape():
        per_row = x.shape[-1] // length
        return (*x.shape[:-1], per_row) if keep or per_row != 1 else tuple(x.shape[:-1])

    scale, zp = b.out(outs[0], stats_shape), b.out(outs[1], stats_shape)
    if scale.elem != "f32" or zp.elem == "f32":
        raise DelegateInvalidCompatibility(f"{op.name}: a float scale and an integer zero point are supported")
    row_dispatches(b, "qparams", {"TZ": zp.elem}, [x, scale, zp], lambda: [blocks(), length, qmin, qmax, eps],
                   lambda: (blocks(), length))


OPS = {
    "et_vk.linear_qcs4w.default": build_qcs4w,
    "aten._weight_int8pack_mm.default": build_int8pack_mm,
    "et_vk.linear_q4gsw.default": build_q4gsw,
    "et_vk.linear_dq8ca_q4gsw.default": build_dq8ca_q4gsw,
    "et_vk.linear_q8ta_q8csw.default": build_q8ta_q8csw,
    "et_vk.q8ta_linear.default": build_q8ta_linear,
    "et_vk.q8ta_linear_gemv.default": build_q8ta_linear,
    "torchao.choose_qparams_affine.default": build_choose_qparams,
}
