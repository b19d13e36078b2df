"""Each WGSL kernel against PyTorch on random inputs: several shapes per operator, with odd sizes and
sizes past one workgroup (64 invocations, 16 x 16 matmul tiles, 65535 workgroups per grid dimension)."""

from __future__ import annotations

import math

import pytest
import torch

from tests.backends.webgpu.adapter import needs_adapter
from tests.backends.webgpu.kernels import check

pytestmark = needs_adapter

SHAPES = [(1,), (7,), (3, 5, 9), (130, 67)]


def rand(*shape, scale=1.0, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * scale


def positive(*shape, seed=0):
    return rand(*shape, seed=seed).abs() + 0.05


UNARY = {
    "aten.abs.default": (),
    "aten.neg.default": (),
    "aten.sigmoid.default": (),
    "aten.tanh.default": (),
    "aten.exp.default": (),
    "aten.relu.default": (),
    "aten.silu.default": (),
    "aten.round.default": (),
    "aten.floor.default": (),
    "aten.ceil.default": (),
    "aten.trunc.default": (),
    "aten.hardswish.default": (),
    "aten.hardsigmoid.default": (),
    "aten.erf.default": (),
    "aten.reciprocal.default": (),
    "aten.hardtanh.default": (-0.5, 0.7),
    "aten.leaky_relu.default": (0.2,),
    "aten.hardshrink.default": (0.3,),
    "aten.gelu.default": ("none",),
}
POSITIVE = {"aten.log.default", "aten.log10.default", "aten.sqrt.default", "aten.rsqrt.default"}


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("name", sorted(UNARY) + sorted(POSITIVE))
def test_unary(name, shape):
    x = positive(*shape) if name in POSITIVE else rand(*shape, scale=3.0)
    if name == "aten.round.default":
        x = torch.cat([x.flatten(), torch.tensor([0.5, 1.5, 2.5, -0.5, -2.5])])
    check(name, x, *UNARY.get(name, ()), reference=gelu if name == "aten.gelu.default" else None)


def gelu(x, approximate):
    return torch.nn.functional.gelu(x, approximate=approximate)


@pytest.mark.parametrize("name", ["aten.sin.default", "aten.cos.default"])
def test_sin_cos_far_from_zero(name):
    # Rotary tables take sin/cos of position * frequency: arguments far beyond 2 pi.
    x = torch.cat([rand(1000, scale=40.0), torch.arange(0, 64, dtype=torch.float32) * 0.7])
    check(name, x)


def test_gelu_tanh_and_large_inputs():
    check("aten.gelu.default", rand(5, 77, scale=6.0), "tanh", reference=gelu)
    check("aten.tanh.default", torch.tensor([-90.0, -20.0, -1e-3, 0.0, 1e-3, 20.0, 90.0]))
    check("aten.sigmoid.default", torch.tensor([-100.0, -30.0, 0.0, 30.0, 100.0]))


@pytest.mark.parametrize("args", [(None, 0.4), (-0.2, None), (-0.3, 0.3)], ids=str)
def test_clamp(args):
    check("aten.clamp.default", rand(4, 33, scale=2.0), *args)
    check(
        "aten.clamp.default",
        torch.randint(-9, 9, (5, 13)),
        *(None if a is None else int(a * 10) for a in args),
    )


@pytest.mark.parametrize("exponent", [2, 3, 0.5, -1.0])
def test_pow_scalar(exponent):
    x = positive(3, 70) if exponent == 0.5 else rand(3, 70)
    check("aten.pow.Tensor_Scalar", x, exponent)


@pytest.mark.parametrize(
    "name",
    [
        "aten.eq.Scalar",
        "aten.ne.Scalar",
        "aten.lt.Scalar",
        "aten.le.Scalar",
        "aten.gt.Scalar",
        "aten.ge.Scalar",
    ],
)
def test_compare_scalar(name):
    x = torch.randint(-3, 4, (6, 71)).float()
    check(name, x, 1.0)
    check(name, x.long(), 2)
    check(name, x, -math.inf)


def test_logical_not_and_bitwise_not():
    b = torch.rand(9, 70) > 0.5
    check("aten.logical_not.default", b)
    check("aten.logical_not.default", rand(9, 70).round())
    check("aten.bitwise_not.default", b)


BROADCASTS = [
    ((5, 1, 7), (3, 1)),
    ((70, 65), (65,)),
    ((1,), (9, 4)),
    ((3, 5, 9), (3, 5, 9)),
    ((2, 1), (1, 130)),
]
BINARY = [
    "aten.add.Tensor",
    "aten.sub.Tensor",
    "aten.mul.Tensor",
    "aten.div.Tensor",
    "aten.minimum.default",
    "aten.maximum.default",
    "aten.eq.Tensor",
    "aten.ne.Tensor",
    "aten.lt.Tensor",
    "aten.le.Tensor",
    "aten.gt.Tensor",
    "aten.ge.Tensor",
]


@pytest.mark.parametrize("shapes", BROADCASTS, ids=str)
@pytest.mark.parametrize("name", BINARY)
def test_binary(name, shapes):
    a, b = rand(*shapes[0], seed=1), rand(*shapes[1], seed=2)
    if name.split(".")[1] in ("eq", "ne", "le", "ge"):
        a, b = a.round(), b.round()
    check(name, a, b)


@pytest.mark.parametrize("shapes", BROADCASTS[:3], ids=str)
def test_binary_integer_and_alpha(shapes):
    a, b = torch.randint(-50, 50, shapes[0]), torch.randint(-50, 50, shapes[1])
    check("aten.add.Tensor", a, b, 3)
    check("aten.sub.Tensor", a, b)
    check("aten.mul.Tensor", a, b)
    check("aten.add.Tensor", rand(*shapes[0]), rand(*shapes[1]), 0.5)
    check("aten.div.Tensor_mode", a, b.clamp(min=1), "floor")
    check("aten.div.Tensor_mode", a, b.clamp(min=1), "trunc")
    check("aten.div.Tensor_mode", rand(*shapes[0]), positive(*shapes[1]), "floor")


def test_binary_pow_and_bool_ops():
    check("aten.pow.Tensor_Tensor", positive(5, 70), rand(70))
    x, y = torch.rand(4, 65) > 0.5, torch.rand(65) > 0.3
    for name in (
        "aten.bitwise_and.Tensor",
        "aten.bitwise_or.Tensor",
        "aten.logical_and.default",
        "aten.logical_or.default",
        "aten.logical_xor.default",
    ):
        check(name, x, y)
    check("aten.bitwise_and.Tensor", torch.randint(0, 64, (3, 70)), torch.randint(0, 64, (70,)))


def test_binary_with_scalar_operand():
    check("aten.mul.Tensor", rand(3, 70), 0.25)
    check("aten.add.Tensor", rand(3, 70), 2.0, 3)


@pytest.mark.parametrize(
    "shapes", [((5, 1, 7), (1, 7), (5, 3, 1)), ((130,), (130,), (130,)), ((1,), (4, 1), (1, 9))], ids=str
)
def test_where(shapes):
    cond = torch.rand(*shapes[0]) > 0.5
    check("aten.where.self", cond, rand(*shapes[1], seed=1), rand(*shapes[2], seed=2))
    check("aten.where.self", cond, torch.randint(0, 9, shapes[1]), torch.randint(0, 9, shapes[2]))


# -- shape operators -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "shape,dims", [((3, 5, 9), [2, 0, 1]), ((2, 3, 4, 67), [0, 2, 1, 3]), ((70, 65), [1, 0])], ids=str
)
def test_permute(shape, dims):
    check("aten.permute_copy.default", rand(*shape), dims)


def test_views_cost_no_dispatch():
    x = rand(2, 3, 1, 35)
    _, d = check("aten.view_copy.default", x, [6, -1])
    assert d.dispatch_count == 0
    check("aten.squeeze_copy.dims", x, [2])
    check("aten.unsqueeze_copy.default", x, -1)
    check("aten.clone.default", x)


def test_expand_repeat_flip_pad():
    check("aten.expand_copy.default", rand(3, 1, 5), [2, 3, 70, 5])
    check("aten.expand_copy.default", rand(1, 9), [-1, 9])
    check("aten.repeat.default", rand(3, 5), [2, 1, 3])
    check("aten.flip.default", rand(3, 5, 70), [0, 2])
    check("aten.constant_pad_nd.default", rand(2, 3, 5), [1, 2, 0, 3], 0.5)


@pytest.mark.parametrize(
    "args", [(1, 1, 4, 1), (0, -3, None, 1), (2, 0, 70, 2), (1, -100, 100, 3), (2, 5, 3, 1)], ids=str
)
def test_slice(args):
    check("aten.slice_copy.Tensor", rand(4, 7, 67), *args)


def test_select_cat_split():
    x = rand(4, 7, 67)
    check("aten.select_copy.int", x, 1, -2)
    check("aten.select_copy.int", x, 2, 66)
    check("aten.cat.default", [rand(2, 3, 5), rand(2, 1, 5), rand(2, 70, 5)], 1)
    check("aten.cat.default", [rand(3, 5), rand(3, 5)], -1)
    check("aten.split_with_sizes_copy.default", rand(4, 70), [10, 60], 1)
    check("aten.split_copy.Tensor", rand(9, 5), 4, 0)


def test_dtype_copies():
    x = rand(5, 70, scale=4.0)
    check("dim_order_ops._to_dim_order_copy.default", x, torch.int64, reference=lambda x, d: x.to(d))
    check("dim_order_ops._to_dim_order_copy.default", x.round(), torch.bool, reference=lambda x, d: x.to(d))
    check(
        "dim_order_ops._to_dim_order_copy.default",
        torch.randint(-9, 9, (70,)),
        torch.float32,
        reference=lambda x, d: x.to(d),
    )


# -- creation --------------------------------------------------------------------------------------


def test_full_and_arange():
    check("aten.full.default", [3, 70], 2.5, reference=lambda s, v: torch.full(s, v))
    check("aten.full_like.default", rand(4, 5), -1.5, reference=lambda x, v: torch.full_like(x, v))
    check("aten.zeros.default", [7], reference=lambda s: torch.zeros(s))
    check("aten.arange.start_step", 0, 130, 1, reference=lambda a, b, c: torch.arange(a, b, c))
    check("aten.arange.start_step", 3, -20, -3, reference=lambda a, b, c: torch.arange(a, b, c))
    check("aten.arange.start_step", 0.5, 9.0, 0.25, reference=lambda a, b, c: torch.arange(a, b, c))


# -- matrix products -------------------------------------------------------------------------------

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


# -- rows: norms and softmax -----------------------------------------------------------------------

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


# -- rotary embeddings, embedding ----------------------------------------------------------------


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


@pytest.mark.parametrize("idx_shape", [(1,), (2, 7), (70,)], ids=str)
def test_embedding(idx_shape):
    table = rand(50, 33)
    idx = torch.randint(0, 50, idx_shape)
    check("aten.embedding.default", table, idx, -1, False, False)


# -- convolution, pooling, reductions --------------------------------------------------------------

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


# -- grids larger than one dimension ---------------------------------------------------------------


def test_elementwise_beyond_one_grid_dimension():
    # 65535 workgroups of 64 cover 4194240 elements; one more row spills into the second dimension.
    n = 65535 * 64 + 1000
    check("aten.add.Tensor", rand(n), rand(1), 1)


# -- indexing ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("dim", [0, 1, 2])
def test_index_with_one_index_tensor(dim):
    x = rand(5, 6, 70)
    idx = torch.tensor([[0, -1], [2, 3], [1, 1]])
    indices = [None] * dim + [idx]
    check(
        "aten.index.Tensor",
        x,
        indices,
        reference=lambda x, i: x[tuple(slice(None) if t is None else t for t in i)],
    )


def test_index_select():
    check("aten.index_select.default", rand(9, 70), 0, torch.tensor([8, 0, 3, 3]))
    check("aten.index_select.default", torch.randint(0, 9, (4, 70)), 1, torch.arange(69, 0, -7))


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


# -- the remaining spellings -------------------------------------------------------------------------


def test_scalar_operand_overloads():
    x = rand(5, 70, scale=3.0)
    check("aten.add.Scalar", x, 2.5, 2)
    check("aten.sub.Scalar", x, 1.5, 3)
    check("aten.mul.Scalar", x, -0.75)
    check("aten.div.Scalar", x, 4.0)
    check("aten.mul.Scalar", torch.randint(-9, 9, (70,)), 3)
    check("aten.rsub.Tensor", x, rand(70, seed=2), 2)
    check("aten.bitwise_xor.Tensor", torch.rand(3, 70) > 0.5, torch.rand(70) > 0.5)
    check("aten.bitwise_xor.Tensor", torch.randint(0, 99, (3, 70)), torch.randint(0, 99, (70,)))


def test_view_spellings():
    x = rand(3, 1, 70)
    check("aten.t_copy.default", rand(5, 70))
    check("aten.squeeze_copy.dim", x, 1)
    check("aten.squeeze_copy.default", x)
    check("aten.alias_copy.default", x)
    check("aten._unsafe_view.default", x, [70, 3])
    check("aten.copy.default", torch.zeros(3, 1, 70), x, False, reference=lambda s, src, nb: src.clone())
    check(
        "dim_order_ops._clone_dim_order.default",
        x,
        False,
        [0, 1, 2],
        reference=lambda t, nb, order: t.clone(),
    )


def test_creation_spellings():
    check("aten.arange.default", 70, reference=lambda n: torch.arange(n))
    check("aten.ones.default", [3, 70], reference=lambda s: torch.ones(s))
    check("aten.ones_like.default", rand(4, 5), reference=lambda x: torch.ones_like(x))
    check("aten.zeros_like.default", rand(4, 5), reference=lambda x: torch.zeros_like(x))
    check("aten.scalar_tensor.default", 1.25, reference=lambda v: torch.scalar_tensor(v))
