"""ETDump files: the events of runs, written as ExecuTorch's devtools read them.

An ETDump is a size-prefixed flatbuffer (schema/etdump.fbs, identifier
"ED00") holding blocks of events (``RunData``): a "Default" block for what
loading did and one "Execute" block per call of a method. Events are profiling
spans (an instruction, the kernel inside it, a node inside a delegate) and
debug events (a value an instruction computed, its bytes in a separate debug
buffer at the offset the event gives).

This module knows the records and their wire form only; what a run records,
and when, is the executor's (executor/etdump.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import flatbuffers

from pterun.errors import InvalidArgument, InvalidProgram
from pterun.flatbuf.verify import verify_buffer
from pterun.format._generated import etdump_generated as fb
from pterun.format._generated import etdump_layout

VERSION = 0
IDENTIFIER = b"ED00"
_NO_CHAIN = (1 << 64) - 1  # a debug event's chain index (uint64) outside any chain: ExecuTorch's -1


@dataclass(frozen=True, slots=True)
class TensorEntry:
    """A tensor logged into the debug buffer: ``scalar_type`` is ExecuTorch's code."""

    scalar_type: int
    sizes: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int


# A logged value: an int, a float (a double), a bool, one tensor or a list of them.
LoggedValue = int | float | bool | TensorEntry | tuple[TensorEntry, ...]


@dataclass(frozen=True, slots=True)
class ProfileEvent:
    name: str | None
    start: int  # nanoseconds
    end: int
    chain: int = -1  # -1: not an instruction's (a method's load, its whole execution)
    instruction: int = -1
    delegate_id: int = -1  # a node inside a delegate: its debug handle, or
    delegate_name: str | None = None  # its name when it has no handle
    metadata: bytes | None = None


@dataclass(frozen=True, slots=True)
class DebugEvent:
    value: LoggedValue
    chain: int = -1
    instruction: int = -1
    output: bool = False  # one of the method's outputs
    delegate_id: int = -1
    delegate_name: str | None = None
    name: str | None = None


@dataclass
class RunBlock:
    name: str
    events: list = field(default_factory=list)  # ProfileEvent | DebugEvent, in the order they ended
    bundled_input_index: int = -1


def write_etdump(blocks: Sequence[RunBlock]) -> bytes:
    """The ETDump of ``blocks``, size-prefixed as ExecuTorch writes it."""
    b = flatbuffers.Builder(4096)
    run_vector = _tables(b, [_run(b, block) for block in blocks])
    fb.ETDumpStart(b)
    fb.ETDumpAddVersion(b, VERSION)
    fb.ETDumpAddRunData(b, run_vector)
    b.FinishSizePrefixed(fb.ETDumpEnd(b), IDENTIFIER)
    return bytes(b.Output())


def _run(b: flatbuffers.Builder, block: RunBlock) -> int:
    name = b.CreateString(block.name)
    events = []
    for event in block.events:
        if isinstance(event, ProfileEvent):
            inner = _profile(b, event)
            fb.EventStart(b)
            fb.EventAddProfileEvent(b, inner)
        else:
            inner = _debug(b, event)
            fb.EventStart(b)
            fb.EventAddDebugEvent(b, inner)
        events.append(fb.EventEnd(b))
    event_vector = _tables(b, events)
    fb.RunDataStart(b)
    fb.RunDataAddName(b, name)
    fb.RunDataAddBundledInputIndex(b, block.bundled_input_index)
    fb.RunDataAddEvents(b, event_vector)
    return fb.RunDataEnd(b)


def _profile(b: flatbuffers.Builder, e: ProfileEvent) -> int:
    name = b.CreateString(e.name) if e.name is not None else None
    delegate_name = b.CreateString(e.delegate_name) if e.delegate_name is not None else None
    metadata = b.CreateByteVector(e.metadata) if e.metadata is not None else None
    fb.ProfileEventStart(b)
    if name is not None:
        fb.ProfileEventAddName(b, name)
    fb.ProfileEventAddChainIndex(b, e.chain)
    fb.ProfileEventAddInstructionId(b, e.instruction)
    fb.ProfileEventAddDelegateDebugIdInt(b, e.delegate_id)
    if delegate_name is not None:
        fb.ProfileEventAddDelegateDebugIdStr(b, delegate_name)
    if metadata is not None:
        fb.ProfileEventAddDelegateDebugMetadata(b, metadata)
    fb.ProfileEventAddStartTime(b, e.start)
    fb.ProfileEventAddEndTime(b, e.end)
    return fb.ProfileEventEnd(b)


def _debug(b: flatbuffers.Builder, e: DebugEvent) -> int:
    value = _value(b, e.value, e.output)
    name = b.CreateString(e.name) if e.name is not None else None
    delegate_name = b.CreateString(e.delegate_name) if e.delegate_name is not None else None
    fb.DebugEventStart(b)
    fb.DebugEventAddChainIndex(b, e.chain & _NO_CHAIN)
    fb.DebugEventAddInstructionId(b, e.instruction)
    fb.DebugEventAddDebugEntry(b, value)
    fb.DebugEventAddDelegateDebugIdInt(b, e.delegate_id)
    if delegate_name is not None:
        fb.DebugEventAddDelegateDebugIdStr(b, delegate_name)
    if name is not None:
        fb.DebugEventAddName(b, name)
    return fb.DebugEventEnd(b)


def _vector(b: flatbuffers.Builder, values: Sequence[int]) -> int:
    b.StartVector(8, len(values), 8)
    for v in reversed(values):
        b.PrependInt64(v)
    return b.EndVector()


def _tables(b: flatbuffers.Builder, offsets: Sequence[int]) -> int:
    """A vector of tables already written (their offsets), begun as flatc's ``Start...Vector`` functions do."""
    b.StartVector(4, len(offsets), 4)
    for offset in reversed(offsets):
        b.PrependUOffsetTRelative(offset)
    return b.EndVector()


def _tensor(b: flatbuffers.Builder, t: TensorEntry) -> int:
    sizes, strides = _vector(b, t.sizes), _vector(b, t.strides)
    fb.TensorStart(b)
    fb.TensorAddScalarType(b, t.scalar_type)
    fb.TensorAddSizes(b, sizes)
    fb.TensorAddStrides(b, strides)
    fb.TensorAddOffset(b, t.offset)
    return fb.TensorEnd(b)


def _value(b: flatbuffers.Builder, v: LoggedValue, output: bool) -> int:
    tensor = tensor_list = scalar = None
    if isinstance(v, TensorEntry):
        kind, tensor = fb.ValueType.Tensor, _tensor(b, v)
    elif isinstance(v, tuple):
        vector = _tables(b, [_tensor(b, t) for t in v])
        fb.TensorListStart(b)
        fb.TensorListAddTensors(b, vector)
        kind, tensor_list = fb.ValueType.TensorList, fb.TensorListEnd(b)
    elif isinstance(v, bool):  # before int: a bool is an int to Python
        fb.BoolStart(b)
        fb.BoolAddBoolVal(b, v)
        kind, scalar = fb.ValueType.Bool, fb.BoolEnd(b)
    elif isinstance(v, int):
        fb.IntStart(b)
        fb.IntAddIntVal(b, v)
        kind, scalar = fb.ValueType.Int, fb.IntEnd(b)
    elif isinstance(v, float):
        fb.DoubleStart(b)
        fb.DoubleAddDoubleVal(b, v)
        kind, scalar = fb.ValueType.Double, fb.DoubleEnd(b)
    else:
        raise InvalidArgument(f"ETDump cannot log a value of type {type(v).__name__}")
    flag = None
    if output:
        fb.BoolStart(b)
        fb.BoolAddBoolVal(b, True)
        flag = fb.BoolEnd(b)
    fb.ValueStart(b)
    fb.ValueAddVal(b, kind)
    if tensor is not None:
        fb.ValueAddTensor(b, tensor)
    if tensor_list is not None:
        fb.ValueAddTensorList(b, tensor_list)
    if scalar is not None:
        {fb.ValueType.Bool: fb.ValueAddBoolValue, fb.ValueType.Int: fb.ValueAddIntValue,
         fb.ValueType.Double: fb.ValueAddDoubleValue}[kind](b, scalar)
    if flag is not None:
        fb.ValueAddOutput(b, flag)
    return fb.ValueEnd(b)


def read_etdump(data: bytes | memoryview) -> list[RunBlock]:
    """The blocks of an ETDump (pterun's or ExecuTorch's), every table verified first."""
    view = memoryview(data)
    if len(view) < 8:
        raise InvalidProgram(f"an ETDump is at least 8 bytes; this one is {len(view)}")
    size = int.from_bytes(view[:4], "little")
    if size + 4 > len(view):
        raise InvalidProgram(f"the ETDump says it is {size} bytes after its prefix; the file has {len(view) - 4}")
    buf = view[: 4 + size]
    if bytes(buf[8:12]) != IDENTIFIER:
        raise InvalidProgram(f"not an ETDump: identifier {bytes(buf[8:12])!r}, expected {IDENTIFIER!r}")
    verify_buffer(buf, etdump_layout, root=4)
    root = fb.ETDump.GetRootAs(buf, 4)
    blocks = []
    for i in range(root.RunDataLength()):
        run = root.RunData(i)
        block = RunBlock((run.Name() or b"").decode(), bundled_input_index=run.BundledInputIndex())
        for j in range(run.EventsLength()):
            event = run.Events(j)
            if event.ProfileEvent() is not None:
                block.events.append(_read_profile(event.ProfileEvent()))
            elif event.DebugEvent() is not None:
                block.events.append(_read_debug(event.DebugEvent()))
        blocks.append(block)
    return blocks


def _text(raw: bytes | None) -> str | None:
    return None if raw is None else raw.decode("utf-8", "replace")


def _read_profile(p) -> ProfileEvent:
    metadata = None if p.DelegateDebugMetadataIsNone() else p.DelegateDebugMetadataAsNumpy().tobytes()
    return ProfileEvent(_text(p.Name()), p.StartTime(), p.EndTime(), p.ChainIndex(), p.InstructionId(),
                        p.DelegateDebugIdInt(), _text(p.DelegateDebugIdStr()), metadata)


def _read_tensor(t) -> TensorEntry:
    return TensorEntry(t.ScalarType(), tuple(t.Sizes(i) for i in range(t.SizesLength())),
                       tuple(t.Strides(i) for i in range(t.StridesLength())), t.Offset())


def _read_debug(d) -> DebugEvent:
    v = d.DebugEntry()
    value: LoggedValue
    kind = v.Val() if v is not None else fb.ValueType.Null
    if kind == fb.ValueType.Tensor:
        value = _read_tensor(v.Tensor())
    elif kind == fb.ValueType.TensorList:
        tl = v.TensorList()
        value = tuple(_read_tensor(tl.Tensors(i)) for i in range(tl.TensorsLength()))
    elif kind == fb.ValueType.Int:
        value = v.IntValue().IntVal()
    elif kind == fb.ValueType.Bool:
        value = bool(v.BoolValue().BoolVal())
    elif kind == fb.ValueType.Double:
        value = v.DoubleValue().DoubleVal()
    elif kind == fb.ValueType.Float:
        value = v.FloatValue().FloatVal()
    else:
        raise InvalidProgram(f"a debug event logs a value of kind {kind}, which pterun does not read")
    output = v is not None and v.Output() is not None and bool(v.Output().BoolVal())
    chain = d.ChainIndex()
    return DebugEvent(value, -1 if chain == _NO_CHAIN else chain, d.InstructionId(), output,
                      d.DelegateDebugIdInt(), _text(d.DelegateDebugIdStr()), _text(d.Name()))
