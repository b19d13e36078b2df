"""The header ExecuTorch's XNNPACK and Vulkan serializers put in front of a delegate's flatbuffer.

Layout (all little-endian)::

    0   4 bytes   zero (where a bare flatbuffer has its root offset)
    4   magic     "XH00", "VH00" (where a bare flatbuffer has its identifier)
    8   u16       header length (30)
    10  u32       flatbuffer offset
    14  u32       flatbuffer size
    18  u32       constant data offset
    22  u64       constant data size

The flatbuffer and the constant region are each padded to 16 bytes. Each
backend checks the magic and the flatbuffer it locates; everything between
is checked here, so that a blob that fails raises a
:class:`~pterun.errors.PteError`, never a reader's exception.
"""

from __future__ import annotations

import struct

from pterun.errors import InvalidProgram

HEADER_LENGTH = 30

_HEADER = struct.Struct("<4s4sHIIIQ")


def split_header(data: memoryview, name: str, *, exact: bool) -> tuple[memoryview, memoryview]:
    """The flatbuffer and the constant region that the header of ``data`` (magic already checked) locates.

    ``exact``: the header is exactly ``HEADER_LENGTH`` bytes and the flatbuffer follows it, as
    ExecuTorch's Vulkan reader requires; otherwise it is at least that long (its XNNPACK reader).
    """
    size = len(data)
    if size < HEADER_LENGTH:
        raise InvalidProgram(f"{name} header is truncated: the blob is {size} bytes")
    _, _, length, fb_offset, fb_size, const_offset, const_size = _HEADER.unpack_from(data, 0)
    if length < HEADER_LENGTH or (exact and length != HEADER_LENGTH):
        expected = HEADER_LENGTH if exact else f"at least {HEADER_LENGTH}"
        raise InvalidProgram(f"{name} header length is {length}; expected {expected}")
    if fb_size < 8:
        raise InvalidProgram(f"{name} flatbuffer size is {fb_size}; too small to hold a graph")
    if (exact and fb_offset < HEADER_LENGTH) or fb_offset > size or fb_size > size - fb_offset:
        raise InvalidProgram(
            f"{name} flatbuffer ({fb_size} bytes at {fb_offset}) lies outside the {size}-byte blob"
        )
    if const_offset > size or const_size > size - const_offset:
        raise InvalidProgram(
            f"{name} constant data ({const_size} bytes at {const_offset}) runs past the {size}-byte blob"
        )
    if const_offset < fb_offset + fb_size:
        raise InvalidProgram(f"{name} constant data overlaps the flatbuffer")
    return data[fb_offset : fb_offset + fb_size], data[const_offset : const_offset + const_size]
