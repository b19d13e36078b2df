"""The one-row Triton matrix-vector kernel against PyTorch, on random inputs, odd sizes included; outputs poisoned
first. SwiGLU's gated kernel is tested with SwiGLU (tests/gpu/test_swiglu_on_cuda.py)."""

from __future__ import annotations

import pytest
import torch

from tests.gpu.conftest import captured

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


@pytest.mark.parametrize("n, k", [(11008, 4096), (4096, 11008)])
def test_gemv_inside_a_captured_graph(n, k):
    from pterun.kernels.triton.gemv import mm_out

    generator = torch.Generator(device="cuda").manual_seed(n + k)
    weight = torch.randn(n, k, device="cuda", generator=generator).to(torch.bfloat16)
    x = torch.randn(1, k, device="cuda", generator=generator).to(torch.bfloat16)
    out = torch.empty(1, n, device="cuda", dtype=torch.bfloat16)
    graph = captured(lambda: mm_out(x, weight.t(), out))
    eager = torch.empty_like(out)
    for _ in range(2):
        x.copy_(torch.randn(1, k, device="cuda", generator=generator))
        out.fill_(float("nan"))
        graph.replay()
        mm_out(x, weight.t(), eager)
        assert torch.equal(out, eager)
        reference = x.double() @ weight.double().t()
        assert ((out.double() - reference).norm() / reference.norm()).item() < 1e-2


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_rotate_half_kernel_rounds_as_the_exported_steps(dtype):
    """The rotate-half rotary kernel against the seven steps it replaces run as PyTorch's CUDA kernels, bit for
    bit: queries read through strides, tables broadcast over heads, a 3-d tensor, outputs poisoned first."""
    from pterun.kernels.triton.rotary import rotate_half_out

    def steps(x, cos, sin):
        half = x.shape[-1] // 2
        return torch.add(torch.mul(x, cos), torch.mul(torch.cat((torch.neg(x[..., half:]), x[..., :half]), -1), sin))

    generator = torch.Generator(device="cuda").manual_seed(3)

    def randn(*shape):
        return torch.randn(*shape, device="cuda", generator=generator)

    cases = [(randn(1, 9, 8, 64).transpose(1, 2), randn(1, 1, 9, 64), randn(9, 64)),
             (randn(5, 7, 16), randn(7, 16), randn(1, 7, 16))]
    for x, cos, sin in cases:
        x, cos, sin = (t.mul(4).to(dtype) for t in (x, cos, sin))
        out = torch.full(x.shape, float("nan"), device="cuda", dtype=dtype)
        assert rotate_half_out(x, cos, sin, out), "premise: the kernel takes these tensors"
        assert torch.equal(out, steps(x, cos, sin)), (dtype, x.shape)


@pytest.mark.parametrize("k, sizes", [(2048, (2048, 512, 512, 300)), (2048, (8192, 8192)), (1001, (37, 64, 7)),
                                     (9000, (301, 64, 7, 5, 3))])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_products_of_one_row_made_together_are_each_products_bits(k, sizes, dtype):
    """mm_together (a decoder layer's query, key and value products with compile=True): three weights in one
    launch, the rest alone (a pair too), each result the bits of its own one-row product, rows of odd length and
    weights of rows a program's band does not divide (k > 8192: two rows a program) included."""
    from pterun.kernels.triton.gemv import mm_out, mm_together, one_row

    generator = torch.Generator(device="cuda").manual_seed(k)
    weights = [(torch.randn(n, k, device="cuda", generator=generator) / k ** 0.5).to(dtype) for n in sizes]
    x = torch.randn(1, k, device="cuda", generator=generator).to(dtype)
    assert all(one_row(x, w.t()) for w in weights), "premise: every product takes the one-row kernel"
    together = mm_together(x, [w.t() for w in weights])
    assert len(together) == len(sizes)
    for w, got in zip(weights, together):
        alone = torch.full((1, w.shape[0]), float("nan"), device="cuda", dtype=dtype)
        mm_out(x, w.t(), alone)
        assert torch.equal(got, alone)
