"""quantize_per_tensor, _per_channel, _per_token: floats to integer codes, ExecuTorch's way.

Quantizing multiplies by a float32 reciprocal of the scale (never divides),
rounds half to even in float32, adds the zero point in float32, and only then
converts to an integer and clamps. On x86 a float that does not fit an int64
(NaN, +-inf, or just huge) converts to INT64_MIN, so it clamps to
``quant_min`` whatever its sign.
"""

from __future__ import annotations

import torch

from pterun.core.dtype import storage_of
from pterun.errors import InvalidArgument
from pterun.kernels.python_kernels import F32, KernelTable, f32, resize
from pterun.kernels.quantized.channels import channel_view, normalize_axis, tokens
from pterun.kernels.quantized.common import as_codes, int32, recip_f32, scalar

KERNELS = KernelTable()

_INT64_RANGE = 2.0**63
_QUANT_BOUNDS = {
    torch.uint8: (0, 255), torch.int8: (-128, 127), torch.int16: (-(2**15), 2**15 - 1),
    torch.uint16: (0, 2**16 - 1), torch.bits16: (0, 2**16 - 1), torch.int32: (-(2**31), 2**31 - 1),
}


def _check_quantize(input: torch.Tensor, quant_min: int, quant_max: int, dtype, out: torch.Tensor, what: str):
    if not input.is_floating_point():
        raise InvalidArgument(f"{what}: input must be a floating-point tensor, not {input.dtype}")
    if out.dtype != storage_of(dtype):
        raise InvalidArgument(f"{what}: out is {out.dtype} but dtype is {dtype}")
    bounds = _QUANT_BOUNDS.get(dtype)
    if bounds is None:
        raise InvalidArgument(f"{what}: cannot quantize to {dtype}")
    if quant_min < bounds[0] or quant_max > bounds[1]:
        raise InvalidArgument(f"{what}: [{quant_min}, {quant_max}] exceeds the range of {dtype}")


def quantize_into(input: torch.Tensor, inv_scale, zero_point, quant_min: int, quant_max: int, dtype,
                  out: torch.Tensor) -> None:
    """out = clamp(int64(float32(zero_point) + rint(float32(inv_scale * input)))), ExecuTorch's way."""
    if input.dtype == torch.float64:
        # float * double is a double product, narrowed to float before rounding.
        scaled = (input * inv_scale).to(F32)
    else:
        scaled = input.to(F32) * inv_scale
    shifted = torch.round(scaled).add_(zero_point)
    fits = shifted.abs() < _INT64_RANGE  # false for NaN and infinities too
    # Clamping in int64, not float32, keeps int32 bounds exact.
    q = torch.where(fits, shifted, float(quant_min)).to(torch.int64).clamp_(quant_min, quant_max)
    target = as_codes(out, dtype)
    target.copy_(q.reshape(target.shape))


@KERNELS.kernel(
    "quantized_decomposed::quantize_per_tensor.out(Tensor input, float scale, int zero_point, int quant_min, "
    "int quant_max, ScalarType dtype, *, Tensor(a!) out) -> Tensor(a!)")
def quantize_per_tensor(input, scale, zero_point, quant_min, quant_max, dtype, out):
    resize(out, input.shape)
    _check_quantize(input, quant_min, quant_max, dtype, out, "quantize_per_tensor")
    inv_scale, shift = recip_f32(f32(scale)), float(int32(zero_point))
    quantize_into(input, inv_scale, shift, quant_min, quant_max, dtype, out)
    return out


@KERNELS.kernel(
    "quantized_decomposed::quantize_per_tensor.Tensor_out(Tensor input, Tensor scale, Tensor zero_point, "
    "int quant_min, int quant_max, ScalarType dtype, *, Tensor(a!) out) -> Tensor(a!)")
def quantize_per_tensor_tensor(input, scale, zero_point, quant_min, quant_max, dtype, out):
    return quantize_per_tensor(
        input, scalar(scale, "quantize_per_tensor: scale"),
        scalar(zero_point, "quantize_per_tensor: zero_point"), quant_min, quant_max, dtype, out,
    )


def _quantize_channels(input, scales, zero_points, axis, quant_min, quant_max, dtype, out, what):
    ndim = input.dim()
    channels = input.shape[axis] if ndim else 1
    if scales.numel() != channels or zero_points.numel() != channels:
        raise InvalidArgument(
            f"{what}: {scales.numel()} scales and {zero_points.numel()} zero points for {channels} channels"
        )
    scale32 = scales.to(F32)
    inv = torch.ones_like(scale32).div_(scale32)
    zp = zero_points.to(torch.int32).to(F32)
    if ndim:
        inv, zp = channel_view(inv, axis, ndim), channel_view(zp, axis, ndim)
    quantize_into(input, inv, zp, quant_min, quant_max, dtype, out)


@KERNELS.kernel(
    "quantized_decomposed::quantize_per_channel.out(Tensor input, Tensor scales, Tensor zero_points, "
    "int axis, int quant_min, int quant_max, ScalarType dtype, *, Tensor(a!) out) -> Tensor(a!)")
def quantize_per_channel(input, scales, zero_points, axis, quant_min, quant_max, dtype, out):
    axis = normalize_axis(axis, input.dim(), "quantize_per_channel")
    resize(out, input.shape)
    _check_quantize(input, quant_min, quant_max, dtype, out, "quantize_per_channel")
    _quantize_channels(
        input, scales, zero_points, axis, quant_min, quant_max, dtype, out, "quantize_per_channel"
    )
    return out


@KERNELS.kernel(
    "quantized_decomposed::quantize_per_token.out(Tensor input, Tensor scales, Tensor zero_points, "
    "int quant_min, int quant_max, ScalarType dtype, *, Tensor(a!) out) -> Tensor(a!)")
def quantize_per_token(input, scales, zero_points, quant_min, quant_max, dtype, out):
    # One channel per token.
    resize(out, input.shape)
    _check_quantize(input, quant_min, quant_max, dtype, out, "quantize_per_token")
    _quantize_channels(
        tokens(input), scales.reshape(-1), zero_points.reshape(-1), 0, quant_min, quant_max, dtype, out,
        "quantize_per_token",
    )
    return out
