"""The FlatBuffers verifier against FlatBuffers' own rules: strings, vectors, required fields and unions.

Each test breaks one buffer of the test schema (schema.py) in one place: a
string without its terminator, a vector whose length runs past the end, a
required field left out, a union member that is not what its type says.
"""

from __future__ import annotations

import flatbuffers
import pytest

from tests.flatbuf.schema import (
    REQ_ROOT,
    check,
    fails,
    field,
    finish,
    follow,
    patched,
    root_table,
    sample,
    u32,
    vtable,
)

# -- strings and vectors ----------------------------------------------------------------------------------


def test_string_without_terminator():
    buf = sample()
    s = follow(buf, field(buf, root_table(buf), 4))
    assert buf[s + 4 : s + 8] == b"root"
    fails(patched(buf, s + 8, "B", ord("x")), "not NUL-terminated")


def test_string_length_past_end():
    buf = sample()
    s = follow(buf, field(buf, root_table(buf), 4))
    fails(patched(buf, s, "I", len(buf)), r"t.Root.name at byte .* outside")


def test_string_length_fills_buffer_exactly_but_no_room_for_terminator():
    buf = sample()
    s = follow(buf, field(buf, root_table(buf), 4))
    fails(patched(buf, s, "I", len(buf) - s - 4), "outside")


def test_string_in_vector_without_terminator():
    buf = sample()
    leaf = follow(buf, field(buf, follow(buf, field(buf, root_table(buf), 6)), 4))
    vec = follow(buf, field(buf, leaf, 12))
    first = follow(buf, vec + 4)
    fails(patched(buf, first + 5, "B", ord("!")), "t.Node.names .* not NUL-terminated")


@pytest.mark.parametrize("length", ["one past the end", 1 << 20, 0xFFFFFFFF])
def test_scalar_vector_length_overrun(length):
    buf = sample()
    vec = follow(buf, field(buf, root_table(buf), 8))
    assert u32(buf, vec) == 3
    if length == "one past the end":
        length = (len(buf) - vec - 4) // 8 + 1
    fails(patched(buf, vec, "I", length), "t.Root.items at byte .* outside")


@pytest.mark.parametrize("length", [3, 1 << 20, 0xFFFFFFFF])
def test_table_vector_length_overrun(length):
    buf = sample()
    vec = follow(buf, field(buf, root_table(buf), 10))
    fails(patched(buf, vec, "I", length), r"t\.Root\.nodes|t\.Node at byte")


def test_vector_length_unaligned():
    buf = sample()
    pos = field(buf, root_table(buf), 8)
    fails(patched(buf, pos, "I", u32(buf, pos) + 2), "t.Root.items at byte .* not 4-byte aligned")


# -- required fields and unions ---------------------------------------------------------------------------


def test_required_field_present():
    b = flatbuffers.Builder(64)
    check(finish(b, 1, 0, b.CreateString("here")), REQ_ROOT)


def test_required_field_absent():
    fails(finish(flatbuffers.Builder(64), 1), "t.Req.must is required but absent", REQ_ROOT)


def test_required_field_absent_in_union_member():
    buf = sample(kind_type=2)
    kind = follow(buf, field(buf, root_table(buf), 16))
    fails(patched(buf, vtable(buf, kind) + 4, "H", 0), "t.Req.must is required but absent")


def test_union_member_is_verified_as_its_type():
    buf = sample(kind_type=1)
    kind = follow(buf, field(buf, root_table(buf), 16))
    fails(patched(buf, kind, "i", 1 << 20), "t.Node vtable")


def test_union_of_unknown_type_is_not_followed():
    # As FlatBuffers does, for union members added by a later schema.
    buf = sample(kind_type=1)
    kind = follow(buf, field(buf, root_table(buf), 16))
    broken = patched(buf, kind, "i", 1 << 20)
    check(patched(broken, field(broken, root_table(broken), 14), "B", 9))


@pytest.mark.parametrize("offset", ["past the end", 0, 1 << 31])
def test_union_offset_is_checked_even_for_unknown_types(offset):
    # FlatBuffers' VerifyOffset: non-zero, positive as a signed offset, landing inside the buffer.
    buf = sample(kind_type=1)
    pos = field(buf, root_table(buf), 16)
    buf = patched(buf, field(buf, root_table(buf), 14), "B", 9)
    if offset == "past the end":
        offset = len(buf) - pos
    fails(patched(buf, pos, "I", offset), "t.Root.kind at byte")
