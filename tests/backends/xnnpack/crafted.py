"""Hand-built XNNPACK delegate blobs, and programs carrying them in place of an exported blob."""

from __future__ import annotations

import struct
from pathlib import Path

import flatbuffers

from pterun.backends.xnnpack._generated import xnngraph_generated as fb
from pterun.format import ProgramFile

FP32 = 1
INPUT, OUTPUT = 1, 2


def _uints(builder: flatbuffers.Builder, start, values) -> int:
    start(builder, len(values))
    for v in reversed(values):
        builder.PrependUint32(v)
    return builder.EndVector()


def _value(builder, vid: int, dims, external: int, flags: int, constant: int = 0) -> int:
    d = _uints(builder, fb.XNNTensorValueStartDimsVector, dims)
    fb.XNNTensorValueStart(builder)
    fb.XNNTensorValueAddDatatype(builder, FP32)
    fb.XNNTensorValueAddNumDims(builder, len(dims))
    fb.XNNTensorValueAddDims(builder, d)
    fb.XNNTensorValueAddConstantBufferIdx(builder, constant)
    fb.XNNTensorValueAddExternalId(builder, external)
    fb.XNNTensorValueAddFlags(builder, flags)
    fb.XNNTensorValueAddIdOut(builder, vid)
    tv = fb.XNNTensorValueEnd(builder)
    fb.XValueStart(builder)
    fb.XValueAddXvalueUnionType(builder, fb.XValueUnion.XNNTensorValue)
    fb.XValueAddXvalueUnion(builder, tv)
    return fb.XValueEnd(builder)


def _constant_entry(builder, offset: int, size: int, key: int | None) -> int:
    fb.ConstantDataOffsetStart(builder)
    fb.ConstantDataOffsetAddOffset(builder, offset)
    fb.ConstantDataOffsetAddSize(builder, size)
    if key is not None:
        fb.ConstantDataOffsetAddNamedKey(builder, key)
    return fb.ConstantDataOffsetEnd(builder)


def unary_graph(node_type: int, dims=(3, 3), identifier: bytes = b"XN01", named_constant: str | None = None,
                inline_constant: bool = False, reads_constant: bool = True, elu_alpha: float | None = None) -> bytes:
    """A graph of one node of type ``node_type`` (a unary node table) from external input 0 to output 1.

    With ``named_constant`` the node reads instead a constant (value 2) kept in named data under that key;
    with ``inline_constant``, one at offset 0 of the blob's constant region. With ``elu_alpha`` the node is
    an XNNELU table of that alpha (``node_type`` must be XNNELU).
    """
    builder = flatbuffers.Builder(256)
    version = builder.CreateString("0")
    values = [_value(builder, 0, dims, 0, INPUT), _value(builder, 1, dims, 1, OUTPUT)]
    # Entry 0 of the constant table is a placeholder: index 0 means "not a constant".
    entries = [_constant_entry(builder, 0, 0, None)]
    source = 0
    if named_constant is not None:
        key = builder.CreateString(named_constant)
        entries.append(_constant_entry(builder, 2**64 - 1, 4 * dims[0] * dims[1], key))
    elif inline_constant:
        entries.append(_constant_entry(builder, 0, 4 * dims[0] * dims[1], None))
    if named_constant is not None or inline_constant:
        values.append(_value(builder, 2, dims, 0xFFFFFFFF, 0, constant=1))
        source = 2 if reads_constant else 0
    if elu_alpha is not None:
        fb.XNNELUStart(builder)
        fb.XNNELUAddAlpha(builder, elu_alpha)
        fb.XNNELUAddInputId(builder, source)
        fb.XNNELUAddOutputId(builder, 1)
        fb.XNNELUAddFlags(builder, 0)
        table = fb.XNNELUEnd(builder)
    else:
        fb.UnaryNodeStart(builder)
        fb.UnaryNodeAddInputId(builder, source)
        fb.UnaryNodeAddOutputId(builder, 1)
        fb.UnaryNodeAddFlags(builder, 0)
        table = fb.UnaryNodeEnd(builder)
    fb.XNodeStart(builder)
    fb.XNodeAddXnodeUnionType(builder, node_type)
    fb.XNodeAddXnodeUnion(builder, table)
    fb.XNodeAddDebugHandle(builder, 7)
    node = fb.XNodeEnd(builder)

    def vector(start, items):
        start(builder, len(items))
        for item in reversed(items):
            builder.PrependUOffsetTRelative(item)
        return builder.EndVector()

    nodes = vector(fb.XNNGraphStartXnodesVector, [node])
    xvalues = vector(fb.XNNGraphStartXvaluesVector, values)
    constants = vector(fb.XNNGraphStartConstantDataVector, entries)
    inputs = _uints(builder, fb.XNNGraphStartInputIdsVector, [0])
    outputs = _uints(builder, fb.XNNGraphStartOutputIdsVector, [1])
    fb.XNNGraphStart(builder)
    fb.XNNGraphAddVersion(builder, version)
    fb.XNNGraphAddXnodes(builder, nodes)
    fb.XNNGraphAddXvalues(builder, xvalues)
    fb.XNNGraphAddNumExterns(builder, 2)
    fb.XNNGraphAddInputIds(builder, inputs)
    fb.XNNGraphAddOutputIds(builder, outputs)
    fb.XNNGraphAddConstantData(builder, constants)
    builder.Finish(fb.XNNGraphEnd(builder), file_identifier=identifier)
    return bytes(builder.Output())


def with_header(flatbuffer: bytes, constants: bytes = b"") -> bytes:
    """The blob layout: a 30-byte header padded to 32, the flatbuffer padded to 16, the constants."""
    fb_size = len(flatbuffer)
    padded = fb_size + (-fb_size % 16)
    header = struct.pack("<4s4sHIIIQ", b"\0" * 4, b"XH00", 30, 32, fb_size, 32 + padded, len(constants))
    return header + b"\0" * 2 + flatbuffer + b"\0" * (padded - fb_size) + constants


def delegate_blob(pte: Path) -> bytes:
    program = ProgramFile(pte)
    (d,) = program.plan("forward").delegates
    return bytes(program.delegate_data(d.inline, d.index))


def splice(pte: Path, blob: bytes, out: Path) -> Path:
    """A copy of ``pte`` (one delegate) whose delegate blob is ``blob``, zero-padded to the original's size."""
    data = pte.read_bytes()
    old = delegate_blob(pte)
    assert len(blob) <= len(old), f"a {len(blob)}-byte blob does not fit the {len(old)} bytes of the original"
    at = data.find(old)
    assert at >= 0 and data.find(old, at + 1) < 0
    out.write_bytes(data[:at] + blob + b"\0" * (len(old) - len(blob)) + data[at + len(old):])
    return out
