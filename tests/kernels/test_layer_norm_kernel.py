"""Layer norms of float32 rows shorter than 256 values in one native call (kernels/layer_norm.py): ExecuTorch's bits,
replayed in runs, and PyTorch's call wherever the native one does not apply."""

from __future__ import annotations

import math

import pytest
import torch

import pterun
from pterun import native
from pterun.kernels.layer_norm import LONGEST, LayerNormInto, factory
from tests.support.compare import same_bits
from tests.support.exporting import ExportSpec, export_program
from tests.support.oracle import assert_executorch_bits, run_reference

pytestmark = pytest.mark.skipif(native.kernels is None, reason="needs pterun's native kernels (CI builds them)")


class Norms(torch.nn.Module):
    """Layer norms of every form the operator takes: affine, over two dimensions without a bias, without weights,
    and on rows of the longest length the native call takes, each feeding the next through exact arithmetic (a
    product, in ExecuTorch and PyTorch rounded alike, where a matrix product's sums would not be)."""

    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(3)
        self.a = torch.nn.LayerNorm(64)
        self.b = torch.nn.LayerNorm((4, 16), bias=False)
        self.c = torch.nn.LayerNorm(64, elementwise_affine=False, eps=1e-12)
        self.d = torch.nn.LayerNorm(LONGEST)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=g))

    def forward(self, x):
        a = self.a(x)
        b = self.b(a.view(*a.shape[:-1], 4, 16)).view(a.shape) * 2.0
        c = self.c(b + x)
        wide = torch.cat([c, c * 0.5, c * 3.0, c[..., :LONGEST - 192]], dim=-1)
        return c, self.d(wide)


def _inputs(seed: int) -> list:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(3, 5, 64, generator=g) * 4 + 1
    x[0, 0] = 7.0  # a constant row: a variance of zero (or a rounding's negative one)
    x[0, 1, 3] = math.nan
    x[0, 2, 5] = math.inf
    x[1, 0] *= 1e20  # squares past float32's range
    return [x]



def _kernels(method) -> list[LayerNormInto]:
    return [s.binding.fn for s in method.steps
            if s is not None and isinstance(getattr(getattr(s, "binding", None), "fn", None), LayerNormInto)]


def test_a_portable_program_gets_executorchs_bits_and_replays():
    exported = export_program("kernels-layer-norm-v1", lambda: ExportSpec(Norms(), tuple(_inputs(0))))
    method = pterun.Runtime.get().load_program(exported.pte).load_method("forward")
    kernels = _kernels(method)
    assert len(kernels) == 4, "premise: every layer norm is the native kernel's"
    assert_executorch_bits(method, exported.pte, _inputs, range(4), kernels)
    assert sum(method.replays.values()) >= 2, method.replays


def _call(kernel: LayerNormInto, x: torch.Tensor, normalized: list[int], weight, bias, out=None):
    k = len(normalized)
    stats = (*x.shape[:x.dim() - k], *(1,) * k)
    out = torch.empty(x.shape, dtype=x.dtype) if out is None else out
    mean, rstd = torch.empty(stats, dtype=x.dtype), torch.empty(stats, dtype=x.dtype)
    kernel(x, normalized, weight, bias, 1e-5, out0=out, out1=mean, out2=rstd)
    return out, mean, rstd


def test_what_the_native_call_does_not_take_is_pytorchs_call():
    kernel = factory(9).fn  # the instruction passes 8 arguments and the result
    assert isinstance(kernel, LayerNormInto)
    g = torch.Generator().manual_seed(5)
    x = torch.randn(6, 40, generator=g)
    w, b = torch.randn(40, generator=g), torch.randn(40, generator=g)
    _call(kernel, x, [40], w, b)
    assert kernel.ran_natively(), "premise: the native call takes a plain float32 row"
    long = torch.randn(3, LONGEST + 1, generator=g)
    cases = [
        ("rows of 256 values", long, [LONGEST + 1], torch.ones(LONGEST + 1), None),
        ("float64", x.double(), [40], w.double(), b.double()),
        ("a transposed input", torch.randn(40, 6, generator=g).t(), [40], None, None),
        ("a strided weight", x, [40], torch.randn(80, generator=g)[::2], b),
    ]
    for what, xs, normalized, weight, bias in cases:
        out, mean, rstd = _call(kernel, xs, normalized, weight, bias)
        assert not kernel.ran_natively(), what
        expected = torch.native_layer_norm(xs, normalized, weight, bias, 1e-5)
        assert torch.equal(out, expected[0]) and torch.equal(rstd, expected[2]), what
    # In place (out is the input itself): native, each row's sums taken before the row is written.
    z = x.clone()
    expected, _, _ = _call(kernel, x, [40], w, b)
    _call(kernel, z, [40], w, b, out=z)
    assert kernel.ran_natively() and torch.equal(z, expected)
    # An out over part of the input: PyTorch's call.
    buffer = torch.randn(2 * 40 + 20, generator=g)
    before = buffer[:80].view(2, 40).clone()
    _call(kernel, buffer[:80].view(2, 40), [40], w, b, out=buffer[20:].view(2, 40))
    assert not kernel.ran_natively()
    assert torch.equal(buffer[20:].view(2, 40), torch.native_layer_norm(before, [40], w, b, 1e-5)[0])


def test_the_native_call_refuses_rows_it_does_not_compute():
    x = torch.randn(2, LONGEST + 1)
    out, mean, rstd = torch.empty_like(x), torch.empty(2), torch.empty(2)
    with pytest.raises(ValueError, match=r"2 rows of 256 values \(rows of 1 to 255\)"):
        native.kernels.layer_norm(x.data_ptr(), 0, 0, out.data_ptr(), mean.data_ptr(), rstd.data_ptr(), 2,
                                  LONGEST + 1, 1e-5, 1)
    small = torch.randn(2, 8)
    out = torch.empty_like(small)
    native.kernels.layer_norm(small.data_ptr(), 0, 0, out.data_ptr(), mean.data_ptr(), rstd.data_ptr(), 2, 8, 1e-5, 1)
    assert torch.allclose(out, torch.nn.functional.layer_norm(small, [8]), atol=1e-6)


def test_a_row_whose_variance_cancels_is_pytorchs_not_executorchs_loss():
    """Rows far from 0 next to their spread: ExecuTorch's E[x^2] - mean^2 loses the variance (10^5 deviations out,
    all of it); pterun takes the mean and variance again in two passes, PyTorch's result up to rounding (up to the
    rounding of the row's own values, there), and ExecuTorch's bits for the other rows of the same call."""
    g = torch.Generator().manual_seed(9)
    x = torch.randn(3, 48, generator=g)
    x[1] = 3.2 + 0.05 * x[1]  # 64 deviations out
    x[2] = 1000.0 + 0.01 * x[2]  # 10^5 deviations out: the values' own rounding is 0.6% of a deviation
    exported = export_program("kernels-layer-norm-cancel-v1",
                              lambda: ExportSpec(torch.nn.LayerNorm(48, elementwise_affine=False), (x,)))
    method = pterun.Runtime.get().load_program(exported.pte).load_method("forward")
    kernels = _kernels(method)
    assert len(kernels) == 1, "premise: the layer norm is the native kernel's"
    actual = method.execute([x])[0]
    assert kernels[0].ran_natively()
    theirs = run_reference(exported.pte, [x])[0]
    eager = torch.nn.functional.layer_norm(x, [48])
    for row, tolerance in ((1, 1e-5), (2, 1e-3)):
        assert not torch.allclose(theirs[row], eager[row], atol=tolerance, rtol=tolerance), f"premise: row {row}"
        torch.testing.assert_close(actual[row], eager[row], atol=tolerance, rtol=tolerance)
    assert same_bits(actual[0], theirs[0])
