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


def _qb4w_in_order(family: str, x8, packed, scales, start, zero_points, row_scales, bias, size: int) -> torch.Tensor:
    """XNNPACK's qd8 x qb4w order spelled out one block at a time, every operation rounded to float32 (the
    reference the Triton kernel must match bit for bit): a running sum per output (``avx512vnni``) or per lane
    of inputs (k % 8) // 2 (``avx2``), from the start value times the row's zero point, plus each block's exact
    integer sum times its scale, block after block; then times the row's scale, plus the bias (a fused
    multiply-add for ``avx2``: computed in float64, where the product is exact)."""
    rows, k = x8.shape
    weights = torch.stack([(packed & 15).to(torch.int64) - 8, (packed >> 4).to(torch.int64) - 8], -1).reshape(-1, k)
    lanes = 1 if family == "avx512vnni" else 4
    lane = (torch.arange(k) % 8) // 2 if lanes == 4 else torch.zeros(k, dtype=torch.int64)
    out = torch.empty(rows, weights.shape[0])
    for r in range(rows):
        products = weights * x8[r].to(torch.int64)  # [N, K], exact
        sums = [zero_points[r] * start] + [torch.zeros_like(start)] * (lanes - 1)
        for b in range(k // size):
            part = products[:, b * size:(b + 1) * size]
            for lane_index in range(lanes):
                block = part[:, lane[b * size:(b + 1) * size] == lane_index].sum(1)
                sums[lane_index] = sums[lane_index] + block.to(torch.float32) * scales[b]
        if lanes == 1:
            out[r] = sums[0] * row_scales[r] + (bias if bias is not None else -torch.zeros_like(start))
        else:
            total = (sums[0] + sums[1]) + (sums[2] + sums[3])
            out[r] = (total * row_scales[r] if bias is None
                      else (total.double() * row_scales[r].double() + bias.double()).float())
    return out


# One row and several; blocks of 32 and 128; more blocks than a program reads at once and tails short of a
# whole read; outputs past a program's last; a running sum of -0.0 (zero rows, negative scales).
QB4W_CASES = [(1, 2048, 72, 32), (1, 3072, 40, 32), (1, 576, 24, 32), (1, 8192, 16, 32), (3, 1024, 37, 128),
              (17, 512, 40, 32), (32, 2048, 256, 32), (2, 96, 5, 32)]


def _qb4w_case(rows: int, k: int, n: int, size: int, biased: bool) -> tuple:
    g = torch.Generator().manual_seed(rows * 1000 + k + n)
    x8 = torch.randint(-128, 128, (rows, k), dtype=torch.int8, generator=g)
    packed = torch.randint(0, 256, (n, k // 2), dtype=torch.uint8, generator=g)
    scales = (torch.rand(k // size, n, generator=g) * 0.01).bfloat16().float()
    start = torch.randn(n, generator=g)
    zero_points = torch.randint(-128, 128, (rows,), generator=g).float()
    row_scales = torch.rand(rows, generator=g) * 0.1
    bias = torch.randn(n, generator=g) if biased else None
    return x8, packed, scales, start, zero_points, row_scales, bias


@pytest.mark.parametrize("family", ["avx512vnni", "avx2"])
@pytest.mark.parametrize("rows, k, n, size", QB4W_CASES)
@pytest.mark.parametrize("biased", [False, True])
def test_4bit_block_kernel_adds_the_blocks_in_order(rows, k, n, size, family, biased):
    from pterun.backends.xnnpack.nodes.qblock_triton import qb4w

    x8, packed, scales, start, zero_points, row_scales, bias = _qb4w_case(rows, k, n, size, biased)
    if k == 96:
        x8.zero_(), zero_points.zero_()
        scales, start = -scales, -torch.zeros(n)
        bias = -torch.zeros(n) if biased else None
    expected = _qb4w_in_order(family, x8, packed, scales, start, zero_points, row_scales, bias, size)
    if k == 96 and family == "avx512vnni":  # (avx2's other lanes start at +0.0, so its sums end there)
        assert (expected == 0).all() and torch.signbit(expected).all(), "premise: every result is -0.0"
    out = torch.full((rows, n), float("nan"), device="cuda")
    cuda = [t.cuda() if t is not None else None for t in (x8, packed, scales, start, zero_points, row_scales, bias)]
    qb4w(family, *cuda, out, size)
    assert torch.equal(out.cpu().view(torch.int32), expected.view(torch.int32)), (
        f"{(out.cpu() != expected).sum().item()} of {out.numel()} differ")


def test_4bit_rows_off_a_word_take_the_byte_kernel_with_the_same_bits():
    from pterun.backends.xnnpack.nodes import qblock_triton

    rows, k, n, size = 2, 1024, 40, 32
    x8, packed, scales, start, zero_points, row_scales, bias = _qb4w_case(rows, k, n, size, True)
    cuda = [t.cuda() for t in (x8, packed, scales, start, zero_points, row_scales, bias)]
    off = torch.empty(rows * k + 1, dtype=torch.int8, device="cuda")[1:].view(rows, k)
    off.copy_(cuda[0])
    assert qblock_triton._words(cuda[0], cuda[1], size) and not qblock_triton._words(off, cuda[1], size), (
        "premise: word-aligned rows take the word kernel, rows one byte off do not")
    aligned, shifted = (torch.full((rows, n), float("nan"), device="cuda") for _ in range(2))
    qblock_triton.qb4w("avx512vnni", *cuda, aligned, size)
    qblock_triton.qb4w("avx512vnni", off, *cuda[1:], shifted, size)
    expected = _qb4w_in_order("avx512vnni", x8, packed, scales, start, zero_points, row_scales, bias, size)
    assert torch.equal(aligned.cpu().view(torch.int32), expected.view(torch.int32))
    assert torch.equal(shifted.cpu().view(torch.int32), expected.view(torch.int32))
