"""A read the exporter repeats, made once: the later copies become moves of the first one's result.

ExecuTorch's Llama reads its start position once per layer (a ``select_copy`` of the position tensor, then
``_local_scalar_dense``: 24 identical pairs in a 12-layer decoder) and views the rotary tables once per
layer (``et_view`` of the same tensor to the same sizes, 48 of them): a decode step calls about 120 kernels
that compute what an earlier call of the step already did. Each such step returns its result (a view, a
Python number), writes nothing, and reads only its arguments, so a repeat gives the same result as the
first call when nothing between them writes or rebinds what they read: the repeat is then a move, an
assignment in the generated code.

Arguments are compared as the values they stand for: a repeat's argument that is itself a repeat's result
stands for the first result, a list for its items, a scalar for its number (the exporter writes each call's
constants as values of their own).
"""

from __future__ import annotations

from collections.abc import Hashable

from pterun.executor.load.effects import MethodEffects
from pterun.executor.load.steps import KernelStep
from pterun.format import JumpFalseCall, ListValue, MoveCall, Plan, Scalar

# Kernels whose result depends on their arguments alone and which write nothing.
_READS = frozenset({
    "aten::select_copy.int_out",  # as a view (fold.py), where it writes no out
    "aten::_local_scalar_dense",
    "aten::sym_size.int",
    "executorch_prim::et_view.default",
})


def share_repeated_reads(plan: Plan, steps: list, effects: MethodEffects) -> list:
    """``steps`` with every repeated read a move of the first one's result (methods with jumps as they are)."""
    if any(isinstance(s, JumpFalseCall) for s in steps):
        return steps
    out = list(steps)
    first: dict[Hashable, tuple[int, int]] = {}  # a read's key -> (its step, its result)
    stands_for: dict[int, int] = {}  # a repeat's result -> the first result
    for n, step in enumerate(steps):
        if not (isinstance(step, KernelStep) and step.name in _READS and step.binding.result is not None
                and not step.binding.writes):
            continue
        result = step.args[step.binding.result]
        inputs = tuple(a for a in step.args if a != result)  # (an out-variant names its out twice)
        key = (step.name, tuple(_meaning(plan, stands_for, a) for a in inputs))
        found = first.get(key)
        read = tuple(stands_for.get(a, a) for a in inputs)  # what they read: a repeat's result is the first's
        if found is not None and _untouched(plan, effects, (*read, found[1]), found[0], n):
            out[n] = MoveCall(source=found[1], target=result)
            stands_for[result] = found[1]
        else:
            first[key] = (n, result)
    return out


def _meaning(plan: Plan, stands_for: dict[int, int], vi: int) -> Hashable:
    value = plan.values[vi]
    if vi in stands_for:
        return ("value", stands_for[vi])
    if isinstance(value, Scalar):
        return ("scalar", type(value.value).__name__, value.value)
    if isinstance(value, ListValue):
        return ("list", value.kind, tuple(_meaning(plan, stands_for, i) if i >= 0 else None for i in value.items))
    return ("value", vi)


def _values(plan: Plan, inputs: tuple[int, ...]) -> set[int]:
    """The values ``inputs`` read, lists standing for themselves and their items."""
    found: set[int] = set()
    stack = list(inputs)
    while stack:
        vi = stack.pop()
        if vi in found or vi < 0:
            continue
        found.add(vi)
        value = plan.values[vi]
        if isinstance(value, ListValue):
            stack.extend(value.items)
    return found


def _untouched(plan: Plan, effects: MethodEffects, inputs: tuple[int, ...], start: int, end: int) -> bool:
    """Whether no step after ``start`` and before ``end`` writes the memory the values refer to, or binds one of
    them (the inputs of a repeat, and the first one's result)."""
    values = _values(plan, inputs)
    memory = effects.memory(*values)
    for k in range(start + 1, end):
        e = effects.effects[k]
        if effects.written[k] & memory or values & set(e.binds) or values & set(e.writes):
            return False
    return True
