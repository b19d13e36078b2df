"""A ConvNet's steps on CUDA straight into their outs (kernels/conv_cuda.py): ATen's bits, and no copy left."""

from __future__ import annotations

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

import pterun
from pterun.kernels import conv_cuda
from tests.gpu.conftest import FIXTURES, on

pytestmark = pytest.mark.gpu

aten = torch.ops.aten

CONVOLUTIONS = {  # input, weight, bias, stride, padding, dilation, groups
    "depthwise": ((1, 96, 56, 56), (96, 1, 3, 3), False, 1, 1, 1, 96),
    "depthwise, strided, bias": ((2, 32, 28, 30), (32, 1, 3, 3), True, 2, 1, 1, 32),
    "pointwise": ((1, 32, 56, 56), (96, 32, 1, 1), False, 1, 0, 1, 1),
    "3x3, bias": ((2, 16, 20, 24), (8, 16, 3, 3), True, 1, 2, 1, 1),
    "grouped, dilated": ((1, 16, 24, 24), (16, 4, 3, 3), True, 1, 2, 2, 4),
    "stem, strided": ((1, 3, 225, 225), (32, 3, 3, 3), False, 2, 0, 1, 1),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("case", list(CONVOLUTIONS))
def test_a_convolution_into_its_out_has_aten_s_bits(case, dtype):
    shape, wshape, has_bias, stride, padding, dilation, groups = CONVOLUTIONS[case]
    x = torch.randn(shape, device="cuda", dtype=dtype)
    w = torch.randn(wshape, device="cuda", dtype=dtype)
    b = torch.randn(wshape[0], device="cuda", dtype=dtype) if has_bias else None
    args = (x, w, b, [stride] * 2, [padding] * 2, [dilation] * 2, False, [0, 0], groups)
    backend = torch._C._select_conv_backend(*args, None)
    assert backend in (torch._C._ConvBackend.Cudnn, torch._C._ConvBackend.CudaDepthwise2d), \
        "the premise: the call takes a direct path"
    expected = aten.convolution.default(*args)
    for out in (torch.empty_like(expected), torch.empty(0, device="cuda", dtype=dtype)):
        got = conv_cuda.convolution_out(*args, out=out)
        assert got is out and torch.equal(out, expected), case


def test_convolutions_no_direct_path_takes_keep_aten_s_kernel():
    """Transposed, one-dimensional: ATen's out-variant, same values."""
    x = torch.randn(1, 4, 9, 9, device="cuda")
    for args in ((x, torch.randn(4, 4, 3, 3, device="cuda"), None, [1, 1], [1, 1], [1, 1], True, [0, 0], 1),
                 (x[:, :, 0], torch.randn(4, 4, 3, device="cuda"), None, [1], [1], [1], False, [0], 1)):
        expected = aten.convolution.default(*args)
        out = torch.empty(0, device="cuda")
        conv_cuda.convolution_out(*args, out=out)
        assert torch.equal(out, expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", [(2, 24, 14, 14), (1, 32, 112, 112), (1, 1280, 7, 7), (3, 5, 9), (4, 6)])
@pytest.mark.parametrize("affine", [True, False])
def test_batch_norm_into_its_out_has_aten_s_bits_and_leaves_empty_statistics_empty(dtype, shape, affine):
    """One Triton launch where the statistics outputs are empty (as ExecuTorch plans them), the native kernel's
    bits; where they have room, they get the statistics, as before."""
    from pterun.kernels.triton import batch_norm as triton_batch_norm

    kernel = conv_cuda.FACTORIES[conv_cuda.BATCH_NORM](11).fn
    c = shape[1]
    x = torch.randn(shape, device="cuda", dtype=dtype) * 3 + 1
    weight, bias = ((torch.randn(c, device="cuda", dtype=dtype) for _ in range(2)) if affine else (None, None))
    mean = torch.randn(c, device="cuda", dtype=dtype)
    var = torch.rand(c, device="cuda", dtype=dtype) + 0.5
    expected = aten._native_batch_norm_legit_no_training.default(x, weight, bias, mean, var, 0.1, 1e-3)
    out0 = torch.empty(0, device="cuda", dtype=dtype)
    empty = torch.empty(0, device="cuda", dtype=dtype), torch.empty(0, device="cuda", dtype=dtype)
    assert triton_batch_norm.applies(x, x, weight, bias, mean, var), "the premise: the Triton kernel runs"
    kernel(x, weight, bias, mean, var, 0.1, 1e-3, out0=out0, out1=empty[0], out2=empty[1])
    assert torch.equal(out0, expected[0]) and empty[0].numel() == 0 and empty[1].numel() == 0
    sized = torch.empty(c, device="cuda", dtype=dtype), torch.empty(c, device="cuda", dtype=dtype)
    out0.zero_()
    kernel(x, weight, bias, mean, var, 0.1, 1e-3, out0=out0, out1=sized[0], out2=sized[1])
    assert torch.equal(out0, expected[0])
    assert torch.equal(sized[0], expected[1].to(dtype)) and torch.equal(sized[1], expected[2].to(dtype))


@pytest.mark.parametrize("pad", [[0, 0, 0, 0], [1, 1, 1, 1], [0, 1, 0, 1], [2, 0], [1, 2, 0, 0, 3, 1]])
@pytest.mark.parametrize("value", [0.0, -1.5])
def test_a_pad_into_its_out_has_aten_s_bits(pad, value):
    x = torch.randn(2, 3, 7, 5, device="cuda")
    expected = aten.constant_pad_nd.default(x, pad, value)
    for out in (torch.empty_like(expected), torch.empty(0, device="cuda")):
        conv_cuda.pad_out(x, pad, value, out=out)
        assert torch.equal(out, expected)
    cropped = aten.constant_pad_nd.default(x, [-1, 1], value)  # a negative pad crops: ATen's kernel
    out = torch.empty(0, device="cuda")
    conv_cuda.pad_out(x, [-1, 1], value, out=out)
    assert torch.equal(out, cropped)


def _kernels(fn) -> list[str]:
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as trace:
        fn()
        torch.cuda.synchronize()
    return [e.name for e in trace.events() if e.device_type == torch.autograd.DeviceType.CUDA]


def _emptied(outs: dict) -> dict:
    for name in ("out1", "out2"):
        outs[name].resize_(0)
    return outs


def test_each_kernel_launches_fewer_kernels_than_aten_s_out_variant():
    """ATen's out-variants of these operators compute a fresh result and copy it into ``out``: one launch more
    (three for batch norm's three outputs), on every activation of a ConvNet."""
    x = torch.randn(1, 96, 56, 56, device="cuda")
    w = torch.randn(96, 1, 3, 3, device="cuda")
    conv = (x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 96)
    out = aten.convolution.default(*conv)
    stats = [torch.randn(96, device="cuda") for _ in range(3)] + [torch.rand(96, device="cuda") + 0.5]
    norm = (x, *stats, 0.1, 1e-3)
    outs = dict(out0=torch.empty_like(x), out1=torch.empty(0, device="cuda"), out2=torch.empty(0, device="cuda"))
    # (ATen's out-variant writes statistics of C elements into the empty outs: they are emptied before each call.)
    padded = torch.empty(1, 96, 58, 58, device="cuda")
    batch_norm = conv_cuda.FACTORIES[conv_cuda.BATCH_NORM](11).fn
    pairs = {
        "convolution": (lambda: conv_cuda.convolution_out(*conv, out=out),
                        lambda: aten.convolution.out(*conv, out=out)),
        "batch norm": (lambda: batch_norm(*norm, **_emptied(outs)),
                       lambda: aten._native_batch_norm_legit_no_training.out(*norm, **_emptied(outs))),
        "pad": (lambda: conv_cuda.pad_out(x, [1, 1, 1, 1], 0.0, out=padded),
                lambda: aten.constant_pad_nd.out(x, [1, 1, 1, 1], 0.0, out=padded)),
    }
    for what, (ours, theirs) in pairs.items():
        mine, aten_s = _kernels(ours), _kernels(theirs)
        assert aten_s, "the premise: the profiler sees the kernels"
        assert len(mine) < len(aten_s), (what, mine, aten_s)


def test_a_replayed_convnet_matches_executorch():
    """transformers' MobileNetV2 (52 pads, convolutions and batch norms; 47 pads folded into their convolutions)
    replayed from its CUDA graph: ExecuTorch's outputs."""
    directory = FIXTURES / "corpus" / "mobilenet_v2"
    if not directory.exists():
        pytest.skip("no fixtures: run scripts/make-gpu-fixtures.py")
    calls = torch.load(directory / "calls.pt", weights_only=False)
    expected = torch.load(directory / "expected.pt", weights_only=False)
    method = pterun.Runtime.get().load_program(directory / "program.pte", device="cuda").load_method("forward")
    assert [s.name for s in method.steps if getattr(s, "replaces", ())].count("pterun::padded_convolution") >= 40
    args = on("cuda", calls[0])
    for _ in range(3):
        (logits,) = method.execute(args)
    assert method.cuda_graph is not None and method.cuda_graph.current is not None, "the premise: it replays"
    torch.testing.assert_close(logits.cpu(), expected[0][0], rtol=2e-4, atol=2e-4)
