"""Quantized operators of the WebGPU backend on graphs built in memory, against references computed here.

Integer arithmetic is exact: int8 products are summed in integers, and the float steps after (the scales,
a bias, quantizing to int8) are the float32 operations the reference does in the same order, so quantized
results are compared for equality. Weights are laid out as ExecuTorch's Vulkan partitioner packs them.
"""

from __future__ import annotations

import pytest
import torch

from tests.backends.webgpu.adapter import needs_adapter
from tests.backends.webgpu.crafted import DTYPES, Craft, run
from tests.support.compare import assert_matches

pytestmark = [needs_adapter]

custom_ops = pytest.importorskip("executorch.backends.vulkan.custom_ops_lib")


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _run(c: Craft, inputs: list, outputs) -> list[torch.Tensor]:
    c.output(*outputs)
    return run(c.delegate(), inputs)


def _quantize(v: torch.Tensor, inv_scale: float, zp: int) -> torch.Tensor:
    """ExecuTorch's quantization of float32 values: round half to even of v * f32(1 / scale), + zp."""
    return torch.clamp(torch.round(v * torch.tensor(inv_scale, dtype=torch.float32)) + zp, -128, 127).to(torch.int8)


def _int4(n: int, k: int, seed: int) -> torch.Tensor:
    return torch.randint(-8, 8, (n, k), generator=_gen(seed), dtype=torch.int8)


def _pack_low_first(w: torch.Tensor) -> torch.Tensor:
    from executorch.backends.vulkan.patterns.weight_packing_utils import pack_4bit_weight_tensor

    return pack_4bit_weight_tensor(w)


def _pack_high_first(w: torch.Tensor) -> torch.Tensor:
    from executorch.backends.vulkan._passes.fuse_quantized_ops import pack_4bit_weight_tensor

    return pack_4bit_weight_tensor(w)


@pytest.mark.parametrize("m, n, k, group", [(5, 12, 64, 32), (1, 20, 96, 32), (3, 8, 128, 128)])
def test_linear_q4gsw_matches_executorchs_reference(m, n, k, group):
    x = torch.randn(m, k, generator=_gen(1))
    w = _int4(n, k, 2)
    scales = torch.rand(k // group, n, generator=_gen(3)) * 0.1 + 0.01  # [groups, N], as the partitioner
    bias = torch.randn(n, generator=_gen(4))
    packed = _pack_low_first(w)
    c = Craft()
    xi = c.input(x.shape)
    y = c.op("et_vk.linear_q4gsw.default", xi, c.const(packed), c.const(scales), c.scalar(group), c.const(bias),
             out=(m, n))
    (got,) = _run(c, [x], [y])
    want = torch.ops.et_vk.linear_q4gsw(x, packed, scales, group, bias)
    assert_matches(got, want, rtol=1e-5, what="linear_q4gsw")


def test_linear_qcs4w_dequantizes_per_channel():
    x = torch.randn(4, 40, generator=_gen(1))
    w = _int4(16, 40, 2)
    scales = torch.rand(16, generator=_gen(3)) * 0.1 + 0.01
    c = Craft()
    xi = c.input(x.shape)
    y = c.op("et_vk.linear_qcs4w.default", xi, c.const(_pack_high_first(w)), c.const(scales), out=(4, 16))
    (got,) = _run(c, [x], [y])
    assert_matches(got, x @ (w.float() * scales[:, None]).T, rtol=1e-5, what="linear_qcs4w")


def _int_linear(xq, zp, w, in_scale, scales, bias):
    acc = (xq.long() - zp) @ w.long().T  # exact
    v = acc.float() * torch.tensor(in_scale, dtype=torch.float32) * scales
    return v + bias if bias is not None else v


@pytest.mark.parametrize("relu", [False, True])
def test_q8ta_linear_is_exact(relu):
    m, n, k = 6, 12, 72
    xq = torch.randint(-128, 128, (m, k), generator=_gen(1), dtype=torch.int8)
    w = torch.randint(-127, 128, (n, k), generator=_gen(2), dtype=torch.int8)
    scales = torch.rand(n, generator=_gen(3)) * 0.01 + 1e-3
    bias = torch.randn(n, generator=_gen(4))
    in_scale, in_zp, out_scale, out_zp = 0.02, -7, 0.3, 5
    c = Craft()
    xi = c.input(xq.shape, DTYPES[torch.int8])
    sums = c.const((w.long().sum(1)).to(torch.int32))
    y = c.op("et_vk.q8ta_linear.default", xi, c.scalar(in_scale), c.scalar(in_zp), c.const(w), sums,
             c.const(scales), c.scalar(out_scale), c.scalar(out_zp), c.const(bias),
             c.scalar("relu" if relu else "none"), out=(m, n), dtype=DTYPES[torch.int8])
    (got,) = _run(c, [xq], [y])
    v = _int_linear(xq, in_zp, w, in_scale, scales, bias)
    want = _quantize(v.clamp_min(0) if relu else v, 1.0 / out_scale, out_zp)
    assert torch.equal(got, want), f"{int((got != want).sum())} of {want.numel()} values differ"


def test_linear_q8ta_q8csw_is_exact_before_its_float_steps():
    m, n, k = 3, 8, 40
    xq = torch.randint(-128, 128, (m, k), generator=_gen(1), dtype=torch.int8)
    w = torch.randint(-127, 128, (n, k), generator=_gen(2), dtype=torch.int8)
    scales = torch.rand(n, generator=_gen(3)) * 0.01 + 1e-3
    c = Craft()
    xi = c.input(xq.shape, DTYPES[torch.int8])
    y = c.op("et_vk.linear_q8ta_q8csw.default", xi, c.scalar(0.05), c.scalar(3), c.const(w),
             c.const(w.long().sum(1).to(torch.int32)), c.const(scales), c.scalar(None), out=(m, n))
    (got,) = _run(c, [xq], [y])
    assert torch.equal(got, _int_linear(xq, 3, w, 0.05, scales, None))


@pytest.mark.parametrize("scale, zp", [(0.05, 0), (0.1, -3), (1 / 3, 100)])
def test_quantize_per_tensor_rounds_as_executorch(scale, zp):
    # Halfway values (k + 0.5) * scale test the ties; far ones test the clamp.
    x = torch.cat([(torch.arange(-40, 40) + 0.5) * scale, torch.randn(300, generator=_gen(1)) * 50 * scale])
    c = Craft()
    xi = c.input(x.shape)
    y = c.op("quantized_decomposed.quantize_per_tensor.default", xi, c.scalar(scale), c.scalar(zp),
             c.scalar(-128), c.scalar(127), c.scalar(None), out=tuple(x.shape), dtype=DTYPES[torch.int8])
    (got,) = _run(c, [x], [y])
    want = torch.ops.quantized_decomposed.quantize_per_tensor(x, scale, zp, -128, 127, torch.int8)
    assert torch.equal(got, want), f"{int((got != want).sum())} values differ"


def test_choose_qparams_affine_matches_torchao():
    x = torch.randn(7, 64, generator=_gen(1)) * torch.linspace(0.01, 4, 7)[:, None]
    x[3] = x[3].abs()  # a row with no negative value: zero is its minimum
    c = Craft()
    xi = c.input(x.shape)
    outs = c.op("torchao.choose_qparams_affine.default", xi, c.scalar("ASYMMETRIC"), c.ints([1, 64]),
                c.scalar(None), c.scalar(-128), c.scalar(127), c.scalar(None), c.scalar(None), c.scalar(None),
                c.scalar(False), out=[(7,), (7,)], dtype=[DTYPES[torch.float32], DTYPES[torch.int8]])
    got = _run(c, [x], list(c.values[outs].items))
    scale, zp = torch.ops.torchao.choose_qparams_affine(x, "ASYMMETRIC", [1, 64], torch.int8, -128, 127, None,
                                                       torch.float32, torch.int8)
    assert torch.equal(got[0], scale) and torch.equal(got[1], zp)


@pytest.mark.parametrize("linear_weight", [False, True])
def test_embedding_q4gsw_matches_executorchs_reference(linear_weight):
    rows, d, group = 10, 32, 16
    packed = torch.randint(0, 256, (rows, d // 2), generator=_gen(1), dtype=torch.uint8)
    scales = torch.rand(rows, d // group, generator=_gen(2)) + 0.1
    idx = torch.tensor([[3, 0, 9], [9, 1, 4]])
    c = Craft()
    ii = c.input(idx.shape, DTYPES[torch.int64])
    y = c.op("et_vk.embedding_q4gsw.default", c.const(packed), c.const(scales), c.scalar(group), ii,
             c.scalar(linear_weight), out=(2, 3, d))
    (got,) = _run(c, [idx], [y])
    want = torch.ops.et_vk.embedding_q4gsw(packed, scales, group, idx, linear_weight)
    assert torch.equal(got, want)


@pytest.mark.parametrize("groups, relu", [(1, False), (2, True)])
def test_q8ta_conv2d_is_exact(groups, relu):
    n, ic, h, w_, oc, kh, kw = 1, 4, 7, 6, 6, 3, 3
    xq = torch.randint(-128, 128, (n, ic, h, w_), generator=_gen(1), dtype=torch.int8)
    weight = torch.randint(-127, 128, (oc, ic // groups, kh, kw), generator=_gen(2), dtype=torch.int8)
    scales = torch.rand(oc, generator=_gen(3)) * 0.01 + 1e-3
    bias = torch.randn(oc, generator=_gen(4))
    in_scale, in_zp, out_scale, out_zp = 0.03, 4, 0.5, -2
    rows = weight.permute(0, 2, 3, 1).reshape(oc, kh * kw * (ic // groups))  # the partitioner's layout
    c = Craft()
    xi = c.input(xq.shape, DTYPES[torch.int8])
    y = c.op("et_vk.q8ta_conv2d.default", xi, c.scalar(in_scale), c.scalar(in_zp), c.const(rows),
             c.const(rows.long().sum(1).to(torch.int32)), c.const(scales), c.scalar(out_scale), c.scalar(out_zp),
             c.const(bias), c.ints([kh, kw]), c.ints([2, 1]), c.ints([1, 1]), c.ints([1, 1]), c.scalar(groups),
             c.scalar("relu" if relu else "none"), out=(n, oc, 4, 6), dtype=DTYPES[torch.int8])
    (got,) = _run(c, [xq], [y])
    # Padding is zero in float: a zero point's worth of the integer input.
    centred = torch.nn.functional.pad(xq.double() - in_zp, (1, 1, 1, 1))
    acc = torch.nn.functional.conv2d(centred, weight.double(), stride=(2, 1), groups=groups).long()
    v = acc.float() * torch.tensor(in_scale, dtype=torch.float32) * scales[:, None, None] + bias[:, None, None]
    want = _quantize(v.clamp_min(0) if relu else v, 1.0 / out_scale, out_zp)
    assert torch.equal(got, want), f"{int((got != want).sum())} of {want.numel()} values differ"
