"""XNNPACK's qd8 x qb4w product on a CUDA device, in one Triton kernel and in the order of the CPU's kernels.

``qblock.py`` says what the order is; this kernel repeats it on the GPU, so a CUDA run of an 8da4w program
gives the bits ExecuTorch gives on the machine's CPU. Each program takes one row and ``BLOCK_N`` outputs
and walks the blocks in order, ``CHUNK`` at a time: their sums are computed together (exact in int32),
then each block's, taken out of the tile exactly (a sum of one integer and zeros), is multiplied by its
scale (exact in float32) and added onto the running sum (one sum, or the ``avx2`` kernels' four lanes),
one rounding per block, in the blocks' order. The weights stay as the file packs them, two 4-bit values to
a byte plus 8, read once per row.

The kernel is compiled with ``enable_fp_fusion=False``: Triton would otherwise contract a product and a
sum into one fused multiply-add, which rounds once where XNNPACK rounds twice (the row's scale times the
sum, then the bias). The one fused multiply-add XNNPACK's ``avx2`` kernels do make is ``tl.fma``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from pterun.core.triton_options import NO_FUSION

_LANES = {"avx512vnni": 1, "avx2": 4}  # the running sums each output keeps, by family
_TILE = 4096  # weight bytes a program holds at once (outputs x blocks x bytes of a block)


@triton.jit
def _qb4w(x_ptr, w_ptr, scale_ptr, start_ptr, zp_ptr, rs_ptr, bias_ptr, y_ptr, N, K, blocks, stride_w,
          SIZE: tl.constexpr, HALF: tl.constexpr, CHUNK: tl.constexpr, BLOCK_N: tl.constexpr, LANES: tl.constexpr,
          HAS_BIAS: tl.constexpr):
    row = tl.program_id(1)
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < N
    t = tl.arange(0, HALF)  # the bytes of a block: inputs 2t (low nibble) and 2t + 1 (high)
    t_ok = t < SIZE // 2
    lane = t % 4  # the avx2 kernels' lane of inputs 2t and 2t + 1: (k % 8) // 2
    chunk = tl.arange(0, CHUNK)  # the blocks read at once: their sums in parallel, added in order after
    x_row = x_ptr + row.to(tl.int64) * K
    w_rows = w_ptr + cols[:, None, None].to(tl.int64) * stride_w
    zp = tl.load(zp_ptr + row)
    first = zp * tl.load(start_ptr + cols, mask=col_ok, other=0.0)
    zero = tl.zeros((BLOCK_N,), dtype=tl.float32)
    s0, s1, s2, s3 = first, zero, zero, zero
    for c0 in range(0, blocks, CHUNK):
        block = c0 + chunk
        ok = (block < blocks)[:, None] & t_ok[None, :]
        x_at = x_row + block[:, None] * SIZE + 2 * t[None, :]
        xe = tl.load(x_at, mask=ok, other=0).to(tl.int32)
        xo = tl.load(x_at + 1, mask=ok, other=0).to(tl.int32)
        wb = tl.load(w_rows + (block[:, None] * (SIZE // 2) + t[None, :])[None, :, :],
                     mask=col_ok[:, None, None] & ok[None, :, :], other=0x88).to(tl.int32)
        products = ((wb & 15) - 8) * xe[None, :, :] + ((wb >> 4) - 8) * xo[None, :, :]  # [outputs, blocks, bytes]
        if LANES == 1:
            sums = tl.sum(products, axis=2)
            for j in tl.static_range(CHUNK):
                there = c0 + j < blocks
                scale = tl.load(scale_ptr + (c0 + j) * N + cols, mask=col_ok & there, other=0.0)
                s = tl.sum(tl.where(chunk[None, :] == j, sums, 0), axis=1)  # block j's sums, exact
                s0 = tl.where(there, s0 + s.to(tl.float32) * scale, s0)
        else:
            sums0 = tl.sum(tl.where(lane[None, None, :] == 0, products, 0), axis=2)
            sums1 = tl.sum(tl.where(lane[None, None, :] == 1, products, 0), axis=2)
            sums2 = tl.sum(tl.where(lane[None, None, :] == 2, products, 0), axis=2)
            sums3 = tl.sum(tl.where(lane[None, None, :] == 3, products, 0), axis=2)
            for j in tl.static_range(CHUNK):
                there = c0 + j < blocks
                scale = tl.load(scale_ptr + (c0 + j) * N + cols, mask=col_ok & there, other=0.0)
                pick = chunk[None, :] == j
                s0 = tl.where(there, s0 + tl.sum(tl.where(pick, sums0, 0), axis=1).to(tl.float32) * scale, s0)
                s1 = tl.where(there, s1 + tl.sum(tl.where(pick, sums1, 0), axis=1).to(tl.float32) * scale, s1)
                s2 = tl.where(there, s2 + tl.sum(tl.where(pick, sums2, 0), axis=1).to(tl.float32) * scale, s2)
                s3 = tl.where(there, s3 + tl.sum(tl.where(pick, sums3, 0), axis=1).to(tl.float32) * scale, s3)
    rs = tl.load(rs_ptr + row)
    if LANES == 1:
        y = s0 * rs
        if HAS_BIAS:
            y = y + tl.load(bias_ptr + cols, mask=col_ok, other=0.0)
    else:
        total = (s0 + s1) + (s2 + s3)
        if HAS_BIAS:
            y = tl.fma(total, rs, tl.load(bias_ptr + cols, mask=col_ok, other=0.0))
        else:
            y = total * rs
    tl.store(y_ptr + row.to(tl.int64) * N + cols, y, mask=col_ok)


def block_n(rows: int, n: int) -> int:
    """Outputs per program: enough programs to fill a large GPU at one row, wide tiles for many rows."""
    want = max(8, min(128, triton.next_power_of_2(max(1, rows * n // 512))))
    return min(want, max(8, triton.next_power_of_2(n)))


def qb4w(family: str, x8: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor, start: torch.Tensor,
         zero_points: torch.Tensor, row_scales: torch.Tensor, bias: torch.Tensor | None, out: torch.Tensor,
         size: int) -> torch.Tensor:
    """out [rows, N] = the product of int8 rows ``x8`` [rows, K] and ``packed`` [N, K/2] 4-bit weights with
    float32 ``scales`` [K/size, N], the start sums [N], the rows' zero points and scales [rows] (or [rows, 1])
    and ``bias`` [N], in ``family``'s order; every tensor contiguous and on one GPU."""
    rows, k = x8.shape
    n = out.shape[1]
    tile = block_n(rows, n)
    half = triton.next_power_of_2(size // 2)
    chunk = 1  # blocks a program reads at once, a power of two
    while chunk < 8 and 2 * chunk * tile * half <= _TILE:
        chunk *= 2
    _qb4w[(triton.cdiv(n, tile), rows)](
        x8, packed, scales, start, zero_points, row_scales, bias if bias is not None else start, out, n, k,
        k // size, packed.stride(0), SIZE=size, HALF=half, CHUNK=chunk, BLOCK_N=tile, LANES=_LANES[family],
        HAS_BIAS=bias is not None, num_warps=4, **NO_FUSION)
    return out
