"""File identifiers, the .pte extended header ("eh00") and the .ptd header ("FH01")."""

from __future__ import annotations

import struct

import pytest

from pterun.errors import ErrorCode, InvalidExternalData, InvalidProgram
from pterun.format import DataFile, ProgramFile, Verification
from pterun.format.header import read_data_header, read_program_header
from tests.format import build


def _pte_header(length: int, *fields: int, size: int | None = None) -> bytes:
    """Root offset, identifier, then an extended header of ``length`` bytes, padded to ``size``."""
    raw = (struct.pack("<I", 0) + b"ET12" + b"eh00" + struct.pack("<I", length)
           + struct.pack(f"<{len(fields)}Q", *fields))
    return raw.ljust(size if size is not None else len(raw), b"\0")


# -- .pte: identifier ---------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [0, 1, 4, 7])
def test_program_shorter_than_identifier(size):
    with pytest.raises(InvalidProgram, match=f"{size} bytes") as info:
        read_program_header(memoryview(bytes(size)))
    assert info.value.code == ErrorCode.InvalidProgram


@pytest.mark.parametrize("identifier", [b"ET11", b"ET13", b"FT01", b"\0\0\0\0", b"et12"])
def test_program_identifier_must_be_et12(identifier):
    data = b"\x10\0\0\0" + identifier + bytes(24)
    with pytest.raises(InvalidProgram, match="file identifier"):
        read_program_header(memoryview(data))


def test_a_data_file_is_not_a_program(external):
    with pytest.raises(InvalidProgram, match="FT01"):
        ProgramFile(external.ptd[0])


# -- .pte: extended header ------------------------------------------------------------------------------


def test_without_extended_header_the_program_is_the_whole_file():
    data = build.program([build.identity()])
    header = read_program_header(memoryview(data))
    assert (header.program_size, header.segment_base_offset, header.segment_data_size) == (len(data), 0, 0)


def test_extended_header_of_exported_program(affine):
    data = affine.pte.read_bytes()
    header = read_program_header(memoryview(data))
    assert data[8:12] == b"eh00"
    assert header.program_size < header.segment_base_offset <= len(data)
    assert header.segment_base_offset + header.segment_data_size == len(data)


def test_extended_header_truncated_after_magic():
    with pytest.raises(InvalidProgram, match="truncated"):
        read_program_header(memoryview(b"\0\0\0\0ET12eh00\x20\0"))


@pytest.mark.parametrize("length", [0, 8, 16, 23])
def test_extended_header_shorter_than_24_bytes(length):
    data = _pte_header(length, 64, 0, 0, size=64)
    with pytest.raises(InvalidProgram, match=f"extended header length is {length}"):
        read_program_header(memoryview(data))


def test_extended_header_longer_than_file():
    data = _pte_header(200, 40, 0, 0, size=40)
    with pytest.raises(InvalidProgram, match="extended header length is 200"):
        read_program_header(memoryview(data))


@pytest.mark.parametrize("program_size", [0, 39, 65, 1 << 40, (1 << 64) - 1])
def test_program_size_outside_file(program_size):
    data = _pte_header(32, program_size, 0, 0, size=64)
    with pytest.raises(InvalidProgram, match="program size"):
        read_program_header(memoryview(data))


@pytest.mark.parametrize("base, data_size", [(64, 1), (48, 17), (1 << 63, 1), ((1 << 64) - 1, (1 << 64) - 1)])
def test_segment_data_past_end_of_file(base, data_size):
    data = _pte_header(32, 48, base, data_size, size=64)
    with pytest.raises(InvalidProgram, match="its extended header needs"):
        read_program_header(memoryview(data))


def test_segments_inside_the_program():
    data = _pte_header(32, 48, 40, 8, size=64)
    with pytest.raises(InvalidProgram, match="inside the 48-byte program"):
        read_program_header(memoryview(data))


def test_24_byte_header_of_older_files_has_no_data_size():
    # Writers before segment_data_size existed wrote a 24-byte header; the 8 bytes after it are not a size.
    data = _pte_header(24, 48, 48, size=64)[:32] + struct.pack("<Q", 1 << 60) + bytes(24)
    header = read_program_header(memoryview(data))
    assert (header.program_size, header.segment_base_offset, header.segment_data_size) == (48, 48, 0)


def test_24_byte_header_program_loads_and_runs():
    import torch

    import pterun

    data = build.program(
        [build.add_constant(build.Tensor(data_buffer_idx=1))], constant_segment=(0, [0, 0]),
        segments=[build.floats(10, 20)], header_length=24,
    )
    assert ProgramFile(data).header.segment_data_size == 0
    method = pterun.Runtime.get().load_program(data).load_method("forward")
    assert method.execute([torch.tensor([1.0, 2.0])])[0].tolist() == [11.0, 22.0]


def test_segment_data_size_zero_in_exported_program(affine):
    """An exported program rewritten as an older writer would have it: segment_data_size 0, segments still found."""
    data = bytearray(affine.pte.read_bytes())
    struct.pack_into("<Q", data, 32, 0)
    pf = ProgramFile(bytes(data))
    assert pf.header.segment_data_size == 0
    assert len(pf.constant(1, 48)) == 48


def test_segment_data_size_zero_does_not_hide_a_truncated_segment(affine):
    data = bytearray(affine.pte.read_bytes())
    struct.pack_into("<Q", data, 32, 0)
    with pytest.raises(InvalidProgram, match="segment 0 spans bytes"):
        ProgramFile(bytes(data[:-8]))


@pytest.mark.parametrize("cut", [-1, -60])
def test_truncated_segments_with_data_size(affine, cut):
    data = affine.pte.read_bytes()
    with pytest.raises(InvalidProgram, match="its extended header needs"):
        ProgramFile(data[:cut])


def test_truncated_inside_program(affine):
    data = affine.pte.read_bytes()
    size = read_program_header(memoryview(data)).program_size
    with pytest.raises(InvalidProgram, match="program size"):
        ProgramFile(data[: size - 1])


def test_segments_without_extended_header_are_rejected():
    # A program whose segments table is not empty but that has no extended header has nowhere to find them.
    data = build.program(
        [build.add_constant(build.Tensor(data_buffer_idx=1))], constant_segment=(0, [0, 0]),
        segments=[build.floats(10, 20)],
    )
    flat = bytearray(data)
    flat[8:12] = b"xxxx"  # no longer an extended header: the file is one flatbuffer with a segments table
    with pytest.raises(InvalidProgram):
        ProgramFile(bytes(flat), Verification.Minimal)


# -- .ptd -----------------------------------------------------------------------------------------------


def _ptd(**overrides) -> bytes:
    fields = {"length": 40, "fb_offset": 48, "fb_size": 16, "base": 64, "data_size": 16}
    fields.update(overrides)
    return (
        b"\0\0\0\0FT01FH01" + struct.pack("<I", fields["length"])
        + struct.pack("<QQQQ", fields["fb_offset"], fields["fb_size"], fields["base"], fields["data_size"])
    ).ljust(80, b"\0")


def test_data_header_reads_all_fields():
    header = read_data_header(memoryview(_ptd()))
    assert (header.flatbuffer_offset, header.flatbuffer_size, header.segment_base_offset,
            header.segment_data_size) == (48, 16, 64, 16)


def test_data_header_of_exported_file(external):
    data = external.ptd[0].read_bytes()
    header = read_data_header(memoryview(data))
    assert header.segment_base_offset + header.segment_data_size == len(data)


@pytest.mark.parametrize("size", [0, 8, 15])
def test_data_file_too_small(size):
    with pytest.raises(InvalidExternalData, match="too small") as info:
        read_data_header(memoryview(_ptd()[:size]))
    assert info.value.code == ErrorCode.InvalidExternalData


def test_data_file_identifier():
    data = bytearray(_ptd())
    data[4:8] = b"ET12"
    with pytest.raises(InvalidExternalData, match="file identifier"):
        read_data_header(memoryview(bytes(data)))


def test_a_program_is_not_a_data_file(affine):
    with pytest.raises(InvalidExternalData, match="ET12"):
        DataFile(affine.pte)


def test_data_header_magic():
    data = bytearray(_ptd())
    data[8:12] = b"FH02"
    with pytest.raises(InvalidExternalData, match="header magic"):
        read_data_header(memoryview(bytes(data)))


@pytest.mark.parametrize("length", [0, 32, 39, 73, 1 << 31])
def test_data_header_length(length):
    with pytest.raises(InvalidExternalData, match=f"header length is {length}"):
        read_data_header(memoryview(_ptd(length=length)))


@pytest.mark.parametrize("fb_offset, fb_size", [(48, 33), (81, 0), (1 << 63, 1 << 63), ((1 << 64) - 1, 2)])
def test_data_header_flatbuffer_outside_file(fb_offset, fb_size):
    with pytest.raises(InvalidExternalData, match="flatbuffer ends at"):
        read_data_header(memoryview(_ptd(fb_offset=fb_offset, fb_size=fb_size)))


@pytest.mark.parametrize("base, data_size", [(64, 17), (81, 0), ((1 << 64) - 1, 1)])
def test_data_header_segments_outside_file(base, data_size):
    with pytest.raises(InvalidExternalData, match="its header needs"):
        read_data_header(memoryview(_ptd(base=base, data_size=data_size)))


@pytest.mark.parametrize("cut", [1, 16, 100])
def test_truncated_exported_data_file(external, cut):
    data = external.ptd[0].read_bytes()
    with pytest.raises(InvalidExternalData):
        DataFile(data[:-cut])
