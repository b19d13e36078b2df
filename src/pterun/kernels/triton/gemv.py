"""Matrix-vector products for one-token decoding: y = x @ W^T with W row-major [N, K], in bf16 or fp16.

With one row of activations a matmul is bound by reading W once; cuBLAS's
general GEMM leaves much of the bandwidth unused for that shape. Each program
here reads a band of W's rows, coalesced along K, and reduces it against x in
fp32, writing one rounded result per row (as torch's bf16 matmul does: fp32
accumulation, one rounding).

The tiling is chosen by a fixed rule from the shape, never by autotuning at
the first call: nothing is benchmarked, allocated or synchronized when a CUDA
graph captures the call, and the same shape always gets the same reduction
order. ``gated.py`` reads the gate and up weights of a SwiGLU MLP in one pass
with the same loop.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl
from torch.library import triton_op, wrap_triton


class Tiling(NamedTuple):
    rows: int  # BLOCK_N: weight rows per program
    cols: int  # BLOCK_K: elements of each row read per step
    warps: int
    stages: int


def tiling(n: int, k: int) -> Tiling:
    """The tiling for an [n, k] weight: the fastest inside a CUDA graph on an H200 (bench/gemv.py --search)
    at 11008x4096 (one row a program), 4096x11008 (two) and for the gate/up pair at 11008x4096."""
    rows, cols, warps = (1, 1024, 4) if k <= 8192 else (2, 512, 2)
    return Tiling(rows, min(cols, max(16, triton.next_power_of_2(k))), warps, 1)


@triton.jit
def _row_block_dot(w_rows, x_ptr, row_ok, K, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_N: tl.constexpr):
    """sum_k W[rows, k] * x[k] in fp32 for one band of rows: whole blocks unmasked, then the remainder."""
    cols = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
    k_full = K - K % BLOCK_K
    for k0 in range(0, k_full, BLOCK_K):
        k = k0 + cols
        if EVEN_N:
            w = tl.load(w_rows + k[None, :], eviction_policy="evict_first")
        else:
            w = tl.load(w_rows + k[None, :], mask=row_ok[:, None], other=0.0, eviction_policy="evict_first")
        x = tl.load(x_ptr + k)
        acc += w.to(tl.float32) * x.to(tl.float32)[None, :]
    if k_full < K:
        k = k_full + cols
        k_ok = k < K
        w = tl.load(w_rows + k[None, :], mask=row_ok[:, None] & k_ok[None, :], other=0.0)
        x = tl.load(x_ptr + k, mask=k_ok, other=0.0)
        acc += w.to(tl.float32) * x.to(tl.float32)[None, :]
    return tl.sum(acc, axis=1)


@triton.jit
def _gemv(w_ptr, x_ptr, y_ptr, N, K, stride_wn, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_N: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < N
    y = _row_block_dot(w_ptr + rows[:, None] * stride_wn, x_ptr, row_ok, K, BLOCK_N, BLOCK_K, EVEN_N)
    tl.store(y_ptr + rows, y.to(y_ptr.dtype.element_ty), mask=row_ok)


def gemv(weight: torch.Tensor, x: torch.Tensor, out: torch.Tensor, tile: Tiling | None = None) -> torch.Tensor:
    """out[n] = sum_k weight[n, k] * x[k]; weight rows contiguous, x and out contiguous vectors."""
    n, k = weight.shape
    t = tile or tiling(n, k)
    _gemv[(triton.cdiv(n, t.rows),)](weight, x, out, n, k, weight.stride(0), BLOCK_N=t.rows, BLOCK_K=t.cols,
                                     EVEN_N=n % t.rows == 0, num_warps=t.warps, num_stages=t.stages)
    return out


def one_row(a: torch.Tensor, b: torch.Tensor) -> bool:
    """a [1, K] times b = W^T with W row-major [N, K], in half precision, on one GPU."""
    return (
        a.is_cuda and a.dim() == 2 and a.shape[0] == 1 and a.dtype in (torch.bfloat16, torch.float16)
        and b.dtype == a.dtype and b.dim() == 2 and b.stride(0) == 1 and b.stride(1) == b.shape[0]
        # The kernel reads K elements of the row: shapes that do not agree are torch's error, not a wild read.
        and a.stride(1) == 1 and a.shape[1] == b.shape[0] and a.device == b.device
    )


def applies(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> bool:
    """One activation row against a transposed row-major weight, in half precision, all on the GPU."""
    return (one_row(a, b) and out.dtype == a.dtype and out.is_contiguous() and out.shape == (1, b.shape[1])
            and out.device == a.device)


def mm_out(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    if applies(a, b, out):
        return gemv(b.t(), a[0], out[0])
    return torch.mm(a, b, out=out)


@triton_op("pterun::one_row_mm", mutates_args=())
def one_row_mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``gemv`` as an operator TorchInductor sees into: it allocates the result and launches the kernel from its
    own code. ``b`` is W^T of a row-major W, so b's storage is W's."""
    k, n = b.shape
    out = torch.empty((1, n), device=a.device, dtype=a.dtype)
    t = tiling(n, k)
    wrap_triton(_gemv)[(triton.cdiv(n, t.rows),)](b, a, out, n, k, b.stride(1), BLOCK_N=t.rows, BLOCK_K=t.cols,
                                                  EVEN_N=n % t.rows == 0, num_warps=t.warps, num_stages=t.stages)
    return out


@triton.jit
def _gemv3(w0, w1, w2, x_ptr, y0, y1, y2, N0, N1, N2, K, s0, s1, s2,
           BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_N: tl.constexpr):
    """``_gemv`` of up to three weights in one launch: the programs cover the first weight's rows, then the
    second's, then the third's; each row is reduced exactly as ``_gemv`` reduces it."""
    pid = tl.program_id(0)
    b0 = tl.cdiv(N0, BLOCK_N)
    b1 = tl.cdiv(N1, BLOCK_N)
    if pid < b0:
        w, y, n, stride, first = w0, y0, N0, s0, pid
    elif pid < b0 + b1:
        w, y, n, stride, first = w1, y1, N1, s1, pid - b0
    else:
        w, y, n, stride, first = w2, y2, N2, s2, pid - b0 - b1
    rows = first.to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < n
    out = _row_block_dot(w + rows[:, None] * stride, x_ptr, row_ok, K, BLOCK_N, BLOCK_K, EVEN_N)
    tl.store(y + rows, out.to(y.dtype.element_ty), mask=row_ok)


@triton_op("pterun::one_row_mm3", mutates_args=())
def one_row_mm3(a: torch.Tensor, b0: torch.Tensor, b1: torch.Tensor, b2: torch.Tensor) -> list[torch.Tensor]:
    """``one_row_mm`` of one row against three weights in one launch (a layer's query, key and value products),
    each result the bits ``one_row_mm`` gives: the tiling depends on the rows' length alone."""
    k = a.shape[1]
    t = tiling(max(b0.shape[1], b1.shape[1], b2.shape[1]), k)
    outs = [torch.empty((1, b.shape[1]), device=a.device, dtype=a.dtype) for b in (b0, b1, b2)]
    n0, n1, n2 = b0.shape[1], b1.shape[1], b2.shape[1]
    grid = (triton.cdiv(n0, t.rows) + triton.cdiv(n1, t.rows) + triton.cdiv(n2, t.rows),)
    wrap_triton(_gemv3)[grid](b0, b1, b2, a, outs[0], outs[1], outs[2], n0, n1, n2, k,
                              b0.stride(1), b1.stride(1), b2.stride(1), BLOCK_N=t.rows, BLOCK_K=t.cols,
                              EVEN_N=n0 % t.rows == 0 and n1 % t.rows == 0 and n2 % t.rows == 0,
                              num_warps=t.warps, num_stages=t.stages)
    return outs


def mm_together(a: torch.Tensor, weights: list[torch.Tensor]) -> list[torch.Tensor]:
    """``mm`` of one ``a`` against several weights: three at a time in one launch where each is a one-row
    product, the rest one by one. A pair (a SwiGLU's gate and up, where the fused step did not match) is two
    launches: the kernel's pair with an empty third weight did not give the single launches' bits in the GPU
    suite (left for a later look; the gate and up products are large enough to run near the bandwidth alone)."""
    results: list[torch.Tensor] = []
    rest = list(weights)
    while len(rest) >= 3 and all(one_row(a, b) for b in rest[:3]):
        results += torch.ops.pterun.one_row_mm3(a, *rest[:3])
        rest = rest[3:]
    return results + [mm(a, b) for b in rest]


def mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """mm's functional form for ``torch.compile``: a one-row product in half precision through the same kernel
    as ``mm_out`` (so compiled and plain calls give the same bits), the rest cuBLAS's, which Inductor picks for
    shapes of more rows."""
    if one_row(a, b):
        return torch.ops.pterun.one_row_mm(a, b)
    return torch.mm(a, b)
