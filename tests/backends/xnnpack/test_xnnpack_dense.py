"""XNNPACK's float products bit for bit: fully connected layers and dense convolutions. Its x86 kernels start each
output at its bias, take the window's taps in order (kernel row, then column; a fully connected layer has one) and
each tap's input channels in order, one fused multiply-add each, then clamp; pterun's native kernel does the same
(``native/gemm.c``) for products under a work limit, so their outputs are ExecuTorch's.

* Programs of fully connected layers (odd widths, with and without bias, clamps fused) and of convolutions
  (strides, dilation, padding, 1 x 1 to 5 x 5) against ExecuTorch's runtime; the test corpus's ResNet and DS-CNN,
  whose every product is native, to the bit.
* The kernel's two families give the same bits (every output's order is the same), and write nothing outside
  their output.
* The AVX2 family against ExecuTorch on an emulated AVX2 CPU: test_xnnpack_isa.py.
* Turned off (``native=False``), PyTorch computes them: within float32 rounding.
"""

from __future__ import annotations

import re

import pytest
import torch

import pterun
from pterun.backends.xnnpack.nodes import conv, linear, native
from tests.backends.xnnpack.programs import (
    FLOAT_MLP_ROWS,
    assert_relative,
    export_float_convs,
    export_float_mlp,
    export_model,
    float_convs_inputs,
    float_mlp_inputs,
    partitioners,
)
from tests.support.ci import on_ci
from tests.support.differential import flat
from tests.support.exporting import ExportSpec, export_program
from tests.support.models import build
from tests.support.oracle import run_reference

PRODUCT, CONVOLUTION = "float fully connected product (native)", "float convolution (native)"


def _family() -> str:
    family = native.float_family()
    if family is None:
        message = "pterun's native float kernels do not run on this machine"
        if on_ci():
            pytest.fail(f"{message}; CI builds them", pytrace=False)
        pytest.skip(message)
    return family


def _method(pte, **load):
    return pterun.Runtime.get().load_program(pte, **load).load_method("forward")


def _routes(method) -> list[str]:
    return [how for handle in method.delegate_handles for _, how in handle.routes]


def _assert_equal(actual, expected, what: str) -> None:
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        assert torch.equal(a, e), f"{what}: {(a - e).abs().max()}"


@pytest.mark.parametrize("rows", [1, 3, 8, 9, 64, 70, FLOAT_MLP_ROWS])
def test_fully_connected_layers_are_executorchs_bits(rows):
    family = _family()
    pte = export_float_mlp().pte
    method = _method(pte)
    routes = _routes(method)
    assert sum(PRODUCT in r and family in r for r in routes) == 3, routes  # the premise: every layer native
    for seed, scale in ((1, 1.0), (2, 30.0)):
        x = float_mlp_inputs(seed, scale, rows)
        _assert_equal(method.execute(x), run_reference(pte, x), f"rows {rows}, seed {seed}")


def test_convolutions_are_executorchs_bits():
    family = _family()
    pte = export_float_convs().pte
    method = _method(pte)
    routes = _routes(method)
    assert sum(CONVOLUTION in r and family in r for r in routes) == 5, routes
    for seed, scale in ((1, 1.0), (2, 10.0), (3, 0.01)):
        x = float_convs_inputs(seed, scale)
        _assert_equal(method.execute(x), run_reference(pte, x), f"seed {seed}")


@pytest.mark.parametrize("name", ["resnet", "et_ds_cnn"])
def test_models_whose_products_are_all_native_are_executorchs_bits(name):
    _family()
    pte = export_model(name).pte
    method = _method(pte)
    source = "".join(handle.source for handle in method.delegate_handles)
    assert "conv(" in source and "addmm(" not in source, source  # the premise: no product on PyTorch's kernels
    for seed in (0, 1):
        x = flat(build(name).make_inputs(seed))
        _assert_equal(method.execute(x), run_reference(pte, x), f"{name} seed {seed}")


def test_turned_off_the_products_run_on_pytorch_within_rounding():
    _family()
    for pte, x in ((export_float_mlp().pte, float_mlp_inputs(3, 1.0, 9)),
                   (export_float_convs().pte, float_convs_inputs(3))):
        method = _method(pte, backend_options={"XnnpackBackend": {"native": False}})
        assert not any("(native)" in r for r in _routes(method)), _routes(method)
        for a, e in zip(method.execute(x), run_reference(pte, x)):
            assert_relative(a, e, 1e-5, "native=False")


def _reference(x, filt, bias, window, lo, hi):
    """The convolution in float64, NHWC in and out."""
    sh, sw, dh, dw, top, left, bottom, right = window
    padded = torch.nn.functional.pad(x.permute(0, 3, 1, 2).double(), (left, right, top, bottom))
    out = torch.nn.functional.conv2d(padded, filt.double(), bias.double(), (sh, sw), 0, (dh, dw))
    return out.clamp(lo, hi).permute(0, 2, 3, 1).float()


CASES = [  # (n, h, w, cin, cout, kh, kw, sh, sw, dh, dw, top, left, bottom, right)
    (1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0),
    (1, 1, 70, 256, 70, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0),  # a fully connected layer: one row of 70
    (2, 9, 7, 5, 33, 3, 3, 2, 1, 1, 1, 1, 1, 1, 0),
    (1, 11, 13, 3, 65, 5, 3, 1, 2, 2, 1, 2, 0, 3, 1),
    (1, 4, 4, 7, 16, 7, 7, 1, 1, 1, 1, 3, 3, 3, 3),
    (2, 32, 32, 3, 20, 16, 16, 16, 16, 1, 1, 0, 0, 0, 0),  # a vision transformer's patches: 256 taps
    (3, 5, 7, 24, 40, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0),  # pointwise: each output pixel reads its own input pixel
    (2, 3, 5, 4, 17, 1, 1, 2, 1, 1, 1, 0, 1, 0, 0),  # one tap, but strided and padded: not pointwise
]


@pytest.mark.parametrize("case", CASES)
def test_the_families_give_the_same_bits_and_write_only_their_output(case):
    _family()
    n, h, w, cin, cout, kh, kw, sh, sw, dh, dw, top, left, bottom, right = case
    oh = (h + top + bottom - (kh - 1) * dh - 1) // sh + 1
    ow = (w + left + right - (kw - 1) * dw - 1) // sw + 1
    kernels = native._kernels()
    g = torch.Generator().manual_seed(sum(case))
    x, filt, bias = (torch.randn(n, h, w, cin, generator=g), torch.randn(cout, cin, kh, kw, generator=g),
                     torch.randn(cout, generator=g))
    packed = native.conv_pack(filt, bias)
    reference = _reference(x, filt, bias, (sh, sw, dh, dw, top, left, bottom, right), -0.8, 1.5)
    results = {}
    for family, code in native.VFAMILIES.items():
        if not kernels.vfamily_runs(code):
            continue
        canvas = torch.full((n * oh * ow * cout + 64,), 7.0)  # the output inside a larger buffer
        out = canvas[32:-32].view(n, oh, ow, cout)
        kernels.conv(code, x.data_ptr(), packed.data_ptr(), out.data_ptr(), n, h, w, cin, cout, kh, kw, sh, sw, dh,
                     dw, top, left, oh, ow, -0.8, 1.5, 1)
        assert torch.equal(canvas[:32], torch.full((32,), 7.0)) and torch.equal(canvas[-32:], torch.full((32,), 7.0)), \
            f"{family} wrote outside its output"
        assert torch.allclose(out, reference, rtol=1e-5, atol=1e-5 * cin * kh * kw), family
        results[family] = out.clone()
    first = next(iter(results.values()))
    assert all(torch.equal(r, first) for r in results.values()), "the families' bits differ"


def test_a_family_this_cpu_does_not_run_a_negative_size_or_a_wider_window_is_refused():
    family = native.VFAMILIES[_family()]
    kernels = native._kernels()
    good = [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1]
    for bad_family, sizes in ((7, good), (family, [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, -1, 1]),
                              (family, [1, 17, 16, 1, 1, 17, 16, 1, 1, 1, 1, 0, 0, 1, 1])):
        with pytest.raises(ValueError, match="conv"):
            kernels.conv(bad_family, 0, 0, 0, *sizes, 0.0, 1.0, 1)


class _TwoLayers(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.small = torch.nn.Linear(64, 64)
        self.large = torch.nn.Linear(1024, 1024)
        self.conv_small = torch.nn.Conv2d(8, 8, 3, padding=1)
        self.conv_large = torch.nn.Conv2d(64, 64, 3, padding=1)

    def forward(self, a, b, c, d):
        return self.small(a), self.large(b), self.conv_small(c), self.conv_large(d)


def test_products_past_the_work_limit_stay_on_onednn():
    family = _family()
    g = torch.Generator().manual_seed(5)
    inputs = (torch.randn(4, 64, generator=g), torch.randn(8, 1024, generator=g), torch.randn(1, 8, 8, 8, generator=g),
              torch.randn(1, 64, 32, 32, generator=g))
    assert 8 * 1024 * 1024 > linear.NATIVE_GEMM_MACS[family] >= 4 * 64 * 64  # the premise
    assert 32 * 32 * 64 * 64 * 9 > conv.NATIVE_DENSE_MACS[family] >= 8 * 8 * 8 * 8 * 9
    exported = export_program("xnnpack-two-sizes", lambda: ExportSpec(_TwoLayers().eval(), inputs,
                                                                      lower=partitioners))
    method = _method(exported.pte)
    source = "".join(handle.source for handle in method.delegate_handles)
    assert len(re.findall(r"^\s*conv\(", source, re.MULTILINE)) == 2, source
    assert source.count("linear_pw(") == 1 and source.count("conv_pw(") == 1, source
    for a, e in zip(method.execute(list(inputs)), run_reference(exported.pte, list(inputs))):
        assert_relative(a, e, 1e-5, "two sizes")
