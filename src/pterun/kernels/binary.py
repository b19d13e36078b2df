"""ATen's add, sub, mul and div of two small float32 tensors on the CPU as one native call (``native/move.c``).

Through PyTorch each such call costs a microsecond or two of dispatch, most of a small program's time (a chain of
seven adds and multiplies on 8 x 32 floats: 20 us against ExecuTorch's 8). Each output is one IEEE operation of its
two inputs (``alpha`` of 1 only: no multiply), the result PyTorch's and ExecuTorch's portable kernels give, bit for
bit; and a run of such calls can be recorded and made again as one native call (executor/codegen/replay.py).
Anything else (other dtypes, an ``alpha``, strided or overlapping tensors, large ones, where PyTorch's vectorized
and threaded kernels win) takes PyTorch's own call.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import torch

from pterun import native
from pterun.kernels.aten import aten_kernel
from pterun.kernels.fused import NativeCall
from pterun.kernels.registry import Binding, KernelFactory
from pterun.native import geometry

# Operator -> (native.geometry's op, PyTorch's binding of the same overload, or None: the overload's own entry point).
# A scalar is the float32 it is cast to, as both runtimes cast it; a division by one is left to PyTorch. ReLU is the
# clamp at 0 as PyTorch's kernel makes it (a value equal to the bound, -0.0, kept; NaN kept).
NAMES: dict[str, tuple[str, Callable[..., Any] | None]] = {
    "aten::add.out": ("add", torch.add), "aten::sub.out": ("sub", torch.sub), "aten::mul.out": ("mul", torch.mul),
    "aten::div.out": ("div", torch.div), "aten::add.Scalar_out": ("add", None), "aten::sub.Scalar_out": ("sub", None),
    "aten::mul.Scalar_out": ("mul", None), "aten::relu.out": ("clamp", None)}
LARGEST = 1 << 16  # elements: past this PyTorch's kernels (vectorized wider, split over threads) take the call
_F32 = torch.float32
_INF = math.inf


class BinaryInto(NativeCall):
    """One operator's calls at one step: natively where the tensors allow, else ``fallback`` (PyTorch's binding)."""

    def __init__(self, op: int, fallback: Callable[..., torch.Tensor]) -> None:
        self._op = op
        self._fallback = fallback  # PyTorch's call, as fallback(a, b, alpha, out)
        self._key: tuple = ()
        self._native: tuple | None = None  # the native call's arguments for the key, or None: PyTorch's call
        self._held: tuple = ()  # what the native call reads: its geometry, a scalar operand as float32

    def __call__(self, a: torch.Tensor, b, alpha=1, *, out: torch.Tensor) -> torch.Tensor:
        self._ran_natively = False
        tensor = isinstance(b, torch.Tensor)
        key = (a.data_ptr(), a.shape, a.stride(), a.dtype, out.data_ptr(), out.shape, out.stride(), out.dtype, alpha,
               (b.data_ptr(), b.shape, b.stride(), b.dtype) if tensor else (type(b), b))
        if key != self._key:
            self._native, self._key = self._prepare(a, b if tensor else self._scalar(b), alpha, out), key
        if self._native is not None:
            native.kernels.vbinary(*self._native, torch.get_num_threads())  # type: ignore[union-attr]
            self._ran_natively = True
            return out
        return self._fallback(a, b, alpha, out)

    @staticmethod
    def _scalar(b) -> torch.Tensor | None:
        """A scalar operand as the float32 a float32 operation casts it to (None: another kind of value)."""
        if type(b) not in (int, float):
            return None
        return torch.tensor(b, dtype=_F32)

    def _prepare(self, a: torch.Tensor, b: torch.Tensor | None, alpha, out: torch.Tensor) -> tuple | None:
        if b is None or not (a.dtype is _F32 and b.dtype is _F32 and out.dtype is _F32 and alpha == 1
                             and type(alpha) is not bool and a.device.type == b.device.type == out.device.type
                             == "cpu"):
            return None
        try:
            shape = torch.broadcast_shapes(a.shape, b.shape)
        except RuntimeError:
            return None  # PyTorch's call says why
        if math.prod(shape) > LARGEST or out.shape != shape or not (
                _dense(a) and _dense(b) and _dense(out)) or not (_apart(out, a) and _apart(out, b)):
            return None
        walk = geometry.binary_geometry(shape, a.shape, b.shape)
        if walk is None:
            return None
        held = torch.tensor(walk, dtype=torch.int64)
        self._held = (held, b)
        lo = 0.0 if self._op == geometry.BINARY_OPS["clamp"] else -_INF
        return (self._op, a.data_ptr(), b.data_ptr(), out.data_ptr(), len(walk) // 4, held.data_ptr(), lo, _INF)


class ReluInto(BinaryInto):
    """``relu`` as the clamp of ``a`` at 0."""

    def __call__(self, a: torch.Tensor, *, out: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return super().__call__(a, a, out=out)


def _dense(t: torch.Tensor) -> bool:
    """Contiguous in the strict sense the native walk reads: the strides of its sizes, in order."""
    return list(t.stride()) == geometry.contiguous_strides(t.shape) or t.numel() <= 1


def _apart(out: torch.Tensor, x: torch.Tensor) -> bool:
    """``out`` shares no byte with ``x``, or is ``x`` itself (an update in place reads each value before writing
    it)."""
    if out.data_ptr() == x.data_ptr() and out.shape == x.shape:
        return True
    o, n = out.data_ptr(), out.numel() * 4
    return o + n <= x.data_ptr() or x.data_ptr() + x.numel() * 4 <= o


def factory(name: str) -> KernelFactory:
    """The kernel of ``name`` (one of ``NAMES``): ATen's binding, with the native call in front of its own."""
    op, binding_fn = NAMES[name]
    generic = aten_kernel(name)

    def make(count: int) -> Binding:
        binding = generic(count)
        kind = ReluInto if op == "clamp" else BinaryInto
        kernel = kind(geometry.BINARY_OPS[op], _torch_call(binding_fn or binding.fn, binding))
        return dataclasses.replace(binding, fn=kernel)

    return make


def _torch_call(fn: Callable[..., torch.Tensor], binding: Binding) -> Callable[..., torch.Tensor]:
    """``fn`` called as (a, b, alpha, out), with the arguments its operator takes, as the binding passes them."""
    if any(k == "alpha" for k, _ in binding.keywords):
        return lambda a, b, alpha, out: fn(a, b, alpha=alpha, out=out)
    if len(binding.positional) == 3:  # a scalar's alpha
        return lambda a, b, alpha, out: fn(a, b, alpha, out=out)
    if len(binding.positional) == 1:  # relu
        return lambda a, b, alpha, out: fn(a, out=out)
    return lambda a, b, alpha, out: fn(a, b, out=out)
