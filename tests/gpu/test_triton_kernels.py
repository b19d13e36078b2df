"""Triton kernels against PyTorch, on random inputs, odd sizes included; outputs poisoned first."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("n, k", [(1, 7), (37, 200), (4096, 4096), (11008, 4096), (4096, 11008), (1000, 1001)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_gemv_matches_a_float64_reference(n, k, dtype):
    from pterun.kernels.triton.gemv import applies, mm_out

    generator = torch.Generator(device="cuda").manual_seed(n * 7 + k)
    weight = torch.randn(n, k, device="cuda", generator=generator).to(dtype)
    x = torch.randn(1, k, device="cuda", generator=generator).to(dtype)
    out = torch.full((1, n), float("nan"), device="cuda", dtype=dtype)
    assert applies(x, weight.t(), out), "premise: the one-row path is taken"
    mm_out(x, weight.t(), out)
    reference = (x.double() @ weight.double().t())
    error = ((out.double() - reference).norm() / reference.norm()).item()
    assert not torch.isnan(out).any() and error < 1e-2, error
    torch_error = ((torch.mm(x, weight.t()).double() - reference).norm() / reference.norm()).item()
    assert error <= 2 * torch_error + 1e-3


def test_other_shapes_take_torch_s_matmul():
    from pterun.kernels.triton.gemv import applies, mm_out

    a, b = torch.randn(3, 64, device="cuda"), torch.randn(64, 5, device="cuda")
    out = torch.empty(3, 5, device="cuda")
    assert not applies(a, b, out)
    torch.testing.assert_close(mm_out(a, b, out), a @ b)


def _captured(fn):
    """Runs ``fn`` once eagerly (compiling its kernels), then captures it in a CUDA graph and replays that."""
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph


@pytest.mark.parametrize("n, k", [(1, 7), (37, 200), (704, 256), (11008, 4096), (4096, 11008), (1000, 1001)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_gate_up_is_the_exported_chain_inside_a_captured_graph(n, k, dtype):
    from pterun.kernels.triton.gated import applies, swiglu_out
    from pterun.kernels.triton.gemv import mm_out

    generator = torch.Generator(device="cuda").manual_seed(n * 3 + k)
    # Scaled so that products stay O(1): float16 holds silu(g) * u of unscaled weights only up to k ~ 4000.
    w_gate, w_up = ((torch.randn(n, k, device="cuda", generator=generator) / k ** 0.5).to(dtype) for _ in range(2))
    x = torch.randn(1, k, device="cuda", generator=generator).to(dtype)
    out = torch.empty(1, n, device="cuda", dtype=dtype)
    assert applies(x, w_gate.t(), w_up.t(), out), "premise: the fused path is taken"
    graph = _captured(lambda: swiglu_out(x, w_gate.t(), w_up.t(), out))
    for _ in range(2):  # fresh inputs in place: the graph reads them where they are
        x.copy_(torch.randn(1, k, device="cuda", generator=generator))
        out.fill_(float("nan"))
        graph.replay()
        # The exported chain on the same kernel's products: bit for bit the same.
        gate, up = torch.empty_like(out), torch.empty_like(out)
        mm_out(x, w_gate.t(), gate)
        mm_out(x, w_up.t(), up)
        g32 = gate.float()
        chain = (g32 * torch.sigmoid(g32)).to(dtype) * up
        assert torch.equal(out, chain)
        reference = torch.nn.functional.silu(x.double() @ w_gate.double().t()) * (x.double() @ w_up.double().t())
        error = ((out.double() - reference).norm() / reference.norm()).item()
        assert error < 1e-2, error


@pytest.mark.parametrize("n, k", [(11008, 4096), (4096, 11008)])
def test_gemv_inside_a_captured_graph(n, k):
    from pterun.kernels.triton.gemv import mm_out

    generator = torch.Generator(device="cuda").manual_seed(n + k)
    weight = torch.randn(n, k, device="cuda", generator=generator).to(torch.bfloat16)
    x = torch.randn(1, k, device="cuda", generator=generator).to(torch.bfloat16)
    out = torch.empty(1, n, device="cuda", dtype=torch.bfloat16)
    graph = _captured(lambda: mm_out(x, weight.t(), out))
    eager = torch.empty_like(out)
    for _ in range(2):
        x.copy_(torch.randn(1, k, device="cuda", generator=generator))
        out.fill_(float("nan"))
        graph.replay()
        mm_out(x, weight.t(), eager)
        assert torch.equal(out, eager)
        reference = x.double() @ weight.double().t()
        assert ((out.double() - reference).norm() / reference.norm()).item() < 1e-2
