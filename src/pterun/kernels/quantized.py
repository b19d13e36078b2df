"""quantized_decomposed::* kernels: the operators of PT2E quantized programs.

ExecuTorch's quantized kernel library is the reference, and integer results
must match it bit for bit, so every kernel reproduces its arithmetic rather
than PyTorch's reference decompositions:

* quantizing multiplies by a float32 reciprocal of the scale (never divides),
  rounds half to even in float32, adds the zero point in float32, and only
  then converts to an integer and clamps. On x86 a float that does not fit an
  int64 (NaN, +-inf, or just huge) converts to INT64_MIN, so it clamps to
  ``quant_min`` whatever its sign;
* dequantizing subtracts the zero point in integers and multiplies by the
  scale rounded to float32, in float32, before converting to the output type;
* choose_qparams computes the scale in double and the zero point from
  whichever of the two affine pairs carries less rounding error, ignoring
  ``eps``, as ExecuTorch does.

Each kernel takes the schema's arguments in order and writes its ``out``
tensors in place (resizing them first where the result's shape can vary); a
call's trailing value (the result, or the list of results for two-output
operators) is not used.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable

import torch

from pterun.core.dtype import to_torch
from pterun.errors import InvalidArgument
from pterun.kernels.registry import KernelRegistry
from pterun.kernels.schema import python_kernel

_F32 = torch.float32
_INT64_RANGE = 2.0**63
# Values ExecuTorch reads as unsigned 16-bit although they may be stored in int16 memory.
_UNSIGNED16 = (torch.uint16, torch.bits16)
_QUANT_BOUNDS = {
    torch.uint8: (0, 255), torch.int8: (-128, 127), torch.int16: (-(2**15), 2**15 - 1),
    torch.uint16: (0, 2**16 - 1), torch.bits16: (0, 2**16 - 1), torch.int32: (-(2**31), 2**31 - 1),
}
_DEQUANT_INPUTS = (torch.uint8, torch.int8, torch.int16, torch.uint16, torch.bits16, torch.int32)
_SMALL_SCALE = 6.1e-5  # rounded to float32 where used, as ExecuTorch's float constant is


# -- scalar helpers ------------------------------------------------------------


def _f32(value: float) -> float:
    """``value`` rounded to the nearest float32 (infinite where float32 overflows)."""
    try:
        return struct.unpack("f", struct.pack("f", value))[0]
    except OverflowError:
        return math.copysign(math.inf, value)


def _recip_f32(value: float) -> float:
    # 1.0f / value in float32; a double quotient rounded to float32 is the same number.
    if value == 0:
        return math.copysign(math.inf, value)
    return _f32(1.0 / value)


def _int32(value: int) -> int:
    return (int(value) + 2**31) % 2**32 - 2**31


def _dtype(code):
    return None if code is None else to_torch(code)


def _storage(dtype: torch.dtype) -> torch.dtype:
    return torch.int16 if dtype is torch.bits16 else dtype


def _as_read(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``x`` as the kernel reads it: 16-bit codes stored as int16 are unsigned values."""
    if dtype in _UNSIGNED16 and x.dtype == torch.int16:
        return x.view(torch.uint16)
    return x


def _resize(out: torch.Tensor, shape) -> None:
    shape = tuple(shape)
    if tuple(out.shape) != shape:
        out.resize_(shape)


def _normalize_axis(axis: int, ndim: int, what: str) -> int:
    rank = max(ndim, 1)
    if not -rank <= axis < rank:
        raise InvalidArgument(f"{what}: axis {axis} is out of range for a {ndim}-d input")
    return axis + rank if axis < 0 else axis


def _channel_view(t: torch.Tensor, axis: int, ndim: int) -> torch.Tensor:
    """A per-channel parameter vector shaped to broadcast along ``axis``."""
    return t.reshape((-1,) + (1,) * (ndim - axis - 1))


def _scalar(t: torch.Tensor, what: str):
    if t.numel() != 1:
        raise InvalidArgument(f"{what} must have one element; it has {t.numel()}")
    return t.reshape(()).item()


# -- quantize ------------------------------------------------------------------


def _check_quantize(input: torch.Tensor, quant_min: int, quant_max: int, dtype, out: torch.Tensor, what: str):
    if not input.is_floating_point():
        raise InvalidArgument(f"{what}: input must be a floating-point tensor, not {input.dtype}")
    if out.dtype != _storage(dtype):
        raise InvalidArgument(f"{what}: out is {out.dtype} but dtype is {dtype}")
    bounds = _QUANT_BOUNDS.get(dtype)
    if bounds is None:
        raise InvalidArgument(f"{what}: cannot quantize to {dtype}")
    if quant_min < bounds[0] or quant_max > bounds[1]:
        raise InvalidArgument(f"{what}: [{quant_min}, {quant_max}] exceeds the range of {dtype}")


def _quantize_into(input: torch.Tensor, inv_scale, zero_point, quant_min: int, quant_max: int, dtype,
                   out: torch.Tensor) -> None:
    """out = clamp(int64(float32(zero_point) + rint(float32(inv_scale * input)))), ExecuTorch's way."""
    if input.dtype == torch.float64:
        # float * double is a double product, narrowed to float before rounding.
        scaled = (input * inv_scale).to(_F32)
    else:
        scaled = input.to(_F32) * inv_scale
    shifted = torch.round(scaled).add_(zero_point)
    fits = shifted.abs() < _INT64_RANGE  # false for NaN and infinities too
    # Clamping in int64, not float32, keeps int32 bounds exact.
    q = torch.where(fits, shifted, float(quant_min)).to(torch.int64).clamp_(quant_min, quant_max)
    target = out.view(torch.uint16) if dtype in _UNSIGNED16 and out.dtype == torch.int16 else out
    target.copy_(q.reshape(target.shape))


def quantize_per_tensor(input, scale, zero_point, quant_min, quant_max, dtype, out):
    _resize(out, input.shape)
    _check_quantize(input, quant_min, quant_max, dtype, out, "quantize_per_tensor")
    inv_scale, shift = _recip_f32(_f32(scale)), float(_int32(zero_point))
    _quantize_into(input, inv_scale, shift, quant_min, quant_max, dtype, out)
    return out


def quantize_per_tensor_tensor(input, scale, zero_point, quant_min, quant_max, dtype, out):
    return quantize_per_tensor(
        input, _scalar(scale, "quantize_per_tensor: scale"),
        _scalar(zero_point, "quantize_per_tensor: zero_point"), quant_min, quant_max, dtype, out,
    )


def _quantize_channels(input, scales, zero_points, axis, quant_min, quant_max, dtype, out, what):
    ndim = input.dim()
    channels = input.shape[axis] if ndim else 1
    if scales.numel() != channels or zero_points.numel() != channels:
        raise InvalidArgument(
            f"{what}: {scales.numel()} scales and {zero_points.numel()} zero points for {channels} channels"
        )
    scale32 = scales.to(_F32)
    inv = torch.ones_like(scale32).div_(scale32)
    zp = zero_points.to(torch.int32).to(_F32)
    if ndim:
        inv, zp = _channel_view(inv, axis, ndim), _channel_view(zp, axis, ndim)
    _quantize_into(input, inv, zp, quant_min, quant_max, dtype, out)


def quantize_per_channel(input, scales, zero_points, axis, quant_min, quant_max, dtype, out):
    axis = _normalize_axis(axis, input.dim(), "quantize_per_channel")
    _resize(out, input.shape)
    _check_quantize(input, quant_min, quant_max, dtype, out, "quantize_per_channel")
    _quantize_channels(
        input, scales, zero_points, axis, quant_min, quant_max, dtype, out, "quantize_per_channel"
    )
    return out


def quantize_per_token(input, scales, zero_points, quant_min, quant_max, dtype, out):
    # One channel per token: every dimension but the last.
    _resize(out, input.shape)
    _check_quantize(input, quant_min, quant_max, dtype, out, "quantize_per_token")
    tokens = input.reshape(-1, input.shape[-1]) if input.dim() else input.reshape(1, 1)
    _quantize_channels(
        tokens, scales.reshape(-1), zero_points.reshape(-1), 0, quant_min, quant_max, dtype, out,
        "quantize_per_token",
    )
    return out


# -- dequantize ----------------------------------------------------------------


def _check_dequantize(input, quant_min, quant_max, dtype, out_dtype, out, what):
    if input.dtype != _storage(dtype) or dtype not in _DEQUANT_INPUTS:
        raise InvalidArgument(f"{what}: input is {input.dtype}, dtype is {dtype}")
    if out_dtype is not None and out.dtype != out_dtype:
        raise InvalidArgument(f"{what}: out is {out.dtype} but out_dtype is {out_dtype}")
    if not out.is_floating_point():
        raise InvalidArgument(f"{what}: out must be a floating-point tensor, not {out.dtype}")
    if quant_min > quant_max:
        raise InvalidArgument(f"{what}: quant_min {quant_min} is greater than quant_max {quant_max}")


def dequantize_per_tensor(input, scale, zero_point, quant_min, quant_max, dtype, out_dtype, out):
    _resize(out, input.shape)
    _check_dequantize(input, quant_min, quant_max, dtype, out_dtype, out, "dequantize_per_tensor")
    diff = _as_read(input, dtype).to(torch.int32) - _int32(zero_point)
    out.copy_(diff.to(_F32) * _f32(scale))
    return out


def dequantize_per_tensor_tensor(input, scale, zero_point, quant_min, quant_max, dtype, out_dtype, out):
    return dequantize_per_tensor(
        input, _scalar(scale, "dequantize_per_tensor: scale"),
        _scalar(zero_point, "dequantize_per_tensor: zero_point"), quant_min, quant_max, dtype, out_dtype, out,
    )


def _dequantize_channels(input, dtype, scales, zero_points, axis, out):
    ndim = input.dim()
    scale32 = scales.to(_F32)
    zp = None if zero_points is None else zero_points.to(torch.int32)
    values = _as_read(input, dtype).to(torch.int32)
    if ndim == 1:
        # Here ExecuTorch converts the difference to the output type before scaling by the float scale.
        diff = values if zp is None else values - zp
        converted = diff.to(out.dtype)
        if out.dtype == torch.float64:
            out.copy_(converted * scale32.to(torch.float64))
        else:
            out.copy_(converted.to(_F32) * scale32)
        return
    scale32 = _channel_view(scale32, axis, ndim)
    diff = values if zp is None else values - _channel_view(zp, axis, ndim)
    out.copy_((diff.to(_F32) * scale32).reshape(out.shape))


def dequantize_per_channel(input, scales, zero_points, axis, quant_min, quant_max, dtype, out_dtype, out):
    what = "dequantize_per_channel"
    axis = _normalize_axis(axis, input.dim(), what)
    _resize(out, input.shape)
    channels = input.shape[axis] if input.dim() else 1
    if scales.numel() != channels:
        raise InvalidArgument(f"{what}: {scales.numel()} scales for {channels} channels")
    if scales.dtype not in (torch.float32, torch.float64):
        raise InvalidArgument(f"{what}: scales must be float or double, not {scales.dtype}")
    if zero_points is not None and zero_points.numel() != channels:
        raise InvalidArgument(f"{what}: {zero_points.numel()} zero points for {channels} channels")
    _check_dequantize(input, quant_min, quant_max, dtype, out_dtype, out, what)
    _dequantize_channels(input, dtype, scales, zero_points, axis, out)
    return out


def dequantize_per_token(input, scales, zero_points, quant_min, quant_max, dtype, output_dtype, out):
    what = "dequantize_per_token"
    _resize(out, input.shape)
    _check_dequantize(input, quant_min, quant_max, dtype, output_dtype, out, what)
    tokens = input.reshape(-1, input.shape[-1]) if input.dim() else input.reshape(1, 1)
    if scales.numel() != tokens.shape[0] or zero_points.numel() != tokens.shape[0]:
        raise InvalidArgument(f"{what}: scales and zero points need one value per token ({tokens.shape[0]})")
    _dequantize_channels(tokens, dtype, scales.reshape(-1), zero_points.reshape(-1), 0, out)
    return out


# -- choose_qparams ------------------------------------------------------------


def _first_nan_extreme(rows: torch.Tensor, largest: bool) -> torch.Tensor:
    # std::min_element / max_element: a NaN in the first place wins, NaNs elsewhere are never picked.
    nan = torch.isnan(rows)
    fill = -math.inf if largest else math.inf
    cleaned = torch.where(nan, fill, rows)
    extreme = cleaned.amax(-1) if largest else cleaned.amin(-1)
    return torch.where(nan[:, 0], math.nan, extreme)


def _scale_and_zero_point(lo: torch.Tensor, hi: torch.Tensor, qmin: int, qmax: int):
    """Vectorized over rows; lo and hi are float32, the scale double and the zero point int64."""
    lo = torch.minimum(lo, torch.zeros_like(lo))
    hi = torch.maximum(hi, torch.zeros_like(hi))
    span = qmax - qmin
    scale = (hi.double() - lo.double()) / span
    narrow = scale.to(_F32)
    degenerate = (narrow == 0) | torch.isinf(torch.ones_like(narrow) / narrow)
    scale = torch.where(degenerate, 0.1, scale)
    if not bool((scale > 0).all()):
        raise InvalidArgument("choose_qparams: quantization scale must be positive (the input holds NaN?)")

    threshold = _f32(_SMALL_SCALE)
    small = scale < threshold
    if bool(small.any()):
        # Widen the range so the threshold can be the scale, in float32 as ExecuTorch does: a range
        # touching zero moves its other end to threshold * span; any other range grows in proportion.
        amplifier = torch.full_like(lo, threshold) / scale.to(_F32)
        lo_zero, hi_zero = lo == 0, hi == 0
        new_hi = torch.where(lo_zero, _f32(threshold * span), torch.where(hi_zero, hi, hi * amplifier))
        new_lo = torch.where(lo_zero, lo, torch.where(hi_zero, _f32(-threshold * span), lo * amplifier))
        lo, hi = torch.where(small, new_lo, lo), torch.where(small, new_hi, hi)
        scale = torch.where(small, threshold, scale)

    lo_ratio, hi_ratio = lo.double() / scale, hi.double() / scale
    from_min, from_max = qmin - lo_ratio, qmax - hi_ratio
    error_min = abs(qmin) - lo_ratio.abs()
    error_max = abs(qmax) - hi_ratio.abs()
    initial = torch.where(error_min < error_max, from_min, from_max)
    nudged = torch.round(initial.to(_F32)).double()
    # The int32 conversion of a NaN (an infinite input range) gives INT32_MIN on x86.
    nudged = torch.where(nudged.abs() < 2.0**31, nudged, -(2.0**31))
    zero_point = torch.where(initial < qmin, float(qmin), torch.where(initial > qmax, float(qmax), nudged))
    return scale, zero_point.to(torch.int64)


def _check_qparams_outputs(input, quant_min, quant_max, scale_out, zero_point_out, what):
    if quant_min >= quant_max:
        raise InvalidArgument(f"{what}: quant_min {quant_min} must be less than quant_max {quant_max}")
    if input.dtype != torch.float32:
        raise InvalidArgument(f"{what}: input must be float32, not {input.dtype}")
    if scale_out.dtype != torch.float64 or zero_point_out.dtype != torch.int64:
        raise InvalidArgument(f"{what}: scale_out must be double and zero_point_out long")
    if input.numel() == 0:
        raise InvalidArgument(f"{what}: input is empty")


def choose_qparams(input, quant_min, quant_max, eps, dtype, scale_out, zero_point_out):
    what = "choose_qparams"
    _check_qparams_outputs(input, quant_min, quant_max, scale_out, zero_point_out, what)
    if scale_out.numel() != 1 or zero_point_out.numel() != 1:
        raise InvalidArgument(f"{what}: scale_out and zero_point_out must have one element")
    row = input.reshape(1, -1)
    scale, zero_point = _scale_and_zero_point(
        _first_nan_extreme(row, False), _first_nan_extreme(row, True), _int32(quant_min), _int32(quant_max)
    )
    scale_out.copy_(scale.reshape(scale_out.shape))
    zero_point_out.copy_(zero_point.reshape(zero_point_out.shape))
    return scale_out, zero_point_out


def choose_qparams_per_token_asymmetric(input, dtype, scale_out, zero_point_out):
    what = "choose_qparams_per_token_asymmetric"
    if input.dim() == 0:
        raise InvalidArgument(f"{what}: input must have at least one dimension")
    shape = (*input.shape[:-1], 1)
    _resize(scale_out, shape)
    _resize(zero_point_out, shape)
    _check_qparams_outputs(input, -128, 127, scale_out, zero_point_out, what)
    rows = input.reshape(-1, input.shape[-1])
    scale, zero_point = _scale_and_zero_point(
        _first_nan_extreme(rows, False), _first_nan_extreme(rows, True), -128, 127
    )
    scale_out.copy_(scale.reshape(shape))
    zero_point_out.copy_(zero_point.reshape(shape))
    return scale_out, zero_point_out


# -- quantized add -------------------------------------------------------------


def add(a, a_scale, a_zero_point, a_quant_min, a_quant_max, b, b_scale, b_zero_point, b_quant_min,
        b_quant_max, out_scale, out_zero_point, out_quant_min, out_quant_max, out):
    what = "quantized add"
    if a.shape != b.shape or a.shape != out.shape or not (a.dtype == b.dtype == out.dtype):
        raise InvalidArgument(f"{what}: a, b and out must have one shape and dtype")
    if a.is_floating_point() or a.dtype == torch.bool:
        raise InvalidArgument(f"{what}: unsupported dtype {a.dtype}")
    for lo, hi, name in ((a_quant_min, a_quant_max, "a"), (b_quant_min, b_quant_max, "b"),
                         (out_quant_min, out_quant_max, "out")):
        if not (0 <= lo <= hi <= 255):
            raise InvalidArgument(f"{what}: [{lo}, {hi}] for {name} must lie within [0, 255]")
    # Each operand is dequantized exactly (small integer times a float32 scale) and rounded to float.
    dqa = (a.to(torch.int64) - _int32(a_zero_point)).to(_F32) * _f32(a_scale)
    dqb = (b.to(torch.int64) - _int32(b_zero_point)).to(_F32) * _f32(b_scale)
    total = dqa + dqb
    inv = _recip_f32(_f32(out_scale))
    _quantize_into(total, inv, float(_int32(out_zero_point)), out_quant_min, out_quant_max, out.dtype, out)
    return out


# -- quantized embeddings ------------------------------------------------------


def _check_embedding(weight, weight_scales, weight_zero_points, weight_quant_min, weight_quant_max, indices,
                     out_dtype, out, what, embedding_dim, weight_types, index_types):
    if weight.dim() != 2:
        raise InvalidArgument(f"{what}: weight must be 2-d, not {weight.dim()}-d")
    if weight.dtype not in weight_types:
        raise InvalidArgument(f"{what}: weight dtype {weight.dtype} is not supported")
    if weight_scales.dim() not in (1, 2) or weight_scales.shape[0] != weight.shape[0]:
        raise InvalidArgument(f"{what}: weight_scales must be 1-d or 2-d with one row per embedding")
    if weight_scales.dim() == 2 and embedding_dim % weight_scales.shape[1]:
        raise InvalidArgument(f"{what}: {weight_scales.shape[1]} groups cannot split {embedding_dim} columns")
    floats = (torch.float32, torch.float16, torch.bfloat16)
    if out.dtype not in floats or weight_scales.dtype not in floats:
        raise InvalidArgument(f"{what}: out and weight_scales must be float, half or bfloat16")
    if weight_zero_points is not None:
        if weight_zero_points.shape != weight_scales.shape or weight_zero_points.dtype != out.dtype:
            raise InvalidArgument(f"{what}: weight_zero_points must have weight_scales' shape, out's dtype")
    if indices.dtype not in index_types:
        raise InvalidArgument(f"{what}: indices must be {' or '.join(str(t) for t in index_types)}")
    if weight_quant_min > weight_quant_max:
        raise InvalidArgument(f"{what}: quant_min {weight_quant_min} exceeds quant_max {weight_quant_max}")
    if out_dtype is not None and out.dtype != out_dtype:
        raise InvalidArgument(f"{what}: out is {out.dtype} but dtype is {out_dtype}")
    if indices.numel():
        lo, hi = int(indices.min()), int(indices.max())
        if lo < 0 or hi >= weight.shape[0]:
            bad = lo if lo < 0 else hi
            raise InvalidArgument(f"{what}: index {bad} is out of range for {weight.shape[0]} rows")


def _unpack(weight: torch.Tensor, bits: int) -> torch.Tensor:
    """Sub-byte codes as signed ints. 4-bit: high nibble first; 2-bit: lowest bits first."""
    if bits == 8:
        return weight.to(torch.int32)
    w = weight.to(torch.int32)
    if bits == 4:
        parts = [(w >> 4) & 0xF, w & 0xF]
    else:
        parts = [(w >> shift) & 0x3 for shift in (0, 2, 4, 6)]
    return torch.stack(parts, dim=-1).reshape(weight.shape[0], -1) - (1 << (bits - 1))


def _embedding(weight, weight_scales, weight_zero_points, weight_quant_min, weight_quant_max, indices,
               out_dtype, out, bits, what):
    per_byte = 8 // bits
    embedding_dim = weight.shape[1] * per_byte if weight.dim() == 2 else 0
    weight_types = (torch.uint8, torch.int8) if bits == 8 else (torch.uint8,)
    index_types = (torch.int64,) if bits == 8 else (torch.int64, torch.int32)
    _resize(out, (*indices.shape, embedding_dim))
    _check_embedding(weight, weight_scales, weight_zero_points, weight_quant_min, weight_quant_max, indices,
                     out_dtype, out, what, embedding_dim, weight_types, index_types)
    flat = indices.reshape(-1).to(torch.int64)
    codes = _unpack(weight.index_select(0, flat), bits).to(_F32)
    groups = weight_scales.shape[1] if weight_scales.dim() == 2 else 1
    group_size = embedding_dim // groups

    def per_column(params: torch.Tensor) -> torch.Tensor:
        rows = params.index_select(0, flat).reshape(flat.numel(), groups).to(_F32)
        return rows.repeat_interleave(group_size, dim=1)

    if weight_zero_points is not None:
        codes = codes - per_column(weight_zero_points)
    out.copy_((codes * per_column(weight_scales)).reshape(out.shape))
    return out


def _embedding_kernel(bits: int, with_dtype: bool) -> Callable:
    name = {8: "embedding_byte", 4: "embedding_4bit", 2: "embedding_2bit"}[bits]

    if with_dtype:
        def kernel(weight, weight_scales, weight_zero_points, quant_min, quant_max, indices, dtype, out):
            return _embedding(weight, weight_scales, weight_zero_points, quant_min, quant_max, indices, dtype,
                              out, bits, name)
    else:
        def kernel(weight, weight_scales, weight_zero_points, quant_min, quant_max, indices, out):
            return _embedding(weight, weight_scales, weight_zero_points, quant_min, quant_max, indices, None,
                              out, bits, name)
    return kernel


# -- mixed-precision matmuls ---------------------------------------------------


def _sequential_half_dot(terms: Callable[[int], torch.Tensor], count: int, shape, device) -> torch.Tensor:
    # Half arithmetic rounds after every operation; summing term by term keeps that rounding.
    total = torch.zeros(shape, dtype=torch.float16, device=device)
    for k in range(count):
        total = total + terms(k)
    return total


def mixed_mm(input, weight, weight_scales, weight_zero_points, out):
    what = "mixed_mm"
    if input.dim() != 2 or weight.dim() != 2 or weight_scales.dim() != 1:
        raise InvalidArgument(f"{what}: input and weight must be 2-d and weight_scales 1-d")
    if input.shape[1] != weight.shape[0] or weight_scales.shape[0] != weight.shape[0]:
        raise InvalidArgument(f"{what}: shapes {tuple(input.shape)}, {tuple(weight.shape)} do not multiply")
    if not input.dtype == weight_scales.dtype == out.dtype or input.dtype not in (_F32, torch.float16):
        raise InvalidArgument(f"{what}: input, weight_scales and out must all be float or all half")
    if weight.dtype != torch.int8:
        raise InvalidArgument(f"{what}: weight must be int8")
    if weight_zero_points is not None:
        raise InvalidArgument(f"{what}: zero points are not supported")
    _resize(out, (input.shape[0], weight.shape[1]))
    if input.dtype == torch.float16:
        w = weight.to(torch.float16)
        out.copy_(_sequential_half_dot(
            lambda k: (input[:, k:k + 1] * w[k]) * weight_scales[k], input.shape[1], out.shape, out.device))
    else:
        out.copy_(input @ (weight.to(_F32) * weight_scales[:, None]))
    return out


def mixed_linear(input, weight, weight_scales, weight_zero_points, dtype, out):
    what = "mixed_linear"
    if input.dim() != 2 or weight.dim() != 2 or weight_scales.dim() not in (1, 2):
        raise InvalidArgument(f"{what}: input and weight must be 2-d and weight_scales 1-d or 2-d")
    if input.shape[1] != weight.shape[1] or weight_scales.shape[0] != weight.shape[0]:
        raise InvalidArgument(f"{what}: shapes {tuple(input.shape)}, {tuple(weight.shape)} do not match")
    if input.dtype != weight_scales.dtype or input.dtype not in (torch.float32, torch.float16):
        raise InvalidArgument(f"{what}: input and weight_scales must both be float or both half")
    if dtype is not None and (out.dtype != dtype or dtype not in (torch.float32, torch.float16)):
        raise InvalidArgument(f"{what}: dtype must be float or half and match out")
    if weight.dtype != torch.int8:
        raise InvalidArgument(f"{what}: weight must be int8")
    if weight_zero_points is not None:
        raise InvalidArgument(f"{what}: zero points are not supported")
    n = input.shape[1]
    group = n if weight_scales.dim() == 1 else -(-n // weight_scales.shape[1])
    scales = weight_scales.reshape(weight.shape[0], -1)
    _resize(out, (input.shape[0], weight.shape[0]))
    acc = out.dtype  # ExecuTorch accumulates in the output type
    if input.dtype == _F32 and acc == _F32:
        total = torch.zeros(out.shape, dtype=_F32, device=out.device)
        w = weight.to(_F32)
        for g, k in enumerate(range(0, n, group)):
            total += (input[:, k:k + group] @ w[:, k:k + group].T) * scales[:, g]
        out.copy_(total)
        return out
    # Half somewhere: products round to the input type, sums to the output type, term by term.
    w = weight.to(input.dtype)
    total = torch.zeros(out.shape, dtype=acc, device=out.device)
    for g, k in enumerate(range(0, n, group)):
        partial = torch.zeros(out.shape, dtype=acc, device=out.device)
        for j in range(k, min(k + group, n)):
            partial = (partial.to(_F32) + (input[:, j:j + 1] * w[:, j]).to(_F32)).to(acc)
        scaled = partial.to(_F32) * scales[:, g].to(_F32)
        if acc == torch.float16 and scales.dtype == torch.float16:
            scaled = scaled.to(torch.float16).to(_F32)
        total = (total.to(_F32) + scaled).to(acc)
    out.copy_(total)
    return out


# -- registration --------------------------------------------------------------


# Each kernel with the schema ExecuTorch registers for it (in the quantized_decomposed namespace): its
# arguments in order (the kernel takes them positionally), which are ScalarType codes, and which it
# writes (its outs).
_KERNELS: list[tuple[Callable, str]] = [
    (add, (
        "add.out(Tensor a, float a_scale, int a_zero_point, int a_quant_min, int a_quant_max, Tensor b, "
        "float b_scale, int b_zero_point, int b_quant_min, int b_quant_max, float out_scale, "
        "int out_zero_point, int out_quant_min, int out_quant_max, *, Tensor(a!) out) -> Tensor(a!)")),
    (choose_qparams, (
        "choose_qparams.Tensor_out(Tensor input, int quant_min, int quant_max, float eps, ScalarType dtype, *, "
        "Tensor(a!) scale_out, Tensor(b!) zero_point_out) -> (Tensor(a!), Tensor(b!))")),
    (dequantize_per_tensor, (
        "dequantize_per_tensor.out(Tensor input, float scale, int zero_point, int quant_min, int quant_max, "
        "ScalarType dtype, *, ScalarType? out_dtype=None, Tensor(a!) out) -> Tensor(a!)")),
    (dequantize_per_tensor_tensor, (
        "dequantize_per_tensor.Tensor_out(Tensor input, Tensor scale, Tensor zero_point, int quant_min, "
        "int quant_max, ScalarType dtype, *, ScalarType? out_dtype=None, Tensor(a!) out) -> Tensor(a!)")),
    (quantize_per_channel, (
        "quantize_per_channel.out(Tensor input, Tensor scales, Tensor zero_points, int axis, int quant_min, "
        "int quant_max, ScalarType dtype, *, Tensor(a!) out) -> Tensor(a!)")),
    (dequantize_per_channel, (
        "dequantize_per_channel.out(Tensor input, Tensor scales, Tensor? zero_points, int axis, int quant_min, "
        "int quant_max, ScalarType dtype, *, ScalarType? out_dtype=None, Tensor(a!) out) -> Tensor(a!)")),
    (_embedding_kernel(8, False), (
        "embedding_byte.out(Tensor weight, Tensor weight_scales, Tensor? weight_zero_points, "
        "int weight_quant_min, int weight_quant_max, Tensor indices, *, Tensor(a!) out) -> Tensor(a!)")),
    (_embedding_kernel(8, True), (
        "embedding_byte.dtype_out(Tensor weight, Tensor weight_scales, Tensor? weight_zero_points, "
        "int weight_quant_min, int weight_quant_max, Tensor indices, *, ScalarType? dtype=None, "
        "Tensor(a!) out) -> Tensor(a!)")),
    (_embedding_kernel(2, False), (
        "embedding_2bit.out(Tensor weight, Tensor weight_scales, Tensor? weight_zero_points, "
        "int weight_quant_min, int weight_quant_max, Tensor indices, *, Tensor(a!) out) -> Tensor(a!)")),
    (_embedding_kernel(2, True), (
        "embedding_2bit.dtype_out(Tensor weight, Tensor weight_scales, Tensor? weight_zero_points, "
        "int weight_quant_min, int weight_quant_max, Tensor indices, ScalarType? dtype=None, *, "
        "Tensor(a!) out) -> Tensor(a!)")),
    (_embedding_kernel(4, False), (
        "embedding_4bit.out(Tensor weight, Tensor weight_scales, Tensor? weight_zero_points, "
        "int weight_quant_min, int weight_quant_max, Tensor indices, *, Tensor(a!) out) -> Tensor(a!)")),
    (_embedding_kernel(4, True), (
        "embedding_4bit.dtype_out(Tensor weight, Tensor weight_scales, Tensor? weight_zero_points, "
        "int weight_quant_min, int weight_quant_max, Tensor indices, ScalarType? dtype=None, *, "
        "Tensor(a!) out) -> Tensor(a!)")),
    (mixed_mm, (
        "mixed_mm.out(Tensor input, Tensor weight, Tensor weight_scales, Tensor? weight_zero_points, *, "
        "Tensor(a!) out) -> Tensor(a!)")),
    (mixed_linear, (
        "mixed_linear.out(Tensor input, Tensor weight, Tensor weight_scales, Tensor? weight_zero_points, "
        "ScalarType? dtype=None, *, Tensor(a!) out) -> Tensor(a!)")),
    (quantize_per_tensor, (
        "quantize_per_tensor.out(Tensor input, float scale, int zero_point, int quant_min, int quant_max, "
        "ScalarType dtype, *, Tensor(a!) out) -> Tensor(a!)")),
    (quantize_per_tensor_tensor, (
        "quantize_per_tensor.Tensor_out(Tensor input, Tensor scale, Tensor zero_point, int quant_min, "
        "int quant_max, ScalarType dtype, *, Tensor(a!) out) -> Tensor(a!)")),
    (choose_qparams_per_token_asymmetric, (
        "choose_qparams_per_token_asymmetric.out(Tensor input, ScalarType dtype, *, Tensor(a!) scale_out, "
        "Tensor(b!) zero_point_out) -> (Tensor(a!), Tensor(b!))")),
    (quantize_per_token, (
        "quantize_per_token.out(Tensor input, Tensor scales, Tensor zero_points, int quant_min, int quant_max, "
        "ScalarType dtype, *, Tensor(a!) out) -> Tensor(a!)")),
    (dequantize_per_token, (
        "dequantize_per_token.out(Tensor input, Tensor scales, Tensor zero_points, int quant_min, "
        "int quant_max, ScalarType dtype, ScalarType output_dtype, *, Tensor(a!) out) -> Tensor(a!)")),
]


def register(registry: KernelRegistry) -> None:
    for fn, schema in _KERNELS:
        registry.register(*python_kernel(fn, f"quantized_decomposed::{schema}", _dtype))
