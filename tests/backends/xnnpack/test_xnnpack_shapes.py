"""The XNNPACK translator's broadcasting rule against torch's, and its error."""

import pytest
import torch

from pterun.backends.xnnpack.compiler import broadcast
from pterun.errors import InvalidArgument

CASES = [((2, 3), (3,)), ((2, 1, 4), (3, 1)), ((), (5,)), ((1,), (1, 1, 7)), ((0, 3), (1, 3)), ((4, 1), (4, 0))]


@pytest.mark.parametrize("a,b", CASES)
def test_broadcast_matches_torch(a, b):
    assert broadcast(a, b, "node 0") == tuple(torch.broadcast_shapes(a, b))


def test_shapes_that_do_not_broadcast_name_both():
    with pytest.raises(InvalidArgument) as error:
        broadcast((2, 3), (4, 3), "node 7 (add)")
    assert error.value.code == 0x12
    assert "node 7 (add)" in str(error.value) and "[2, 3]" in str(error.value) and "[4, 3]" in str(error.value)
