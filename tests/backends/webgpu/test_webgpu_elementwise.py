"""Elementwise kernels against PyTorch: unary formulas, binary operators with broadcasting, comparisons,
where, the scalar-operand spellings, and grids past one dimension."""

from __future__ import annotations

import math

import pytest
import torch

from tests.backends.webgpu.adapter import needs_adapter
from tests.backends.webgpu.kernels import check, positive, rand

pytestmark = needs_adapter


SHAPES = [(1,), (7,), (3, 5, 9), (130, 67)]


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


# -- binary operators and where ----------------------------------------------------------------------

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


def test_elementwise_beyond_one_grid_dimension():
    # 65535 workgroups of 64 cover 4194240 elements; one more row spills into the second dimension.
    n = 65535 * 64 + 1000
    check("aten.add.Tensor", rand(n), rand(1), 1)
