"""XNNPACK's dynamic per-row quantization (qd8) on a CUDA device, in one Triton kernel.

Step for step as XNNPACK's x86 kernels quantize a row, as pterun's native CPU kernels do: the range is
taken in the row's order, ``lo = v if v < lo else lo`` from the first value on, so a NaN decides the range
only as the first value; the range widened to include 0 (x86's ``minss``/``maxss`` against 0), the scale
255 / range (1 for an empty range), the zero point from whichever end of the range has the smaller error,
then each value times the scale, limited to [-32768, 32767] (a NaN gives 32767), rounded, plus the zero
point, clamped. PyTorch's twenty ops of ``convert._dynamic_quantize`` are this arithmetic but for a NaN's
place; this is one kernel, and it writes the int8 rows the 4-bit products read (``qblock_triton.py``).
Compiled with ``enable_fp_fusion=False`` (no product and sum contracted into one rounding); divisions are
IEEE's (``div_rn``: Triton's ``/`` is an approximate division).

Rounding half to even is ``(v + 1.5 * 2**23) - 1.5 * 2**23``, exact for ``|v| < 2**22``: both values rounded
are within [-32768, 32767] by then.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from pterun.core.triton_options import NO_FUSION

_ROUNDER = 12582912.0  # 1.5 * 2**23
_BLOCK = 1024


@triton.jit
def _round_even(v, ROUNDER: tl.constexpr):
    return (v + ROUNDER) - ROUNDER


@triton.jit
def _divide(a, b):
    return tl.math.div_rn(tl.full((), a, tl.float32), b)


@triton.jit
def _quantize_rows(x_ptr, q_ptr, zp_ptr, inv_ptr, L, BLOCK: tl.constexpr, ROUNDER: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * L
    offs = tl.arange(0, BLOCK)
    inf = float("inf")
    lo = tl.full((BLOCK,), inf, tl.float32)
    hi = tl.full((BLOCK,), -inf, tl.float32)
    for start in range(0, L, BLOCK):
        ok = start + offs < L
        v = tl.load(x_row + start + offs, mask=ok, other=0.0)
        lo = tl.minimum(lo, tl.where(ok & (v == v), v, inf))  # a NaN after the first value never compares less
        hi = tl.maximum(hi, tl.where(ok & (v == v), v, -inf))
    first = tl.load(x_row)
    lo = tl.where(first != first, first, tl.min(lo, axis=0))  # a NaN first value stays the range's end
    hi = tl.where(first != first, first, tl.max(hi, axis=0))
    rmin = tl.where(lo < 0.0, lo, 0.0)
    rmax = tl.where(hi < 0.0, 0.0, hi)
    s = tl.where(rmin == rmax, 1.0, _divide(255.0, rmax - rmin))
    low = rmin * s
    high = rmax * s
    zp = tl.where((-128.0 + low) + (127.0 + high) > 0.0, -128.0 - low, 127.0 - high)
    zp = tl.where(-128.0 < zp, zp, -128.0)
    zp = _round_even(tl.where(zp < 127.0, zp, 127.0), ROUNDER)
    for start in range(0, L, BLOCK):
        ok = start + offs < L
        v = tl.load(x_row + start + offs, mask=ok, other=0.0) * s
        v = tl.where(v < 32767.0, v, 32767.0)
        v = tl.where(v >= -32768.0, _round_even(v, ROUNDER), -32768.0) + zp
        q = tl.minimum(tl.maximum(v, -128.0), 127.0)
        tl.store(q_ptr + row * L + start + offs, q.to(tl.int8), mask=ok)
    tl.store(zp_ptr + row, zp)
    tl.store(inv_ptr + row, _divide(1.0, s))


def quantize_rows(x: torch.Tensor, q: torch.Tensor, zero_points: torch.Tensor, inverse_scales: torch.Tensor) -> None:
    """int8 ``q`` [rows, L], float32 ``zero_points`` and ``inverse_scales`` (the dequantization scales) [rows, 1]
    from float32 ``x`` [rows, L]; all contiguous, on one GPU."""
    rows, length = x.shape
    block = min(_BLOCK, triton.next_power_of_2(length))
    _quantize_rows[(rows,)](x, q, zero_points, inverse_scales, length, BLOCK=block, ROUNDER=_ROUNDER, num_warps=4,
                            **NO_FUSION)
