"""Split copies on CUDA read and write operands of any strides (kernels/split.py): a permuted input, as a
transposed view of attention heads arrives, and outputs in another dim order."""

from __future__ import annotations

import pytest
import torch

from pterun.core.device import DeviceType
from pterun.kernels import default_registry

pytestmark = pytest.mark.gpu


def _split(name: str, count: int):
    binding = default_registry().lookup(name, DeviceType.CUDA)(count)
    return binding.fn


@pytest.mark.parametrize("name, sizes", [("aten::split_with_sizes_copy.out", [1, 2, 1]),
                                         ("aten::split_copy.Tensor_out", 1)])
def test_a_permuted_input_is_split_into_the_right_elements(name, sizes):
    x = torch.randn(1, 6, 4, 16, device="cuda").permute(0, 2, 1, 3)  # dense, not contiguous
    assert not x.is_contiguous()
    pieces = torch.split(x, sizes, 1)
    outs = [torch.empty_like(p, memory_format=torch.contiguous_format) for p in pieces]
    _split(name, 5)(x, sizes, 1, out=outs)
    for out, piece in zip(outs, pieces):
        assert torch.equal(out, piece)


def test_outputs_in_another_dim_order_get_the_right_elements():
    x = torch.randn(1, 4, 10, 16, device="cuda")
    outs = [torch.empty(1, 1, 16, 10, device="cuda").transpose(2, 3) for _ in range(4)]
    _split("aten::split_with_sizes_copy.out", 5)(x, [1, 1, 1, 1], 1, out=outs)
    for out, piece in zip(outs, x.split(1, 1)):
        assert torch.equal(out, piece)


def test_contiguous_operands_take_torchs_kernel_and_match():
    x = torch.randn(2, 6, 8, device="cuda")
    outs = [torch.empty(2, n, 8, device="cuda") for n in (2, 4)]
    _split("aten::split_with_sizes_copy.out", 5)(x, [2, 4], 1, out=outs)
    assert torch.equal(outs[0], x[:, :2]) and torch.equal(outs[1], x[:, 2:])
