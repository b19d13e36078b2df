"""ExecuTorch's dim-order operators: copies into a tensor of a given memory layout.

The program has already planned ``out`` with the target dim order, so a copy
into it is the whole operation; a dynamic ``out`` is first re-shaped to the
input's sizes with strides from that dim order.
"""

from __future__ import annotations

import torch

from pterun.core.layout import strides_for
from pterun.kernels.registry import Functional, KernelRegistry, fixed_arity


def _reshape_like(out: torch.Tensor, sizes, dim_order) -> None:
    if tuple(out.shape) != tuple(sizes):
        order = tuple(dim_order) if dim_order is not None else tuple(range(len(sizes)))
        out.as_strided_(tuple(sizes), strides_for(sizes, order))


def _to_dim_order_copy(self: torch.Tensor, non_blocking: bool, dim_order, out: torch.Tensor) -> torch.Tensor:
    _reshape_like(out, self.shape, dim_order)
    out.copy_(self)
    return out


def _empty_dim_order(size, dim_order, out: torch.Tensor) -> torch.Tensor:
    _reshape_like(out, size, dim_order)
    return out


def _dim_order_copy(self: torch.Tensor, non_blocking: bool, dim_order, *, dtype: torch.dtype,
                    memory_format: torch.memory_format) -> torch.Tensor:
    # The functional form. Always a copy, as the out-variant: a clone of a mutable buffer taken before
    # the buffer is updated in place must keep the old values (``to`` hands back its input when nothing
    # changes).
    return self.to(dtype, memory_format=memory_format, copy=True)


_TENSOR, _DIM_ORDER = frozenset({"tensor"}), frozenset({"int_list", "null"})


def register(registry: KernelRegistry) -> None:
    for op in ("_to_dim_order_copy", "_clone_dim_order"):
        name = f"dim_order_ops::{op}.out"
        registry.register(name, fixed_arity(_to_dim_order_copy, 5, name, result=False, mutates=(3,), covers=(3,),
                                            accepts=(_TENSOR, frozenset({"bool"}), _DIM_ORDER, _TENSOR),
                                            functional=Functional(_dim_order_copy, (3,), ("dtype", "memory_format"))))
    name = "dim_order_ops::_empty_dim_order.out"
    registry.register(name, fixed_arity(_empty_dim_order, 4, name, result=False, mutates=(2,),
                                        accepts=(frozenset({"int_list"}), _DIM_ORDER, _TENSOR)))
