"""One method of a program (an ExecutionPlan), read into plain frozen objects.

Everything a method needs at load time is read here once: its values, the
instructions of its chains, its operators and delegates, and its memory plan.
Every index in the plan is checked against what it refers to, so the executor
can trust them. Nothing here knows about torch or devices; tensors are
described, not made.
"""

from __future__ import annotations

import enum
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Union

from pterun.errors import InvalidProgram, NotSupported
from pterun.flatbuf.verify import DATA_PER_BYTE
from pterun.format._generated import program_generated as fb


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


# Element sizes by ScalarType code; codes outside this table are not in the format.
ELEMENT_SIZE = {
    0: 1, 1: 1, 2: 2, 3: 4, 4: 8, 5: 2, 6: 4, 7: 8, 11: 1, 12: 1, 13: 1, 14: 4, 15: 2, 16: 1, 17: 1,
    22: 2, 23: 1, 24: 1, 25: 1, 26: 1, 27: 2, 28: 4, 29: 8,
}
_MAX_NBYTES = 1 << 63
# The format's DeviceType, TensorDataLocation and DataLocation enums.
_DEVICE_TYPES = (0, 1)
_TENSOR_LOCATIONS = (fb.TensorDataLocation.SEGMENT, fb.TensorDataLocation.EXTERNAL)
_DATA_LOCATIONS = (fb.DataLocation.INLINE, fb.DataLocation.SEGMENT)


@dataclass(frozen=True, slots=True)
class TensorSpec:
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

    @property
    def numel(self) -> int:
        n = 1
        for s in self.sizes:
            n *= s
        return n

    @property
    def nbytes(self) -> int:
        return self.numel * ELEMENT_SIZE[self.scalar_type]

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


@dataclass(frozen=True, slots=True)
class KernelCall:
    op_index: int
    args: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class DelegateCall:
    delegate_index: int
    args: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class MoveCall:
    source: int
    target: int


@dataclass(frozen=True, slots=True)
class JumpFalseCall:
    condition: int
    destination: int


@dataclass(frozen=True, slots=True)
class FreeCall:
    value: int


Instruction = Union[KernelCall, DelegateCall, MoveCall, JumpFalseCall, FreeCall]


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


def _string(raw: bytes | None) -> str | None:
    if raw is None:
        return None
    charge(len(raw))
    return raw.decode("utf-8")


# Elements a plan may still read. A verified program cannot exceed it (the
# verifier bounds the same walk); an unverified one (Verification.Minimal)
# whose vectors are shared over and over would otherwise keep the reader busy
# for time quadratic in its size.
_READ_BUDGET: ContextVar[list[int] | None] = ContextVar("_READ_BUDGET", default=None)


@contextmanager
def read_budget(buffer_size: int):
    """Bounds the elements read inside the block to DATA_PER_BYTE per byte of the buffer."""
    token = _READ_BUDGET.set([DATA_PER_BYTE * buffer_size])
    try:
        yield
    finally:
        _READ_BUDGET.reset(token)


def charge(n: int) -> int:
    """Counts ``n`` elements against the budget of the enclosing ``read_budget``; returns ``n``."""
    left = _READ_BUDGET.get()
    if left is not None:
        left[0] -= n
        if left[0] < 0:
            raise InvalidProgram(
                f"the program's vectors and strings, as read, add up to more than {DATA_PER_BYTE} "
                f"elements per byte of it (data shared over and over)"
            )
    return n


def _numpy_or_empty(length: int, as_numpy) -> tuple:
    return tuple(int(x) for x in as_numpy()) if charge(length) else ()


def read_tensor(t: fb.Tensor, where: str) -> TensorSpec:
    scalar_type = t.ScalarType()
    if scalar_type not in ELEMENT_SIZE:
        raise InvalidProgram(f"{where}: scalar type {scalar_type} is not a type of the format")
    sizes = _numpy_or_empty(t.SizesLength(), t.SizesAsNumpy)
    dim_order = _numpy_or_empty(t.DimOrderLength(), t.DimOrderAsNumpy)
    if any(s < 0 for s in sizes):
        raise InvalidProgram(f"{where}: sizes {list(sizes)} include a negative size")
    if sorted(dim_order) != list(range(len(sizes))):
        raise InvalidProgram(f"{where}: dim_order {list(dim_order)} is not a permutation of {len(sizes)} dims")
    # A zero size makes numel 0 but not the strides: the extent of every
    # dimension must fit in 64 bits as well, or a stride of the tensor would not.
    extent = 1
    for s in sizes:
        extent *= max(s, 1)
    if extent * ELEMENT_SIZE[scalar_type] >= _MAX_NBYTES:
        raise InvalidProgram(f"{where}: sizes {list(sizes)} overflow a 64-bit byte count")
    dynamism = t.ShapeDynamism()
    if dynamism not in (0, 1, 2):
        raise InvalidProgram(f"{where}: shape dynamism {dynamism} is not one of STATIC, DYNAMIC_BOUND, DYNAMIC_UNBOUND")
    if t.StorageOffset() != 0:
        raise NotSupported(f"{where}: storage_offset is {t.StorageOffset()}; only 0 is supported")
    alloc = t.AllocationInfo()
    memory_id = None
    offset = 0
    if alloc is not None:
        memory_id = alloc.MemoryId()
        offset = alloc.MemoryOffsetLow() | (alloc.MemoryOffsetHigh() << 32)
    extra = t.ExtraTensorInfo()
    fqn, external, device_type, device_index = None, False, 0, 0
    if extra is not None:
        fqn = _string(extra.FullyQualifiedName())
        location = extra.Location()
        if location not in _TENSOR_LOCATIONS:
            raise InvalidProgram(f"{where}: data location {location} is not one of SEGMENT, EXTERNAL")
        external = location == fb.TensorDataLocation.EXTERNAL
        device_type, device_index = extra.DeviceType(), extra.DeviceIndex()
        _check_device(device_type, device_index, where)
        if external and not fqn:
            raise InvalidProgram(f"{where}: stored externally but has no fully qualified name")
    return TensorSpec(
        scalar_type, sizes, dim_order, Dynamism(dynamism), t.DataBufferIdx(), memory_id, offset,
        fqn, external, device_type, device_index,
    )


def _check_device(device_type: int, device_index: int, where: str) -> None:
    if device_type not in _DEVICE_TYPES:
        raise NotSupported(f"{where}: device type {device_type} is not one this runtime knows (0: CPU, 1: CUDA)")
    if device_index < 0:
        raise InvalidProgram(f"{where}: device index {device_index} is negative")


def _read_value(ev: fb.EValue, where: str) -> Value:
    tag = ev.ValType()
    table = ev.Val()
    if tag == Kind.NULL or tag == 0:
        return Scalar(Kind.NULL, None)
    if table is None:
        raise InvalidProgram(f"{where}: value of kind {tag} has no data")
    if tag == Kind.TENSOR:
        t = fb.Tensor()
        t.Init(table.Bytes, table.Pos)
        return read_tensor(t, where)
    if tag == Kind.INT:
        v = fb.Int()
        v.Init(table.Bytes, table.Pos)
        return Scalar(Kind.INT, v.IntVal())
    if tag == Kind.BOOL:
        v = fb.Bool()
        v.Init(table.Bytes, table.Pos)
        return Scalar(Kind.BOOL, bool(v.BoolVal()))
    if tag == Kind.DOUBLE:
        v = fb.Double()
        v.Init(table.Bytes, table.Pos)
        return Scalar(Kind.DOUBLE, v.DoubleVal())
    if tag == Kind.STRING:
        v = fb.String()
        v.Init(table.Bytes, table.Pos)
        return Scalar(Kind.STRING, _string(v.StringVal()) or "")
    list_class = {
        Kind.INT_LIST: fb.IntList, Kind.DOUBLE_LIST: fb.DoubleList, Kind.BOOL_LIST: fb.BoolList,
        Kind.TENSOR_LIST: fb.TensorList, Kind.OPTIONAL_TENSOR_LIST: fb.OptionalTensorList,
    }.get(tag)
    if list_class is None:
        raise InvalidProgram(f"{where}: unknown value kind {tag}")
    v = list_class()
    v.Init(table.Bytes, table.Pos)
    n = charge(v.ItemsLength())
    items = tuple(v.ItemsAsNumpy().tolist()) if n else ()
    if tag == Kind.BOOL_LIST:
        items = tuple(bool(x) for x in items)
    elif tag == Kind.DOUBLE_LIST:
        items = tuple(float(x) for x in items)
    return ListValue(Kind(tag), items)


def _read_instruction(ins: fb.Instruction, where: str) -> Instruction:
    tag = ins.InstrArgsType()
    table = ins.InstrArgs()
    if table is None:
        raise InvalidProgram(f"{where}: instruction of kind {tag} has no arguments")
    if tag == fb.InstructionArguments.KernelCall:
        k = fb.KernelCall()
        k.Init(table.Bytes, table.Pos)
        return KernelCall(k.OpIndex(), _numpy_or_empty(k.ArgsLength(), k.ArgsAsNumpy))
    if tag == fb.InstructionArguments.DelegateCall:
        d = fb.DelegateCall()
        d.Init(table.Bytes, table.Pos)
        return DelegateCall(d.DelegateIndex(), _numpy_or_empty(d.ArgsLength(), d.ArgsAsNumpy))
    if tag == fb.InstructionArguments.MoveCall:
        m = fb.MoveCall()
        m.Init(table.Bytes, table.Pos)
        return MoveCall(m.MoveFrom(), m.MoveTo())
    if tag == fb.InstructionArguments.JumpFalseCall:
        j = fb.JumpFalseCall()
        j.Init(table.Bytes, table.Pos)
        return JumpFalseCall(j.CondValueIndex(), j.DestinationInstruction())
    if tag == fb.InstructionArguments.FreeCall:
        f = fb.FreeCall()
        f.Init(table.Bytes, table.Pos)
        return FreeCall(f.ValueIndex())
    raise InvalidProgram(f"{where}: unknown instruction kind {tag}")


def read_plan(p: fb.ExecutionPlan) -> Plan:
    with read_budget(len(p._tab.Bytes)):
        return _read_plan(p)


def _read_plan(p: fb.ExecutionPlan) -> Plan:
    name = _string(p.Name())
    if name is None:
        raise InvalidProgram("an execution plan has no name")
    where = f"method {name!r}"
    if p.InputsIsNone() or p.OutputsIsNone() or p.NonConstBufferSizesIsNone():
        raise InvalidProgram(f"{where}: inputs, outputs or non_const_buffer_sizes is missing")
    values = tuple(_read_value(p.Values(i), f"{where} value {i}") for i in range(charge(p.ValuesLength())))
    chains = [p.Chains(i) for i in range(min(p.ChainsLength(), 1))]
    instructions: tuple[Instruction, ...] = ()
    if chains:
        chain = chains[0]
        instructions = tuple(
            _read_instruction(chain.Instructions(i), f"{where} instruction {i}")
            for i in range(charge(chain.InstructionsLength()))
        )
    operators = []
    for i in range(charge(p.OperatorsLength())):
        op = p.Operators(i)
        op_name = _string(op.Name())
        if not op_name:
            raise InvalidProgram(f"{where}: operator {i} has no name")
        operators.append((op_name, _string(op.Overload()) or ""))
    delegates = []
    for i in range(charge(p.DelegatesLength())):
        d = p.Delegates(i)
        backend_id = _string(d.Id())
        processed = d.Processed()
        if not backend_id or processed is None:
            raise InvalidProgram(f"{where}: delegate {i} has no backend id or no processed data")
        specs = []
        for j in range(charge(d.CompileSpecsLength())):
            spec = d.CompileSpecs(j)
            value = spec.ValueAsNumpy().tobytes() if charge(spec.ValueLength()) else b""
            specs.append((_string(spec.Key()) or "", value))
        location = processed.Location()
        if location not in _DATA_LOCATIONS:
            raise InvalidProgram(f"{where}: delegate {i} data location {location} is not one of INLINE, SEGMENT")
        delegates.append(
            DelegateSpec(backend_id, location == fb.DataLocation.INLINE, processed.Index(), tuple(specs))
        )
    buffer_sizes = _numpy_or_empty(p.NonConstBufferSizesLength(), p.NonConstBufferSizesAsNumpy)
    devices = {}
    for i in range(charge(p.NonConstBufferDeviceLength())):
        dev = p.NonConstBufferDevice(i)
        _check_device(dev.DeviceType(), dev.DeviceIndex(), f"{where} buffer {dev.BufferIdx()}")
        devices[dev.BufferIdx()] = (dev.DeviceType(), dev.DeviceIndex())
    meta = p.ContainerMetaType()
    plan = Plan(
        name=name,
        values=values,
        inputs=_numpy_or_empty(p.InputsLength(), p.InputsAsNumpy),
        outputs=_numpy_or_empty(p.OutputsLength(), p.OutputsAsNumpy),
        instructions=instructions,
        operators=tuple(operators),
        delegates=tuple(delegates),
        buffer_sizes=buffer_sizes,
        buffer_devices=devices,
        input_spec=_string(meta.EncodedInpStr()) if meta else None,
        output_spec=_string(meta.EncodedOutStr()) if meta else None,
    )
    check_plan(plan)
    return plan


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
    for vi, v in enumerate(plan.values):
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
        elif isinstance(v, ListValue) and v.kind in (Kind.INT_LIST, Kind.TENSOR_LIST, Kind.OPTIONAL_TENSOR_LIST):
            for item in v.items:
                if v.kind == Kind.OPTIONAL_TENSOR_LIST and item == -1:
                    continue
                target = value(item, f"list value {vi}")
                expected = {Kind.INT_LIST: (Kind.INT,), Kind.TENSOR_LIST: (Kind.TENSOR,),
                            Kind.OPTIONAL_TENSOR_LIST: (Kind.TENSOR, Kind.NULL)}[v.kind]
                got = Kind.TENSOR if isinstance(target, TensorSpec) else target.kind
                if got not in expected:
                    raise InvalidProgram(
                        f"{where} value {vi}: a {v.kind.name} item refers to value {item}, a {got.name}"
                    )
    n_ins = len(plan.instructions)
    for pc, ins in enumerate(plan.instructions):
        what = f"instruction {pc}"
        if isinstance(ins, KernelCall):
            if not 0 <= ins.op_index < len(plan.operators):
                raise InvalidProgram(f"{where}: {what} calls operator {ins.op_index} of {len(plan.operators)}")
            for a in ins.args:
                value(a, what)
        elif isinstance(ins, DelegateCall):
            if not 0 <= ins.delegate_index < len(plan.delegates):
                raise InvalidProgram(f"{where}: {what} calls delegate {ins.delegate_index} of {len(plan.delegates)}")
            for a in ins.args:
                value(a, what)
        elif isinstance(ins, MoveCall):
            value(ins.source, what)
            value(ins.target, what)
        elif isinstance(ins, JumpFalseCall):
            value(ins.condition, what)
            if not 0 <= ins.destination <= n_ins:
                raise InvalidProgram(f"{where}: {what} jumps to {ins.destination}; the chain has {n_ins} instructions")
        elif isinstance(ins, FreeCall):
            value(ins.value, what)
