"""A method's output against a bundled expected output, judged as ExecuTorch's bundled_program.cpp judges it.

Float, Double and Half elements are close when both are NaN, both are infinite of the same sign (ExecuTorch
tests ``(a > 0) == (b > 0)`` there, so a NaN also matches -inf), or ``|expected - actual| <= atol + |rtol *
actual|`` (the tolerance scales with the method's output, not the expected one; a Float difference is
computed in float32, as there); with ``rtol == atol == 0`` they must be equal. Every other dtype (BFloat16
included) must match bit for bit. Tensors of another dtype or other sizes never match. ExecuTorch then
compares the two buffers in memory order and aborts the process when the strides differ; here elements
are compared by index, whatever the layout.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from pterun.core.dtype import name as dtype_name
from pterun.core.dtype import storage_dtype

_TOLERANT = (torch.float32, torch.float64, torch.float16)
_BITS = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


@dataclass(frozen=True)
class OutputCheck:
    """One output compared: ``ok``, the largest absolute difference, and what differs when not ``ok``."""

    index: int
    ok: bool
    max_abs_error: float | None = None  # floating-point outputs of matching dtype and sizes
    mismatched: int = 0
    numel: int = 0
    detail: str = ""


def compare(index: int, expected: torch.Tensor, expected_code: int, actual, rtol: float, atol: float) -> OutputCheck:
    """Output ``index`` of a method (``actual``) against ``expected``, a tensor of ScalarType ``expected_code``."""
    if not isinstance(actual, torch.Tensor):
        return OutputCheck(index, False, detail=f"the method returned a {type(actual).__name__}; "
                                                f"a {dtype_name(expected_code)} tensor was expected")
    if actual.dtype != storage_dtype(expected_code):
        return OutputCheck(index, False, detail=f"dtype is {str(actual.dtype).removeprefix('torch.')}; "
                                                f"expected {dtype_name(expected_code)}")
    if tuple(actual.shape) != tuple(expected.shape):
        return OutputCheck(index, False, detail=f"sizes are {list(actual.shape)}; expected {list(expected.shape)}")
    numel = expected.numel()
    if numel == 0:
        return OutputCheck(index, True, numel=0)
    actual = actual.detach().to("cpu")
    if expected.dtype in _TOLERANT:
        return _close(index, expected, actual, rtol, atol)
    e, a = _bits(expected), _bits(actual)
    bad = e != a
    count = int(bad.sum())
    max_abs = None if expected.dtype == torch.bool else float((expected.double() - actual.double()).abs().max())
    if not count:
        return OutputCheck(index, True, max_abs, numel=numel)
    flat = int(bad.flatten().nonzero()[0])
    at = _index(flat, expected.shape)
    detail = (f"{count} of {numel} elements differ (compared exactly, as {dtype_name(expected_code)} is); "
              f"first at {at}: {_item(actual, at)} where {_item(expected, at)} was expected")
    return OutputCheck(index, False, max_abs, count, numel, detail)


def _close(index: int, expected: torch.Tensor, actual: torch.Tensor, rtol: float, atol: float) -> OutputCheck:
    e, a = expected, actual
    if e.dtype == torch.float16:
        e, a = e.double(), a.double()
    diff = (e - a).abs().double()
    allowed = atol + (rtol * a.double()).abs()
    both_nan = e.isnan() & a.isnan()
    same_infinity = ~e.isfinite() & ~a.isfinite() & ((e > 0) == (a > 0))
    if rtol == 0 and atol == 0:
        close = e == a
    else:
        close = diff.isfinite() & (diff <= allowed)
    ok = both_nan | same_infinity | close
    numel = e.numel()
    finite = diff[diff.isfinite()]
    max_abs = float(finite.max()) if finite.numel() else float("nan")
    bad = ~ok
    count = int(bad.sum())
    if not count:
        return OutputCheck(index, True, max_abs, numel=numel)
    excess = torch.where(diff.isfinite(), diff - allowed, torch.inf)
    flat = int(torch.where(bad, excess, -torch.inf).flatten().argmax())
    at = _index(flat, expected.shape)
    got, want = _item(actual, at), _item(expected, at)
    if rtol == 0 and atol == 0:
        rule = "rtol and atol are 0: equal values required"
    else:
        rule = f"|difference| {diff[tuple(at)].item():.6g} > atol {atol:g} + rtol {rtol:g} × |{got}|"
    detail = f"{count} of {numel} elements differ; worst at {at}: {got} where {want} was expected ({rule})"
    return OutputCheck(index, False, max_abs, count, numel, detail)


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t if t.dtype == torch.bool else t.view(_BITS[t.element_size()])


def _index(flat: int, shape) -> list[int]:
    at = []
    for size in reversed(tuple(shape)):
        at.append(flat % size)
        flat //= size
    return at[::-1]


def _item(t: torch.Tensor, at: list[int]):
    value = t[tuple(at)].item()
    return f"{value:.8g}" if isinstance(value, float) else value
