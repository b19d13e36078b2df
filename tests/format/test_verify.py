"""The FlatBuffers verifier against FlatBuffers' own rules, on buffers built for each rule.

Buffers are written with ``flatbuffers.Builder`` for a small test schema
(the layout below, in the form scripts/regen_schema.py generates), then
broken in one place each: a vtable outside the buffer, an unaligned offset,
a string without its terminator, a vector whose length runs past the end, a
required field left out, nesting past the depth limit, and sub-tables shared
so often that a naive walk would never finish.
"""

from __future__ import annotations

import struct
import time
from types import SimpleNamespace

import flatbuffers
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pterun.errors import InvalidExternalData, InvalidProgram
from pterun.flatbuf.verify import MAX_DEPTH, verify_buffer
from pterun.format._generated import flat_tensor_layout, program_layout

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


def _u16(buf, pos):
    return struct.unpack_from("<H", buf, pos)[0]


def _u32(buf, pos):
    return struct.unpack_from("<I", buf, pos)[0]


def _root(buf) -> int:
    return _u32(buf, 0)


def _vtable(buf, table: int) -> int:
    return table - struct.unpack_from("<i", buf, table)[0]


def _field(buf, table: int, voffset: int) -> int:
    """Where a present field of ``table`` is."""
    off = _u16(buf, _vtable(buf, table) + voffset)
    assert off, "field absent"
    return table + off


def _follow(buf, pos: int) -> int:
    return pos + _u32(buf, pos)


def _node(b: flatbuffers.Builder, *, child=None, left=None, right=None, value=None, names=None) -> int:
    b.StartObject(5)
    for slot, off in ((0, child), (1, left), (2, right), (4, names)):
        if off is not None:
            b.PrependUOffsetTRelativeSlot(slot, off, 0)
    if value is not None:
        b.PrependInt64Slot(3, value, 0)
    return b.EndObject()


def _offsets(b: flatbuffers.Builder, offsets) -> int:
    b.StartVector(4, len(offsets), 4)
    for off in reversed(offsets):
        b.PrependUOffsetTRelative(off)
    return b.EndVector()


def sample(kind_type: int = 1) -> bytes:
    """A Root with every kind of field."""
    b = flatbuffers.Builder(256)
    name = b.CreateString("root")
    strings = _offsets(b, [b.CreateString("a"), b.CreateString("bc")])
    leaf = _node(b, value=7, names=strings)
    node = _node(b, child=leaf, value=-1)
    b.StartVector(8, 3, 8)
    for v in (3, 2, 1):
        b.PrependInt64(v)
    items = b.EndVector()
    nodes = _offsets(b, [leaf, node])
    if kind_type == 2:
        must = b.CreateString("x")
        b.StartObject(1)
        b.PrependUOffsetTRelativeSlot(0, must, 0)
        kind = b.EndObject()
    else:
        kind = _node(b, value=5)
    b.StartObject(7)
    b.PrependUOffsetTRelativeSlot(0, name, 0)
    b.PrependUOffsetTRelativeSlot(1, node, 0)
    b.PrependUOffsetTRelativeSlot(2, items, 0)
    b.PrependUOffsetTRelativeSlot(3, nodes, 0)
    b.PrependInt32Slot(4, 42, 0)
    b.PrependUint8Slot(5, kind_type, 0)
    b.PrependUOffsetTRelativeSlot(6, kind, 0)
    b.Finish(b.EndObject())
    return bytes(b.Output())


def check(buf: bytes, layout=LAYOUT) -> None:
    verify_buffer(memoryview(buf), layout)


def fails(buf: bytes, match: str, layout=LAYOUT) -> None:
    with pytest.raises(InvalidProgram, match=match):
        check(buf, layout)


def patched(buf: bytes, pos: int, fmt: str, value) -> bytes:
    out = bytearray(buf)
    struct.pack_into("<" + fmt, out, pos, value)
    return bytes(out)


# -- valid buffers ----------------------------------------------------------------------------------------


def test_sample_is_valid():
    check(sample())
    check(sample(kind_type=2))


def test_error_class_is_the_callers():
    with pytest.raises(InvalidExternalData, match="Root verification failed"):
        verify_buffer(memoryview(b"\xff\0\0\0"), LAYOUT, error=InvalidExternalData)


def test_absent_optional_fields_are_fine():
    b = flatbuffers.Builder(64)
    b.StartObject(7)
    b.Finish(b.EndObject())
    check(bytes(b.Output()))


def test_vtable_shorter_than_the_schema_means_absent_fields():
    # A writer that knows fewer fields writes a shorter vtable; the rest read as absent.
    b = flatbuffers.Builder(64)
    name = b.CreateString("old")
    b.StartObject(1)
    b.PrependUOffsetTRelativeSlot(0, name, 0)
    b.Finish(b.EndObject())
    buf = bytes(b.Output())
    assert _u16(buf, _vtable(buf, _root(buf))) == 6
    check(buf)


# -- offsets and vtables ----------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [0, 1, 3])
def test_buffer_too_small_for_root_offset(size):
    fails(bytes(size), "root offset")


def test_root_offset_past_end():
    buf = sample()
    fails(patched(buf, 0, "I", len(buf)), "outside")


def test_root_offset_unaligned():
    buf = sample()
    fails(patched(buf, 0, "I", _root(buf) + 2), "aligned")


@pytest.mark.parametrize("soffset", [-(1 << 20), 1 << 20, -(1 << 31), (1 << 31) - 1])
def test_vtable_out_of_bounds(soffset):
    buf = sample()
    fails(patched(buf, _root(buf), "i", soffset), "vtable at byte .* outside")


def test_vtable_unaligned():
    buf = sample()
    root = _root(buf)
    soffset = struct.unpack_from("<i", buf, root)[0]
    fails(patched(buf, root, "i", soffset + 1), "vtable at byte .* not 2-byte aligned")


@pytest.mark.parametrize("vt_size", [0, 2, 5])
def test_vtable_size_invalid(vt_size):
    buf = sample()
    fails(patched(buf, _vtable(buf, _root(buf)), "H", vt_size), f"has size {vt_size}")


def test_vtable_size_past_end():
    buf = sample()
    fails(patched(buf, _vtable(buf, _root(buf)), "H", 0xFFFE), "vtable at byte .* outside")


def test_table_size_past_end():
    buf = sample()
    fails(patched(buf, _vtable(buf, _root(buf)) + 2, "H", 0xFFFF), r"t.Root at byte .* outside")


def test_field_outside_its_table():
    buf = sample()
    vt = _vtable(buf, _root(buf))
    fails(patched(buf, vt + 12, "H", _u16(buf, vt + 2)), "t.Root.count lies outside its table")


def test_scalar_unaligned():
    buf = sample()
    root = _root(buf)
    node = _follow(buf, _field(buf, root, 6))
    vt = _vtable(buf, node)
    off = _u16(buf, vt + 10)  # Node.value, a long
    assert (node + off) % 8 == 0 and off + 2 < _u16(buf, vt + 2)
    fails(patched(buf, vt + 10, "H", off + 2), "t.Node.value at byte .* not 8-byte aligned")


def test_offset_field_unaligned():
    buf = sample()
    vt = _vtable(buf, _root(buf))
    fails(patched(buf, vt + 4, "H", _u16(buf, vt + 4) + 1), "t.Root.name at byte .* not 4-byte aligned")


def test_offset_pointing_past_end():
    buf = sample()
    pos = _field(buf, _root(buf), 6)
    fails(patched(buf, pos, "I", len(buf)), r"t\.Root\.node at byte .* outside")


def test_table_vector_element_past_end():
    buf = sample()
    vec = _follow(buf, _field(buf, _root(buf), 10))
    fails(patched(buf, vec + 8, "I", 1 << 20), r"t\.Root\.nodes at byte .* outside")


# -- strings and vectors ----------------------------------------------------------------------------------


def test_string_without_terminator():
    buf = sample()
    s = _follow(buf, _field(buf, _root(buf), 4))
    assert buf[s + 4 : s + 8] == b"root"
    fails(patched(buf, s + 8, "B", ord("x")), "not NUL-terminated")


def test_string_length_past_end():
    buf = sample()
    s = _follow(buf, _field(buf, _root(buf), 4))
    fails(patched(buf, s, "I", len(buf)), r"t.Root.name at byte .* outside")


def test_string_length_fills_buffer_exactly_but_no_room_for_terminator():
    buf = sample()
    s = _follow(buf, _field(buf, _root(buf), 4))
    fails(patched(buf, s, "I", len(buf) - s - 4), "outside")


def test_string_in_vector_without_terminator():
    buf = sample()
    leaf = _follow(buf, _field(buf, _follow(buf, _field(buf, _root(buf), 6)), 4))
    vec = _follow(buf, _field(buf, leaf, 12))
    first = _follow(buf, vec + 4)
    fails(patched(buf, first + 5, "B", ord("!")), "t.Node.names .* not NUL-terminated")


@pytest.mark.parametrize("length", ["one past the end", 1 << 20, 0xFFFFFFFF])
def test_scalar_vector_length_overrun(length):
    buf = sample()
    vec = _follow(buf, _field(buf, _root(buf), 8))
    assert _u32(buf, vec) == 3
    if length == "one past the end":
        length = (len(buf) - vec - 4) // 8 + 1
    fails(patched(buf, vec, "I", length), "t.Root.items at byte .* outside")


@pytest.mark.parametrize("length", [3, 1 << 20, 0xFFFFFFFF])
def test_table_vector_length_overrun(length):
    buf = sample()
    vec = _follow(buf, _field(buf, _root(buf), 10))
    fails(patched(buf, vec, "I", length), r"t\.Root\.nodes|t\.Node at byte")


def test_vector_length_unaligned():
    buf = sample()
    pos = _field(buf, _root(buf), 8)
    fails(patched(buf, pos, "I", _u32(buf, pos) + 2), "t.Root.items at byte .* not 4-byte aligned")


# -- required fields and unions ---------------------------------------------------------------------------


def test_required_field_present():
    b = flatbuffers.Builder(64)
    must = b.CreateString("here")
    b.StartObject(1)
    b.PrependUOffsetTRelativeSlot(0, must, 0)
    b.Finish(b.EndObject())
    check(bytes(b.Output()), REQ_ROOT)


def test_required_field_absent():
    b = flatbuffers.Builder(64)
    b.StartObject(1)
    b.Finish(b.EndObject())
    fails(bytes(b.Output()), "t.Req.must is required but absent", REQ_ROOT)


def test_required_field_absent_in_union_member():
    buf = sample(kind_type=2)
    kind = _follow(buf, _field(buf, _root(buf), 16))
    fails(patched(buf, _vtable(buf, kind) + 4, "H", 0), "t.Req.must is required but absent")


def test_union_member_is_verified_as_its_type():
    buf = sample(kind_type=1)
    kind = _follow(buf, _field(buf, _root(buf), 16))
    fails(patched(buf, kind, "i", 1 << 20), "t.Node vtable")


def test_union_of_unknown_type_is_not_followed():
    # As FlatBuffers does, for union members added by a later schema.
    buf = sample(kind_type=1)
    kind = _follow(buf, _field(buf, _root(buf), 16))
    broken = patched(buf, kind, "i", 1 << 20)
    check(patched(broken, _field(broken, _root(broken), 14), "B", 9))


@pytest.mark.parametrize("offset", ["past the end", 0, 1 << 31])
def test_union_offset_is_checked_even_for_unknown_types(offset):
    # FlatBuffers' VerifyOffset: non-zero, positive as a signed offset, landing inside the buffer.
    buf = sample(kind_type=1)
    pos = _field(buf, _root(buf), 16)
    buf = patched(buf, _field(buf, _root(buf), 14), "B", 9)
    if offset == "past the end":
        offset = len(buf) - pos
    fails(patched(buf, pos, "I", offset), "t.Root.kind at byte")


# -- depth and work ---------------------------------------------------------------------------------------


def _chain(depth: int) -> bytes:
    b = flatbuffers.Builder(64)
    node = _node(b, value=0)
    for _ in range(depth - 1):
        node = _node(b, child=node)
    b.StartObject(7)
    b.PrependUOffsetTRelativeSlot(1, node, 0)
    b.Finish(b.EndObject())
    return bytes(b.Output())


def test_nesting_up_to_the_limit():
    check(_chain(MAX_DEPTH - 1))  # the root is depth 1


def test_nesting_past_the_limit():
    fails(_chain(MAX_DEPTH), f"nested deeper than {MAX_DEPTH}")
    fails(_chain(1000), f"nested deeper than {MAX_DEPTH}")


def _diamonds(levels: int) -> bytes:
    """Each node's left and right are the same node below it: 2**levels paths to the bottom."""
    b = flatbuffers.Builder(64)
    node = _node(b, value=1)
    for _ in range(levels):
        node = _node(b, left=node, right=node)
    b.StartObject(7)
    b.PrependUOffsetTRelativeSlot(1, node, 0)
    b.Finish(b.EndObject())
    return bytes(b.Output())


def test_shared_subtables_are_bounded():
    small = _diamonds(3)  # 16 visits, the least any buffer is allowed
    check(small)
    start = time.perf_counter()
    fails(_diamonds(50), "more tables than the buffer can hold")
    assert time.perf_counter() - start < 1.0


def test_shared_vector_of_strings_is_bounded():
    # Every node of a long vector shares one long vector of strings: nodes * strings visits.
    b = flatbuffers.Builder(1 << 16)
    strings = _offsets(b, [b.CreateString("s")] * 2000)
    node = _node(b, names=strings)
    nodes = _offsets(b, [node] * 2000)
    b.StartObject(7)
    b.PrependUOffsetTRelativeSlot(3, nodes, 0)
    b.Finish(b.EndObject())
    start = time.perf_counter()
    fails(bytes(b.Output()), "more strings than the buffer can hold")
    assert time.perf_counter() - start < 1.0


def test_budget_allows_every_distinct_table():
    # A buffer of many distinct small tables stays well inside one visit per 4 bytes.
    b = flatbuffers.Builder(1 << 16)
    nodes = _offsets(b, [_node(b, value=i) for i in range(3000)])
    b.StartObject(7)
    b.PrependUOffsetTRelativeSlot(3, nodes, 0)
    b.Finish(b.EndObject())
    check(bytes(b.Output()))


# -- any corruption: the caller's error class or nothing ------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_corrupt_buffers_raise_only_the_callers_error(data):
    buf = bytearray(sample(kind_type=data.draw(st.sampled_from([1, 2]))))
    for pos, value in data.draw(st.lists(st.tuples(st.integers(0, len(buf) - 1), st.integers(0, 255)), max_size=6)):
        buf[pos] = value
    if data.draw(st.booleans()):
        del buf[data.draw(st.integers(0, len(buf))) :]
    try:
        verify_buffer(memoryview(bytes(buf)), LAYOUT)
    except InvalidProgram:
        pass


# -- the real schemas ---------------------------------------------------------------------------------------


def test_generated_layouts_are_complete():
    for layout in (program_layout, flat_tensor_layout):
        for name, fields in layout.TABLES.items():
            for fname, voffset, kind, arg, required in fields:
                assert kind in ("scalar", "struct", "string", "table", "union", "vscalar", "vstruct", "vstring",
                                "vtable"), (name, fname, kind)
                if kind in ("table", "vtable"):
                    assert arg in layout.TABLES, (name, fname)
                if kind == "union":
                    assert arg[0] in layout.UNIONS
                    assert any(v == arg[1] for _, v, *_ in fields), "a union's type field is in its table"
                    type_index = next(i for i, f in enumerate(fields) if f[1] == arg[1])
                    assert type_index < fields.index((fname, voffset, kind, arg, required)), (
                        "the type field is verified before the union value it selects"
                    )


def test_exported_programs_and_data_files_verify(stateful, external, sin_inline, sin_segment, trainable_external,
                                                 inline_constants):
    from pterun.format.header import read_data_header, read_program_header

    for path in (stateful.pte, external.pte, sin_inline.pte, sin_segment.pte, trainable_external.pte,
                 inline_constants):
        data = memoryview(path.read_bytes())
        verify_buffer(data[: read_program_header(data).program_size], program_layout)
    for path in (*external.ptd, *trainable_external.ptd):
        data = memoryview(path.read_bytes())
        header = read_data_header(data)
        verify_buffer(data[: header.flatbuffer_offset + header.flatbuffer_size], flat_tensor_layout)


def _shared_int_list_program(values: int, items: int) -> bytes:
    """A method whose ``values`` EValues all share one IntList of ``items`` items: values * items to read."""
    from pterun.format._generated import program_generated as fb
    from tests.format.build import _scalars, _vector

    b = flatbuffers.Builder(1 << 16)
    name = b.CreateString("forward")
    ints = _scalars(b, [0] * items, "q")
    fb.IntListStart(b)
    fb.IntListAddItems(b, ints)
    int_list = fb.IntListEnd(b)
    fb.EValueStart(b)
    fb.EValueAddValType(b, fb.KernelTypes.IntList)
    fb.EValueAddVal(b, int_list)
    value = fb.EValueEnd(b)
    value_vec = _vector(b, [value] * values)
    empty = _scalars(b, [], "i")
    sizes = _scalars(b, [0], "q")
    fb.ExecutionPlanStart(b)
    fb.ExecutionPlanAddName(b, name)
    fb.ExecutionPlanAddValues(b, value_vec)
    fb.ExecutionPlanAddInputs(b, empty)
    fb.ExecutionPlanAddOutputs(b, empty)
    fb.ExecutionPlanAddNonConstBufferSizes(b, sizes)
    plans = _vector(b, [fb.ExecutionPlanEnd(b)])
    fb.ProgramStart(b)
    fb.ProgramAddExecutionPlan(b, plans)
    b.Finish(fb.ProgramEnd(b), file_identifier=b"ET12")
    return bytes(b.Output())


def test_shared_scalar_vectors_are_bounded():
    # 2000 values sharing one 2000-item list: a 20 kB file that reads as 4 million items.
    data = _shared_int_list_program(2000, 2000)
    start = time.perf_counter()
    with pytest.raises(InvalidProgram, match="shared vectors and strings add up to more than 4 times"):
        verify_buffer(memoryview(data), program_layout)
    assert time.perf_counter() - start < 1.0


def test_a_little_sharing_is_allowed():
    verify_buffer(memoryview(_shared_int_list_program(3, 100)), program_layout)


def test_shared_vectors_are_bounded_when_not_verified():
    # Verification.Minimal skips the verifier; reading the plan is bounded the same way.
    from pterun.format import ProgramFile, Verification

    pf = ProgramFile(_shared_int_list_program(2000, 2000), Verification.Minimal)
    start = time.perf_counter()
    with pytest.raises(InvalidProgram, match="more than 4 elements per byte"):
        pf.plan("forward")
    assert time.perf_counter() - start < 2.0
