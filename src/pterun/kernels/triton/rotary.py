"""Rotary embedding in the rotate-half form on CUDA, in one kernel: out = x * cos + cat(-x2, x1) * sin.

The exported chain takes seven kernels (``executor/load/fuse/rotate_half.py``); this one rounds as they do:
each product and the sum computed in float32 and rounded to the tensors' dtype on its own, as PyTorch's CUDA
kernels compute a half-precision product (the negation and the concatenation are exact). Compiled with
``enable_fp_fusion=False``, so the sum of the two float32 products is not contracted into a fused
multiply-add. Tensors of up to four dimensions; ``cos`` and ``sin`` broadcast to ``x`` (stride 0 where they
do), ``x`` read through its strides, ``out`` contiguous.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from pterun.core.triton_options import NO_FUSION

_BLOCK = 1024


@triton.jit
def _rotate_half(x_ptr, cos_ptr, sin_ptr, out_ptr, numel, S1, S2, S3, HALF,
                 xs0, xs1, xs2, xs3, cs0, cs1, cs2, cs3, ss0, ss1, ss2, ss3, BLOCK: tl.constexpr):
    i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    ok = i < numel
    d = i % S3
    rest = i // S3
    c = rest % S2
    rest = rest // S2
    b = rest % S1
    a = rest // S1
    x_row = x_ptr + a * xs0 + b * xs1 + c * xs2
    x = tl.load(x_row + d * xs3, mask=ok, other=0.0)
    low = d < HALF
    partner = tl.load(x_row + tl.where(low, d + HALF, d - HALF) * xs3, mask=ok, other=0.0)
    rotated = tl.where(low, -partner, partner)
    cos = tl.load(cos_ptr + a * cs0 + b * cs1 + c * cs2 + d * cs3, mask=ok, other=0.0)
    sin = tl.load(sin_ptr + a * ss0 + b * ss1 + c * ss2 + d * ss3, mask=ok, other=0.0)
    dtype = out_ptr.dtype.element_ty
    by_cos = (x.to(tl.float32) * cos.to(tl.float32)).to(dtype)
    by_sin = (rotated.to(tl.float32) * sin.to(tl.float32)).to(dtype)
    tl.store(out_ptr + i, (by_cos.to(tl.float32) + by_sin.to(tl.float32)).to(dtype), mask=ok)


def _four(t: torch.Tensor, shape: torch.Size) -> tuple[int, ...]:
    """The strides of ``t`` broadcast to ``shape`` (four dimensions)."""
    return t.expand(shape).stride()


def rotate_half_out(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, out: torch.Tensor) -> bool:
    """out = x * cos + cat(-x2, x1) * sin on one GPU, where this kernel takes the tensors (up to four dimensions,
    an even last one, out contiguous and of x's shape, one dtype): True if it wrote out."""
    if (x.dim() > 4 or not out.is_contiguous() or out.shape != x.shape or x.shape[-1] % 2 or cos.dim() > 4
            or sin.dim() > 4 or not x.dtype == cos.dtype == sin.dtype == out.dtype):
        return False
    if x.numel() == 0:
        return True
    x4 = x
    while x4.dim() < 4:
        x4 = x4.unsqueeze(0)
    shape = x4.shape
    _rotate_half[(triton.cdiv(x.numel(), _BLOCK),)](
        x4, cos, sin, out, x.numel(), shape[1], shape[2], shape[3], shape[3] // 2, *x4.stride(),
        *_four(cos, shape), *_four(sin, shape), BLOCK=_BLOCK, num_warps=4, **NO_FUSION)
    return True
