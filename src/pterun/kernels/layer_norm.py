"""ATen's ``native_layer_norm.out`` on float32 rows shorter than 256 values, as ExecuTorch computes it: one native call.

ExecuTorch normalizes such rows with its portable kernel's scalar loop (its optimized kernel too, below 256 values):
sums in order, the variance as E[x^2] - mean^2, then ``(x - mean) / std * weight + bias`` (``native/norm.c``).
PyTorch's kernel sums in vectors and multiplies by 1 / std, a few ulps away; and through PyTorch a small call costs
more in dispatch than the arithmetic (a layer norm of 8 x 64 floats: 9 us against ExecuTorch's 4). Here the rows
get ExecuTorch's bits, and a run of such calls can be recorded and made again as one native call
(executor/codegen/replay.py). Longer rows (ExecuTorch's optimized kernel takes them in vectors, PyTorch's in its
own), other dtypes and tensors the native loop does not read (strided, overlapping) take PyTorch's call.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import torch

from pterun import native
from pterun.kernels.aten import aten_kernel
from pterun.kernels.fused import NativeCall, apart
from pterun.kernels.registry import Binding
from pterun.native import geometry

NAME = "aten::native_layer_norm.out"
LONGEST = 255  # values a row may hold (norm.c's PN_LAYER_NORM_LONGEST - 1): ExecuTorch's scalar loop below 256
_F32 = torch.float32


class LayerNormInto(NativeCall):
    """One step's layer norms: natively where the tensors allow, else ``fallback`` (PyTorch's binding)."""

    def __init__(self, fallback: Callable[..., object]) -> None:
        self._fallback = fallback
        self._key: tuple = ()
        self._native: tuple | None = None  # the native call's arguments for the key, or None: PyTorch's call

    def __call__(self, x: torch.Tensor, normalized_shape, weight: torch.Tensor | None, bias: torch.Tensor | None,
                 eps: float, *, out0: torch.Tensor, out1: torch.Tensor, out2: torch.Tensor):
        self._ran_natively = False
        key = (x.data_ptr(), x.shape, x.stride(), x.dtype, tuple(normalized_shape), _tensor_key(weight),
               _tensor_key(bias), eps, _tensor_key(out0), _tensor_key(out1), _tensor_key(out2))
        if key != self._key:
            self._native, self._key = _prepare(x, tuple(normalized_shape), weight, bias, eps, out0, out1, out2), key
        if self._native is not None:
            native.kernels.layer_norm(*self._native, torch.get_num_threads())  # type: ignore[union-attr]
            self._ran_natively = True
            return out0, out1, out2
        return self._fallback(x, normalized_shape, weight, bias, eps, out0=out0, out1=out1, out2=out2)


def _tensor_key(t: torch.Tensor | None) -> tuple:
    return () if t is None else (t.data_ptr(), t.shape, t.stride(), t.dtype, t.device.type)


def _prepare(x: torch.Tensor, normalized: tuple, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float,
             out: torch.Tensor, mean: torch.Tensor, rstd: torch.Tensor) -> tuple | None:
    """The native call's arguments (but its threads), or None where PyTorch's call takes these tensors: float32 on
    the CPU, strictly contiguous, rows of 1 to 255 values, the outputs of the sizes the operator gives them (which
    PyTorch's call would resize), ``out`` ``x`` itself or bytes apart from it, the statistics apart from both."""
    k = len(normalized)
    if not (0 < k <= x.dim() and tuple(x.shape[x.dim() - k:]) == normalized):
        return None  # PyTorch's call says what is wrong
    n = math.prod(normalized)
    rows = x.numel() // n if n else 0
    stats = (*x.shape[:x.dim() - k], *(1,) * k)
    given = [t for t in (weight, bias) if t is not None]
    if not (1 <= n <= LONGEST and all(t.dtype is _F32 and t.device.type == "cpu" for t in (x, out, mean, rstd, *given))
            and all(tuple(t.shape) == normalized for t in given) and out.shape == x.shape
            and mean.shape == stats and rstd.shape == stats
            and all(_dense(t) for t in (x, out, mean, rstd, *given))):
        return None
    if not ((out.data_ptr() == x.data_ptr() or apart(out, x)) and all(
            apart(s, t) for s in (mean, rstd) for t in (x, out, *given)) and apart(mean, rstd)
            and all(apart(out, t) for t in given)):
        return None
    return (x.data_ptr(), weight.data_ptr() if weight is not None else 0, bias.data_ptr() if bias is not None else 0,
            out.data_ptr(), mean.data_ptr(), rstd.data_ptr(), rows, n, eps)


def _dense(t: torch.Tensor) -> bool:
    return list(t.stride()) == geometry.contiguous_strides(t.shape) or t.numel() <= 1


def factory(count: int) -> Binding:
    """``native_layer_norm.out``: ATen's binding, with the native call in front of its own."""
    binding = aten_kernel(NAME)(count)
    return dataclasses.replace(binding, fn=LayerNormInto(binding.fn))
