"""Indexing by tensors: index.Tensor with one index tensor, index_select (shaders/gather.wgsl); gather
along a dimension (shaders/gather_dim.wgsl)."""

from __future__ import annotations

import math

from pterun.backends.webgpu.builder import NodeBuilder
from pterun.backends.webgpu.graph import ValueList
from pterun.backends.webgpu.ops.common import contiguous_strides, grid, norm_dim, padded
from pterun.backends.webgpu.slots import TSlot
from pterun.errors import DelegateInvalidCompatibility, InvalidArgument


def _gather(b: NodeBuilder, x: TSlot, dim: int, idx: TSlot, out_vid: int, flat_index: bool) -> None:
    if idx.elem != "i32":
        raise DelegateInvalidCompatibility(f"{b.op.name}: only integer indices are supported")

    def shape():
        middle = idx.shape if not flat_index else (idx.numel,)
        return (*x.shape[:dim], *middle, *x.shape[dim + 1 :])

    y = b.out(out_vid, shape)
    b.dispatch(
        "gather",
        {"T": x.elem},
        [x, idx, y],
        lambda: [y.numel, x.shape[dim], math.prod(x.shape[dim + 1 :]), idx.numel],
        lambda: grid(y.numel),
    )


def build_index(b: NodeBuilder, op) -> None:
    args = op.args
    x = b.tensor(args[0])
    listed = b.value(args[1])
    if not isinstance(listed, ValueList):
        raise DelegateInvalidCompatibility("aten.index.Tensor: indices must be a list")
    present = [(d, vid) for d, vid in enumerate(listed.items) if b.value(vid) is not None]
    if len(present) != 1:
        raise DelegateInvalidCompatibility("aten.index.Tensor: only one index tensor is supported")
    dim, vid = present[0]
    _gather(b, x, dim, b.tensor(vid), args[-1], flat_index=False)


def build_index_select(b: NodeBuilder, op) -> None:
    args = op.args
    x = b.tensor(args[0])
    rank = b.rank(args[0])
    _gather(b, x, norm_dim(b.scalar(args[1]), rank), b.tensor(args[2]), args[-1], flat_index=True)


def build_gather(b: NodeBuilder, op) -> None:
    args = op.args
    x = b.tensor(args[0])
    rank = b.rank(args[0])
    dim = norm_dim(b.scalar(args[1]), rank)
    idx = b.tensor(args[2])
    if idx.elem != "i32":
        raise DelegateInvalidCompatibility(f"{op.name}: only integer indices are supported")
    y = b.out(args[-1], lambda: idx.shape)

    def params():
        if idx.ndim != x.ndim or any(i > s for d, (i, s) in enumerate(zip(idx.shape, x.shape)) if d != dim):
            raise InvalidArgument(f"{op.name}: index {list(idx.shape)} for input {list(x.shape)} along {dim}")
        st = contiguous_strides(x.shape)
        walk = [0 if d == dim else s for d, s in enumerate(st)]
        return [y.numel, y.ndim, 0, st[dim] if x.ndim else 1, x.shape[dim] if x.ndim else 1, 0, 0, 0,
                *padded(y.shape, 1), *padded(walk)]

    b.dispatch("gather_dim", {"T": x.elem}, [x, idx, y], params, lambda: grid(y.numel))


OPS = {
    "aten.gather.default": build_gather,
    "aten.index.Tensor": build_index,
    "aten.index_select.default": build_index_select,
}
