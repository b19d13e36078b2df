"""A SwiGLU MLP's gate and up products and its SiLU-product in one pass: h = silu(x @ Wg^T) * (x @ Wu^T).

For one token the two products are bound by reading Wg and Wu; run apart they
are two matrix-vector kernels and five elementwise kernels over the results
(the exporter writes SiLU in half precision as a cast to float32, sigmoid,
product, cast back). Here each program reads the same band of rows of both
weights, reduces each against x in fp32 (as gemv.py does), and rounds as the
exported chain does: each product to the weights' dtype, SiLU in float32
(sigmoid with IEEE exp and division, as torch's CUDA sigmoid), that rounded,
then its product with the up result rounded once. Given the two products'
values, the result is bit for bit the chain's.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch.library import triton_op, wrap_triton
from triton.language.extra import libdevice

from pterun.kernels.triton.gemv import Tiling, _row_block_dot, one_row, tiling


@triton.jit
def _gate_up(wg_ptr, wu_ptr, x_ptr, h_ptr, N, K, stride_g, stride_u,
             BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_N: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < N
    g = _row_block_dot(wg_ptr + rows[:, None] * stride_g, x_ptr, row_ok, K, BLOCK_N, BLOCK_K, EVEN_N)
    u = _row_block_dot(wu_ptr + rows[:, None] * stride_u, x_ptr, row_ok, K, BLOCK_N, BLOCK_K, EVEN_N)
    dtype = h_ptr.dtype.element_ty
    g = g.to(dtype).to(tl.float32)
    sigmoid = tl.math.div_rn(1.0, 1.0 + libdevice.exp(-g))
    silu = (g * sigmoid).to(dtype).to(tl.float32)
    h = silu * u.to(dtype).to(tl.float32)
    tl.store(h_ptr + rows, h.to(dtype), mask=row_ok)


def gate_up(w_gate: torch.Tensor, w_up: torch.Tensor, x: torch.Tensor, out: torch.Tensor,
            tile: Tiling | None = None) -> torch.Tensor:
    """out[n] = silu(w_gate[n] . x) * (w_up[n] . x), rounded as the exported chain rounds."""
    n, k = w_gate.shape
    t = tile or tiling(n, k)
    _gate_up[(triton.cdiv(n, t.rows),)](w_gate, w_up, x, out, n, k, w_gate.stride(0), w_up.stride(0),
                                        BLOCK_N=t.rows, BLOCK_K=t.cols, EVEN_N=n % t.rows == 0,
                                        num_warps=t.warps, num_stages=t.stages)
    return out


def applies(x: torch.Tensor, gate_t: torch.Tensor, up_t: torch.Tensor, out: torch.Tensor) -> bool:
    """x [1, K] against two transposed row-major [N, K] weights, into a contiguous [1, N] of their dtype."""
    return (one_row(x, gate_t) and one_row(x, up_t) and gate_t.shape == up_t.shape and out.dtype == x.dtype
            and out.is_contiguous() and out.shape == (1, gate_t.shape[1]) and out.device == x.device)


def swiglu_out(x: torch.Tensor, gate_t: torch.Tensor, up_t: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """The fused step's kernel: ``gate_t``/``up_t`` are the transposed weights the exported ``mm`` reads; ``x`` and
    ``out`` contiguous, of any rank, their leading dimensions the rows."""
    n = gate_t.shape[1]
    if out.shape[:-1] != x.shape[:-1] or out.shape[-1:] != (n,):
        out.resize_(*x.shape[:-1], n)  # a dynamic out arrives emptied: sized here, within its bound
    rows, flat = x.view(-1, x.shape[-1]), out.view(-1, n)
    if applies(rows, gate_t, up_t, flat):
        gate_up(gate_t.t(), up_t.t(), rows[0], flat[0])
    else:
        torch.mul(*_chain(rows, gate_t, up_t), out=flat)
    return out


def _chain(x: torch.Tensor, gate_t: torch.Tensor, up_t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The exported steps but the last product, for shapes the kernel does not take: silu(gate) rounded, and up."""
    gate = torch.mm(x, gate_t).float()
    return (gate * torch.sigmoid(gate)).to(x.dtype), torch.mm(x, up_t)


@triton_op("pterun::one_row_swiglu", mutates_args=())
def one_row_swiglu(x: torch.Tensor, gate_t: torch.Tensor, up_t: torch.Tensor) -> torch.Tensor:
    """``gate_up`` as an operator TorchInductor sees into (it allocates the result and launches the kernel)."""
    k, n = gate_t.shape
    out = torch.empty((1, n), device=x.device, dtype=x.dtype)
    t = tiling(n, k)
    wrap_triton(_gate_up)[(triton.cdiv(n, t.rows),)](gate_t, up_t, x, out, n, k, gate_t.stride(1), up_t.stride(1),
                                                     BLOCK_N=t.rows, BLOCK_K=t.cols, EVEN_N=n % t.rows == 0,
                                                     num_warps=t.warps, num_stages=t.stages)
    return out


def swiglu(x: torch.Tensor, gate_t: torch.Tensor, up_t: torch.Tensor) -> torch.Tensor:
    """The fused step's functional form for ``torch.compile``: one token through the kernel (the bits of the
    plain call), other shapes as the exported steps, which Inductor fuses."""
    rows = x.reshape(-1, x.shape[-1])
    if one_row(rows, gate_t) and one_row(rows, up_t) and gate_t.shape == up_t.shape:
        h = torch.ops.pterun.one_row_swiglu(rows, gate_t, up_t)
    else:
        silu, up = _chain(rows, gate_t, up_t)
        h = silu * up
    return h.view(*x.shape[:-1], gate_t.shape[1])
