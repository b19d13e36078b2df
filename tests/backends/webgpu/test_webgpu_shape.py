"""Shape operators (views and strided copies), creation and indexing against PyTorch."""

from __future__ import annotations

import pytest
import torch

from tests.backends.webgpu.adapter import needs_adapter
from tests.backends.webgpu.kernels import check, rand

pytestmark = needs_adapter


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


# -- creation ----------------------------------------------------------------------------------------


def test_full_and_arange():
    check("aten.full.default", [3, 70], 2.5, reference=lambda s, v: torch.full(s, v))
    check("aten.full_like.default", rand(4, 5), -1.5, reference=lambda x, v: torch.full_like(x, v))
    check("aten.zeros.default", [7], reference=lambda s: torch.zeros(s))
    check("aten.arange.start_step", 0, 130, 1, reference=lambda a, b, c: torch.arange(a, b, c))
    check("aten.arange.start_step", 3, -20, -3, reference=lambda a, b, c: torch.arange(a, b, c))
    check("aten.arange.start_step", 0.5, 9.0, 0.25, reference=lambda a, b, c: torch.arange(a, b, c))


def test_creation_spellings():
    check("aten.arange.default", 70, reference=lambda n: torch.arange(n))
    check("aten.ones.default", [3, 70], reference=lambda s: torch.ones(s))
    check("aten.ones_like.default", rand(4, 5), reference=lambda x: torch.ones_like(x))
    check("aten.zeros_like.default", rand(4, 5), reference=lambda x: torch.zeros_like(x))
    check("aten.scalar_tensor.default", 1.25, reference=lambda v: torch.scalar_tensor(v))


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


@pytest.mark.parametrize("idx_shape", [(1,), (2, 7), (70,)], ids=str)
def test_embedding(idx_shape):
    table = rand(50, 33)
    idx = torch.randint(0, 50, idx_shape)
    check("aten.embedding.default", table, idx, -1, False, False)
