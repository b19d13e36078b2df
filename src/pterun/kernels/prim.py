"""ExecuTorch's primitive operators: symbolic-size arithmetic and aliasing views.

Scalar operators compute ints, floats and bools the way ExecuTorch's C++
kernels do (C++ integer division and remainder truncate toward zero where
ExecuTorch uses them; Python's round-half-to-even for ``round``), so symbolic
sizes evaluate to the same numbers.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Iterator

import torch

from pterun.errors import InvalidArgument, InvalidType
from pterun.kernels.registry import Binding, Functional, KernelFactory, KernelRegistry, exact_count, fixed_arity


def _number(x, op: str):
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise InvalidType(f"executorch_prim::{op} takes ints or floats; got {type(x).__name__}")
    return x


def _c_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def _c_mod(a: int, b: int) -> int:
    return a - _c_div(a, b) * b


def _floordiv(a, b):
    _number(a, "floordiv.Scalar"), _number(b, "floordiv.Scalar")
    if isinstance(a, int) and isinstance(b, int):
        return a // b
    a, b = float(a), float(b)
    if b == 0:
        return -math.inf if math.copysign(1.0, a) < 0 else math.inf
    return math.floor(a / b) if math.isfinite(a / b) else a / b


def _truediv(a, b):
    _number(a, "truediv.Scalar"), _number(b, "truediv.Scalar")
    a, b = float(a), float(b)
    if b == 0:
        return math.nan if a == 0 or math.isnan(a) else math.copysign(math.inf, a) * math.copysign(1.0, b)
    return a / b


def _algebra(op, name):
    def fn(a, b):
        _number(a, name), _number(b, name)
        return op(a, b)

    return fn


def _compare(op, name):
    def fn(a, b):
        if isinstance(a, bool) and isinstance(b, bool):
            return op(a, b)
        _number(a, name), _number(b, name)
        return op(a, b)

    return fn


def _sym_float(a):
    return float(a)


def _sym_int(a):
    return int(a)  # C++ static_cast truncates, as int() does


def _neg(a):
    return -_number(a, "neg.Scalar")


def _sym_not(a):
    if not isinstance(a, bool):
        raise InvalidType(f"executorch_prim::sym_not.Scalar takes a bool; got {type(a).__name__}")
    return not a


def _sym_ite(cond, a, b):
    if not isinstance(cond, bool):
        raise InvalidType(f"executorch_prim::sym_ite.Scalar takes a bool condition; got {type(cond).__name__}")
    return a if cond else b


def _round(a):
    if not isinstance(a, float):
        raise InvalidType(f"executorch_prim::round.Scalar takes a float; got {type(a).__name__}")
    return int(round(a))


def _ceil(a):
    if not isinstance(a, float):
        raise InvalidType(f"executorch_prim::ceil.Scalar takes a float; got {type(a).__name__}")
    return int(math.ceil(a))


def _trunc(a):
    if not isinstance(a, float):
        raise InvalidType(f"executorch_prim::trunc.Scalar takes a float; got {type(a).__name__}")
    return int(math.trunc(a))


def _mod_scalar(a, b):
    if not (isinstance(a, int) and isinstance(b, int)):
        raise InvalidType("executorch_prim::mod.Scalar takes ints")
    return _c_mod(a, b)


def _sym_size(tensor: torch.Tensor, dim: int) -> int:
    return tensor.size(dim)


def _sym_numel(tensor: torch.Tensor) -> int:
    return tensor.numel()


def _local_scalar_dense(tensor: torch.Tensor):
    if tensor.numel() < 1:
        raise InvalidArgument("aten::_local_scalar_dense needs a tensor with at least one element")
    return tensor.reshape(-1)[0].item()


def _et_view(tensor: torch.Tensor, sizes) -> torch.Tensor:
    # The result must share the input's memory (later writes through either
    # are seen by both), which torch's view gives; ExecuTorch only emits
    # et_view where the input's layout allows a view.
    return tensor.view(sizes)


def _et_copy_index(copy_to: torch.Tensor, copy_from: torch.Tensor, index: int) -> None:
    if index < 0:
        raise InvalidArgument(f"et_copy_index: index {index} is negative")
    if copy_to.dim() != copy_from.dim() + 1 or tuple(copy_to.shape[1:]) != tuple(copy_from.shape):
        raise InvalidArgument(
            f"et_copy_index: cannot copy a {tuple(copy_from.shape)} tensor into row {index} of {tuple(copy_to.shape)}"
        )
    # Grows copy_to one row per call, as ExecuTorch's kernel does.
    copy_to.resize_((index + 1, *copy_from.shape))
    copy_to[index].copy_(copy_from)


_BINARY = {
    "add.Scalar": _algebra(operator.add, "add.Scalar"),
    "sub.Scalar": _algebra(operator.sub, "sub.Scalar"),
    "mul.Scalar": _algebra(operator.mul, "mul.Scalar"),
    "floordiv.Scalar": _floordiv,
    "truediv.Scalar": _truediv,
    "floordiv.int": _c_div,
    "mod.int": _c_mod,
    "mod.Scalar": _mod_scalar,
    "sym_max.Scalar": max,
    "sym_min.Scalar": min,
    "eq.Scalar": _compare(operator.eq, "eq.Scalar"),
    "gt.Scalar": _compare(operator.gt, "gt.Scalar"),
    "lt.Scalar": _compare(operator.lt, "lt.Scalar"),
    "ge.Scalar": _compare(operator.ge, "ge.Scalar"),
    "le.Scalar": _compare(operator.le, "le.Scalar"),
}
_UNARY = {
    "neg.Scalar": _neg,
    "sym_float.Scalar": _sym_float,
    "sym_int.Scalar": _sym_int,
    "sym_not.Scalar": _sym_not,
    "ceil.Scalar": _ceil,
    "round.Scalar": _round,
    "trunc.Scalar": _trunc,
}


_NUMBER = frozenset({"int", "double", "bool"})
_TENSOR, _INT = frozenset({"tensor"}), frozenset({"int"})
_BOOL, _INT_LIST = frozenset({"bool"}), frozenset({"int_list"})


def _traceable(fn, nargs: int, name: str, **effects):
    # These kernels are plain Python on numbers and tensors' sizes: torch.compile traces them as they are.
    return fixed_arity(fn, nargs, name, functional=Functional(fn), **effects)


def _kernels() -> Iterator[tuple[str, KernelFactory]]:
    for suffix, fn in _BINARY.items():
        name = f"executorch_prim::{suffix}"
        yield name, _traceable(fn, 3, name, accepts=(_NUMBER, _NUMBER), returns=_NUMBER)
    for suffix, fn in _UNARY.items():
        name = f"executorch_prim::{suffix}"
        yield name, _traceable(fn, 2, name, accepts=(_NUMBER,), returns=_NUMBER)
    name = "executorch_prim::sym_ite.Scalar"
    yield name, _traceable(_sym_ite, 4, name, accepts=(_BOOL, _NUMBER, _NUMBER), returns=_NUMBER)
    yield "aten::sym_size.int", _traceable(_sym_size, 3, "aten::sym_size.int", accepts=(_TENSOR, _INT), returns=_INT,
                                           strided=True)
    for name in ("aten::sym_numel", "aten::sym_numel.default"):
        yield name, _traceable(_sym_numel, 2, "aten::sym_numel", accepts=(_TENSOR,), returns=_INT, strided=True)
    for name in ("aten::_local_scalar_dense", "aten::_local_scalar_dense.default"):
        yield name, _traceable(_local_scalar_dense, 2, "aten::_local_scalar_dense", accepts=(_TENSOR,),
                               returns=_NUMBER, syncs=True, strided=True)
    yield "executorch_prim::et_view.default", _traceable(_et_view, 3, "executorch_prim::et_view", aliases=(0,),
                                                         accepts=(_TENSOR, _INT_LIST), returns=_TENSOR)
    # The schema returns nothing; emitters have passed the three arguments alone and with a result slot.
    # It grows a tensor in place: no functional form.
    name = "executorch_prim::et_copy_index.tensor"
    binding = Binding(_et_copy_index, (0, 1, 2), mutates=(0,), accepts=(_TENSOR, _TENSOR, _INT))
    yield name, exact_count(binding, 4, name, also=(3,))


def register(registry: KernelRegistry) -> None:
    for name, factory in _kernels():
        registry.register(name, factory)


# The operators registered here: ExecuTorch registers these by hand (kernels/prim_ops), not through its
# codegen, so they record no profiling event of their own (executor/etdump.py).
NAMES = frozenset(name for name, _ in _kernels())
