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


def pieces(abs_weights: torch.Tensor, span: int) -> list[tuple[int, int]]:
    """Contiguous ranges of the inputs, as few as possible, over each of which every partial sum of every
    output's dot product is an exact float32 integer: sum |w| * span < 2**24 (``abs_weights`` [N, K], float64).
    Each range's float32 product is then exact in any order, and the ranges' products sum exactly in float64."""
    n, k = abs_weights.shape
    if k == 0:
        return [(0, 0)]
    ends = torch.cat([torch.zeros(n, 1, dtype=torch.float64), abs_weights.cumsum(1) * span], 1)  # [N, K + 1]
    ranges, start = [], 0
    while start < k:
        reach = (ends[:, start + 1:] - ends[:, start:start + 1]).amax(0)  # worst sum of start..end, per end
        stop = start + max(1, int((reach < EXACT_F32).sum()))  # reach grows with end: the ends within it
        ranges.append((start, stop))
        start = stop
    return ranges


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


def emit_fma(b, out: str, a: str, m: str, c: str, shape) -> None:
    """Lines setting float32 ``out`` to ``a * m + c`` rounded once, as a fused multiply-add does: float32 ``a``
    and ``m``, float64 ``c`` holding float32 values (all broadcasting to ``shape``; ``out`` may be ``a``).

    In float64 the product is exact (24 + 24 significant bits). The sum is rounded to odd: where it is
    inexact (TwoSum's error is not zero) and its last bit is even, the neighbour on the error's side is
    taken. A sum rounded to odd with two bits or more to spare (here 29) rounds to float32 as the exact sum
    does."""
    f64 = torch.float64
    p, s, t, u = (b.scratch(shape, f64) for _ in range(4))
    bits, inexact, even = b.scratch(shape, torch.int64), b.scratch(shape, torch.bool), b.scratch(shape, torch.bool)
    infinity = b.bind(torch.tensor(math.inf, dtype=f64), "infinity")
    b.emit(f"{p}.copy_({a})")
    b.emit(f"{p}.mul_({m})")
    b.emit(f"torch.add({p}, {c}, out={s})")
    # TwoSum's error of p + c, step for step: t = s - p, u = p - (s - t), error = u + (c - t)
    b.emit(f"torch.sub({s}, {p}, out={t})")
    b.emit(f"torch.sub({s}, {t}, out={u})")
    b.emit(f"torch.sub({p}, {u}, out={u})")
    b.emit(f"torch.sub({c}, {t}, out={t})")
    b.emit(f"{u}.add_({t})")
    b.emit(f"torch.ne({u}, 0, out={inexact})")
    b.emit(f"torch.bitwise_and({b.bind(b.env[s].view(torch.int64), 'sum_bits')}, 1, out={bits})")
    b.emit(f"torch.eq({bits}, 0, out={even})")
    b.emit(f"{inexact}.logical_and_({even})")
    b.emit(f"{u}.mul_({infinity})")  # towards the error's side (nan where exact, never taken)
    b.emit(f"torch.nextafter({s}, {u}, out={t})")
    b.emit(f"torch.where({inexact}, {t}, {s}, out={s})")
    b.emit(f"{out}.copy_({s})")
