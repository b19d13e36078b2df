"""Dim order: how a tensor's dimensions are laid out in memory.

ExecuTorch records a permutation of dimensions, outermost first, instead of
strides. The strides follow from it and the sizes; a size of 0 counts as 1 so
that empty tensors keep well-formed strides.
"""

from __future__ import annotations

from collections.abc import Sequence

CHANNELS_LAST_4D = (0, 2, 3, 1)
CHANNELS_LAST_5D = (0, 2, 3, 4, 1)


def strides_for(sizes: Sequence[int], dim_order: Sequence[int]) -> tuple[int, ...]:
    strides = [0] * len(sizes)
    step = 1
    for dim in reversed(dim_order):
        strides[dim] = step
        step *= max(sizes[dim], 1)
    return tuple(strides)


def is_contiguous_order(dim_order: Sequence[int]) -> bool:
    return all(d == i for i, d in enumerate(dim_order))
