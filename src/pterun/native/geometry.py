"""How the native kernels that walk strided regions (move.c) are told what to walk: element strides, broadcasts,
and the same walk over fewer dimensions. Plain integers: the callers own the tensors."""

from __future__ import annotations

from collections.abc import Sequence

MOVE_DIMS = 6  # native.h's PN_MOVE_DIMS
BINARY_OPS = {"add": 0, "sub": 1, "mul": 2, "div": 3, "clamp": 4}  # native.h's pn_binary_op


def contiguous_strides(shape: Sequence[int]) -> list[int]:
    strides, step = [0] * len(shape), 1
    for i in reversed(range(len(shape))):
        strides[i] = step
        step *= shape[i]
    return strides


def broadcast_strides(shape: Sequence[int], out: Sequence[int]) -> list[int]:
    """Element strides of a contiguous tensor of ``shape`` read as ``out`` (right-aligned; 0 where broadcast)."""
    shape = (1,) * (len(out) - len(shape)) + tuple(shape)
    strides, step = [0] * len(out), 1
    for i in reversed(range(len(out))):
        strides[i] = step if shape[i] != 1 else 0
        step *= shape[i]
    return strides


def collapsed(sizes: Sequence[int], *strides: Sequence[int]) -> tuple[list[int], ...]:
    """The same walk over fewer dimensions: size-1 ones dropped, neighbours merged where every operand steps over
    them as over one dimension."""
    kept = [d for d in range(len(sizes)) if sizes[d] != 1]
    if not kept:  # one element
        return ([1], *([1] for _ in strides))
    out_sizes = [sizes[d] for d in kept]
    out_strides = [[s[d] for d in kept] for s in strides]
    d = len(out_sizes) - 1
    while d > 0:
        if all(s[d - 1] == s[d] * out_sizes[d] for s in out_strides):
            out_sizes[d - 1] *= out_sizes[d]
            del out_sizes[d]
            for s in out_strides:
                s[d - 1] = s[d]
                del s[d]
        d -= 1
    return (out_sizes, *out_strides)


def binary_geometry(shape: Sequence[int], a_shape: Sequence[int], b_shape: Sequence[int]) -> list[int] | None:
    """The geometry ``vbinary`` takes for contiguous operands of ``a_shape`` and ``b_shape`` broadcast to a contiguous
    ``shape`` (sizes, then a's, b's and the output's strides); None past ``MOVE_DIMS`` dimensions."""
    sizes, a, b, y = collapsed(list(shape), broadcast_strides(a_shape, shape), broadcast_strides(b_shape, shape),
                               contiguous_strides(shape))
    return None if len(sizes) > MOVE_DIMS else [*sizes, *a, *b, *y]
