"""Every call passes values of the kinds its kernel takes; checked once, at load.

A corrupted value index can hand a kernel a list where it reads a tensor, or
a tensor where it reads an int, and the kernel would fail on it with
whatever exception Python raises. Kernels state the kinds each argument
takes and the kind of their result (``Binding.accepts`` and ``returns``,
from their schemas); a move keeps a value's kind, and a jump's condition is
a bool or a tensor. A call that breaks this is ``InvalidProgram``, naming the
instruction, its operator, the argument and the value.
"""

from __future__ import annotations

from collections.abc import Sequence

from pterun.errors import InvalidProgram
from pterun.executor.load.steps import KernelStep
from pterun.executor.meta import value_kind
from pterun.format import JumpFalseCall, MoveCall, Plan

_CONDITIONS = frozenset({"bool", "tensor"})


def check_arguments(plan: Plan, steps: Sequence) -> None:
    where = f"method {plan.name!r}"

    def kind(vi: int) -> str:
        return value_kind(plan.values[vi]).name.lower()

    for n, step in enumerate(steps):
        if isinstance(step, KernelStep):
            b = step.binding
            for position, kinds in enumerate(b.accepts):
                if kinds is not None and kind(step.args[position]) not in kinds:
                    raise InvalidProgram(
                        f"{where} instruction {n} ({step.name}) argument {position} is value {step.args[position]}, "
                        f"of kind {kind(step.args[position])}; it takes {' or '.join(sorted(kinds))}"
                    )
            if b.result is not None and b.returns is not None and kind(step.args[b.result]) not in b.returns:
                raise InvalidProgram(
                    f"{where} instruction {n} ({step.name}) assigns its result to value {step.args[b.result]}, "
                    f"of kind {kind(step.args[b.result])}; its result is {' or '.join(sorted(b.returns))}"
                )
        elif isinstance(step, MoveCall) and kind(step.source) != kind(step.target):
            raise InvalidProgram(
                f"{where} instruction {n} (MoveCall) moves value {step.source}, of kind {kind(step.source)}, "
                f"into value {step.target}, of kind {kind(step.target)}"
            )
        elif isinstance(step, JumpFalseCall) and kind(step.condition) not in _CONDITIONS:
            raise InvalidProgram(
                f"{where} instruction {n} (JumpFalseCall) tests value {step.condition}, of kind "
                f"{kind(step.condition)}; a condition is a bool or a tensor"
            )
