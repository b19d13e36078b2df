"""The FlatBuffers verifier against FlatBuffers' own rules: offsets, vtables and tables.

Each test breaks one buffer of the test schema (schema.py) in one place: a
vtable outside the buffer, an unaligned offset, a field outside its table.
"""

from __future__ import annotations

import struct

import flatbuffers
import pytest

from pterun.errors import InvalidExternalData
from pterun.flatbuf.verify import verify_buffer
from tests.flatbuf.schema import (
    LAYOUT,
    check,
    fails,
    field,
    finish,
    follow,
    patched,
    root_table,
    sample,
    u16,
    vtable,
)

# -- valid buffers ----------------------------------------------------------------------------------------


def test_sample_is_valid():
    check(sample())
    check(sample(kind_type=2))


def test_error_class_is_the_callers():
    with pytest.raises(InvalidExternalData, match="Root verification failed"):
        verify_buffer(memoryview(b"\xff\0\0\0"), LAYOUT, error=InvalidExternalData)


def test_absent_optional_fields_are_fine():
    check(finish(flatbuffers.Builder(64)))


def test_vtable_shorter_than_the_schema_means_absent_fields():
    # A writer that knows fewer fields writes a shorter vtable; the rest read as absent.
    b = flatbuffers.Builder(64)
    buf = finish(b, 1, 0, b.CreateString("old"))
    assert u16(buf, vtable(buf, root_table(buf))) == 6
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
    fails(patched(buf, 0, "I", root_table(buf) + 2), "aligned")


@pytest.mark.parametrize("soffset", [-(1 << 20), 1 << 20, -(1 << 31), (1 << 31) - 1])
def test_vtable_out_of_bounds(soffset):
    buf = sample()
    fails(patched(buf, root_table(buf), "i", soffset), "vtable at byte .* outside")


def test_vtable_unaligned():
    buf = sample()
    root = root_table(buf)
    soffset = struct.unpack_from("<i", buf, root)[0]
    fails(patched(buf, root, "i", soffset + 1), "vtable at byte .* not 2-byte aligned")


@pytest.mark.parametrize("vt_size", [0, 2, 5])
def test_vtable_size_invalid(vt_size):
    buf = sample()
    fails(patched(buf, vtable(buf, root_table(buf)), "H", vt_size), f"has size {vt_size}")


def test_vtable_size_past_end():
    buf = sample()
    fails(patched(buf, vtable(buf, root_table(buf)), "H", 0xFFFE), "vtable at byte .* outside")


def test_table_size_past_end():
    buf = sample()
    fails(patched(buf, vtable(buf, root_table(buf)) + 2, "H", 0xFFFF), r"t.Root at byte .* outside")


def test_field_outside_its_table():
    buf = sample()
    vt = vtable(buf, root_table(buf))
    fails(patched(buf, vt + 12, "H", u16(buf, vt + 2)), "t.Root.count lies outside its table")


def test_scalar_unaligned():
    buf = sample()
    root = root_table(buf)
    node = follow(buf, field(buf, root, 6))
    vt = vtable(buf, node)
    off = u16(buf, vt + 10)  # Node.value, a long
    assert (node + off) % 8 == 0 and off + 2 < u16(buf, vt + 2)
    fails(patched(buf, vt + 10, "H", off + 2), "t.Node.value at byte .* not 8-byte aligned")


def test_offset_field_unaligned():
    buf = sample()
    vt = vtable(buf, root_table(buf))
    fails(patched(buf, vt + 4, "H", u16(buf, vt + 4) + 1), "t.Root.name at byte .* not 4-byte aligned")


def test_offset_pointing_past_end():
    buf = sample()
    pos = field(buf, root_table(buf), 6)
    fails(patched(buf, pos, "I", len(buf)), r"t\.Root\.node at byte .* outside")


def test_table_vector_element_past_end():
    buf = sample()
    vec = follow(buf, field(buf, root_table(buf), 10))
    fails(patched(buf, vec + 8, "I", 1 << 20), r"t\.Root\.nodes at byte .* outside")


# -- strings and vectors ----------------------------------------------------------------------------------
