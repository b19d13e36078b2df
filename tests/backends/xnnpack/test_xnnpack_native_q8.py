"""pterun's native static 8-bit kernels (``native/qconv.c``, ``qbinary.c``, ``convert.c``) against XNNPACK's
arithmetic written out in NumPy, with every instruction set this CPU has, on what the exported programs seldom
reach: channel counts around the kernels' blocks, strides, dilations, asymmetric padding, groups, depthwise
multipliers, saturating requantization, broadcasting, NaN and infinities. The programs' tests
(test_xnnpack_qinteger.py, test_xnnpack_native.py, test_xnnpack_isa.py) hold the same kernels against
ExecuTorch itself."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pterun.backends.xnnpack.nodes import native

ISAS = {"portable": 0, "avx2": 1, "avx512vnni": 2}


def _isas() -> list[str]:
    if not native.available()[0]:
        return []
    best = native.kernel_isa()
    return {"avx512vnni": ["portable", "avx2", "avx512vnni"], "avx2": ["portable", "avx2"]}.get(best, ["portable"])


@pytest.fixture(params=_isas())
def kernel(request, monkeypatch) -> str:
    monkeypatch.setattr(native, "kernel_isa", lambda: request.param)
    return request.param


def _requantize(acc: np.ndarray, scale: np.ndarray, ozp: int, qmin: int, qmax: int) -> np.ndarray:
    """XNNPACK's fp32 requantization of int32 sums (x86: minps, cvtps, packs, saturating adds, packs, pmaxsb)."""
    f32 = np.float32
    v = np.minimum(acc.astype(np.int32).astype(f32) * scale.astype(f32), f32(qmax - ozp))
    q = np.where(v >= f32(-2.0 ** 31), np.rint(v), f32(-2.0 ** 31)).astype(np.int64)
    return np.clip(np.maximum(q, -32768) + ozp, qmin, qmax).astype(np.int8)


def _conv_reference(x, w, bias, scale, izp, ozp, qmin, qmax, groups, strides, dilations, pads, out_hw):
    """x [n, h, w, cin], w [cout, kh, kw, cin / groups]: sums of (x - izp) w over windows padded with izp."""
    n, h, wd, cin = x.shape
    cout, kh, kw, cin_g = w.shape
    (sh, sw), (dh, dw), (top, left), (oh, ow) = strides, dilations, pads, out_hw
    bottom = max(0, (oh - 1) * sh + (kh - 1) * dh + 1 - h - top)
    right = max(0, (ow - 1) * sw + (kw - 1) * dw + 1 - wd - left)
    xp = np.pad(x.astype(np.int64) - izp, ((0, 0), (top, bottom), (left, right), (0, 0)))
    acc = np.zeros((n, oh, ow, cout), dtype=np.int64) + bias
    cout_g = cout // groups
    for ky in range(kh):
        for kx in range(kw):
            patch = xp[:, ky * dh: ky * dh + (oh - 1) * sh + 1: sh, kx * dw: kx * dw + (ow - 1) * sw + 1: sw, :]
            for g in range(groups):
                wg = w[g * cout_g:(g + 1) * cout_g, ky, kx, :].astype(np.int64)
                acc[..., g * cout_g:(g + 1) * cout_g] += patch[..., g * cin_g:(g + 1) * cin_g] @ wg.T
    return _requantize(acc, scale, ozp, qmin, qmax)


# (groups, cin / groups, cout / groups, kernel, strides, dilations, (top, left, bottom, right), input h, w, batch)
CONVOLUTIONS = [
    (16, 1, 1, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 9, 7, 2),       # depthwise, a 32-channel block's half
    (48, 1, 1, (3, 3), (2, 1), (1, 1), (1, 0, 1, 1), 7, 6, 1),       # one and a half blocks: 16 channels a step
    (33, 1, 1, (3, 3), (2, 2), (1, 1), (0, 0, 1, 1), 11, 10, 1),     # an odd tail, TensorFlow's padding
    (70, 1, 1, (5, 5), (1, 2), (1, 1), (2, 1, 2, 3), 8, 9, 1),       # 25 taps: an odd last pair
    (7, 1, 1, (2, 3), (1, 1), (2, 1), (1, 0, 0, 2), 6, 6, 1),        # dilated, 6 taps
    (1, 1, 1, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 5, 5, 1),        # one channel
    (12, 1, 3, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 6, 5, 1),       # a depthwise multiplier: a product per group
    (4, 6, 10, (3, 3), (2, 1), (1, 1), (1, 1, 0, 1), 9, 8, 2),       # grouped
    (3, 24, 40, (3, 3), (1, 1), (1, 2), (1, 2, 1, 2), 7, 7, 1),      # grouped, dilated, two tiles per group
    (1, 3, 17, (7, 7), (2, 2), (1, 1), (3, 3, 3, 3), 16, 15, 1),     # a 3-channel stem
    (1, 70, 33, (1, 1), (1, 1), (1, 1), (0, 0, 0, 0), 9, 11, 1),     # pointwise: 99 rows (blocks of 64 and 8)
    (1, 200, 16, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 4, 5, 1),     # windows over 64 bytes a tap
    (1, 16, 48, (1, 1), (2, 2), (1, 1), (0, 0, 0, 0), 10, 10, 1),    # strided pointwise
    (1, 64, 20, (1, 1), (1, 1), (1, 1), (0, 0, 0, 0), 9, 11, 1),     # pointwise on the image's own rows (VNNI)
    (2, 24, 16, (1, 1), (1, 1), (1, 1), (0, 0, 0, 0), 5, 13, 2),     # the same per group
]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", CONVOLUTIONS, ids=lambda c: f"g{c[0]}-{c[1]}x{c[2]}-k{c[3][0]}{c[3][1]}")
def test_convolutions_are_xnnpacks_arithmetic(kernel, case, threads):
    groups, cin_g, cout_g, (kh, kw), strides, dilations, (top, left, bottom, right), h, w, n = case
    (sh, sw), (dh, dw) = strides, dilations
    oh = (h + top + bottom - (kh - 1) * dh - 1) // sh + 1
    ow = (w + left + right - (kw - 1) * dw - 1) // sw + 1
    g = torch.Generator().manual_seed(groups * 1000 + cin_g * 10 + cout_g)
    cin, cout = groups * cin_g, groups * cout_g
    x = torch.randint(-128, 128, (n, h, w, cin), dtype=torch.int8, generator=g)
    weights = torch.randint(-128, 128, (cout, kh, kw, cin_g), dtype=torch.int8, generator=g)
    bias = torch.randint(-40000, 40000, (cout,), dtype=torch.int32, generator=g)
    # scales from far below one step per sum to saturation both ways
    scale = torch.exp(torch.empty(cout).uniform_(-11.0, -2.0, generator=g)).float()
    for izp, ozp, qmin, qmax in ((3, -5, -128, 127), (-128, 20, -20, 127), (127, -128, -128, -100)):
        layer = native.qconv_pack(None, groups, cin_g, cout_g, (kh, kw), strides, dilations, (top, left), weights,
                                  scale, bias, izp, ozp, qmin, qmax)
        assert native.qconv_isa(layer) == kernel  # the premise: the instruction set under test
        y = torch.full((n, oh, ow, cout), 99, dtype=torch.int8)
        native._kernels().qconv_run(layer, n, h, w, x.data_ptr(), oh, ow, y.data_ptr(), threads)
        expected = _conv_reference(x.numpy(), weights.numpy(), bias.numpy().astype(np.int64), scale.numpy(), izp,
                                   ozp, qmin, qmax, groups, strides, dilations, (top, left), (oh, ow))
        assert np.array_equal(y.numpy(), expected), (
            f"{case} zero points {izp}, {ozp} on {kernel}: {(y.numpy() != expected).sum()} of {y.numel()} differ")


def test_a_filter_that_does_not_fit_is_refused():
    from types import SimpleNamespace

    from pterun.errors import DelegateInvalidCompatibility

    if not native.available()[0]:
        pytest.skip(native.available()[1])
    b = SimpleNamespace(where="node 3 (XNNConv2d, debug handle 7)")
    with pytest.raises(DelegateInvalidCompatibility, match=r"node 3 .*filter \[8, 3, 3, 4\]"):
        native.qconv_pack(b, 2, 3, 4, (3, 3), (1, 1), (1, 1), (1, 1), torch.zeros(8, 3, 3, 4, dtype=torch.int8),
                          torch.ones(8), None, 0, 0, -128, 127)


# (output shape, a's shape, b's shape): broadcasting of either operand, along any dimensions
BROADCASTS = [
    ((1000,), (1000,), (1000,)),
    ((37,), (37,), (1,)),
    ((2, 3, 4, 21), (2, 1, 1, 21), (2, 3, 4, 21)),          # squeeze-and-excitation's multiply
    ((4, 5, 6), (4, 1, 6), (1, 5, 1)),
    ((3, 1, 2, 2, 3, 17), (3, 1, 2, 1, 3, 17), (1, 1, 2, 2, 1, 17)),
    ((5, 19), (19,), (5, 1)),
]


def _add_reference(a, b, am, bm, bias, shift, ozp, qmin, qmax):
    acc = (bias + a.astype(np.int64) * am + b.astype(np.int64) * bm).astype(np.int32)  # wrapping, as XNNPACK's
    return np.clip((acc >> shift).astype(np.int64) + ozp, qmin, qmax).astype(np.int8)


def _mul_reference(a, b, azp, bzp, scale, ozp, qmin, qmax):
    product = ((a.astype(np.int64) - azp) * (b.astype(np.int64) - bzp)).astype(np.float32)
    return np.clip(np.rint(product * np.float32(scale)).astype(np.int64) + ozp, qmin, qmax).astype(np.int8)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shapes", BROADCASTS, ids=lambda s: "x".join(map(str, s[0])))
@pytest.mark.parametrize("op", ["add", "mul"])
def test_adds_and_multiplies_are_xnnpacks_arithmetic(kernel, op, shapes, threads):
    out, a_shape, b_shape = shapes
    g = torch.Generator().manual_seed(len(out) * 7 + out[-1])
    a = torch.randint(-128, 128, a_shape, dtype=torch.int8, generator=g)
    b = torch.randint(-128, 128, b_shape, dtype=torch.int8, generator=g)
    params = ((1 << 20) + 12345, -(1 << 19) - 777, (1 << 17) + 3 * 1024, 18) if op == "add" else (5, -7, 0, 0)
    scale = 0.0 if op == "add" else 0.00731
    for ozp, qmin, qmax in ((-3, -128, 127), (100, -50, 90)):
        kernel_op = native.qbinary_make(op, out, a_shape, b_shape, *params, scale, ozp, qmin, qmax)
        assert native.qbinary_isa(kernel_op) == kernel
        y = torch.full(out, 99, dtype=torch.int8)
        native._kernels().qbinary_run(kernel_op, a.data_ptr(), b.data_ptr(), y.data_ptr(), threads)
        aa, bb = np.broadcast_to(a.numpy(), out), np.broadcast_to(b.numpy(), out)
        if op == "add":
            expected = _add_reference(aa, bb, *params, ozp, qmin, qmax)
        else:
            expected = _mul_reference(aa, bb, params[0], params[1], scale, ozp, qmin, qmax)
        assert np.array_equal(y.numpy(), expected), f"{op} {shapes} on {kernel}: {(y.numpy() != expected).sum()}"


def test_large_elementwise_outputs_split_over_threads(kernel):
    """Outputs large enough for several tasks, split inside innermost rows: the same bits at 1 and 2 threads."""
    shape = (3, 70001)
    g = torch.Generator().manual_seed(11)
    a = torch.randint(-128, 128, shape, dtype=torch.int8, generator=g)
    b = torch.randint(-128, 128, (1, 70001), dtype=torch.int8, generator=g)
    op = native.qbinary_make("add", shape, shape, (1, 70001), 1 << 20, 1 << 19, 1 << 14, 15, 0.0, 1, -128, 127)
    results = []
    for threads in (1, 2):
        y = torch.empty(shape, dtype=torch.int8)
        native._kernels().qbinary_run(op, a.data_ptr(), b.data_ptr(), y.data_ptr(), threads)
        results.append(y)
    expected = _add_reference(a.numpy(), np.broadcast_to(b.numpy(), shape), 1 << 20, 1 << 19, 1 << 14, 15, 1, -128,
                              127)
    assert torch.equal(results[0], results[1]) and np.array_equal(results[0].numpy(), expected)


def test_more_than_six_dimensions_are_refused():
    if not native.available()[0]:
        pytest.skip(native.available()[1])
    shape = (1, 2, 1, 2, 1, 2, 3)
    with pytest.raises(ValueError, match="more than 6 dimensions"):
        native.qbinary_make("add", shape, shape, shape, 1, 1, 0, 12, 0.0, 0, -128, 127)


EDGES = [0.0, -0.0, 0.5, 1.5, 2.5, -0.5, -1.5, 126.5, 127.5, -127.5, -128.5, 1e9, -1e9, 3e38, -3e38, float("inf"),
         -float("inf"), float("nan"), 1e-45, -1e-45]


@pytest.mark.parametrize("threads", [1, 2])
def test_converts_are_xnnpacks_arithmetic(kernel, threads):
    """f32 -> qs8: min(x / scale, 32767), a NaN giving 32767 (x86's minps), rounded half to even, saturated; qs8
    -> f32: (q - zero point) * scale. Lengths around the vectors' and over the tasks' sizes."""
    f32 = np.float32
    g = torch.Generator().manual_seed(5)
    for n in (1, 15, 17, 200003):
        x = torch.randn(n, generator=g) * 40
        x[: min(n, len(EDGES))] = torch.tensor(EDGES[: min(n, len(EDGES))])
        for inverse, zp in ((1.0, 0), (f32(1) / f32(0.37), -7), (2.0, 127)):
            q = torch.empty(n, dtype=torch.int8)
            native._kernels().quantize_s8(ISAS[kernel], x.data_ptr(), q.data_ptr(), n, float(inverse), zp, threads)
            with np.errstate(over="ignore"):
                v = np.minimum(x.numpy() * f32(inverse), f32(32767))
            v = np.where(np.isnan(v), f32(32767), v)
            expected = np.clip(np.maximum(np.rint(v), -32768).astype(np.int64) + zp, -128, 127).astype(np.int8)
            assert np.array_equal(q.numpy(), expected), f"{n} values on {kernel}: {(q.numpy() != expected).sum()}"
            back = torch.empty(n)
            native._kernels().dequantize_s8(ISAS[kernel], q.data_ptr(), back.data_ptr(), n, 0.37, zp, threads)
            assert np.array_equal(back.numpy(), (q.numpy().astype(np.int32) - zp).astype(f32) * f32(0.37))


def test_tables_of_8bit_values(kernel):
    """Every byte through a table of 256 (the round trips through float32 optimize.py turns into tables), at
    lengths around a vector's."""
    table = torch.randint(-128, 128, (256,), dtype=torch.int8, generator=torch.Generator().manual_seed(3))
    for n in (1, 63, 64, 65, 1000, 70001):
        x = torch.arange(n).remainder(256).to(torch.uint8).view(torch.int8)
        y = torch.empty(n, dtype=torch.int8)
        native._kernels().lookup_s8(ISAS[kernel], table.data_ptr(), x.data_ptr(), y.data_ptr(), n, 2)
        assert torch.equal(y, table[x.view(torch.uint8).long()]), f"{n} values on {kernel}"


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(("window", "size"), [
    ((2, 2, 2, 2, 1, 1, 0, 0), (2, 9, 8, 16)),    # (kh, kw, sh, sw, dh, dw, top, left); n, h, w, c
    ((3, 3, 2, 2, 1, 1, 1, 1), (1, 11, 10, 37)),  # ResNet's stem pooling, padded
    ((3, 2, 1, 2, 2, 1, 0, 1), (1, 7, 9, 300)),   # dilated, over 256 channels
    ((2, 3, 2, 1, 1, 2, 1, 1), (1, 6, 7, 48)),    # 32 channels and 16 a step
])
def test_max_pooling_takes_the_largest_value(window, size, threads):
    if not native.available()[0]:
        pytest.skip(native.available()[1])
    kh, kw, sh, sw, dh, dw, top, left = window
    n, h, w, c = size
    oh, ow = (h + 2 * top - (kh - 1) * dh - 1) // sh + 1, (w + 2 * left - (kw - 1) * dw - 1) // sw + 1
    x = torch.randint(-128, 128, size, dtype=torch.int8, generator=torch.Generator().manual_seed(c))
    y = torch.empty(n, oh, ow, c, dtype=torch.int8)
    geometry = torch.tensor(window, dtype=torch.int64)  # alive through the call
    native._kernels().qmaxpool_s8(x.data_ptr(), y.data_ptr(), n, h, w, c, oh, ow, geometry.data_ptr(), -100, 90,
                                  threads)
    padded = np.pad(x.numpy(), ((0, 0), (top, kh * dh), (left, kw * dw), (0, 0)), constant_values=-128)
    expected = np.full((n, oh, ow, c), -128, dtype=np.int8)
    for ky in range(kh):
        for kx in range(kw):
            view = padded[:, ky * dh: ky * dh + (oh - 1) * sh + 1: sh, kx * dw: kx * dw + (ow - 1) * sw + 1: sw]
            expected = np.maximum(expected, view)
    assert np.array_equal(y.numpy(), np.clip(expected, -100, 90))


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("size", [(2, 4, 4, 16), (1, 56, 56, 300), (3, 1, 7, 5)])
def test_global_means_are_xnnpacks_arithmetic(size, threads):
    """An exact int32 sum, then float32(sum) * scale + zero (two roundings), rounded half to even, clamped."""
    if not native.available()[0]:
        pytest.skip(native.available()[1])
    n, h, w, c = size
    x = torch.randint(-128, 128, size, dtype=torch.int8, generator=torch.Generator().manual_seed(h))
    f32 = np.float32
    scale, zero = f32(0.37) * (f32(1) / f32(h * w)), f32(-3.25)
    y = torch.empty(n, c, dtype=torch.int8)
    native._kernels().qmean_s8(x.data_ptr(), y.data_ptr(), n, h, w, c, float(scale), float(zero), -120, 127, threads)
    sums = x.numpy().astype(np.int64).sum((1, 2)).astype(f32)
    expected = np.clip(np.rint(sums * scale + zero), -120, 127).astype(np.int8)
    assert np.array_equal(y.numpy(), expected)
