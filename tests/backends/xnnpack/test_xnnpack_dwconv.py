"""Float depthwise convolutions through the native kernel (``native/dwconv.c``), which oneDNN ran at about 33 us a
call however small the image: against a float64 reference over the shapes the kernel's loops reach (channels
around its vector widths, strides, dilations, padding on one side, no bias, clamps), in both x86-64 families this
CPU runs, with the memory around the output untouched; and in exported programs, where the node takes it (the
program's outputs against ExecuTorch's are test_xnnpack_models.py's)."""

from __future__ import annotations

import pytest
import torch

import pterun
from pterun.backends.xnnpack.nodes import native
from tests.backends.xnnpack.programs import export_model
from tests.support.differential import flat
from tests.support.models import build

CASES = [  # n, h, w, c, (kh, kw), (sh, sw), (dh, dw), (top, left, bottom, right), bias, clamp
    (1, 9, 9, 16, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), True, (0.0, 6.0)),
    (2, 8, 7, 17, (3, 3), (2, 2), (1, 1), (0, 0, 1, 1), True, None),
    (1, 12, 12, 33, (5, 5), (1, 2), (2, 1), (4, 2, 4, 2), False, (-1.0, 1.0)),
    (1, 5, 6, 7, (1, 3), (1, 1), (1, 1), (0, 1, 0, 1), True, (0.0, float("inf"))),
    (3, 4, 4, 96, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), True, None),
    (1, 3, 3, 1, (3, 3), (1, 1), (1, 1), (2, 2, 2, 2), True, None),
]


def _families() -> list[str]:
    if native.float_family() is None:
        return []
    kernels = native._kernels()
    return [name for name, code in native.VFAMILIES.items() if kernels.vfamily_runs(code)]


@pytest.mark.parametrize("family", _families() or [pytest.param(None, marks=pytest.mark.skip(
    reason="pterun's native float kernels do not run on this machine"))])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[3]}ch-{c[4][0]}x{c[4][1]}-s{c[5][0]}{c[5][1]}")
def test_the_native_depthwise_convolution_is_the_convolution(family, case):
    n, h, w, c, (kh, kw), (sh, sw), (dh, dw), (top, left, bottom, right), with_bias, clamp = case
    g = torch.Generator().manual_seed(c * 7 + kh)
    x = torch.randn(n, h, w, c, generator=g)
    weights = torch.randn(c, 1, kh, kw, generator=g)
    bias = torch.randn(c, generator=g) if with_bias else None
    padded = torch.nn.functional.pad(x.permute(0, 3, 1, 2).double(), (left, right, top, bottom))
    expected = torch.nn.functional.conv2d(padded, weights.double(), None if bias is None else bias.double(),
                                          (sh, sw), 0, (dh, dw), c).permute(0, 2, 3, 1)
    lo, hi = clamp if clamp is not None else (-float("inf"), float("inf"))
    expected = expected.clamp(lo, hi)
    oh, ow = expected.shape[1:3]
    # The kernel writes [n, oh, ow, c] in the middle of a buffer whose ends must stay as they were.
    guard = 64
    buffer = torch.full((guard + n * oh * ow * c + guard,), float("nan"))
    out = buffer[guard:guard + n * oh * ow * c]
    packed = weights.permute(2, 3, 0, 1).reshape(kh, kw, c).contiguous()
    native._kernels().dwconv(native.VFAMILIES[family], x.data_ptr(), packed.data_ptr(),
                             0 if bias is None else bias.data_ptr(), out.data_ptr(), n, h, w, c, kh, kw, sh, sw, dh,
                             dw, top, left, oh, ow, lo, hi, 2)
    assert buffer[:guard].isnan().all() and buffer[-guard:].isnan().all()
    torch.testing.assert_close(out.view(n, oh, ow, c).double(), expected, rtol=1e-5, atol=1e-5)


def test_a_family_this_cpu_does_not_run_is_refused():
    with pytest.raises(ValueError, match="dwconv"):
        native._kernels().dwconv(7, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 0.0, 1.0, 1)


def test_mobilenet_depthwise_layers_take_the_native_kernel_unless_turned_off():
    if native.float_family() is None:
        pytest.skip("pterun's native float kernels do not run on this machine")
    pte = export_model("mobilenet_v2").pte

    def routes(**options):
        method = pterun.Runtime.get().load_program(pte, **options).load_method("forward")
        method.execute(flat(build("mobilenet_v2").make_inputs(0)))
        return [how for handle in method.delegate_handles for _, how in handle.routes]

    assert any("float depthwise convolution (native)" in how for how in routes())
    off = routes(backend_options={"XnnpackBackend": {"native": False}})
    assert not any("depthwise convolution (native)" in how for how in off)


class _TwoDepthwise(torch.nn.Module):
    """A small depthwise convolution and one past the native kernel's work limit (96 x 96 x 32, 3 x 3)."""

    def __init__(self) -> None:
        super().__init__()
        self.small = torch.nn.Conv2d(32, 32, 3, padding=1, groups=32)
        self.large = torch.nn.Conv2d(32, 32, 3, padding=1, groups=32)

    def forward(self, a, b):
        return torch.nn.functional.relu6(self.small(a)), self.large(b)


def test_a_depthwise_convolution_past_the_work_limit_stays_on_onednn():
    from pterun.backends.xnnpack.nodes import conv
    from tests.backends.xnnpack.programs import assert_relative, partitioners
    from tests.support.exporting import ExportSpec, export_program
    from tests.support.oracle import run_reference

    family = native.float_family()
    if family is None:
        pytest.skip("pterun's native float kernels do not run on this machine")
    g = torch.Generator().manual_seed(3)
    inputs = (torch.randn(1, 32, 16, 16, generator=g), torch.randn(1, 32, 96, 96, generator=g))
    assert 96 * 96 * 32 * 9 > conv.NATIVE_DEPTHWISE_MACS[family] >= 16 * 16 * 32 * 9  # the premise
    exported = export_program("xnnpack-two-depthwise", lambda: ExportSpec(
        _TwoDepthwise().eval(), inputs, lower=partitioners))
    method = pterun.Runtime.get().load_program(exported.pte).load_method("forward")
    source = "".join(handle.source for handle in method.delegate_handles)
    assert source.count("dwconv(") == 1 and source.count("conv_pw(") == 1, source
    for actual, expected in zip(method.execute(list(inputs)), run_reference(exported.pte, list(inputs))):
        assert_relative(actual, expected, 1e-5, "two depthwise convolutions")
