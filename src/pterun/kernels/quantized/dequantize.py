"""dequantize_per_tensor, _per_channel, _per_token: integer codes to floats, ExecuTorch's way.

Dequantizing subtracts the zero point in integers and multiplies by the scale
rounded to float32, in float32, before converting to the output type.
"""

from __future__ import annotations

import torch

from pterun.core.dtype import storage_of
from pterun.errors import InvalidArgument
from pterun.kernels.python_kernels import F32, KernelTable, f32, resize
from pterun.kernels.quantized.channels import channel_view, normalize_axis, tokens
from pterun.kernels.quantized.common import as_codes, int32, scalar

KERNELS = KernelTable()

_DEQUANT_INPUTS = (torch.uint8, torch.int8, torch.int16, torch.uint16, torch.bits16, torch.int32)


def _check_dequantize(input, quant_min, quant_max, dtype, out_dtype, out, what):
    if input.dtype != storage_of(dtype) or dtype not in _DEQUANT_INPUTS:
        raise InvalidArgument(f"{what}: input is {input.dtype}, dtype is {dtype}")
    if out_dtype is not None and out.dtype != out_dtype:
        raise InvalidArgument(f"{what}: out is {out.dtype} but out_dtype is {out_dtype}")
    if not out.is_floating_point():
        raise InvalidArgument(f"{what}: out must be a floating-point tensor, not {out.dtype}")
    if quant_min > quant_max:
        raise InvalidArgument(f"{what}: quant_min {quant_min} is greater than quant_max {quant_max}")


@KERNELS.kernel(
    "quantized_decomposed::dequantize_per_tensor.out(Tensor input, float scale, int zero_point, "
    "int quant_min, int quant_max, ScalarType dtype, *, ScalarType? out_dtype=None, Tensor(a!) out) "
    "-> Tensor(a!)")
def dequantize_per_tensor(input, scale, zero_point, quant_min, quant_max, dtype, out_dtype, out):
    resize(out, input.shape)
    _check_dequantize(input, quant_min, quant_max, dtype, out_dtype, out, "dequantize_per_tensor")
    diff = as_codes(input, dtype).to(torch.int32) - int32(zero_point)
    out.copy_(diff.to(F32) * f32(scale))
    return out


@KERNELS.kernel(
    "quantized_decomposed::dequantize_per_tensor.Tensor_out(Tensor input, Tensor scale, Tensor zero_point, "
    "int quant_min, int quant_max, ScalarType dtype, *, ScalarType? out_dtype=None, Tensor(a!) out) "
    "-> Tensor(a!)")
def dequantize_per_tensor_tensor(input, scale, zero_point, quant_min, quant_max, dtype, out_dtype, out):
    return dequantize_per_tensor(
        input, scalar(scale, "dequantize_per_tensor: scale"),
        scalar(zero_point, "dequantize_per_tensor: zero_point"), quant_min, quant_max, dtype, out_dtype, out,
    )


def _dequantize_channels(input, dtype, scales, zero_points, axis, out):
    ndim = input.dim()
    scale32 = scales.to(F32)
    zp = None if zero_points is None else zero_points.to(torch.int32)
    values = as_codes(input, dtype).to(torch.int32)
    if ndim == 1:
        # Here ExecuTorch converts the difference to the output type before scaling by the float scale.
        diff = values if zp is None else values - zp
        converted = diff.to(out.dtype)
        if out.dtype == torch.float64:
            out.copy_(converted * scale32.to(torch.float64))
        else:
            out.copy_(converted.to(F32) * scale32)
        return
    scale32 = channel_view(scale32, axis, ndim)
    diff = values if zp is None else values - channel_view(zp, axis, ndim)
    out.copy_((diff.to(F32) * scale32).reshape(out.shape))


@KERNELS.kernel(
    "quantized_decomposed::dequantize_per_channel.out(Tensor input, Tensor scales, Tensor? zero_points, "
    "int axis, int quant_min, int quant_max, ScalarType dtype, *, ScalarType? out_dtype=None, "
    "Tensor(a!) out) -> Tensor(a!)")
def dequantize_per_channel(input, scales, zero_points, axis, quant_min, quant_max, dtype, out_dtype, out):
    what = "dequantize_per_channel"
    axis = normalize_axis(axis, input.dim(), what)
    resize(out, input.shape)
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


@KERNELS.kernel(
    "quantized_decomposed::dequantize_per_token.out(Tensor input, Tensor scales, Tensor zero_points, "
    "int quant_min, int quant_max, ScalarType dtype, ScalarType output_dtype, *, Tensor(a!) out) "
    "-> Tensor(a!)")
def dequantize_per_token(input, scales, zero_points, quant_min, quant_max, dtype, output_dtype, out):
    what = "dequantize_per_token"
    resize(out, input.shape)
    _check_dequantize(input, quant_min, quant_max, dtype, output_dtype, out, what)
    rows = tokens(input)
    if scales.numel() != rows.shape[0] or zero_points.numel() != rows.shape[0]:
        raise InvalidArgument(f"{what}: scales and zero points need one value per token ({rows.shape[0]})")
    _dequantize_channels(rows, dtype, scales.reshape(-1), zero_points.reshape(-1), 0, out)
    return out
