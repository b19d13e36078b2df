"""The kernels of network layers against PyTorch: matrix products, normalizations, softmax, reductions,
rotary embeddings, convolution and pooling."""

from __future__ import annotations

import math

import pytest
import torch

from tests.backends.webgpu.adapter import needs_adapter
from tests.backends.webgpu.kernels import check, positive, rand

pytestmark = needs_adapter


# -- matrix products ---------------------------------------------------------------------------------

MNK = [(1, 1, 16), (7, 33, 65), (70, 18, 129), (16, 16, 16)]


@pytest.mark.parametrize("m,n,k", MNK, ids=str)
def test_linear(m, n, k):
    x, w, b = rand(m, k, seed=1), rand(n, k, seed=2), rand(n, seed=3)
    check("aten.linear.default", x, w, b)
    check("aten.linear.default", x.reshape(1, m, k), w, None)


@pytest.mark.parametrize("m,n,k", MNK, ids=str)
def test_mm_bmm_addmm(m, n, k):
    check("aten.mm.default", rand(m, k, seed=1), rand(k, n, seed=2))
    check("aten.bmm.default", rand(3, m, k, seed=1), rand(3, k, n, seed=2))
    check("aten.addmm.default", rand(n, seed=3), rand(m, k, seed=1), rand(k, n, seed=2), 0.5, 2.0)
    check("aten.addmm.default", rand(m, n, seed=3), rand(m, k, seed=1), rand(k, n, seed=2))


# -- rows: norms, softmax, reductions ----------------------------------------------------------------

ROWS = [((1, 5), 5), ((3, 64), 64), ((2, 35, 130), 130), ((4, 1000), 1000)]


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


@pytest.mark.parametrize("shape,d", ROWS, ids=str)
def test_rms_norm(shape, d):
    check("et_vk.rms_norm.default", rand(*shape, scale=3.0), rand(d, seed=5), 1e-5, reference=rms_norm)


@pytest.mark.parametrize("shape,d", ROWS, ids=str)
def test_layer_norm(shape, d):
    x = rand(*shape, scale=3.0) + 2.0
    check("aten.native_layer_norm.default", x, [d], rand(d, seed=5), rand(d, seed=6), 1e-5)
    check("aten.native_layer_norm.default", x, [d], None, None, 1e-5)


def test_rows_beyond_one_grid_dimension():
    # 70000 rows: more workgroups than one grid dimension holds.
    check("et_vk.rms_norm.default", rand(70000, 2), rand(2), 1e-6, reference=rms_norm)
    check("aten._softmax.default", rand(70000, 3), -1, False)


@pytest.mark.parametrize("shape", [(3, 5, 9), (2, 70, 130), (1, 1000)], ids=str)
@pytest.mark.parametrize("dim", [-1, 0, 1])
def test_softmax(shape, dim):
    if dim >= len(shape):
        pytest.skip("no such dim")
    x = rand(*shape, scale=8.0)
    check("aten._softmax.default", x, dim, False)
    check("aten._log_softmax.default", x, dim, False)


def test_softmax_with_masked_rows():
    x = rand(4, 70)
    x[:, 30:] = -math.inf
    check("aten._softmax.default", x, -1, False)


@pytest.mark.parametrize(
    "name", ["aten.sum.dim_IntList", "aten.mean.dim", "aten.amax.default", "aten.amin.default"]
)
def test_reduce(name):
    x = rand(3, 70, 5)
    for dims, keep in (([1], True), ([0, 2], False), ([-1], False)):
        if name.startswith("aten.am"):
            check(name, x, dims, keep)
        else:
            check(name, x, dims, keep, None)


@pytest.mark.parametrize("shape", [(1, 5, 7, 9), (2, 70, 3), (3, 4)], ids=str)
def test_batch_norm(shape):
    c = shape[1]
    mean, var = rand(c, seed=1), positive(c, seed=2)
    check(
        "aten._native_batch_norm_legit_no_training.default",
        rand(*shape),
        rand(c, seed=3),
        rand(c, seed=4),
        mean,
        var,
        0.1,
        1e-5,
    )
    check("aten._native_batch_norm_legit_no_training.default", rand(*shape), None, None, mean, var, 0.1, 1e-3)


# -- rotary embeddings -------------------------------------------------------------------------------


def rope(xq, xk, cos, sin):
    def rotate(x):
        r, i = x.reshape(*x.shape[:-1], -1, 2).unbind(-1)
        c = cos.view(1, x.shape[1], 1, -1) if cos.ndim == 2 else cos.unsqueeze(0)
        s = sin.view(1, x.shape[1], 1, -1) if sin.ndim == 2 else sin.unsqueeze(0)
        return torch.stack([r * c - i * s, r * s + i * c], -1).flatten(3)

    return rotate(xq), rotate(xk)


@pytest.mark.parametrize("s,h,kv,d", [(1, 4, 2, 16), (9, 3, 1, 8), (33, 4, 4, 66)], ids=str)
def test_rotary_embedding(s, h, kv, d):
    angles = torch.arange(s).float()[:, None] * torch.rand(d // 2)[None] * 3
    check(
        "et_vk.apply_rotary_emb.default",
        rand(2, s, h, d, seed=1),
        rand(2, s, kv, d, seed=2),
        angles.cos(),
        angles.sin(),
        reference=rope,
    )


def test_rotary_embedding_per_head_tables():
    angles = torch.rand(5, 3, 4) * 10
    check(
        "et_vk.apply_rotary_emb.default",
        rand(1, 5, 3, 8),
        rand(1, 5, 3, 8, seed=3),
        angles.cos(),
        angles.sin(),
        reference=rope,
    )


# -- convolution and pooling -------------------------------------------------------------------------

CONVS = [
    # input, weight, bias?, stride, padding, dilation, groups
    ((1, 3, 13, 13), (8, 3, 3, 3), True, [1, 1], [1, 1], [1, 1], 1),
    ((1, 6, 17, 11), (6, 1, 3, 3), True, [2, 1], [2, 2], [2, 2], 6),
    ((2, 4, 9, 9), (6, 2, 1, 3), False, [1, 2], [0, 1], [1, 1], 2),
    ((1, 16, 20, 20), (70, 16, 1, 1), True, [1, 1], [0, 0], [1, 1], 1),
]


@pytest.mark.parametrize("case", CONVS, ids=lambda c: f"{c[0]}x{c[1]}")
def test_convolution(case):
    xs, ws, has_bias, stride, padding, dilation, groups = case
    bias = rand(ws[0], seed=3) if has_bias else None
    check(
        "aten.convolution.default",
        rand(*xs),
        rand(*ws, seed=2),
        bias,
        stride,
        padding,
        dilation,
        False,
        [0, 0],
        groups,
    )


def test_transposed_and_1d_convolution():
    check(
        "aten.convolution.default",
        rand(1, 4, 6, 7),
        rand(4, 3, 3, 3, seed=2),
        rand(6, seed=3),
        [2, 2],
        [1, 1],
        [1, 1],
        True,
        [1, 0],
        2,
    )
    check(
        "aten.convolution.default",
        rand(1, 5, 30),
        rand(7, 5, 3, seed=2),
        rand(7, seed=3),
        [2],
        [1],
        [1],
        False,
        [0],
        1,
    )


def conv_with_clamp(x, w, b, stride, padding, dilation, transposed, output_padding, groups, lo, hi):
    y = torch.ops.aten.convolution.default(
        x, w, b, stride, padding, dilation, transposed, output_padding, groups
    )
    return y.clamp(lo, hi if hi < 3.4e38 else None)


def test_conv_with_clamp():
    check(
        "et_vk.conv_with_clamp.default",
        rand(1, 3, 10, 10),
        rand(5, 3, 3, 3, seed=2),
        rand(5),
        [1, 1],
        [1, 1],
        [1, 1],
        False,
        [0, 0],
        1,
        0.0,
        6.0,
        reference=conv_with_clamp,
    )
    check(
        "et_vk.conv_with_clamp.default",
        rand(1, 3, 10, 10),
        rand(5, 3, 3, 3, seed=2),
        None,
        [1, 1],
        [1, 1],
        [1, 1],
        False,
        [0, 0],
        1,
        -0.5,
        1.7976931348623157e308,
        reference=conv_with_clamp,
    )


@pytest.mark.parametrize(
    "args",
    [
        ([2, 2], [], [0, 0], [1, 1], False),
        ([3, 3], [2, 2], [1, 1], [1, 1], True),
        ([3, 2], [1, 2], [1, 0], [2, 1], False),
    ],
    ids=str,
)
def test_max_pool(args):
    x = rand(1, 5, 13, 11)
    check("aten.max_pool2d_with_indices.default", x, *args)
    check("aten.max_pool2d.default", x, *args)


@pytest.mark.parametrize(
    "args",
    [
        ([2, 2], [], [0, 0], False, True, None),
        ([3, 3], [2, 2], [1, 1], True, False, None),
        ([3, 3], [2, 2], [1, 1], True, True, None),
        ([2, 3], [1, 2], [1, 1], False, True, 5),
    ],
    ids=str,
)
def test_avg_pool(args):
    check("aten.avg_pool2d.default", rand(1, 5, 13, 11), *args)
