"""A method's steps, and what each one does, described once at load.

Every instruction becomes a step: a kernel call (the operator's name, its
:class:`~pterun.kernels.Binding` and the call's value indices), a delegate
call, or one of the format's own instructions (a move, a conditional jump, a
free). Each step's :class:`Effect` says what it does to the method's values,
as its kernel or backend declares it. Everything that reasons about steps
reads this one description: the constant check and the rewrites of copies
into views (effects.py, fold.py), the functional form for ``torch.compile``
(functional.py), whether a CUDA graph can hold the method (graphs.py), and
the names in generated code and in errors.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

from pterun.core.device import DeviceType
from pterun.errors import OperatorMissing
from pterun.format import DelegateCall, FreeCall, JumpFalseCall, KernelCall, Kind, MoveCall, Plan
from pterun.kernels import Binding, KernelRegistry


@dataclass(frozen=True)
class KernelStep:
    name: str  # the operator, as the program names it ("aten::add.out")
    binding: Binding
    args: tuple[int, ...]
    replaces: tuple[str, ...] = ()  # a fused step (fuse/): the operators of the chain it runs as one call
    event: ClassVar[str] = KernelCall.event

    @property
    def values(self) -> tuple[int, ...]:
        return self.args

    def kind_error(self, plan: Plan) -> str | None:
        """Whether the call passes values of the kinds its kernel takes, and assigns its result to a value of
        the kind it returns (``Binding.accepts``, ``returns``: from the kernel's schema)."""
        b = self.binding
        for position, kinds in enumerate(b.accepts):
            if kinds is not None and plan.kind_name(self.args[position]) not in kinds:
                return (f"argument {position} is value {self.args[position]}, of kind "
                        f"{plan.kind_name(self.args[position])}; it takes {' or '.join(sorted(kinds))}")
        if b.result is not None and b.returns is not None and plan.kind_name(self.args[b.result]) not in b.returns:
            return (f"assigns its result to value {self.args[b.result]}, of kind "
                    f"{plan.kind_name(self.args[b.result])}; its result is {' or '.join(sorted(b.returns))}")
        return None


@dataclass(frozen=True)
class FunctionalDelegate:
    """A delegate's backend's answers for compile=True, bound to its handle: the sizes of the arguments it writes
    (``BackendInterface.output_sizes``) and a form tracing can follow, or None (``traced_execute``)."""

    sizes: Callable[[list], Sequence[tuple[int, ...]] | None]
    traced: Callable[[list], Callable[[list], None] | None]


@dataclass(frozen=True)
class DelegateStep:
    name: str  # the backend's id
    fn: Callable[[list], None]
    args: tuple[int, ...]
    # What compile=True's functional form calls it by (codegen/functional.py), or why its backend keeps a method
    # calling it uncompiled (BackendInterface.uncompiled_reason).
    functional: FunctionalDelegate | str
    event: ClassVar[str] = DelegateCall.event

    @property
    def values(self) -> tuple[int, ...]:
        return self.args

    def kind_error(self, plan: Plan) -> str | None:
        return None  # a delegate's blob says what it takes; its backend checks that


Step = KernelStep | DelegateStep | MoveCall | JumpFalseCall | FreeCall | None  # None: folded away at load


@dataclass(frozen=True)
class Effect:
    """One step's effect, on values as the step names them (a list stands for its items)."""

    writes: tuple[int, ...] = ()  # values whose memory the step writes (out arguments, in-place updates)
    reads: tuple[int, ...] = ()
    binds: tuple[int, ...] = ()  # values given a new object (a kernel's result, a moved value)
    shares: tuple[int, ...] = ()  # values whose memory that new object may share
    syncs: bool = False  # reads tensor values on the host: no CUDA graph can hold the step
    strided: bool = False  # reads its tensors at any strides (a copy feeding it may be a view)
    known: bool = True  # False: the kernel declares no effect at all, so it is taken to write every argument


def step_effect(step: Step, delegate_writes: Sequence[int] = ()) -> Effect:
    """The effect of one step; ``delegate_writes`` are the argument positions a delegate step writes."""
    if isinstance(step, KernelStep):
        b, args = step.binding, step.args
        if b.result is None and not b.writes and not b.mutates:
            # A kernel that returns nothing and writes nothing would do nothing: its writes are undeclared.
            return Effect(writes=args, reads=args, syncs=b.syncs, known=False)
        return Effect(
            writes=tuple(args[p] for p in (*b.writes, *b.mutates)),
            reads=tuple(args[p] for p in (*b.positional, *(i for _, i in b.keywords)) if p not in b.writes),
            binds=(args[b.result],) if b.result is not None else (),
            shares=tuple(args[p] for p in b.aliases),
            syncs=b.syncs,
            strided=b.strided,
        )
    if isinstance(step, DelegateStep):
        return Effect(writes=tuple(step.args[p] for p in delegate_writes), reads=step.args)
    if step is None:
        return Effect()  # folded away
    # The format's own instructions: a moved value's new object is the source's; a condition is read on the host.
    return Effect(reads=step.reads, binds=step.binds, shares=step.reads if step.binds else (),
                  syncs=isinstance(step, JumpFalseCall))


def describe(step: Step) -> str:
    """What a step is, for errors and generated code: "aten::add.out", "delegate XnnpackBackend", a fused step
    with the operators it replaced."""
    if isinstance(step, KernelStep):
        return f"{step.name} ({', '.join(step.replaces)})" if step.replaces else step.name
    if isinstance(step, DelegateStep):
        return f"delegate {step.name}"
    return type(step).__name__


def build_steps(plan: Plan, kernels: KernelRegistry, device_type: DeviceType,
                delegates: Sequence[tuple[str, Callable, FunctionalDelegate | str]],
                ) -> tuple[list[Step], frozenset[int]]:
    """The method's steps, every operator resolved to its kernel, and the values steps assign.

    ``delegates`` are ``(backend id, execute function, FunctionalDelegate or a reason)`` per delegate of the plan. Every
    missing operator is named in one ``OperatorMissing``."""
    factories, missing = {}, []
    for index in range(len(plan.operators)):
        name = plan.operator_name(index)
        try:
            factories[index] = kernels.lookup(name, device_type)
        except OperatorMissing as exc:
            missing.append((name, exc))
    if missing:
        detail = missing[0][1].message if len(missing) == 1 else ", ".join(name for name, _ in missing)
        raise OperatorMissing(f"method {plan.name!r} needs {len(missing)} operator(s) with no kernel: {detail}")
    steps: list[Step] = []
    assigned: set[int] = set()
    for ins in plan.instructions:
        if isinstance(ins, KernelCall):
            binding = factories[ins.op_index](len(ins.args))
            if binding.result is not None:
                assigned.add(ins.args[binding.result])
            steps.append(KernelStep(plan.operator_name(ins.op_index), binding, ins.args))
        elif isinstance(ins, DelegateCall):
            # A delegate returns scalars (symbolic sizes) by replacing them in its argument list; they are
            # read back after the call.
            assigned.update(a for a in ins.args if plan.values[a].kind in (Kind.INT, Kind.DOUBLE, Kind.BOOL))
            backend_id, fn, functional = delegates[ins.delegate_index]
            steps.append(DelegateStep(backend_id, fn, ins.args, functional))
        else:
            assigned.update(ins.binds)
            steps.append(ins)
    return steps, frozenset(assigned)
