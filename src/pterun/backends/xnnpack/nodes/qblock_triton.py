"""XNNPACK's qd8 x qb4w product on a CUDA device, in one Triton kernel and in the order of the CPU's kernels.

``qblock.py`` says what the order is; this kernel repeats it on the GPU, so a CUDA run of an 8da4w program
gives the bits ExecuTorch gives on the machine's CPU. Each program takes one row and ``BLOCK_N`` outputs
and walks the blocks in order, ``CHUNK`` at a time: their sums are computed together (exact in int32) and
multiplied by their scales (one rounding each, in any order), then added onto the running sum (one sum, or
the ``avx2`` kernels' four lanes) one block after the other, each sum rounded, in the blocks' order
(``_in_order`` takes the tile's columns apart in registers). The weights stay as the file packs them, two
4-bit values to a byte plus 8, read once per row.

A decode step has one row, so its outputs are all the parallelism there is (the order forbids splitting a
column's blocks between programs): each program then takes a few outputs and up to 64 of their blocks at
once, kilobytes of weights in flight, where eight outputs of eight blocks each left a 1B decoder's products
at a sixteenth of the GPU's bandwidth. tests/backends/xnnpack/test_xnnpack_gpu.py holds it to the CPU's bits
in both orders, at one row and many.

In the ``avx512vnni`` order (one running sum per output) the block sums come from the GPU's own 8-bit dot
products (``dp4a``) in ``_qb4w_words``: a 32-bit word of weights holds eight nibbles, inputs 8j to 8j + 7,
the low nibbles the even inputs and the high ones the odd; the row's bytes are picked into the same order
(``prmt``), so that two ``dp4a`` make a word's eight products, where the byte-at-a-time kernel spent about
twenty instructions a byte and left the 1B decoder's products bound by instructions, not by memory. The
nibbles hold a weight plus 8: a block's sum is the nibbles' dot product less 8 times the inputs' sum, exact
in int32 as before, so the bits are the byte-at-a-time kernel's. The ``avx2`` order keeps four running sums,
one per pair of bytes of each word, which a word's dot product would mix: it stays byte at a time.

The kernels are compiled with ``enable_fp_fusion=False``: Triton would otherwise contract a product and a
sum into one fused multiply-add, which rounds once where XNNPACK rounds twice (the row's scale times the
sum, then the bias). The one fused multiply-add XNNPACK's ``avx2`` kernels do make is ``tl.fma``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from pterun.core.triton_options import INTERPRETED, NO_FUSION

_LANES = {"avx512vnni": 1, "avx2": 4}  # the running sums each output keeps, by family
_TILE = 8192  # weight bytes a program holds at once (outputs x blocks x bytes of a block)
_MAX_CHUNK = 64  # blocks a program reads at once
_PROGRAMS = 256  # programs wanted at one row: about two per multiprocessor of a large GPU
# The word kernel at one row (a decode step), as measured on an H200 over every tiling of a 1B decoder's and a 100M
# one's layers: 16 KB of weights a program, at most 32 outputs, 4 warps (docs/benchmarks.md).
_ROW_TILE = 16384
_ROW_OUTPUTS = 32


@triton.jit
def _in_order(s, p, BLOCK_N: tl.constexpr, CHUNK: tl.constexpr):
    """``s`` plus the columns of ``p`` [BLOCK_N, CHUNK], one after the other, each sum rounded: halves
    taken apart in registers (tl.split), the first half's columns added before the second's."""
    if CHUNK == 1:
        return s + tl.reshape(p, (BLOCK_N,))
    else:
        first, second = tl.split(tl.permute(tl.reshape(p, (BLOCK_N, 2, CHUNK // 2)), (0, 2, 1)))
        return _in_order(_in_order(s, first, BLOCK_N, CHUNK // 2), second, BLOCK_N, CHUNK // 2)


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
        there = block < blocks
        ok = there[:, None] & t_ok[None, :]
        x_at = x_row + block[:, None] * SIZE + 2 * t[None, :]
        xe = tl.load(x_at, mask=ok, other=0).to(tl.int32)
        xo = tl.load(x_at + 1, mask=ok, other=0).to(tl.int32)
        wb = tl.load(w_rows + (block[:, None] * (SIZE // 2) + t[None, :])[None, :, :],
                     mask=col_ok[:, None, None] & ok[None, :, :], other=0x88).to(tl.int32)
        products = ((wb & 15) - 8) * xe[None, :, :] + ((wb >> 4) - 8) * xo[None, :, :]  # [outputs, blocks, bytes]
        # Each block's sum times its scale: one rounding, whatever the order (the sums are exact in int32). A
        # block past the last adds -0.0, which leaves every running sum as it was, bit for bit (made from its
        # bits: Triton takes the literal -0.0 for 0.0, equal as floats).
        scale = tl.load(scale_ptr + block[None, :] * N + cols[:, None], mask=col_ok[:, None] & there[None, :],
                        other=0.0)
        past = tl.full((BLOCK_N, CHUNK), -(2**31), tl.int32).to(tl.float32, bitcast=True)
        if LANES == 1:
            s0 = _in_order(s0, tl.where(there[None, :], tl.sum(products, axis=2).to(tl.float32) * scale, past),
                           BLOCK_N, CHUNK)
        else:
            p0 = tl.sum(tl.where(lane[None, None, :] == 0, products, 0), axis=2).to(tl.float32) * scale
            p1 = tl.sum(tl.where(lane[None, None, :] == 1, products, 0), axis=2).to(tl.float32) * scale
            p2 = tl.sum(tl.where(lane[None, None, :] == 2, products, 0), axis=2).to(tl.float32) * scale
            p3 = tl.sum(tl.where(lane[None, None, :] == 3, products, 0), axis=2).to(tl.float32) * scale
            s0 = _in_order(s0, tl.where(there[None, :], p0, past), BLOCK_N, CHUNK)
            s1 = _in_order(s1, tl.where(there[None, :], p1, past), BLOCK_N, CHUNK)
            s2 = _in_order(s2, tl.where(there[None, :], p2, past), BLOCK_N, CHUNK)
            s3 = _in_order(s3, tl.where(there[None, :], p3, past), BLOCK_N, CHUNK)
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


@triton.jit
def _dp4a(a, b, c):
    """``c`` plus the products of ``a``'s four unsigned bytes and ``b``'s four signed bytes."""
    return tl.inline_asm_elementwise("dp4a.u32.s32 $0, $1, $2, $3;", "=r,r,r,r", [a, b, c], dtype=tl.int32,
                                     is_pure=True, pack=1)


@triton.jit
def _pick(a, b, SELECTOR: tl.constexpr):
    """The bytes of the 64-bit ``b:a`` the selector names (byte 0 of ``a`` is 0, byte 0 of ``b`` is 4)."""
    return tl.inline_asm_elementwise(f"prmt.b32 $0, $1, $2, {SELECTOR};", "=r,r,r", [a, b], dtype=tl.int32,
                                     is_pure=True, pack=1)


@triton.jit
def _qb4w_words(x_ptr, w_ptr, scale_ptr, start_ptr, zp_ptr, rs_ptr, bias_ptr, y_ptr, N, K, blocks, stride_w,
                SIZE: tl.constexpr, CHUNK: tl.constexpr, BLOCK_N: tl.constexpr, HAS_BIAS: tl.constexpr):
    """``_qb4w`` in the ``avx512vnni`` order, a word at a time: ``x_ptr`` the int8 rows and ``w_ptr`` the
    nibbles as 32-bit words, ``stride_w`` in words."""
    WORDS: tl.constexpr = SIZE // 8  # of weights, a block's
    row = tl.program_id(1)
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < N
    i = tl.arange(0, CHUNK * WORDS)  # the words of CHUNK blocks, in order
    chunk = tl.arange(0, CHUNK)
    x_row = x_ptr + row.to(tl.int64) * (K // 4)
    w_rows = w_ptr + cols[:, None].to(tl.int64) * stride_w
    eights = tl.full((CHUNK * WORDS,), 0x08080808, tl.int32)
    s = tl.load(zp_ptr + row) * tl.load(start_ptr + cols, mask=col_ok, other=0.0)
    for c0 in range(0, blocks, CHUNK):
        word = c0 * WORDS + i
        ok = word < blocks * WORDS
        x0 = tl.load(x_row + 2 * word, mask=ok, other=0)  # inputs 8j to 8j + 3
        x1 = tl.load(x_row + 2 * word + 1, mask=ok, other=0)  # 8j + 4 to 8j + 7
        even = _pick(x0, x1, 0x6420)  # the inputs the low nibbles weigh
        odd = _pick(x0, x1, 0x7531)
        less = _dp4a(eights, even, _dp4a(eights, odd, tl.zeros((CHUNK * WORDS,), tl.int32)))  # 8 times their sum
        w = tl.load(w_rows + word[None, :], mask=col_ok[:, None] & ok[None, :], other=0)
        low = w & 0x0F0F0F0F
        high = (w >> 4) & 0x0F0F0F0F
        products = _dp4a(low, even[None, :], _dp4a(high, odd[None, :], -less[None, :]))
        sums = tl.sum(tl.reshape(products, (BLOCK_N, CHUNK, WORDS)), axis=2)
        block = c0 + chunk
        there = block < blocks
        scale = tl.load(scale_ptr + block[None, :] * N + cols[:, None], mask=col_ok[:, None] & there[None, :],
                        other=0.0)
        past = tl.full((BLOCK_N, CHUNK), -(2**31), tl.int32).to(tl.float32, bitcast=True)  # -0.0, as in _qb4w
        s = _in_order(s, tl.where(there[None, :], sums.to(tl.float32) * scale, past), BLOCK_N, CHUNK)
    y = s * tl.load(rs_ptr + row)
    if HAS_BIAS:
        y = y + tl.load(bias_ptr + cols, mask=col_ok, other=0.0)
    tl.store(y_ptr + row.to(tl.int64) * N + cols, y, mask=col_ok)


def tiles(rows: int, n: int, blocks: int, half: int, *, most: int = 128, tile: int = _TILE) -> tuple[int, int]:
    """(outputs, blocks) a program takes at once, at most ``most`` outputs and ``tile`` bytes of weights. Enough
    programs to fill a large GPU: at one row, where the outputs alone give the parallelism, a few outputs each
    and many of their blocks at once, so that every program has kilobytes of weights in flight (eight outputs
    and eight blocks each read the 1B decoder's weights at a sixteenth of the bandwidth); wide tiles for many
    rows."""
    outputs = max(2, min(most, triton.next_power_of_2(max(1, rows * n // _PROGRAMS))))
    outputs = min(outputs, max(2, triton.next_power_of_2(n)))
    chunk = min(_MAX_CHUNK, triton.next_power_of_2(blocks), max(1, tile // (outputs * half)))
    return outputs, chunk


def qb4w(family: str, x8: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor, start: torch.Tensor,
         zero_points: torch.Tensor, row_scales: torch.Tensor, bias: torch.Tensor | None, out: torch.Tensor,
         size: int) -> torch.Tensor:
    """out [rows, N] = the product of int8 rows ``x8`` [rows, K] and ``packed`` [N, K/2] 4-bit weights with
    float32 ``scales`` [K/size, N], the start sums [N], the rows' zero points and scales [rows] (or [rows, 1])
    and ``bias`` [N], in ``family``'s order; every tensor contiguous and on one GPU."""
    rows, k = x8.shape
    n = out.shape[1]
    half = triton.next_power_of_2(size // 2)
    words = family == "avx512vnni" and _words(x8, packed, size)
    if words and rows == 1:
        # A 2048 -> 32768 head: 128 outputs of 4 blocks each took 22.0 us, 32 of 32 blocks 11.3 (H200).
        tile, chunk = tiles(rows, n, k // size, half, most=_ROW_OUTPUTS, tile=_ROW_TILE)
        warps = 4
    else:
        tile, chunk = tiles(rows, n, k // size, half)
        warps = 8 if tile * chunk * half > _TILE // 2 else 4
    if words:
        _qb4w_words[(triton.cdiv(n, tile), rows)](
            x8.view(torch.int32), packed.view(torch.int32), scales, start, zero_points, row_scales,
            bias if bias is not None else start, out, n, k, k // size, packed.stride(0) // 4, SIZE=size,
            CHUNK=chunk, BLOCK_N=tile, HAS_BIAS=bias is not None, num_warps=warps, **NO_FUSION)
        return out
    _qb4w[(triton.cdiv(n, tile), rows)](
        x8, packed, scales, start, zero_points, row_scales, bias if bias is not None else start, out, n, k,
        k // size, packed.stride(0), SIZE=size, HALF=half, CHUNK=chunk, BLOCK_N=tile, LANES=_LANES[family],
        HAS_BIAS=bias is not None, num_warps=warps, **NO_FUSION)
    return out


def _words(x8: torch.Tensor, packed: torch.Tensor, size: int) -> bool:
    """Whether ``_qb4w_words`` reads these: blocks of whole words, in a power of two of them (a tile's shape), and
    rows and weights that start on a word (Triton's interpreter runs no PTX: there the byte-at-a-time kernel)."""
    words = size // 8
    return (not INTERPRETED and size % 8 == 0 and words & (words - 1) == 0 and x8.stride(0) % 4 == 0
            and x8.data_ptr() % 4 == 0 and packed.stride(0) % 4 == 0 and packed.data_ptr() % 4 == 0)
