"""A small test schema for the FlatBuffers verifier, buffers written for it, and ways to break them.

Buffers are written with ``flatbuffers.Builder`` for the layout below (in the
form scripts/regen-schema.py generates), then broken in one place each by the
tests beside this file.
"""

from __future__ import annotations

import struct
from types import SimpleNamespace

import flatbuffers
import pytest

from pterun.errors import InvalidProgram
from pterun.flatbuf.verify import verify_buffer

# table Node { child: Node; left: Node; right: Node; value: long; names: [string]; }
# table Root { name: string; node: Node; items: [long]; nodes: [Node]; count: int; kind_type: ubyte; kind: Kind; }
# table Req { must: string (required); }
# union Kind { Node = 1, Req = 2 }
LAYOUT = SimpleNamespace(
    ROOT="t.Root",
    TABLES={
        "t.Node": (
            ("child", 4, "table", "t.Node", False),
            ("left", 6, "table", "t.Node", False),
            ("right", 8, "table", "t.Node", False),
            ("value", 10, "scalar", 8, False),
            ("names", 12, "vstring", None, False),
        ),
        "t.Root": (
            ("name", 4, "string", None, False),
            ("node", 6, "table", "t.Node", False),
            ("items", 8, "vscalar", 8, False),
            ("nodes", 10, "vtable", "t.Node", False),
            ("count", 12, "scalar", 4, False),
            ("kind_type", 14, "scalar", 1, False),
            ("kind", 16, "union", ("t.Kind", 14), False),
        ),
        "t.Req": (("must", 4, "string", None, True),),
    },
    UNIONS={"t.Kind": {1: "t.Node", 2: "t.Req"}},
)
REQ_ROOT = SimpleNamespace(ROOT="t.Req", TABLES=LAYOUT.TABLES, UNIONS=LAYOUT.UNIONS)
ROOT_FIELDS = len(LAYOUT.TABLES["t.Root"])

# -- reading a buffer ---------------------------------------------------------------------------------------


def u16(buf, pos):
    return struct.unpack_from("<H", buf, pos)[0]


def u32(buf, pos):
    return struct.unpack_from("<I", buf, pos)[0]


def root_table(buf) -> int:
    return u32(buf, 0)


def vtable(buf, table: int) -> int:
    return table - struct.unpack_from("<i", buf, table)[0]


def field(buf, table: int, voffset: int) -> int:
    """Where a present field of ``table`` is."""
    off = u16(buf, vtable(buf, table) + voffset)
    assert off, "field absent"
    return table + off


def follow(buf, pos: int) -> int:
    return pos + u32(buf, pos)


# -- writing one ----------------------------------------------------------------------------------------------


def node(b: flatbuffers.Builder, *, child=None, left=None, right=None, value=None, names=None) -> int:
    b.StartObject(5)
    for slot, off in ((0, child), (1, left), (2, right), (4, names)):
        if off is not None:
            b.PrependUOffsetTRelativeSlot(slot, off, 0)
    if value is not None:
        b.PrependInt64Slot(3, value, 0)
    return b.EndObject()


def offsets(b: flatbuffers.Builder, items) -> int:
    b.StartVector(4, len(items), 4)
    for off in reversed(items):
        b.PrependUOffsetTRelative(off)
    return b.EndVector()


def finish(b: flatbuffers.Builder, fields: int = ROOT_FIELDS, slot: int | None = None, offset: int = 0) -> bytes:
    """The buffer whose root table has ``fields`` fields, all absent but ``slot`` (an offset, when given)."""
    b.StartObject(fields)
    if slot is not None:
        b.PrependUOffsetTRelativeSlot(slot, offset, 0)
    b.Finish(b.EndObject())
    return bytes(b.Output())


def sample(kind_type: int = 1) -> bytes:
    """A Root with every kind of field."""
    b = flatbuffers.Builder(256)
    name = b.CreateString("root")
    strings = offsets(b, [b.CreateString("a"), b.CreateString("bc")])
    leaf = node(b, value=7, names=strings)
    inner = node(b, child=leaf, value=-1)
    b.StartVector(8, 3, 8)
    for v in (3, 2, 1):
        b.PrependInt64(v)
    items = b.EndVector()
    nodes = offsets(b, [leaf, inner])
    if kind_type == 2:
        must = b.CreateString("x")
        b.StartObject(1)
        b.PrependUOffsetTRelativeSlot(0, must, 0)
        kind = b.EndObject()
    else:
        kind = node(b, value=5)
    b.StartObject(7)
    b.PrependUOffsetTRelativeSlot(0, name, 0)
    b.PrependUOffsetTRelativeSlot(1, inner, 0)
    b.PrependUOffsetTRelativeSlot(2, items, 0)
    b.PrependUOffsetTRelativeSlot(3, nodes, 0)
    b.PrependInt32Slot(4, 42, 0)
    b.PrependUint8Slot(5, kind_type, 0)
    b.PrependUOffsetTRelativeSlot(6, kind, 0)
    b.Finish(b.EndObject())
    return bytes(b.Output())


# -- checking it -----------------------------------------------------------------------------------------------


def check(buf: bytes, layout=LAYOUT) -> None:
    verify_buffer(memoryview(buf), layout)


def fails(buf: bytes, match: str, layout=LAYOUT) -> None:
    with pytest.raises(InvalidProgram, match=match):
        check(buf, layout)


def patched(buf: bytes, pos: int, fmt: str, value) -> bytes:
    out = bytearray(buf)
    struct.pack_into("<" + fmt, out, pos, value)
    return bytes(out)
