"""The FlatBuffers verifier on the schemas pterun reads: their generated layouts, exported files, shared data.

The verifier itself is tested on a small schema of its own (tests/flatbuf).
"""

from __future__ import annotations

import time

import pytest

from pterun.errors import InvalidProgram
from pterun.flatbuf.verify import verify_buffer
from pterun.format import ProgramFile, Verification
from pterun.format._generated import flat_tensor_layout, program_layout
from pterun.format.header import read_data_header, read_program_header
from tests.format import build


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
    return build.program([build.Plan(values=[("int_list", [0] * items)] + [("same", 0)] * (values - 1))])


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
    pf = ProgramFile(_shared_int_list_program(2000, 2000), Verification.Minimal)
    start = time.perf_counter()
    with pytest.raises(InvalidProgram, match="more than 4 elements per byte"):
        pf.plan("forward")
    assert time.perf_counter() - start < 2.0
