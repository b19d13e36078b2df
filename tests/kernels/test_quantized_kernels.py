"""quantized_decomposed::* kernels against ExecuTorch's own, called eagerly.

The oracle is ExecuTorch's quantized kernel library as compiled into its AOT
library (the same C++ the runtime runs, callable eagerly as
``torch.ops.quantized_decomposed.*.out``), for dense randomized coverage.
Integer results must match exactly; test_quantized_programs.py covers the
calling convention, in programs run on both runtimes.

ExecuTorch's kernels abort the process on invalid arguments, so the eager
oracle is only ever given valid ones.
"""

from __future__ import annotations

import math

import executorch.exir.passes._quant_patterns_and_replacements  # noqa: F401 - functional add, mixed_*
import executorch.kernels.quantized  # noqa: F401 - registers the kernels and their out variants
import pytest
import torch

from pterun.errors import InvalidArgument
from pterun.kernels.quantized import dequantize, quantize
from pterun.kernels.quantized.add import add
from pterun.kernels.quantized.embedding import embedding_kernel
from pterun.kernels.quantized.matmul import mixed_linear, mixed_mm
from pterun.kernels.quantized.qparams import choose_qparams, choose_qparams_per_token_asymmetric
from tests.support.compare import assert_matches

qd = torch.ops.quantized_decomposed

_BOUNDS = {
    torch.int8: (-128, 127), torch.uint8: (0, 255), torch.int16: (-32768, 32767),
    torch.uint16: (0, 65535), torch.int32: (-(2**31), 2**31 - 1),
}


def _wide_floats(shape, seed: int) -> torch.Tensor:
    """Values across many magnitudes, with rounding ties and values no int64 holds."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g) * 10 ** torch.empty(shape).uniform_(-4, 4, generator=g)
    flat = x.view(-1)
    specials = torch.tensor(
        [0.5, 1.5, 2.5, -0.5, -2.5, 0.0, -0.0, 1e30, -1e30, math.inf, -math.inf, math.nan]
    )
    flat[: specials.numel()] = specials
    return x


def _assert_equal(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype}, expected {expected.dtype}"
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)}, not {tuple(expected.shape)}"
    same = actual == expected
    if actual.is_floating_point():
        same |= torch.isnan(actual) & torch.isnan(expected)
    assert bool(same.all()), f"{what}: {int((~same).sum())} of {actual.numel()} values differ"


@pytest.mark.parametrize("dtype", list(_BOUNDS))
@pytest.mark.parametrize("input_dtype", [torch.float32, torch.float64, torch.float16])
def test_quantize_per_tensor_matches_executorch(dtype, input_dtype):
    lo, hi = _BOUNDS[dtype]
    x = _wide_floats((9, 37), seed=list(_BOUNDS).index(dtype) * 3 + input_dtype.itemsize).to(input_dtype)
    for scale, zero_point in ((0.1, 3), (1.0, 0), (3.7e-3, -11), (123.456, 7), (1e-8, 1)):
        if lo == 0:
            zero_point = abs(zero_point)
        expected = qd.quantize_per_tensor.out(
            x, scale, zero_point, lo, hi, dtype, out=torch.empty(x.shape, dtype=dtype)
        )
        actual = torch.empty(0, dtype=dtype)
        quantize.quantize_per_tensor(x, scale, zero_point, lo, hi, dtype, actual)
        _assert_equal(actual, expected, f"quantize_per_tensor scale={scale} zp={zero_point}")


def test_quantize_sends_unrepresentable_values_to_quant_min():
    # On x86 ExecuTorch's float -> int64 conversion turns NaN, +-inf and huge values into INT64_MIN.
    x = torch.tensor([math.inf, -math.inf, math.nan, 1e30, -1e30, 1e10])
    actual = torch.empty(0, dtype=torch.int8)
    quantize.quantize_per_tensor(x, 1.0, 0, -128, 127, torch.int8, actual)
    expected = qd.quantize_per_tensor.out(x, 1.0, 0, -128, 127, torch.int8,
                                          out=torch.empty(6, dtype=torch.int8))
    _assert_equal(actual, expected, "unrepresentable")
    assert actual.tolist() == [-128, -128, -128, -128, -128, 127]


def test_quantize_rounds_half_to_even():
    x = torch.arange(-8, 8, dtype=torch.float32) + 0.5
    actual = torch.empty(0, dtype=torch.int8)
    quantize.quantize_per_tensor(x, 1.0, 0, -128, 127, torch.int8, actual)
    expected = qd.quantize_per_tensor.out(x, 1.0, 0, -128, 127, torch.int8,
                                          out=torch.empty(16, dtype=torch.int8))
    _assert_equal(actual, expected, "ties")


def test_quantize_per_tensor_tensor_args_matches_executorch():
    x = _wide_floats((4, 50), seed=5)
    scale, zero_point = torch.tensor([0.037], dtype=torch.float64), torch.tensor([-3])
    expected = qd.quantize_per_tensor.Tensor_out(
        x, scale, zero_point, -128, 127, torch.int8, out=torch.empty(x.shape, dtype=torch.int8)
    )
    actual = torch.empty(0, dtype=torch.int8)
    quantize.quantize_per_tensor_tensor(x, scale, zero_point, -128, 127, torch.int8, actual)
    _assert_equal(actual, expected, "quantize_per_tensor.Tensor_out")


@pytest.mark.parametrize("dtype", list(_BOUNDS))
@pytest.mark.parametrize("out_dtype", [torch.float32, torch.float64, torch.float16])
def test_dequantize_per_tensor_matches_executorch(dtype, out_dtype):
    lo, hi = _BOUNDS[dtype]
    g = torch.Generator().manual_seed(7)
    q = torch.randint(lo, hi, (6, 41), generator=g, dtype=torch.int64).to(dtype)
    for scale, zero_point in ((0.1, 3), (1.0, 0), (3.7e-3, 11), (0.3333333333, 127)):
        expected = qd.dequantize_per_tensor.out(
            q, scale, zero_point, lo, hi, dtype, out_dtype=out_dtype,
            out=torch.empty(q.shape, dtype=out_dtype),
        )
        actual = torch.empty(0, dtype=out_dtype)
        dequantize.dequantize_per_tensor(q, scale, zero_point, lo, hi, dtype, out_dtype, actual)
        _assert_equal(actual, expected, f"dequantize_per_tensor scale={scale}")
        # Without out_dtype the out tensor's type decides.
        dequantize.dequantize_per_tensor(q, scale, zero_point, lo, hi, dtype, None, actual)
        _assert_equal(actual, expected, "dequantize_per_tensor without out_dtype")


def test_dequantize_per_tensor_tensor_args_matches_executorch():
    q = torch.randint(-128, 127, (3, 70), dtype=torch.int8)
    scale, zero_point = torch.tensor([0.0123], dtype=torch.float64), torch.tensor([5])
    expected = qd.dequantize_per_tensor.Tensor_out(
        q, scale, zero_point, -128, 127, torch.int8, out=torch.empty(q.shape)
    )
    actual = torch.empty(0)
    dequantize.dequantize_per_tensor_tensor(q, scale, zero_point, -128, 127, torch.int8, None, actual)
    _assert_equal(actual, expected, "dequantize_per_tensor.Tensor_out")


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
@pytest.mark.parametrize("input_dtype", [torch.float32, torch.float64])
def test_quantize_per_channel_matches_executorch(axis, input_dtype):
    x = _wide_floats((5, 6, 7), seed=axis + 10).to(input_dtype)
    channels = x.shape[axis]
    g = torch.Generator().manual_seed(11)
    scales = (torch.rand(channels, generator=g, dtype=torch.float64) + 1e-3) * 0.05
    zero_points = torch.randint(-20, 20, (channels,), generator=g)
    expected = qd.quantize_per_channel.out(
        x, scales, zero_points, axis, -128, 127, torch.int8, out=torch.empty(x.shape, dtype=torch.int8)
    )
    actual = torch.empty(0, dtype=torch.int8)
    quantize.quantize_per_channel(x, scales, zero_points, axis, -128, 127, torch.int8, actual)
    _assert_equal(actual, expected, "quantize_per_channel")


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("out_dtype", [torch.float32, torch.float64, torch.float16])
@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8, torch.int32])
def test_dequantize_per_channel_matches_executorch(axis, out_dtype, dtype):
    lo, hi = (-128, 127) if dtype != torch.uint8 else (0, 255)
    g = torch.Generator().manual_seed(13)
    q = torch.randint(lo, hi, (4, 9, 5), generator=g).to(dtype)
    channels = q.shape[axis]
    for scale_dtype in (torch.float32, torch.float64):
        scales = (torch.rand(channels, generator=g) * 0.1 + 1e-4).to(scale_dtype)
        for zero_points in (torch.randint(0, 10, (channels,), generator=g), None):
            expected = qd.dequantize_per_channel.out(
                q, scales, zero_points, axis, lo, hi, dtype, out_dtype=out_dtype,
                out=torch.empty(q.shape, dtype=out_dtype),
            )
            actual = torch.empty(0, dtype=out_dtype)
            dequantize.dequantize_per_channel(q, scales, zero_points, axis, lo, hi, dtype, out_dtype, actual)
            what = f"dequantize_per_channel {scale_dtype} zp={zero_points is not None}"
            _assert_equal(actual, expected, what)


@pytest.mark.parametrize("out_dtype", [torch.float32, torch.float64, torch.float16])
def test_dequantize_per_channel_one_dimensional_matches_executorch(out_dtype):
    # ExecuTorch converts to the output type before scaling when the input is 1-d.
    q = torch.randint(-128, 127, (300,), dtype=torch.int32)
    scales = torch.rand(300) * 40 + 1e-3
    zero_points = torch.randint(-9, 9, (300,))
    expected = qd.dequantize_per_channel.out(
        q, scales, zero_points, 0, -128, 127, torch.int32, out_dtype=out_dtype,
        out=torch.empty(300, dtype=out_dtype),
    )
    actual = torch.empty(0, dtype=out_dtype)
    dequantize.dequantize_per_channel(q, scales, zero_points, 0, -128, 127, torch.int32, out_dtype, actual)
    _assert_equal(actual, expected, "dequantize_per_channel 1-d")


def _qparams_inputs():
    g = torch.Generator().manual_seed(17)
    cases = []
    for magnitude in (1e-9, 1e-7, 3e-6, 6e-5, 1e-3, 1.0, 1e3, 1e20):
        base = torch.rand(6, 16, generator=g) * magnitude
        cases += [base, -base, base - magnitude / 2, base - magnitude / 3, base + magnitude,
                  -(base + magnitude), torch.full((6, 16), magnitude)]
    cases.append(torch.zeros(6, 16))
    with_nan = torch.randn(6, 16, generator=g)
    with_nan[0, 3] = math.nan  # not first: std::min_element never picks it
    cases.append(with_nan)
    with_inf = torch.randn(6, 16, generator=g)
    with_inf[2, 5] = math.inf  # an infinite scale, and a NaN zero point on the way
    cases.append(with_inf)
    return cases


@pytest.mark.parametrize("bounds", [(-128, 127), (0, 255), (-8, 7), (0, 15)])
def test_choose_qparams_matches_executorch(bounds):
    lo, hi = bounds
    for i, x in enumerate(_qparams_inputs()):
        scale_ref, zp_ref = torch.empty(1, dtype=torch.float64), torch.empty(1, dtype=torch.int64)
        qd.choose_qparams.Tensor_out(x, lo, hi, 1e-5, torch.int8, scale_out=scale_ref, zero_point_out=zp_ref)
        scale, zero_point = torch.empty(1, dtype=torch.float64), torch.empty(1, dtype=torch.int64)
        choose_qparams(x, lo, hi, 1e-5, torch.int8, scale, zero_point)
        _assert_equal(scale, scale_ref, f"choose_qparams scale, case {i}")
        _assert_equal(zero_point, zp_ref, f"choose_qparams zero point, case {i}")


def test_choose_qparams_per_token_asymmetric_matches_executorch():
    for i, x in enumerate(_qparams_inputs()):
        x = x.reshape(2, 3, 16)
        scale_ref, zp_ref = torch.empty(2, 3, 1, dtype=torch.float64), torch.empty(2, 3, 1, dtype=torch.int64)
        qd.choose_qparams_per_token_asymmetric.out(x, torch.int8, scale_out=scale_ref, zero_point_out=zp_ref)
        scale, zero_point = torch.empty(0, dtype=torch.float64), torch.empty(0, dtype=torch.int64)
        choose_qparams_per_token_asymmetric(x, torch.int8, scale, zero_point)
        _assert_equal(scale, scale_ref, f"per-token scale, case {i}")
        _assert_equal(zero_point, zp_ref, f"per-token zero point, case {i}")


@pytest.mark.parametrize("out_dtype", [torch.float32, torch.float16])
def test_per_token_quantize_and_dequantize_match_executorch(out_dtype):
    x = torch.randn(3, 5, 24) * torch.logspace(-3, 3, 5)[None, :, None]
    scale, zero_point = torch.empty(3, 5, 1, dtype=torch.float64), torch.empty(3, 5, 1, dtype=torch.int64)
    qd.choose_qparams_per_token_asymmetric.out(x, torch.int8, scale_out=scale, zero_point_out=zero_point)
    expected_q = qd.quantize_per_token.out(
        x, scale, zero_point, -128, 127, torch.int8, out=torch.empty(x.shape, dtype=torch.int8)
    )
    q = torch.empty(0, dtype=torch.int8)
    quantize.quantize_per_token(x, scale, zero_point, -128, 127, torch.int8, q)
    _assert_equal(q, expected_q, "quantize_per_token")
    expected = qd.dequantize_per_token.out(
        q, scale, zero_point, -128, 127, torch.int8, out_dtype, out=torch.empty(x.shape, dtype=out_dtype)
    )
    actual = torch.empty(0, dtype=out_dtype)
    dequantize.dequantize_per_token(q, scale, zero_point, -128, 127, torch.int8, out_dtype, actual)
    _assert_equal(actual, expected, "dequantize_per_token")


def test_quantized_add_matches_executorch():
    g = torch.Generator().manual_seed(19)
    for trial in range(20):
        a = torch.randint(0, 256, (7, 9), generator=g, dtype=torch.uint8)
        b = torch.randint(0, 256, (7, 9), generator=g, dtype=torch.uint8)
        scales = (torch.rand(3, generator=g, dtype=torch.float64) * 0.2 + 1e-3).tolist()
        zps = torch.randint(0, 256, (3,), generator=g).tolist()
        args = (scales[0], zps[0], 0, 255, b, scales[1], zps[1], 0, 255, scales[2], zps[2], 10, 250)
        expected = qd.add.out(a, *args, out=torch.empty(7, 9, dtype=torch.uint8))
        actual = torch.empty(7, 9, dtype=torch.uint8)
        add(a, *args, actual)
        _assert_equal(actual, expected, f"add, trial {trial}")


def test_mixed_mm_and_mixed_linear_match_executorch():
    g = torch.Generator().manual_seed(23)
    x = torch.randn(5, 24, generator=g)
    w = torch.randint(-128, 128, (24, 7), generator=g, dtype=torch.int8)
    s = torch.rand(24, generator=g) * 0.1
    expected = qd.mixed_mm.out(x, w, s, None, out=torch.empty(5, 7))
    actual = torch.empty(0)
    mixed_mm(x, w, s, None, actual)
    assert_matches(actual, expected)
    wl = torch.randint(-128, 128, (6, 24), generator=g, dtype=torch.int8)
    for scales in (torch.rand(6, generator=g), torch.rand(6, 3, generator=g), torch.rand(6, 5, generator=g)):
        expected = qd.mixed_linear.out(x, wl, scales, None, None, out=torch.empty(5, 6))
        actual = torch.empty(0)
        mixed_linear(x, wl, scales, None, None, actual)
        assert_matches(actual, expected)


def test_mixed_mm_half_matches_executorch():
    g = torch.Generator().manual_seed(29)
    x = torch.randn(3, 16, generator=g).half()
    w = torch.randint(-128, 128, (16, 4), generator=g, dtype=torch.int8)
    s = (torch.rand(16, generator=g) * 0.05).half()
    expected = qd.mixed_mm.out(x, w, s, None, out=torch.empty(3, 4, dtype=torch.float16))
    actual = torch.empty(0, dtype=torch.float16)
    mixed_mm(x, w, s, None, actual)
    assert_matches(actual, expected)


def test_invalid_arguments_raise():
    x = torch.randn(4)
    with pytest.raises(InvalidArgument):
        quantize.quantize_per_tensor(x, 0.1, 0, -128, 127, torch.int8, torch.empty(4, dtype=torch.uint8))
    with pytest.raises(InvalidArgument):
        quantize.quantize_per_tensor(x, 0.1, 0, -200, 127, torch.int8, torch.empty(4, dtype=torch.int8))
    with pytest.raises(InvalidArgument):
        dequantize.dequantize_per_tensor(torch.zeros(4, dtype=torch.int8), 0.1, 0, -128, 127, torch.uint8,
                                         None, torch.empty(4))
    with pytest.raises(InvalidArgument):
        quantize.quantize_per_channel(x, torch.ones(3, dtype=torch.float64),
                                      torch.zeros(3, dtype=torch.int64), 0, -128, 127, torch.int8,
                                      torch.empty(4, dtype=torch.int8))
    with pytest.raises(InvalidArgument):
        dequantize.dequantize_per_channel(torch.zeros(4, 2, dtype=torch.int8), torch.ones(4), None, 2, -128,
                                          127, torch.int8, None, torch.empty(4, 2))
    with pytest.raises(InvalidArgument):
        embedding_kernel(8, False)(torch.zeros(4, 8, dtype=torch.int8), torch.ones(4), None, -128, 127,
                                   torch.tensor([4]), torch.empty(0))
