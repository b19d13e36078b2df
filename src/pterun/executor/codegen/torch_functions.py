"""A cheaper way to call an ATen out-variant: torch's own Python binding, where it calls the same overload.

An ``OpOverload._op`` converts each Python argument by walking the operator's schema (boxed); torch's
generated bindings (``torch.add(x, y, out=o)``) parse their arguments in C++ and call the kernel unboxed.
On 8x32 float tensors (``bench/tiny.py``'s sizes) ``torch.ops.aten.add.out._op(x, y, alpha=1, out=o)``
costs about 3.1 µs and ``torch.add(x, y, alpha=1, out=o)`` 1.5 µs; ``mul.out`` 2.2 and 1.5. In a
program of small operators that is most of the time a call takes.

A binding chooses its overload from the arguments it is given, so a call site uses it only when the
binding, called at load with the site's arguments (tensors on the meta device, scalars as they are),
dispatches to exactly the program's overload: a dispatch mode records the first operator the call
reaches and stops it there, before any kernel runs. The same overload runs the same kernel on the same
arguments, so results are bit-identical; every other site keeps ``_op``.
"""

from __future__ import annotations

import torch

from pterun.core.dtype import storage_dtype
from pterun.core.layout import strides_for
from pterun.format import Kind, ListValue, Plan, Scalar, TensorSpec
from pterun.kernels.aten import overload_of, split_name

_UNKNOWN = object()
_MODULES = (torch._C._VariableFunctions, torch._C._nn)  # torch.<op>, torch.nn.functional's C++ bindings


class _Stop(Exception):
    pass


class _First:
    """Records the first operator a call dispatches, and stops the call there. Pushed on torch's dispatch
    mode stack directly: entering a ``TorchDispatchMode`` imports torch._dynamo (a second, once)."""

    op = None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.op = func
        raise _Stop


def _meta(spec: TensorSpec) -> torch.Tensor:
    strides = strides_for(spec.sizes, spec.dim_order)
    return torch.empty_strided(spec.sizes, strides, dtype=storage_dtype(spec.scalar_type), device="meta")


def _sample(plan: Plan, objects: list, vi: int):
    """An argument like the one the call site passes: tensors on the meta device; _UNKNOWN if there is none."""
    value = plan.values[vi]
    if isinstance(value, TensorSpec):
        return _meta(value)
    if isinstance(value, Scalar):
        return value.value
    if isinstance(value, ListValue):
        if value.kind in (Kind.TENSOR_LIST, Kind.OPTIONAL_TENSOR_LIST):
            items = [None if i < 0 else _sample(plan, objects, i) for i in value.items]
            return _UNKNOWN if any(item is _UNKNOWN for item in items) else items
        obj = objects[vi]
        return list(obj) if isinstance(obj, (list, tuple)) else _UNKNOWN
    return _UNKNOWN


_FOUND: dict[tuple, object] = {}  # (operator, the kinds of its arguments) -> the binding or None


def _kind(plan: Plan, vi: int):
    value = plan.values[vi]
    if isinstance(value, TensorSpec):
        return "tensor"
    if isinstance(value, Scalar):
        return type(value.value)
    if isinstance(value, ListValue):
        return value.kind, len(value.items) if value.kind in (Kind.TENSOR_LIST, Kind.OPTIONAL_TENSOR_LIST) else 0
    return type(value)


def python_binding(step, plan: Plan, objects: list, converted: dict[int, object]):
    """torch's Python binding for the step's operator when it calls exactly that overload with the step's
    arguments, else None. ``converted``: argument position -> the value a converter made at load.

    A binding picks its overload from the kinds of its arguments, so the answer is kept per operator and
    argument kinds: a program's repeated operators are checked once per process."""
    key = (step.name, step.binding.fn, tuple((p, type(converted[p])) if p in converted else _kind(plan, a)
                                             for p, a in enumerate(step.args)))
    found = _FOUND.get(key, _UNKNOWN)
    if found is _UNKNOWN:
        found = _FOUND[key] = _check(step, plan, objects, converted)
    return found


def _check(step, plan: Plan, objects: list, converted: dict[int, object]):
    binding = step.binding
    overload = overload_of(step.name)
    if overload is None or binding.fn is not overload._op or binding.result is not None:
        return None  # not the generic ATen kernel (views.py's, a Python kernel), or one returning a value
    namespace, op, _ = split_name(step.name)
    if namespace != "aten":
        return None
    fn = next((f for f in (getattr(m, op, None) for m in _MODULES) if f is not None), None)
    if fn is None:
        return None
    samples = {}
    for pos in (*binding.positional, *(i for _, i in binding.keywords)):
        sample = converted[pos] if pos in converted else _sample(plan, objects, step.args[pos])
        if sample is _UNKNOWN:
            return None
        samples[pos] = sample
    mode = _First()
    torch._C._push_on_torch_dispatch_stack(mode)  # type: ignore[arg-type]  # a mode by duck typing (above)
    try:
        fn(*[samples[p] for p in binding.positional], **{k: samples[p] for k, p in binding.keywords})
    except _Stop:
        pass
    except Exception:  # noqa: BLE001 - the binding takes other arguments: keep _op
        return None
    finally:
        torch._C._pop_torch_dispatch_stack(None)
    return fn if mode.op is overload else None
