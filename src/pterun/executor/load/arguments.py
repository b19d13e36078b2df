"""Every call passes values of the kinds its kernel takes; checked once, at load.

A corrupted value index can hand a kernel a list where it reads a tensor, or
a tensor where it reads an int, and the kernel would fail on it with
whatever exception Python raises. Kernels state the kinds each argument
takes and the kind of their result (``Binding.accepts`` and ``returns``,
from their schemas; ``KernelStep.kind_error``); a move keeps a value's kind,
and a jump's condition is a bool or a tensor (the format's instructions'
``kind_error``). A step that breaks this is ``InvalidProgram``, naming the
instruction, its operator, the argument and the value.
"""

from __future__ import annotations

from collections.abc import Sequence

from pterun.errors import InvalidProgram
from pterun.executor.load.steps import Step, describe
from pterun.format import Plan


def check_arguments(plan: Plan, steps: Sequence[Step]) -> None:
    for n, step in enumerate(steps):
        problem = step.kind_error(plan) if step is not None else None
        if problem is not None:
            raise InvalidProgram(f"method {plan.name!r} instruction {n} ({describe(step)}) {problem}")
