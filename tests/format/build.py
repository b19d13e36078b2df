"""Purpose-built .pte and .ptd files, written with the flatbuffers Builder and the generated schema code.

Real programs come from the exporter (programs.py); these are for what it
never writes: a version from the future, a program with both kinds of
constant storage, an index or enum value out of range, a file whose header
lies. Each builder takes plain Python values and returns the file's bytes.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import flatbuffers

from pterun.format._generated import flat_tensor_generated as ft
from pterun.format._generated import program_generated as fb

FLOAT = 6
LONG = 4


@dataclass
class Tensor:
    scalar_type: int = FLOAT
    sizes: tuple[int, ...] = (2,)
    dim_order: tuple[int, ...] | None = None  # default: contiguous
    data_buffer_idx: int = 0
    memory: tuple[int, int] | None = None  # (memory_id, offset)
    fqn: str | None = None
    external: bool = False
    device: tuple[int, int] | None = None  # (device type, device index); None writes no ExtraTensorInfo field
    location: int | None = None  # TensorDataLocation; overrides `external`
    dynamism: int = 0


@dataclass
class Plan:
    name: str = "forward"
    # Tensor | ("int", v) | ("double", v) | ("bool", v) | ("int_list", [value indices]) | ("null",)
    # | ("same", i): value i's table again (FlatBuffers lets any number of offsets share one table)
    values: list = field(default_factory=list)
    inputs: list[int] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)
    # ("kernel", op, args) | ("delegate", index, args) | ("move", src, dst) | ("jump", cond, dst) | ("free", v)
    instructions: list[tuple] = field(default_factory=list)
    operators: list[tuple[str, str]] = field(default_factory=list)
    # (backend id, DataLocation, index) or (..., {compile spec key: value bytes})
    delegates: list[tuple] = field(default_factory=list)
    buffer_sizes: list[int] = field(default_factory=lambda: [0])
    buffer_devices: list[tuple[int, int, int]] = field(default_factory=list)  # (buffer index, type, index)


def _vector(b: flatbuffers.Builder, offsets: list[int]) -> int:
    b.StartVector(4, len(offsets), 4)
    for off in reversed(offsets):
        b.PrependUOffsetTRelative(off)
    return b.EndVector()


def _scalars(b: flatbuffers.Builder, values, fmt: str) -> int:
    prepend = {"i": b.PrependInt32, "B": b.PrependUint8, "q": b.PrependInt64, "Q": b.PrependUint64}[fmt]
    values = list(values)
    size = struct.calcsize(fmt)
    b.StartVector(size, len(values), size)
    for v in reversed(values):
        prepend(v)
    return b.EndVector()


def _bytes(b: flatbuffers.Builder, data: bytes, alignment: int = 16) -> int:
    # Buffer.storage and BackendDelegateInlineData.data are force_align: 16.
    b.StartVector(1, len(data), alignment)
    for byte in reversed(data):
        b.PrependUint8(byte)
    return b.EndVector()


def _tensor(b: flatbuffers.Builder, t: Tensor) -> int:
    sizes = _scalars(b, t.sizes, "i")
    dim_order = _scalars(b, t.dim_order if t.dim_order is not None else range(len(t.sizes)), "B")
    extra = None
    if t.fqn is not None or t.external or t.device is not None or t.location is not None:
        name = b.CreateString(t.fqn) if t.fqn is not None else None
        fb.ExtraTensorInfoStart(b)
        if name is not None:
            fb.ExtraTensorInfoAddFullyQualifiedName(b, name)
        location = t.location if t.location is not None else int(t.external)
        fb.ExtraTensorInfoAddLocation(b, location)
        if t.device is not None:
            fb.ExtraTensorInfoAddDeviceType(b, t.device[0])
            fb.ExtraTensorInfoAddDeviceIndex(b, t.device[1])
        extra = fb.ExtraTensorInfoEnd(b)
    alloc = None
    if t.memory is not None:
        fb.AllocationDetailsStart(b)
        fb.AllocationDetailsAddMemoryId(b, t.memory[0])
        fb.AllocationDetailsAddMemoryOffsetLow(b, t.memory[1] & 0xFFFFFFFF)
        fb.AllocationDetailsAddMemoryOffsetHigh(b, t.memory[1] >> 32)
        alloc = fb.AllocationDetailsEnd(b)
    fb.TensorStart(b)
    fb.TensorAddScalarType(b, t.scalar_type)
    fb.TensorAddSizes(b, sizes)
    fb.TensorAddDimOrder(b, dim_order)
    fb.TensorAddDataBufferIdx(b, t.data_buffer_idx)
    fb.TensorAddShapeDynamism(b, t.dynamism)
    if alloc is not None:
        fb.TensorAddAllocationInfo(b, alloc)
    if extra is not None:
        fb.TensorAddExtraTensorInfo(b, extra)
    return fb.TensorEnd(b)


def _table(b: flatbuffers.Builder, name: str, **fields) -> int:
    """Table ``name`` of the program schema with ``fields`` (its Add functions' names, without the table's)."""
    getattr(fb, f"{name}Start")(b)
    for key, value in fields.items():
        getattr(fb, f"{name}Add{key}")(b, value)
    return getattr(fb, f"{name}End")(b)


# Plan.values' kinds: the table each is written as.
_SCALARS = {"int": "Int", "double": "Double", "bool": "Bool"}


def _value(b: flatbuffers.Builder, v) -> int:
    if isinstance(v, Tensor):
        tag, table = fb.KernelTypes.Tensor, _tensor(b, v)
    elif v[0] in _SCALARS:
        name = _SCALARS[v[0]]
        tag, table = getattr(fb.KernelTypes, name), _table(b, name, **{f"{name}Val": v[1]})
    elif v[0] == "int_list":  # ("int_list", [value indices])
        tag, table = fb.KernelTypes.IntList, _table(b, "IntList", Items=_scalars(b, v[1], "q"))
    elif v[0] == "null":
        tag, table = fb.KernelTypes.Null, _table(b, "Null")
    elif v[0] == "raw":  # ("raw", tag): a union tag with an empty table
        tag, table = v[1], _table(b, "Null")
    else:
        raise ValueError(v)
    return _table(b, "EValue", ValType=tag, Val=table)


# Plan.instructions' kinds: the table each is written as, and its fields in the order of the tuple's items.
_INSTRUCTIONS = {
    "kernel": ("KernelCall", ("OpIndex", "Args")),
    "delegate": ("DelegateCall", ("DelegateIndex", "Args")),
    "move": ("MoveCall", ("MoveFrom", "MoveTo")),
    "jump": ("JumpFalseCall", ("CondValueIndex", "DestinationInstruction")),
    "free": ("FreeCall", ("ValueIndex",)),
}


def _instruction(b: flatbuffers.Builder, ins: tuple) -> int:
    if ins[0] not in _INSTRUCTIONS:
        raise ValueError(ins)
    name, fields = _INSTRUCTIONS[ins[0]]
    # Vectors are written before the table that refers to them.
    values = [_scalars(b, x, "i") if field == "Args" else x for field, x in zip(fields, ins[1:])]
    table = _table(b, name, **dict(zip(fields, values)))
    return _table(b, "Instruction", InstrArgsType=getattr(fb.InstructionArguments, name), InstrArgs=table)


def _plan(b: flatbuffers.Builder, p: Plan) -> int:
    name = b.CreateString(p.name)
    made: list[int] = []
    for v in p.values:
        made.append(made[v[1]] if isinstance(v, tuple) and v[0] == "same" else _value(b, v))
    values = _vector(b, made)
    inputs = _scalars(b, p.inputs, "i")
    outputs = _scalars(b, p.outputs, "i")
    instructions = _vector(b, [_instruction(b, ins) for ins in p.instructions])
    fb.ChainStart(b)
    fb.ChainAddInputs(b, inputs)
    fb.ChainAddOutputs(b, outputs)
    fb.ChainAddInstructions(b, instructions)
    chains = _vector(b, [fb.ChainEnd(b)])
    operators = []
    for op_name, overload in p.operators:
        n, o = b.CreateString(op_name), b.CreateString(overload)
        fb.OperatorStart(b)
        fb.OperatorAddName(b, n)
        fb.OperatorAddOverload(b, o)
        operators.append(fb.OperatorEnd(b))
    operators_vec = _vector(b, operators)
    delegates = []
    for backend_id, location, index, *specs in p.delegates:
        spec_tables = []
        for key, value in (specs[0] if specs else {}).items():
            k, v = b.CreateString(key), _scalars(b, list(value), "B")
            fb.CompileSpecStart(b)
            fb.CompileSpecAddKey(b, k)
            fb.CompileSpecAddValue(b, v)
            spec_tables.append(fb.CompileSpecEnd(b))
        spec_vec = _vector(b, spec_tables) if specs else None
        ident = b.CreateString(backend_id)
        fb.BackendDelegateDataReferenceStart(b)
        fb.BackendDelegateDataReferenceAddLocation(b, location)
        fb.BackendDelegateDataReferenceAddIndex(b, index)
        ref = fb.BackendDelegateDataReferenceEnd(b)
        fb.BackendDelegateStart(b)
        fb.BackendDelegateAddId(b, ident)
        fb.BackendDelegateAddProcessed(b, ref)
        if spec_vec is not None:
            fb.BackendDelegateAddCompileSpecs(b, spec_vec)
        delegates.append(fb.BackendDelegateEnd(b))
    delegates_vec = _vector(b, delegates)
    sizes = _scalars(b, p.buffer_sizes, "q")
    devices = []
    for idx, dtype, dindex in p.buffer_devices:
        fb.NonConstBufferDeviceStart(b)
        fb.NonConstBufferDeviceAddBufferIdx(b, idx)
        fb.NonConstBufferDeviceAddDeviceType(b, dtype)
        fb.NonConstBufferDeviceAddDeviceIndex(b, dindex)
        devices.append(fb.NonConstBufferDeviceEnd(b))
    devices_vec = _vector(b, devices) if devices else None
    fb.ExecutionPlanStart(b)
    fb.ExecutionPlanAddName(b, name)
    fb.ExecutionPlanAddValues(b, values)
    fb.ExecutionPlanAddInputs(b, inputs)
    fb.ExecutionPlanAddOutputs(b, outputs)
    fb.ExecutionPlanAddChains(b, chains)
    fb.ExecutionPlanAddOperators(b, operators_vec)
    fb.ExecutionPlanAddDelegates(b, delegates_vec)
    fb.ExecutionPlanAddNonConstBufferSizes(b, sizes)
    if devices_vec is not None:
        fb.ExecutionPlanAddNonConstBufferDevice(b, devices_vec)
    return fb.ExecutionPlanEnd(b)


def _subsegment(b: flatbuffers.Builder, segment_index: int, offsets) -> int:
    vec = _scalars(b, offsets, "Q")
    fb.SubsegmentOffsetsStart(b)
    fb.SubsegmentOffsetsAddSegmentIndex(b, segment_index)
    fb.SubsegmentOffsetsAddOffsets(b, vec)
    return fb.SubsegmentOffsetsEnd(b)


def program(
    plans: list[Plan],
    *,
    version: int = 0,
    constant_buffers: list[bytes] | None = None,
    constant_segment: tuple[int, list[int]] | None = None,
    segments: list[bytes] | None = None,
    mutable: list[tuple[int, list[int]]] | None = None,
    named: list[tuple[str, int]] | None = None,
    delegate_data: list[bytes] | None = None,
    identifier: bytes = b"ET12",
    header_length: int = 32,
) -> bytes:
    """A .pte file; with ``segments`` it gets an extended header of ``header_length`` bytes and the segment data."""
    b = flatbuffers.Builder(1024)
    plan_vec = _vector(b, [_plan(b, p) for p in plans])
    def tables(items, make):
        return None if items is None else _vector(b, [make(item) for item in items])

    buffers = tables(constant_buffers, lambda data: _table(b, "Buffer", Storage=_bytes(b, data)))
    inline = tables(delegate_data, lambda data: _table(b, "BackendDelegateInlineData", Data=_bytes(b, data)))
    segment_offsets, offset = [], 0
    for data in segments or []:
        segment_offsets.append((offset, len(data)))
        offset += -(-len(data) // 16) * 16
    seg_vec = tables(
        segment_offsets if segments is not None else None,
        lambda seg: _table(b, "DataSegment", Offset=seg[0], Size=seg[1]),
    )
    cs = _subsegment(b, *constant_segment) if constant_segment is not None else None
    mut = tables(mutable, lambda m: _subsegment(b, *m))
    named_vec = tables(named, lambda n: _table(b, "NamedData", Key=b.CreateString(n[0]), SegmentIndex=n[1]))
    fb.ProgramStart(b)
    fb.ProgramAddVersion(b, version)
    fb.ProgramAddExecutionPlan(b, plan_vec)
    for add, vec in [
        (fb.ProgramAddConstantBuffer, buffers), (fb.ProgramAddBackendDelegateData, inline),
        (fb.ProgramAddSegments, seg_vec), (fb.ProgramAddConstantSegment, cs),
        (fb.ProgramAddMutableDataSegments, mut), (fb.ProgramAddNamedData, named_vec),
    ]:
        if vec is not None:
            add(b, vec)
    b.Finish(fb.ProgramEnd(b), file_identifier=identifier)
    flatbuffer = bytes(b.Output())
    if not segments:
        return flatbuffer
    header_block = -(-header_length // 16) * 16
    program_size = len(flatbuffer) + header_block
    base = -(-program_size // 16) * 16
    data = b"".join(d + bytes(-len(d) % 16) for d in segments)
    fields = struct.pack("<QQQ", program_size, base, len(data))[: header_length - 8]
    header = (b"eh00" + struct.pack("<I", header_length) + fields).ljust(header_block, b"\0")
    return insert_header(flatbuffer, header) + bytes(base - program_size) + data


def insert_header(flatbuffer: bytes, header: bytes) -> bytes:
    """``header`` placed at byte 8, as ExecuTorch inserts its headers: every offset past it moves with it."""
    (root,) = struct.unpack_from("<I", flatbuffer, 0)
    return struct.pack("<I", root + len(header)) + flatbuffer[4:8] + header + flatbuffer[8:]


def data_file(
    entries: list[tuple[str, bytes, tuple[int, tuple[int, ...], tuple[int, ...]] | None]],
    *,
    version: int = 0,
    identifier: bytes = b"FT01",
) -> bytes:
    """A .ptd file: (key, data, (scalar type, sizes, dim order) or None) per entry, one segment each."""
    b = flatbuffers.Builder(1024)
    named, segments, offset = [], [], 0
    for key, data, layout in entries:
        tl = None
        if layout is not None:
            sizes = _scalars(b, layout[1], "i")
            dims = _scalars(b, layout[2], "B")
            ft.TensorLayoutStart(b)
            ft.TensorLayoutAddScalarType(b, layout[0])
            ft.TensorLayoutAddSizes(b, sizes)
            ft.TensorLayoutAddDimOrder(b, dims)
            tl = ft.TensorLayoutEnd(b)
        k = b.CreateString(key)
        ft.NamedDataStart(b)
        ft.NamedDataAddKey(b, k)
        ft.NamedDataAddSegmentIndex(b, len(named))
        if tl is not None:
            ft.NamedDataAddTensorLayout(b, tl)
        named.append(ft.NamedDataEnd(b))
        ft.DataSegmentStart(b)
        ft.DataSegmentAddOffset(b, offset)
        ft.DataSegmentAddSize(b, len(data))
        segments.append(ft.DataSegmentEnd(b))
        offset += -(-len(data) // 16) * 16
    seg_vec, named_vec = _vector(b, segments), _vector(b, named)
    ft.FlatTensorStart(b)
    ft.FlatTensorAddVersion(b, version)
    ft.FlatTensorAddSegments(b, seg_vec)
    ft.FlatTensorAddNamedData(b, named_vec)
    b.Finish(ft.FlatTensorEnd(b), file_identifier=identifier)
    flatbuffer = bytes(b.Output())
    total = len(flatbuffer) + 40
    base = -(-total // 16) * 16
    data = b"".join(d + bytes(-len(d) % 16) for _, d, _ in entries)
    header = b"FH01" + struct.pack("<IQQQQ", 40, 48, total - 48, base, len(data))
    return insert_header(flatbuffer, header) + bytes(base - total) + data


# -- small runnable programs ---------------------------------------------------------------------------


def identity(**plan_overrides) -> Plan:
    """forward(x: float[2]) -> x, planned in one 8-byte arena; no instructions."""
    kwargs = {"values": [Tensor(memory=(1, 0))], "inputs": [0], "outputs": [0], "buffer_sizes": [0, 8]}
    kwargs.update(plan_overrides)
    return Plan(**kwargs)


def add_constant(constant: Tensor) -> Plan:
    """forward(x: float[2]) -> x + c, with c described by ``constant``."""
    return Plan(
        values=[Tensor(memory=(1, 0)), constant, ("int", 1), Tensor(memory=(1, 8))],
        inputs=[0], outputs=[3],
        instructions=[("kernel", 0, [0, 1, 2, 3, 3])],  # out-variant calls pass the out value twice
        operators=[("aten::add", "out")],
        buffer_sizes=[0, 16],
    )


def floats(*values: float) -> bytes:
    return struct.pack(f"<{len(values)}f", *values)
