"""What the quantized kernels share: ExecuTorch's scalar conversions and dtype codes."""

from __future__ import annotations

import math

import torch

from pterun.core.dtype import to_torch
from pterun.errors import InvalidArgument
from pterun.kernels.python_kernels import f32

# Values ExecuTorch reads as unsigned 16-bit although they may be stored in int16 memory.
UNSIGNED16 = (torch.uint16, torch.bits16)


def recip_f32(value: float) -> float:
    # 1.0f / value in float32; a double quotient rounded to float32 is the same number.
    if value == 0:
        return math.copysign(math.inf, value)
    return f32(1.0 / value)


def int32(value: int) -> int:
    return (int(value) + 2**31) % 2**32 - 2**31


def dtype_of(code):
    """The torch dtype of a ScalarType code a program passes (None stays None)."""
    return None if code is None else to_torch(code)


def as_codes(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``x`` holding codes of ``dtype``, as the kernel reads and writes them: 16-bit codes stored as int16
    are unsigned values."""
    if dtype in UNSIGNED16 and x.dtype == torch.int16:
        return x.view(torch.uint16)
    return x


def scalar(t: torch.Tensor, what: str):
    if t.numel() != 1:
        raise InvalidArgument(f"{what} must have one element; it has {t.numel()}")
    return t.reshape(()).item()
