"""What every chain pattern reads the steps through: which step made a value, and the chain found."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TypeGuard

from pterun.core.layout import is_contiguous_order
from pterun.executor.load.fold import overlaps
from pterun.executor.load.steps import KernelStep
from pterun.format import Dynamism, Plan, TensorSpec
from pterun.kernels import Binding

ET_VIEW = "executorch_prim::et_view.default"

@dataclass(frozen=True)
class Chain:
    name: str  # the fused operator, as generated code and errors name it
    steps: frozenset[int]  # every step of the chain; the last one becomes the fused call
    binding: Binding  # without a functional form, the functional form for torch.compile keeps the steps
    args: tuple[int, ...]
    inputs: tuple[int, ...]  # tensors the fused call reads
    apart: bool = False  # the kernel reads its inputs while it writes its out (the last argument): no shared bytes
    # Values the steps compute on the way that the fused call writes too, where and as they did: others may read them.
    kept: frozenset[int] = frozenset()


class Graph:
    """Which step made each value a step reads, following views the exporter planned on the same bytes."""

    def __init__(self, plan: Plan, steps: list, objects: list) -> None:
        self.plan, self.steps, self.objects = plan, steps, objects
        self.maker: dict[int, int] = {}
        for n, step in enumerate(steps):
            if isinstance(step, KernelStep):
                self.maker[self.made_value(n)] = n

    def runs(self, n: int | None, op: str) -> TypeGuard[int]:
        """Whether step ``n`` calls the kernel ``op``; None (no step found) calls none."""
        step = self.steps[n] if n is not None else None
        return isinstance(step, KernelStep) and step.name == op

    def arg(self, n: int, pos: int) -> int:
        return self.steps[n].args[pos]

    def made_value(self, n: int) -> int:
        # Every operator matched here is an out-variant: its out argument is last, also when fold.py made it a
        # view bound as the step's result.
        return self.steps[n].args[-1]

    def value(self, vi: int):
        return self.objects[vi]

    def maker_of(self, n: int, pos: int) -> int | None:
        """The step that made argument ``pos`` of step ``n``: directly, or a tensor on the same bytes."""
        vi = self.arg(n, pos)
        if vi in self.maker and self.maker[vi] < n:
            return self.maker[vi]
        spec = self.spec(vi)
        if spec is None or spec.memory_id is None or not contiguous(spec):
            return None
        for k in range(n - 1, -1, -1):
            step = self.steps[k]
            if not isinstance(step, KernelStep):
                if step is not None:
                    return None  # a delegate or a move: what it writes is not followed here
                continue
            b = step.binding
            for p in (*b.writes, *b.mutates):
                made = self.plan.values[step.args[p]]
                if not isinstance(made, TensorSpec) or made.memory_id is None or not overlaps(made, spec):
                    continue
                same = (step.args[p] == self.made_value(k) and made.dynamism == Dynamism.STATIC
                        and made.memory_offset == spec.memory_offset and made.nbytes == spec.nbytes
                        and made.scalar_type == spec.scalar_type and contiguous(made))
                return k if same else None
        return None

    def maker_through_views(self, n: int, pos: int) -> tuple[int | None, tuple[int, ...]]:
        """``maker_of``, also through ``et_view`` steps (a dynamic tensor's views are steps of their own): the
        step that made the viewed tensor, and the view steps passed on the way."""
        views: list[int] = []
        made = self.maker_of(n, pos)
        while self.runs(made, ET_VIEW):
            views.append(made)
            n, pos = made, 0
            made = self.maker_of(n, pos)
        return made, tuple(views)

    def is_dynamic_int(self, vi: int) -> bool:
        """Whether the int value ``vi`` is computed at run time (a size a step reads off a dynamic tensor)."""
        return vi in self.maker

    def spec(self, vi: int) -> TensorSpec | None:
        """The value's tensor spec where its sizes are the run's sizes (a static tensor), else None."""
        value = self.tensor(vi)
        return value if value is not None and value.dynamism == Dynamism.STATIC else None

    def tensor(self, vi: int) -> TensorSpec | None:
        """The value's tensor spec, static or not: its dtype, rank and dim order hold on every run; a dynamic
        tensor's sizes are its bounds."""
        value = self.plan.values[vi]
        return value if isinstance(value, TensorSpec) else None


def contiguous(spec: TensorSpec) -> bool:
    return is_contiguous_order(spec.dim_order)


def scalar(g: Graph, vi: int) -> float | None:
    value = g.value(vi)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def last_dim(g: Graph, vi: int, dim) -> bool:
    spec = g.tensor(vi)
    return spec is not None and dim in (-1, len(spec.sizes) - 1)


def operand(g: Graph, n: int, op: str) -> tuple[int, int] | None:
    """Of a product at step ``n``: the step that made one factor with ``op``, and the other factor's value."""
    for pos in (0, 1):
        made = g.maker_of(n, pos)
        if g.runs(made, op):
            return made, g.arg(n, 1 - pos)
    return None


def plain_cast(g: Graph, n: int) -> bool:
    """Whether the ``_to_dim_order_copy`` at step ``n`` only changes the dtype: contiguous in, contiguous out."""
    source, made = g.tensor(g.arg(n, 0)), g.tensor(g.made_value(n))
    order = g.value(g.arg(n, 2))
    return (source is not None and made is not None and contiguous(source) and contiguous(made)
            and (order is None or list(order) == list(range(len(made.sizes)))))


def shared(a, b) -> bool:
    """Whether two planned tensors (values' specs) overlap in an arena."""
    return (isinstance(a, TensorSpec) and isinstance(b, TensorSpec) and a.memory_id is not None
            and b.memory_id is not None and overlaps(a, b))


def hidden_rows(g: Graph, cond: int | None) -> list[int] | None:
    """The steps of ``logical_not(any(logical_not(eq(scores, -inf)), -1, keepdim))`` ending at step ``cond``, the
    ``eq`` last (its argument 0 is the scores): the rows a mask hides entirely, as the exporter's safe softmax
    finds them."""
    if not g.runs(cond, "aten::logical_not.out"):
        return None
    found = g.maker_of(cond, 0)
    if not g.runs(found, "aten::any.out") or g.value(g.arg(found, 2)) is not True:
        return None
    if not last_dim(g, g.arg(found, 0), g.value(g.arg(found, 1))):
        return None
    inner = g.maker_of(found, 0)
    if not g.runs(inner, "aten::logical_not.out"):
        return None
    eq = g.maker_of(inner, 0)
    if not g.runs(eq, "aten::eq.Scalar_out") or scalar(g, g.arg(eq, 1)) != -math.inf:
        return None
    return [cond, found, inner, eq]
