"""Folds copies of constants into views of them, once, at load.

ExecuTorch's exporter turns ``linear`` into ``permute_copy(weight)`` followed by
``addmm``, so a program transposes every weight on every call; the portable
runtime does exactly that. The result only ever depends on the constant, so
pterun computes it once at load, and as a view of the constant rather than a
copy: no memory is spent (the file's bytes stay the only copy) and the
kernels that read it take the strided view as it is (a transposed weight is
what BLAS wants anyway).

A ``<op>_copy`` instruction is folded when every tensor it reads is a
constant (or itself folded), none of its arguments is computed at run time,
the value it writes is written nowhere else, is
no method output, is read only by ATen kernels, which accept any strides
(a delegate or ``et_view`` may rely on the planned layout), and shares no
bytes with a view the exporter planned on top of it.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from pterun.executor.codegen import DelegateStep, KernelStep
from pterun.format import Kind, ListValue, MoveCall, Plan, TensorSpec

_VIEWABLE_OUT = ("out", "Tensor_out", "int_out", "dims_out", "dim_out")


def _view_op(name: str):
    """The view op an ``aten::<op>_copy`` out-variant copies: permute_copy.out -> permute.default."""
    if not name.startswith("aten::"):
        return None
    base, _, overload = name[len("aten::"):].partition(".")
    if not base.endswith("_copy") or overload not in _VIEWABLE_OUT:
        return None
    view_overload = "default" if overload == "out" else overload[: -len("_out")]
    packet = getattr(torch.ops.aten, base[: -len("_copy")], None)
    return getattr(packet, view_overload, None) if packet is not None else None


def fold_constant_views(plan: Plan, steps: list, objects: list, constants: set[int], computed: set[int]) -> list:
    """Returns the steps with folded ones replaced by None; folded values' objects are replaced in place."""
    writes: dict[int, int] = {}
    readers: dict[int, list] = {}
    for step in steps:
        if isinstance(step, KernelStep):
            b = step.binding
            outs = [step.args[p] for p in (*b.writes, *b.mutates)]
            if b.result is not None:
                outs.append(step.args[b.result])
            for vi in outs:
                for target in _items(plan, vi):
                    writes[target] = writes.get(target, 0) + 1
            for p in (*b.positional, *(i for _, i in b.keywords)):
                if p not in b.writes:
                    for vi in _items(plan, step.args[p]):
                        readers.setdefault(vi, []).append(step)
        elif isinstance(step, DelegateStep):
            for vi in step.args:
                for target in _items(plan, vi):
                    writes[target] = writes.get(target, 0) + 1
                    readers.setdefault(target, []).append(step)
        elif isinstance(step, MoveCall):
            writes[step.target] = writes.get(step.target, 0) + 2
            readers.setdefault(step.source, []).append(step)
    outputs = set(plan.outputs)
    folded = set(constants)
    # The exporter removes static views by planning the view at its base's offset: such a tensor is
    # read but written by nothing, and sees its base's bytes through the arena. A value one of them
    # overlaps must stay in the arena.
    written = set(writes) | set(plan.inputs)
    aliases = [plan.values[vi] for vi in readers if vi not in written
               and isinstance(plan.values[vi], TensorSpec) and plan.values[vi].memory_id is not None
               and plan.values[vi].data_buffer_idx == 0]
    # Folded instructions become None rather than disappearing: steps stay indexed by instruction,
    # which jumps and error messages refer to.
    # Values known only at run time (symbolic sizes) make a fold impossible, directly or inside a list.
    moving = set(computed)
    for li, value in enumerate(plan.values):
        if isinstance(value, ListValue) and value.kind == Kind.INT_LIST and moving.intersection(value.items):
            moving.add(li)
    return [None if isinstance(step, KernelStep) and _fold(step, plan, objects, folded, writes, readers, outputs,
                                                           moving, aliases)
            else step for step in steps]


def _items(plan: Plan, vi: int) -> Sequence[int]:
    value = plan.values[vi]
    if isinstance(value, ListValue) and value.kind in (Kind.TENSOR_LIST, Kind.OPTIONAL_TENSOR_LIST):
        return [i for i in value.items if i >= 0]
    return (vi,)


def _overlaps(a: TensorSpec, b: TensorSpec) -> bool:
    return (a.memory_id == b.memory_id and a.memory_offset < b.memory_offset + b.nbytes
            and b.memory_offset < a.memory_offset + a.nbytes)


def _fold(step: KernelStep, plan, objects, folded: set[int], writes, readers, outputs, moving: set[int],
          aliases) -> bool:
    view = _view_op(step.name)
    b = step.binding
    if view is None or len(b.writes) != 1:
        return False
    spec = plan.values[step.args[b.writes[0]]]
    if isinstance(spec, TensorSpec) and spec.memory_id is not None and any(_overlaps(spec, a) for a in aliases):
        return False
    if any(step.args[p] in moving for p in (*b.positional, *(i for _, i in b.keywords))):
        return False
    out = step.args[b.writes[0]]
    if writes.get(out) != 1 or out in outputs:
        return False
    if not all(isinstance(r, KernelStep) and r.name.startswith("aten::") for r in readers.get(out, ())):
        return False
    inputs = [p for p in b.positional if p not in b.writes]
    if not all(step.args[p] in folded for p in inputs if isinstance(objects[step.args[p]], torch.Tensor)):
        return False
    if not any(isinstance(objects[step.args[p]], torch.Tensor) for p in inputs):
        return False
    converters = dict(b.convert)
    args = [converters.get(p, lambda v: v)(objects[step.args[p]]) for p in inputs]
    kwargs = {k: converters.get(p, lambda v: v)(objects[step.args[p]]) for k, p in b.keywords if p not in b.writes}
    try:
        result = view(*args, **kwargs)
    except (RuntimeError, TypeError, ValueError, IndexError):
        return False
    planned = objects[out]
    if not isinstance(result, torch.Tensor) or result.shape != planned.shape or result.dtype != planned.dtype:
        return False
    objects[out] = result
    folded.add(out)
    # Lists that hold the value were built from the planned tensor; they must hold the view now.
    for li, value in enumerate(plan.values):
        if isinstance(value, ListValue) and value.kind in (Kind.TENSOR_LIST, Kind.OPTIONAL_TENSOR_LIST):
            for j, item in enumerate(value.items):
                if item == out:
                    objects[li][j] = result
    return True
