"""XNNPACK's 8-bit arithmetic, reproduced with float32 torch ops that are exact where it matters.

XNNPACK requantizes an int32 accumulator ``acc`` to 8 bits as
``clamp(rint(float(acc) * scale), qmin - zp, qmax - zp) + zp`` with every
step in float32 and ``rint`` rounding half to even (its "fp32" scheme on
x86). Here accumulators are computed in float32 when every partial sum is an
integer below 2**24 (then float arithmetic is exact in any order), else in
float64, and rounded to float32 once, which is what XNNPACK's int-to-float
conversion does. Scales are combined in the order XNNPACK combines them, in
float32, so requantization scales are the same bits.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from pterun.backends.xnnpack.graph import Datatype, PerChannel, PerTensor, Value
from pterun.errors import DelegateInvalidCompatibility

EXACT_F32 = 1 << 24  # integers below this are exact in float32, sums of them too while they stay below

f32 = np.float32


def qrange(value: Value) -> tuple[int, int]:
    if value.datatype == Datatype.QUINT8:
        return 0, 255
    return -128, 127


def is_q8(value: Value) -> bool:
    return value.datatype in (Datatype.QINT8, Datatype.QUINT8) and isinstance(value.quant, PerTensor)


def per_tensor(value: Value, where: str) -> tuple[float, int]:
    if not isinstance(value.quant, PerTensor):
        raise DelegateInvalidCompatibility(
            f"XNNPACK {where}: value {value.id} ({value.type_name}) needs per-tensor quantization parameters"
        )
    return float(f32(value.quant.scale)), int(value.quant.zero_point)


def quantize_bound(bound: float, scale: float, zero_point: int, lo: int, hi: int) -> int:
    """A float output bound in the quantized domain, as XNNPACK turns fused clamps into integers."""
    if math.isinf(bound):
        return lo if bound < 0 else hi
    with np.errstate(over="ignore"):  # a huge bound overflows to infinity, and is clamped below
        v = f32(f32(f32(bound) / f32(scale)) + f32(zero_point))
    v = min(max(float(v), float(lo)), float(hi))
    return int(np.rint(f32(v)))


def output_bounds(node, value: Value, where: str) -> tuple[int, int]:
    """The quantized [qmin, qmax] an output is clamped to: its type's range, narrowed by a fused clamp."""
    lo, hi = qrange(value)
    scale, zp = per_tensor(value, where)
    qmin = quantize_bound(node.output_min, scale, zp, lo, hi)
    qmax = quantize_bound(node.output_max, scale, zp, lo, hi)
    return qmin, qmax


def weight_scales(value: Value, channels: int, where: str) -> torch.Tensor:
    """Per-output-channel float32 scales of a weight (a per-tensor scale repeated)."""
    q = value.quant
    if isinstance(q, PerChannel):
        if q.scales.numel() != channels:
            raise DelegateInvalidCompatibility(
                f"XNNPACK {where}: {q.scales.numel()} weight scales for {channels} output channels"
            )
        return q.scales.float()
    if isinstance(q, PerTensor):
        if q.zero_point != 0:
            raise DelegateInvalidCompatibility(f"XNNPACK {where}: weights with a zero point are not supported")
        return torch.full((channels,), float(f32(q.scale)), dtype=torch.float32)
    raise DelegateInvalidCompatibility(f"XNNPACK {where}: weight value {value.id} has unsupported quantization")


def requant_scales(input_scale: float, kernel_scales: torch.Tensor, output_scale: float, where: str) -> torch.Tensor:
    """input_scale * kernel_scale / output_scale per channel, evaluated left to right in float32.

    XNNPACK does not run a product whose requantization scale reaches 256 (nor an infinite one)."""
    k = kernel_scales.numpy().astype(np.float32)
    with np.errstate(over="ignore"):
        scales = (f32(input_scale) * k) / f32(output_scale)
    if not bool((scales < 256.0).all()):
        raise DelegateInvalidCompatibility(
            f"XNNPACK {where}: requantization scale {float(scales.max())} is not below 256"
        )
    return torch.from_numpy(scales).float()


def accumulator_dtype(weight_abs_sums: torch.Tensor, input_span: int, bias_abs: torch.Tensor | None) -> torch.dtype:
    """float32 when every partial sum of a dot product is an exact float32 integer, else float64."""
    worst = float(weight_abs_sums.max()) * input_span if weight_abs_sums.numel() else 0.0
    if bias_abs is not None and bias_abs.numel():
        worst += float(bias_abs.max())
    return torch.float32 if worst < EXACT_F32 else torch.float64


def emit_requantize(b, acc: str, scale: str, zero_point: int, qmin: int, qmax: int, out: str,
                    work: str | None = None) -> None:
    """Lines turning accumulator ``acc`` into 8-bit ``out``; ``scale`` is a name. A float32 ``acc`` is
    clobbered; an int32 one is converted into float32 ``work`` by the scale's multiplication."""
    if work is None:
        b.emit(f"{acc}.mul_({scale})")
    else:
        b.emit(f"torch.mul({acc}, {scale}, out={work})")
        acc = work
    b.emit(f"{acc}.clamp_({b.number(qmin - zero_point)}, {b.number(qmax - zero_point)})")
    b.emit(f"torch.round({acc}, out={acc})")
    if zero_point:
        b.emit(f"{acc}.add_({b.number(zero_point)})")
    b.emit(f"{out}.copy_({acc})")


def emit_dequantize(b, out: str, row_scales: str, weight_scales: str, bias, acc: str | None = None) -> None:
    """Products of rows quantized at run time and int8 weights (in ``out``, or int32 ``acc``), back to floats
    in ``out``: times each row's scale and each output channel's, plus the float bias (XNNPACK's qd8_f32
    kernels)."""
    if acc is None:
        b.emit(f"{out}.mul_({row_scales})")
    else:
        b.emit(f"torch.mul({acc}, {row_scales}, out={out})")
    b.emit(f"{out}.mul_({weight_scales})")
    if bias is not None:
        b.emit(f"{out}.add_({b.ref(bias.id)})")
