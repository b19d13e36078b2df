"""``split_with_sizes_copy.out`` and ``split_copy.Tensor_out`` on CUDA, correct for operands of any strides.

PyTorch's CUDA kernel for both (``split_with_sizes_copy_out_cuda``, which ``split_copy`` reaches too) takes a
fast path whenever the input and every output are non-overlapping and dense, and that path computes its
addresses as if they were contiguous: a permuted input, or outputs laid out in another dim order, are split
into the wrong elements. pterun hands kernels views where the exporter made copies (executor/load/fold.py), so a
split of an attention's transposed heads (StableLM's per-head LayerNorm) reads a permuted view, and was
several units off on CUDA only. Here the fast path is taken only when everything is contiguous, where it is
right; anything else is one strided copy per output, as PyTorch's CPU kernel does.
"""

from __future__ import annotations

import dataclasses

import torch

from pterun.kernels.aten import aten_kernel
from pterun.kernels.registry import Binding, KernelFactory

NAMES = ("aten::split_with_sizes_copy.out", "aten::split_copy.Tensor_out")


def _pieces(name: str, self: torch.Tensor, sizes, dim: int) -> tuple[torch.Tensor, ...]:
    if name == "aten::split_copy.Tensor_out":
        return torch.split(self, sizes, dim)
    return torch.split_with_sizes(self, sizes, dim)


def any_strides(name: str) -> KernelFactory:
    def factory(count: int) -> Binding:
        generic = aten_kernel(name)(count)
        fast = generic.fn

        def call(self, sizes, dim=0, *, out):
            if self.is_contiguous() and all(o.is_contiguous() for o in out):
                return fast(self, sizes, dim, out=out)
            pieces = _pieces(name, self, sizes, dim)
            if len(pieces) != len(out):
                raise RuntimeError(f"{name}: the split makes {len(pieces)} pieces; out holds {len(out)} tensors")
            for o, piece in zip(out, pieces):
                if o.shape != piece.shape:
                    o.resize_(piece.shape)
                o.copy_(piece)

        return dataclasses.replace(generic, fn=call)

    return factory
