"""Per-tensor quantization and the quantized (q8ta) elementwise operators (shaders/requant.wgsl).

Integers are exact as ExecuTorch computes them: a value is dequantized as
``float(q - zero_point) * scale`` and quantized as
``clamp(round_half_even(x * (1 / scale)) + zero_point, qmin, qmax)``, the
reciprocal taken in double precision and rounded to float, as PyTorch's
``quantize_per_tensor`` and ExecuTorch's WebGPU kernels both do. int8 values
are held one per 32-bit word, like every integer tensor of this backend.
"""

from __future__ import annotations

import math

from pterun.backends.webgpu.builder import NodeBuilder
from pterun.backends.webgpu.ops.common import broadcast, broadcast_params, contiguous_strides, grid, padded
from pterun.backends.webgpu.ops.shape import copy
from pterun.backends.webgpu.slots import TSlot
from pterun.errors import DelegateInvalidCompatibility, InvalidArgument

INT8_MIN, INT8_MAX = -128, 127
_SCALARS_AT = 40  # where requant.wgsl's scalars start in the parameter block


def inverse(scale: float) -> float:
    """1 / scale as ExecuTorch multiplies by it: in double precision, then rounded to float."""
    if not scale or not math.isfinite(scale):
        raise DelegateInvalidCompatibility(f"quantization scale {scale!r} has no inverse")
    return 1.0 / float(scale)


def requant(
    b: NodeBuilder,
    out_vid: int,
    a: TSlot,
    expr: str,
    *,
    a_q: tuple[float, int] | None,
    out_q: tuple[float, int] | None,
    c: TSlot | None = None,
    c_q: tuple[float, int] | None = None,
    alpha: float = 1.0,
    bounds: tuple[int, int] = (INT8_MIN, INT8_MAX),
    shape=None,
    walk=None,
) -> TSlot:
    """One requant.wgsl dispatch. ``a_q``/``c_q``: an operand's (scale, zero point) when it is quantized;
    ``out_q``: the output's (1 / scale, zero point) when it is. ``walk()`` -> (sizes, A strides) replaces the
    broadcasting walk for operators that move elements (pixel shuffle)."""
    operands = [a] + ([c] if c is not None else [])
    y = b.out(out_vid, shape or (lambda: broadcast(*(t.shape for t in operands))))
    if (out_q is None) != (y.elem == "f32"):
        raise DelegateInvalidCompatibility(f"{b.op.name}: output {out_vid} has the wrong element type")
    for t, q in ((a, a_q), (c, c_q)):
        if t is not None and (q is None) != (t.elem == "f32"):
            raise DelegateInvalidCompatibility(f"{b.op.name}: operand {t.vid} has the wrong element type")
    a_scale, a_zp = a_q or (1.0, 0)
    c_scale, c_zp = c_q or (1.0, 0)
    inv, out_zp = out_q or (1.0, 0)
    scalars = [float(a_scale), int(a_zp), float(c_scale), int(c_zp), float(alpha), float(inv), int(out_zp)]

    def params():
        if walk is None:
            words = broadcast_params(y.shape, [t.shape for t in operands])
        else:
            sizes, strides = walk()
            words = [y.numel, len(sizes), 0, 0, 0, 0, 0, 0, *padded(sizes, 1), *padded(strides)]
        words[3:5] = list(bounds)
        return [*words, *[0] * (_SCALARS_AT - len(words)), *scalars]

    other = c if c is not None else a
    b.dispatch(
        "requant",
        {
            "TA": a.elem,
            "TB": other.elem,
            "TO": y.elem,
            "DEQUANTIZE_A": "true" if a_q is not None else "false",
            "DEQUANTIZE_B": "true" if (c_q if c is not None else a_q) is not None else "false",
            "QUANTIZE": "true" if out_q is not None else "false",
            "EXPR": expr,
        },
        [a, other, y],
        params,
        lambda: grid(y.numel),
    )
    return y


def _qparams(b: NodeBuilder, scale_vid: int, zp_vid: int) -> tuple[float, int]:
    scale, zp = b.scalar(scale_vid), b.scalar(zp_vid, 0)
    if not isinstance(scale, (int, float)) or isinstance(scale, bool):
        raise DelegateInvalidCompatibility(f"{b.op.name}: only a constant scale is supported")
    return float(scale), int(zp)


def build_quantize(b: NodeBuilder, op) -> None:
    args = op.args
    x = b.tensor(args[0])
    scale, zp = _qparams(b, args[1], args[2])
    qmin, qmax = int(b.scalar(args[3])), int(b.scalar(args[4]))
    requant(b, args[-1], x, "a", a_q=None, out_q=(inverse(scale), zp), bounds=(qmin, qmax))


def build_dequantize(b: NodeBuilder, op) -> None:
    args = op.args
    x = b.tensor(args[0])
    requant(b, args[-1], x, "a", a_q=_qparams(b, args[1], args[2]), out_q=None)


def build_q8ta_add(b: NodeBuilder, op) -> None:
    args = op.args
    a, c = b.tensor(args[0]), b.tensor(args[1])
    a_q, c_q = _qparams(b, args[2], args[3]), _qparams(b, args[4], args[5])
    out_scale, out_zp = _qparams(b, args[6], args[7])
    alpha = float(b.scalar(args[8], 1.0))
    requant(b, args[-1], a, "a + alpha * b", a_q=a_q, c=c, c_q=c_q, alpha=alpha,
            out_q=(inverse(out_scale), out_zp))


def build_q8ta_relu(b: NodeBuilder, op) -> None:
    args = op.args
    x = b.tensor(args[0])
    out_scale, out_zp = _qparams(b, args[3], args[4])
    requant(b, args[-1], x, "max(a, 0.0)", a_q=_qparams(b, args[1], args[2]), out_q=(inverse(out_scale), out_zp))


def shuffle_walk(x: TSlot, r: int):
    """(output shape, and the index walk that reads it from x) of pixel_shuffle by ``r``: [..., C*r*r, H, W]
    becomes [..., C, H*r, W*r], walked as [lead, C, H, r, W, r] over x viewed as [lead, C, r, r, H, W]."""

    def dims():
        if x.ndim < 3 or r <= 0 or x.shape[-3] % (r * r):
            raise InvalidArgument(f"pixel_shuffle by {r} of a {list(x.shape)} input")
        lead = math.prod(x.shape[:-3])
        return lead, x.shape[-3] // (r * r), x.shape[-2], x.shape[-1]

    def shape():
        _, c, h, w = dims()
        return (*x.shape[:-3], c, h * r, w * r)

    def walk():
        lead, c, h, w = dims()
        sizes = [lead, c, h, r, w, r]
        strides = [c * r * r * h * w, r * r * h * w, w, r * h * w, 1, h * w]
        return sizes, strides

    return shape, walk


def build_pixel_shuffle(b: NodeBuilder, op) -> None:
    args = op.args
    x = b.tensor(args[0])
    shape, walk = shuffle_walk(x, int(b.scalar(args[1])))
    y = b.out(args[-1], shape)

    def plan():
        sizes, strides = walk()
        return sizes, strides, 0, contiguous_strides(sizes), 0

    copy(b, x, y, plan)


def build_q8ta_pixel_shuffle(b: NodeBuilder, op) -> None:
    args = op.args
    x = b.tensor(args[0])
    a_q = _qparams(b, args[1], args[2])
    inv, out_zp = float(b.scalar(args[3])), int(b.scalar(args[4], 0))
    shape, walk = shuffle_walk(x, int(b.scalar(args[5])))
    requant(b, args[-1], x, "a", a_q=a_q, out_q=(inv, out_zp), shape=shape, walk=walk)


OPS = {
    "quantized_decomposed.quantize_per_tensor.default": build_quantize,
    "quantized_decomposed.dequantize_per_tensor.default": build_dequantize,
    "et_vk.q8ta_add.default": build_q8ta_add,
    "et_vk.q8ta_relu.default": build_q8ta_relu,
    "et_vk.q8ta_pixel_shuffle.default": build_q8ta_pixel_shuffle,
    "aten.pixel_shuffle.default": build_pixel_shuffle,
}

__all__ = ["OPS", "inverse", "requant"]
