"""choose_qparams, choose_qparams_per_token_asymmetric: a scale and zero point for a float tensor.

The scale is computed in double and the zero point from whichever of the two
affine pairs carries less rounding error, ignoring ``eps``, as ExecuTorch does.
"""

from __future__ import annotations

import math

import torch

from pterun.errors import InvalidArgument
from pterun.kernels.python_kernels import F32, KernelTable, f32, resize
from pterun.kernels.quantized.common import int32

KERNELS = KernelTable()

_SMALL_SCALE = 6.1e-5  # rounded to float32 where used, as ExecuTorch's float constant is


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
    narrow = scale.to(F32)
    degenerate = (narrow == 0) | torch.isinf(torch.ones_like(narrow) / narrow)
    scale = torch.where(degenerate, 0.1, scale)
    if not bool((scale > 0).all()):
        raise InvalidArgument("choose_qparams: quantization scale must be positive (the input holds NaN?)")

    threshold = f32(_SMALL_SCALE)
    small = scale < threshold
    if bool(small.any()):
        # Widen the range so the threshold can be the scale, in float32 as ExecuTorch does: a range
        # touching zero moves its other end to threshold * span; any other range grows in proportion.
        amplifier = torch.full_like(lo, threshold) / scale.to(F32)
        lo_zero, hi_zero = lo == 0, hi == 0
        new_hi = torch.where(lo_zero, f32(threshold * span), torch.where(hi_zero, hi, hi * amplifier))
        new_lo = torch.where(lo_zero, lo, torch.where(hi_zero, f32(-threshold * span), lo * amplifier))
        lo, hi = torch.where(small, new_lo, lo), torch.where(small, new_hi, hi)
        scale = torch.where(small, threshold, scale)

    lo_ratio, hi_ratio = lo.double() / scale, hi.double() / scale
    from_min, from_max = qmin - lo_ratio, qmax - hi_ratio
    error_min = abs(qmin) - lo_ratio.abs()
    error_max = abs(qmax) - hi_ratio.abs()
    initial = torch.where(error_min < error_max, from_min, from_max)
    nudged = torch.round(initial.to(F32)).double()
    # The int32 conversion of a NaN (an infinite input range) gives INT32_MIN on x86.
    nudged = torch.where(nudged.abs() < 2.0**31, nudged, -(2.0**31))
    zero_point = torch.where(initial < qmin, float(qmin), torch.where(initial > qmax, float(qmax), nudged))
    return scale, zero_point.to(torch.int64)


def _choose_into(rows: torch.Tensor, qmin: int, qmax: int, scale_out, zero_point_out) -> None:
    """A scale and zero point per row of ``rows``, written into the outs (one element per row, in order)."""
    scale, zero_point = _scale_and_zero_point(
        _first_nan_extreme(rows, False), _first_nan_extreme(rows, True), qmin, qmax
    )
    scale_out.copy_(scale.reshape(scale_out.shape))
    zero_point_out.copy_(zero_point.reshape(zero_point_out.shape))


def _check_qparams_outputs(input, quant_min, quant_max, scale_out, zero_point_out, what):
    if quant_min >= quant_max:
        raise InvalidArgument(f"{what}: quant_min {quant_min} must be less than quant_max {quant_max}")
    if input.dtype != torch.float32:
        raise InvalidArgument(f"{what}: input must be float32, not {input.dtype}")
    if scale_out.dtype != torch.float64 or zero_point_out.dtype != torch.int64:
        raise InvalidArgument(f"{what}: scale_out must be double and zero_point_out long")
    if input.numel() == 0:
        raise InvalidArgument(f"{what}: input is empty")


@KERNELS.kernel(
    "quantized_decomposed::choose_qparams.Tensor_out(Tensor input, int quant_min, int quant_max, float eps, "
    "ScalarType dtype, *, Tensor(a!) scale_out, Tensor(b!) zero_point_out) -> (Tensor(a!), Tensor(b!))")
def choose_qparams(input, quant_min, quant_max, eps, dtype, scale_out, zero_point_out):
    what = "choose_qparams"
    _check_qparams_outputs(input, quant_min, quant_max, scale_out, zero_point_out, what)
    if scale_out.numel() != 1 or zero_point_out.numel() != 1:
        raise InvalidArgument(f"{what}: scale_out and zero_point_out must have one element")
    _choose_into(input.reshape(1, -1), int32(quant_min), int32(quant_max), scale_out, zero_point_out)
    return scale_out, zero_point_out


@KERNELS.kernel(
    "quantized_decomposed::choose_qparams_per_token_asymmetric.out(Tensor input, ScalarType dtype, *, "
    "Tensor(a!) scale_out, Tensor(b!) zero_point_out) -> (Tensor(a!), Tensor(b!))")
def choose_qparams_per_token_asymmetric(input, dtype, scale_out, zero_point_out):
    what = "choose_qparams_per_token_asymmetric"
    if input.dim() == 0:
        raise InvalidArgument(f"{what}: input must have at least one dimension")
    shape = (*input.shape[:-1], 1)
    resize(scale_out, shape)
    resize(zero_point_out, shape)
    _check_qparams_outputs(input, -128, 127, scale_out, zero_point_out, what)
    _choose_into(input.reshape(-1, input.shape[-1]), -128, 127, scale_out, zero_point_out)
    return scale_out, zero_point_out
