"""Reads one method of a program (an ExecutionPlan) from the flatbuffer into the plain objects of ``plan.py``.

Everything a method needs at load time is read here once: its values, the
instructions of its chains, its operators and delegates, and its memory plan;
``check_plan`` then checks every index. Every element read is charged to the
read budget (``budget.py``).
"""

from __future__ import annotations

from pterun.errors import InvalidProgram, NotSupported
from pterun.flatbuf.tables import union_member
from pterun.format._generated import program_generated as fb
from pterun.format.budget import charge, ints, read_budget, string
from pterun.format.plan import (
    ELEMENT_SIZE, DelegateCall, DelegateSpec, Dynamism, FreeCall, Instruction, JumpFalseCall, KernelCall, Kind,
    ListValue, MoveCall, Plan, Scalar, TensorSpec, Value, check_plan,
)

_MAX_NBYTES = 1 << 63
# The format's DeviceType, TensorDataLocation and DataLocation enums.
_DEVICE_TYPES = (0, 1)
_TENSOR_LOCATIONS = (fb.TensorDataLocation.SEGMENT, fb.TensorDataLocation.EXTERNAL)
_DATA_LOCATIONS = (fb.DataLocation.INLINE, fb.DataLocation.SEGMENT)


def read_tensor(t: fb.Tensor, where: str) -> TensorSpec:
    scalar_type = t.ScalarType()
    if scalar_type not in ELEMENT_SIZE:
        raise InvalidProgram(f"{where}: scalar type {scalar_type} is not a type of the format")
    sizes = ints(t.SizesLength(), t.SizesAsNumpy)
    dim_order = ints(t.DimOrderLength(), t.DimOrderAsNumpy)
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
        fqn = string(extra.FullyQualifiedName())
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


# Each kind of value but NULL and TENSOR: its table in the format and how its value is read from that table.
_VALUES = {
    Kind.INT: (fb.Int, lambda v: Scalar(Kind.INT, v.IntVal())),
    Kind.BOOL: (fb.Bool, lambda v: Scalar(Kind.BOOL, bool(v.BoolVal()))),
    Kind.DOUBLE: (fb.Double, lambda v: Scalar(Kind.DOUBLE, v.DoubleVal())),
    Kind.STRING: (fb.String, lambda v: Scalar(Kind.STRING, string(v.StringVal()) or "")),
    Kind.INT_LIST: (fb.IntList, lambda v: ListValue(Kind.INT_LIST, _items(v))),
    Kind.DOUBLE_LIST: (fb.DoubleList, lambda v: ListValue(Kind.DOUBLE_LIST, tuple(map(float, _items(v))))),
    Kind.BOOL_LIST: (fb.BoolList, lambda v: ListValue(Kind.BOOL_LIST, tuple(map(bool, _items(v))))),
    Kind.TENSOR_LIST: (fb.TensorList, lambda v: ListValue(Kind.TENSOR_LIST, _items(v))),
    Kind.OPTIONAL_TENSOR_LIST: (
        fb.OptionalTensorList, lambda v: ListValue(Kind.OPTIONAL_TENSOR_LIST, _items(v)),
    ),
}


def _items(v) -> tuple:
    return tuple(v.ItemsAsNumpy().tolist()) if charge(v.ItemsLength()) else ()


def _read_value(ev: fb.EValue, where: str) -> Value:
    tag = ev.ValType()
    table = ev.Val()
    if tag == Kind.NULL or tag == 0:
        return Scalar(Kind.NULL, None)
    if table is None:
        raise InvalidProgram(f"{where}: value of kind {tag} has no data")
    if tag == Kind.TENSOR:
        return read_tensor(union_member(table, fb.Tensor), where)
    if tag not in _VALUES:
        raise InvalidProgram(f"{where}: unknown value kind {tag}")
    cls, read = _VALUES[tag]
    return read(union_member(table, cls))


# Each kind of instruction: its table in the format and the instruction read from that table.
_INSTRUCTIONS = {
    fb.InstructionArguments.KernelCall: (
        fb.KernelCall, lambda k: KernelCall(k.OpIndex(), ints(k.ArgsLength(), k.ArgsAsNumpy)),
    ),
    fb.InstructionArguments.DelegateCall: (
        fb.DelegateCall, lambda d: DelegateCall(d.DelegateIndex(), ints(d.ArgsLength(), d.ArgsAsNumpy)),
    ),
    fb.InstructionArguments.MoveCall: (fb.MoveCall, lambda m: MoveCall(m.MoveFrom(), m.MoveTo())),
    fb.InstructionArguments.JumpFalseCall: (
        fb.JumpFalseCall, lambda j: JumpFalseCall(j.CondValueIndex(), j.DestinationInstruction()),
    ),
    fb.InstructionArguments.FreeCall: (fb.FreeCall, lambda f: FreeCall(f.ValueIndex())),
}


def _read_instruction(ins: fb.Instruction, where: str) -> Instruction:
    tag = ins.InstrArgsType()
    table = ins.InstrArgs()
    if table is None:
        raise InvalidProgram(f"{where}: instruction of kind {tag} has no arguments")
    if tag not in _INSTRUCTIONS:
        raise InvalidProgram(f"{where}: unknown instruction kind {tag}")
    cls, read = _INSTRUCTIONS[tag]
    return read(union_member(table, cls))


def read_plan(p: fb.ExecutionPlan) -> Plan:
    with read_budget(len(p._tab.Bytes)):
        return _read_plan(p)


def _read_plan(p: fb.ExecutionPlan) -> Plan:
    name = string(p.Name())
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
        op_name = string(op.Name())
        if not op_name:
            raise InvalidProgram(f"{where}: operator {i} has no name")
        operators.append((op_name, string(op.Overload()) or ""))
    delegates = []
    for i in range(charge(p.DelegatesLength())):
        d = p.Delegates(i)
        backend_id = string(d.Id())
        processed = d.Processed()
        if not backend_id or processed is None:
            raise InvalidProgram(f"{where}: delegate {i} has no backend id or no processed data")
        specs = []
        for j in range(charge(d.CompileSpecsLength())):
            spec = d.CompileSpecs(j)
            value = spec.ValueAsNumpy().tobytes() if charge(spec.ValueLength()) else b""
            specs.append((string(spec.Key()) or "", value))
        location = processed.Location()
        if location not in _DATA_LOCATIONS:
            raise InvalidProgram(f"{where}: delegate {i} data location {location} is not one of INLINE, SEGMENT")
        delegates.append(
            DelegateSpec(backend_id, location == fb.DataLocation.INLINE, processed.Index(), tuple(specs))
        )
    buffer_sizes = ints(p.NonConstBufferSizesLength(), p.NonConstBufferSizesAsNumpy)
    devices = {}
    for i in range(charge(p.NonConstBufferDeviceLength())):
        dev = p.NonConstBufferDevice(i)
        _check_device(dev.DeviceType(), dev.DeviceIndex(), f"{where} buffer {dev.BufferIdx()}")
        devices[dev.BufferIdx()] = (dev.DeviceType(), dev.DeviceIndex())
    meta = p.ContainerMetaType()
    plan = Plan(
        name=name,
        values=values,
        inputs=ints(p.InputsLength(), p.InputsAsNumpy),
        outputs=ints(p.OutputsLength(), p.OutputsAsNumpy),
        instructions=instructions,
        operators=tuple(operators),
        delegates=tuple(delegates),
        buffer_sizes=buffer_sizes,
        buffer_devices=devices,
        input_spec=string(meta.EncodedInpStr()) if meta else None,
        output_spec=string(meta.EncodedOutStr()) if meta else None,
    )
    check_plan(plan)
    return plan
