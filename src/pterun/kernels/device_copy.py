"""et_copy::* kernels: the copies ExecuTorch's device passes insert around a delegate.

``_h2d_copy`` moves a host tensor into device memory the plan gave it and
``_d2h_copy`` moves a result back. The destination is planned (or bound by the
caller) with the source's upper-bound shape; it takes the source's shape first.
"""

from __future__ import annotations

import torch

from pterun.kernels.registry import Functional, KernelRegistry, fixed_arity


def _copy(self: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    if out.shape != self.shape:
        out.resize_(self.shape)
    out.copy_(self)
    return out


def register(registry: KernelRegistry) -> None:
    for name in ("et_copy::_h2d_copy.out", "et_copy::_d2h_copy.out"):
        registry.register(name, fixed_arity(_copy, 3, name, result=False, mutates=(1,), keywords={1: "out"},
                                            accepts=(frozenset({"tensor"}), frozenset({"tensor"})),
                                            # Compiled methods run on one device: the copy is a clone.
                                            functional=Functional(torch.ops.aten.clone.default, (1,))))
