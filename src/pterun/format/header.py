"""File identifiers and the little-endian headers in front of the flatbuffers.

A .pte file is a flatbuffer whose bytes 4-8 are the identifier ``ET12``. When
it has segments, the exporter inserts an extended header ("eh00") at byte 8
that says how long the flatbuffer is and where the segments start. A .ptd file
always has its header ("FH01"), also at byte 8.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from pterun.errors import InvalidExternalData, InvalidProgram

IDENTIFIER_OFFSET = 4
HEADER_OFFSET = 8

PROGRAM_IDENTIFIER = b"ET12"
PROGRAM_HEADER_MAGIC = b"eh00"
PROGRAM_HEADER_MIN_LENGTH = 24  # the segment_data_size field (bytes 24-32) came later

DATA_IDENTIFIER = b"FT01"
DATA_HEADER_MAGIC = b"FH01"
DATA_HEADER_MIN_LENGTH = 40


@dataclass(frozen=True)
class ProgramHeader:
    program_size: int  # flatbuffer bytes, counted from offset 0
    segment_base_offset: int  # file offset of segment 0's base; 0 when there are no segments
    segment_data_size: int  # 0 in files written before the field existed


@dataclass(frozen=True)
class DataHeader:
    flatbuffer_offset: int
    flatbuffer_size: int
    segment_base_offset: int
    segment_data_size: int


def read_program_header(data: memoryview) -> ProgramHeader:
    """The extended header, or one spanning the whole file when there is none."""
    size = len(data)
    if size < HEADER_OFFSET:
        raise InvalidProgram(f"program is {size} bytes; a .pte file has at least {HEADER_OFFSET}")
    identifier = bytes(data[IDENTIFIER_OFFSET:HEADER_OFFSET])
    if identifier != PROGRAM_IDENTIFIER:
        raise InvalidProgram(
            f"file identifier is {identifier!r}; expected {PROGRAM_IDENTIFIER!r} (an ExecuTorch .pte program)"
        )
    if bytes(data[HEADER_OFFSET : HEADER_OFFSET + 4]) != PROGRAM_HEADER_MAGIC:
        return ProgramHeader(program_size=size, segment_base_offset=0, segment_data_size=0)
    if size < HEADER_OFFSET + 8:
        raise InvalidProgram("extended header is truncated")
    (length,) = struct.unpack_from("<I", data, HEADER_OFFSET + 4)
    if length < PROGRAM_HEADER_MIN_LENGTH or size < HEADER_OFFSET + length:
        raise InvalidProgram(
            f"extended header length is {length}; expected at least {PROGRAM_HEADER_MIN_LENGTH} "
            f"bytes inside a {size}-byte file"
        )
    program_size, base = struct.unpack_from("<QQ", data, HEADER_OFFSET + 8)
    data_size = struct.unpack_from("<Q", data, HEADER_OFFSET + 24)[0] if length >= 32 else 0
    if program_size < HEADER_OFFSET + length or program_size > size:
        raise InvalidProgram(f"extended header gives a program size of {program_size} in a {size}-byte file")
    # Files written before segment_data_size existed carry 0 there; only a
    # header that states its data size (or has no segments) can be checked.
    if data_size > 0 or base == 0:
        expected = program_size if base == 0 else base + data_size
        if expected > size:
            raise InvalidProgram(f"file is {size} bytes; its extended header needs {expected}")
    if base and base < program_size:
        raise InvalidProgram(f"segments start at byte {base}, inside the {program_size}-byte program")
    return ProgramHeader(program_size, base, data_size)


def read_data_header(data: memoryview) -> DataHeader:
    size = len(data)
    if size < HEADER_OFFSET + 8:
        raise InvalidExternalData(f"data file is {size} bytes; too small for a .ptd header")
    identifier = bytes(data[IDENTIFIER_OFFSET:HEADER_OFFSET])
    if identifier != DATA_IDENTIFIER:
        raise InvalidExternalData(
            f"file identifier is {identifier!r}; expected {DATA_IDENTIFIER!r} (an ExecuTorch .ptd data file)"
        )
    magic = bytes(data[HEADER_OFFSET : HEADER_OFFSET + 4])
    if magic != DATA_HEADER_MAGIC:
        raise InvalidExternalData(f"header magic is {magic!r}; expected {DATA_HEADER_MAGIC!r}")
    (length,) = struct.unpack_from("<I", data, HEADER_OFFSET + 4)
    if length < DATA_HEADER_MIN_LENGTH or size < HEADER_OFFSET + length:
        raise InvalidExternalData(
            f"header length is {length}; expected at least {DATA_HEADER_MIN_LENGTH} bytes inside a {size}-byte file"
        )
    fb_offset, fb_size, base, data_size = struct.unpack_from("<QQQQ", data, HEADER_OFFSET + 8)
    if fb_offset + fb_size > size:
        raise InvalidExternalData(f"flatbuffer ends at byte {fb_offset + fb_size} of a {size}-byte file")
    if base + data_size > size:
        raise InvalidExternalData(f"file is {size} bytes; its header needs {base + data_size}")
    return DataHeader(fb_offset, fb_size, base, data_size)
