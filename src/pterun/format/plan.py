"""One method of a program (an ExecutionPlan) as plain frozen objects, and the checks of its indices.

Nothing here knows about torch, devices or the wire format (``plan_reader.py``
reads a plan from the flatbuffer); tensors are described, not made. Every
index in a plan is checked against what it refers to (``check_plan``), so the
executor can trust them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import ClassVar, Union

from pterun.enums import ELEMENT_SIZE
from pterun.errors import InvalidProgram, NotSupported


class Kind(enum.IntEnum):
    """Value kinds, numbered as the KernelTypes union tags of the format."""

    NULL = 1
    INT = 2
    BOOL = 3
    DOUBLE = 4
    TENSOR = 5
    STRING = 6
    INT_LIST = 7
    DOUBLE_LIST = 8
    BOOL_LIST = 9
    TENSOR_LIST = 10
    OPTIONAL_TENSOR_LIST = 11


class Dynamism(enum.IntEnum):
    STATIC = 0
    DYNAMIC_BOUND = 1
    DYNAMIC_UNBOUND = 2




@dataclass(frozen=True, slots=True)
class TensorSpec:
    kind: ClassVar[Kind] = Kind.TENSOR  # every value says its kind, as the format's union tag does
    scalar_type: int
    sizes: tuple[int, ...]  # the upper bound when dynamic
    dim_order: tuple[int, ...]
    dynamism: Dynamism
    data_buffer_idx: int
    memory_id: int | None  # None: not memory-planned
    memory_offset: int
    fqn: str | None
    external: bool  # data lives in a .ptd file under `fqn`
    device_type: int
    device_index: int
    # Worked out once: every step of a load that places or compares tensors asks for it.
    nbytes: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "nbytes", self.numel * ELEMENT_SIZE[self.scalar_type])

    @property
    def numel(self) -> int:
        n = 1
        for s in self.sizes:
            n *= s
        return n

    @property
    def is_constant(self) -> bool:
        return self.memory_id is None and (self.data_buffer_idx > 0 or self.external)

    @property
    def is_memory_planned(self) -> bool:
        # As ExecuTorch's TensorInfo defines it: constants count as planned.
        return self.memory_id is not None or self.data_buffer_idx != 0


@dataclass(frozen=True, slots=True)
class Scalar:
    kind: Kind  # NULL, INT, BOOL, DOUBLE or STRING
    value: Union[None, int, bool, float, str]


@dataclass(frozen=True, slots=True)
class ListValue:
    kind: Kind  # INT_LIST, TENSOR_LIST, OPTIONAL_TENSOR_LIST: value indices; DOUBLE/BOOL_LIST: literals
    items: tuple


Value = Union[TensorSpec, Scalar, ListValue]


# The instruction kinds. Each says which values it names (``values``: every index, checked by ``check_plan``),
# which it computes with (``uses``: all but a free's), which other index it holds and whether that is in range
# (``index_error``), its name in an ETDump (``event``, ExecuTorch's) and what tables call it (``label``: its
# operator, its delegate's backend or its kind, which ``category`` says). The format's own instructions (a move,
# a jump, a free) also say what they read, which value they give a new object (``reads``, ``binds``) and whether
# the values they name are of kinds they take (``kind_error``); a call's kernel or backend says that of a call.


@dataclass(frozen=True, slots=True)
class KernelCall:
    op_index: int
    args: tuple[int, ...]
    event: ClassVar[str] = "OPERATOR_CALL"
    category: ClassVar[str] = "operator"

    @property
    def values(self) -> tuple[int, ...]:
        return self.args

    uses = values

    def index_error(self, plan: Plan) -> str | None:
        if 0 <= self.op_index < len(plan.operators):
            return None
        return f"calls operator {self.op_index} of {len(plan.operators)}"

    def label(self, plan: Plan) -> str:
        return plan.operator_name(self.op_index)


@dataclass(frozen=True, slots=True)
class DelegateCall:
    delegate_index: int
    args: tuple[int, ...]
    event: ClassVar[str] = "DELEGATE_CALL"
    category: ClassVar[str] = "delegate"

    @property
    def values(self) -> tuple[int, ...]:
        return self.args

    uses = values

    def index_error(self, plan: Plan) -> str | None:
        if 0 <= self.delegate_index < len(plan.delegates):
            return None
        return f"calls delegate {self.delegate_index} of {len(plan.delegates)}"

    def label(self, plan: Plan) -> str:
        return plan.delegates[self.delegate_index].backend_id


class _OwnInstruction:
    """What the format's own instructions (a move, a jump, a free) share: no operator or backend of their own,
    so tables call them by their kind."""

    __slots__ = ()
    category: ClassVar[str] = "instruction"

    def label(self, plan: Plan) -> str:
        return type(self).__name__


@dataclass(frozen=True, slots=True)
class MoveCall(_OwnInstruction):
    source: int
    target: int
    event: ClassVar[str] = "MOVE_CALL"

    @property
    def values(self) -> tuple[int, ...]:
        return (self.source, self.target)

    uses = values

    @property
    def reads(self) -> tuple[int, ...]:
        return (self.source,)

    @property
    def binds(self) -> tuple[int, ...]:
        return (self.target,)  # the target becomes the source's object

    def index_error(self, plan: Plan) -> str | None:
        return None

    def kind_error(self, plan: Plan) -> str | None:
        source, target = plan.kind_name(self.source), plan.kind_name(self.target)
        if source == target:
            return None  # a move keeps its value's kind
        return f"moves value {self.source}, of kind {source}, into value {self.target}, of kind {target}"


@dataclass(frozen=True, slots=True)
class JumpFalseCall(_OwnInstruction):
    condition: int
    destination: int
    event: ClassVar[str] = "JF_CALL"

    @property
    def values(self) -> tuple[int, ...]:
        return (self.condition,)

    uses = values
    reads = values
    binds: ClassVar[tuple[int, ...]] = ()

    def index_error(self, plan: Plan) -> str | None:
        if 0 <= self.destination <= len(plan.instructions):
            return None
        return f"jumps to {self.destination}; the chain has {len(plan.instructions)} instructions"

    def kind_error(self, plan: Plan) -> str | None:
        kind = plan.values[self.condition].kind
        if kind in (Kind.BOOL, Kind.TENSOR):
            return None
        return (f"tests value {self.condition}, of kind {plan.kind_name(self.condition)}; a condition is a bool "
                f"or a tensor")


@dataclass(frozen=True, slots=True)
class FreeCall(_OwnInstruction):
    value: int
    event: ClassVar[str] = "FREE_CALL"

    @property
    def values(self) -> tuple[int, ...]:
        return (self.value,)

    # Memory is released when nothing refers to it any more: a free computes with nothing.
    uses: ClassVar[tuple[int, ...]] = ()
    reads: ClassVar[tuple[int, ...]] = ()
    binds: ClassVar[tuple[int, ...]] = ()

    def index_error(self, plan: Plan) -> str | None:
        return None

    def kind_error(self, plan: Plan) -> str | None:
        return None  # a free takes a value of any kind


Instruction = Union[KernelCall, DelegateCall, MoveCall, JumpFalseCall, FreeCall]
# The events ExecuTorch's runtime records for a whole instruction, one per kind.
INSTRUCTION_EVENTS = frozenset(kind.event for kind in (KernelCall, DelegateCall, MoveCall, JumpFalseCall, FreeCall))


@dataclass(frozen=True, slots=True)
class DelegateSpec:
    backend_id: str
    inline: bool  # the blob is Program.backend_delegate_data[index], else segments[index]
    index: int
    compile_specs: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True)
class Plan:
    name: str
    values: tuple[Value, ...]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    instructions: tuple[Instruction, ...]  # of chain 0, the only chain the runtime executes
    operators: tuple[tuple[str, str], ...]  # (name, overload)
    delegates: tuple[DelegateSpec, ...]
    buffer_sizes: tuple[int, ...]  # entry 0 is reserved
    buffer_devices: dict[int, tuple[int, int]]  # buffer index -> (device type, index), non-CPU only
    input_spec: str | None
    output_spec: str | None

    @property
    def arena_sizes(self) -> tuple[int, ...]:
        """Sizes of the planned arenas, memory_id i - 1 at position i - 1."""
        return self.buffer_sizes[1:]

    def arena_device(self, memory_id: int) -> tuple[int, int]:
        return self.buffer_devices.get(memory_id, (0, 0))

    def operator_name(self, index: int) -> str:
        """Operator ``index`` as ``namespace::name.overload``."""
        name, overload = self.operators[index]
        return f"{name}.{overload}" if overload else name

    def kind_name(self, vi: int) -> str:
        """Value ``vi``'s kind as errors and kernels' declarations say it ("tensor", "int_list")."""
        return self.values[vi].kind.name.lower()


# Each list of other values: the kinds its items may refer to.
_ITEM_KINDS = {Kind.INT_LIST: (Kind.INT,), Kind.TENSOR_LIST: (Kind.TENSOR,),
               Kind.OPTIONAL_TENSOR_LIST: (Kind.TENSOR, Kind.NULL)}


def check_plan(plan: Plan) -> None:
    """Every index in the plan refers to something of the right kind."""
    where = f"method {plan.name!r}"
    n = len(plan.values)

    def value(i: int, what: str) -> Value:
        if not 0 <= i < n:
            raise InvalidProgram(f"{where}: {what} refers to value {i}; the method has {n} values")
        return plan.values[i]

    for i in plan.inputs:
        value(i, "an input")
    for i in plan.outputs:
        value(i, "an output")
    if any(s < 0 for s in plan.buffer_sizes):
        raise InvalidProgram(f"{where}: non_const_buffer_sizes {list(plan.buffer_sizes)} has a negative size")
    for idx in plan.buffer_devices:
        if not 1 <= idx < len(plan.buffer_sizes):
            raise InvalidProgram(f"{where}: device tag for buffer {idx}; the plan has {len(plan.buffer_sizes)} buffers")
    kinds = [v.kind for v in plan.values]
    for vi, v in enumerate(plan.values):
        kind = kinds[vi]
        if isinstance(v, TensorSpec):
            if v.memory_id is not None:
                if not 1 <= v.memory_id < len(plan.buffer_sizes):
                    raise InvalidProgram(
                        f"{where} value {vi}: memory_id {v.memory_id} is not one of the plan's "
                        f"{max(len(plan.buffer_sizes) - 1, 0)} arenas"
                    )
                if v.dynamism == Dynamism.DYNAMIC_UNBOUND:
                    raise NotSupported(f"{where} value {vi}: unbounded dynamic tensors cannot be memory-planned")
                if v.memory_offset + v.nbytes > plan.buffer_sizes[v.memory_id]:
                    raise InvalidProgram(
                        f"{where} value {vi}: {v.nbytes} bytes at offset {v.memory_offset} overrun arena "
                        f"{v.memory_id} of {plan.buffer_sizes[v.memory_id]} bytes"
                    )
        elif isinstance(v, ListValue) and kind in _ITEM_KINDS:
            expected = _ITEM_KINDS[kind]
            for item in v.items:
                if kind == Kind.OPTIONAL_TENSOR_LIST and item == -1:
                    continue
                if not 0 <= item < n:
                    value(item, f"list value {vi}")  # raises
                got = kinds[item]
                if got not in expected:
                    raise InvalidProgram(
                        f"{where} value {vi}: a {v.kind.name} item refers to value {item}, a {got.name}"
                    )
    for pc, ins in enumerate(plan.instructions):
        what = f"instruction {pc}"
        problem = ins.index_error(plan)
        if problem is not None:
            raise InvalidProgram(f"{where}: {what} {problem}")
        named = ins.values
        if named and not (0 <= min(named) and max(named) < n):
            for a in named:
                value(a, what)
