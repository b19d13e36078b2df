"""quantized_decomposed::add: two quantized tensors added through float32, quantized again."""

from __future__ import annotations

import torch

from pterun.errors import InvalidArgument
from pterun.kernels.python_kernels import F32, KernelTable, f32
from pterun.kernels.quantized.common import int32, recip_f32
from pterun.kernels.quantized.quantize import quantize_into

KERNELS = KernelTable()


@KERNELS.kernel(
    "quantized_decomposed::add.out(Tensor a, float a_scale, int a_zero_point, int a_quant_min, "
    "int a_quant_max, Tensor b, float b_scale, int b_zero_point, int b_quant_min, int b_quant_max, "
    "float out_scale, int out_zero_point, int out_quant_min, int out_quant_max, *, Tensor(a!) out) "
    "-> Tensor(a!)")
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
    dqa = (a.to(torch.int64) - int32(a_zero_point)).to(F32) * f32(a_scale)
    dqb = (b.to(torch.int64) - int32(b_zero_point)).to(F32) * f32(b_scale)
    total = dqa + dqb
    inv = recip_f32(f32(out_scale))
    quantize_into(total, inv, float(int32(out_zero_point)), out_quant_min, out_quant_max, out.dtype, out)
    return out
