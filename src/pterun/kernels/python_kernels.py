"""What the kernels written in Python (quantized, LLM operators) share.

Each is listed with the schema ExecuTorch registers for it, written beside
the function: its arguments in order (the kernel takes them positionally),
which are ScalarType codes, and which it writes (its outs, caches updated in
place). ``schema.python_kernel`` binds each by its schema, so what a kernel
writes is stated once: by the schema's ``(a!)`` annotations.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Iterable

import torch

from pterun.kernels.registry import KernelRegistry
from pterun.kernels.schema import python_kernel

F32 = torch.float32


class KernelTable(list):
    """(kernel, schema) pairs, in the order they are added."""

    def kernel(self, *schemas: str) -> Callable[[Callable], Callable]:
        """A decorator: the function is the kernel of each of these schemas."""
        def add(fn: Callable) -> Callable:
            self.extend((fn, schema) for schema in schemas)
            return fn

        return add


def register_kernels(registry: KernelRegistry, kernels: Iterable[tuple[Callable, str]],
                     dtype: Callable | None = None) -> None:
    """Registers each kernel by its schema; ``dtype`` converts the ScalarType codes programs pass."""
    for fn, schema in kernels:
        registry.register(*python_kernel(fn, schema, dtype))


def resize(out: torch.Tensor, shape) -> None:
    """Gives an out tensor the result's shape (the executor leaves that to kernels written in Python)."""
    shape = tuple(shape)
    if tuple(out.shape) != shape:
        out.resize_(shape)


def f32(value: float) -> float:
    """``value`` rounded to the nearest float32 (infinite where float32 overflows)."""
    try:
        return struct.unpack("f", struct.pack("f", value))[0]
    except OverflowError:
        return math.copysign(math.inf, value)
