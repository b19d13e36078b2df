"""Matrix-vector products for one-token decoding: y = x @ W^T with W row-major [N, K], in bf16 or fp16.

With one row of activations a matmul is bound by reading W once; cuBLAS's
general GEMM leaves much of the bandwidth unused for that shape. Each program
here reads a band of W's rows, coalesced along K, and reduces it against x in
fp32, writing one rounded result per row (as torch's bf16 matmul does: fp32
accumulation, one rounding).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.autotune(
    configs=[
        triton.Config({"BLOCK_N": bn, "BLOCK_K": bk}, num_warps=w, num_stages=s)
        for bn, bk, w, s in [
            (4, 512, 4, 3), (8, 512, 4, 3), (8, 1024, 8, 3), (16, 512, 8, 3), (4, 1024, 4, 4), (16, 256, 4, 4),
            (2, 1024, 4, 4), (8, 256, 4, 4),
        ]
    ],
    key=["N", "K"],
)
@triton.jit
def _gemv(w_ptr, x_ptr, y_ptr, N, K, stride_wn, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.arange(0, BLOCK_K)
    row_ok = rows < N
    acc = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + cols
        k_ok = k < K
        w = tl.load(w_ptr + rows[:, None] * stride_wn + k[None, :], mask=row_ok[:, None] & k_ok[None, :], other=0.0)
        x = tl.load(x_ptr + k, mask=k_ok, other=0.0)
        acc += w.to(tl.float32) * x.to(tl.float32)[None, :]
    y = tl.sum(acc, axis=1)
    tl.store(y_ptr + rows, y.to(y_ptr.dtype.element_ty), mask=row_ok)


def gemv(weight: torch.Tensor, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """out[n] = sum_k weight[n, k] * x[k]; weight rows contiguous, x and out contiguous vectors."""
    n, k = weight.shape
    grid = lambda meta: (triton.cdiv(n, meta["BLOCK_N"]),)  # noqa: E731
    _gemv[grid](weight, x, out, n, k, weight.stride(0))
    return out


def applies(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> bool:
    """One activation row against a transposed row-major weight, in half precision, all on the GPU."""
    return (
        a.is_cuda and a.dim() == 2 and a.shape[0] == 1 and a.dtype in (torch.bfloat16, torch.float16)
        and b.dtype == a.dtype and out.dtype == a.dtype and b.dim() == 2 and b.stride(0) == 1
        and b.stride(1) == b.shape[0] and a.stride(1) == 1 and out.is_contiguous() and out.shape == (1, b.shape[1])
        # The kernel reads K elements of the row: shapes that do not agree are torch's error, not a wild read.
        and a.shape[1] == b.shape[0] and a.device == b.device == out.device
    )


def mm_out(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    if applies(a, b, out):
        return gemv(b.t(), a[0], out[0])
    return torch.mm(a, b, out=out)
