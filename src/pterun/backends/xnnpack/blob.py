"""The XnnpackBackend delegate blob: header, graph flatbuffer, constant data.

Layout (all little-endian), as ExecuTorch's XNNPACK preprocessing writes it::

    0   4 bytes   zero (where a bare flatbuffer has its root offset)
    4   "XH00"    header magic (where a bare flatbuffer has its identifier)
    8   u16       header length (30)
    10  u32       flatbuffer offset
    14  u32       flatbuffer size
    18  u32       constant data offset
    22  u64       constant data size

The flatbuffer and the constant region are each padded to 16 bytes. Blobs
from before the header existed are a bare flatbuffer with constants inside it
(``constant_buffer``); bytes 4-8 then hold the file identifier, so the magic
tells the two apart.

Everything here is checked before anything is trusted: a blob that fails
raises a :class:`~pterun.errors.PteError`, never a reader's exception.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from pterun.backends.xnnpack._generated import xnngraph_layout
from pterun.errors import DelegateInvalidCompatibility, InvalidProgram
from pterun.flatbuf.verify import verify_buffer

HEADER_MAGIC = b"XH00"
HEADER_MIN_LENGTH = 30
IDENTIFIERS = (b"XN00", b"XN01")

_HEADER = struct.Struct("<4s4sHIIIQ")


@dataclass(frozen=True)
class Blob:
    flatbuffer: memoryview
    constants: memoryview | None  # None: a bare flatbuffer, constants live inside it
    identifier: bytes


def split_blob(processed: memoryview) -> Blob:
    """Locates the flatbuffer and constant region of a blob and verifies the flatbuffer."""
    data = memoryview(processed).cast("B")
    size = len(data)
    if size < 8:
        raise DelegateInvalidCompatibility(f"XNNPACK blob is {size} bytes; too short to hold a graph")
    if bytes(data[4:8]) == HEADER_MAGIC:
        if size < HEADER_MIN_LENGTH:
            raise InvalidProgram(f"XNNPACK header is truncated: the blob is {size} bytes")
        _, _, length, fb_offset, fb_size, const_offset, const_size = _HEADER.unpack_from(data, 0)
        if length < HEADER_MIN_LENGTH:
            raise InvalidProgram(f"XNNPACK header length is {length}; expected at least {HEADER_MIN_LENGTH}")
        if fb_size < 8:
            raise InvalidProgram(f"XNNPACK flatbuffer size is {fb_size}; too small to hold a graph")
        if fb_offset > size or fb_size > size - fb_offset:
            raise InvalidProgram(
                f"XNNPACK flatbuffer ({fb_size} bytes at {fb_offset}) runs past the {size}-byte blob"
            )
        if const_offset > size or const_size > size - const_offset:
            raise InvalidProgram(
                f"XNNPACK constant data ({const_size} bytes at {const_offset}) runs past the {size}-byte blob"
            )
        if const_offset < fb_offset or const_offset - fb_offset < fb_size:
            raise InvalidProgram("XNNPACK constant data overlaps the flatbuffer")
        flatbuffer = data[fb_offset : fb_offset + fb_size]
        constants = data[const_offset : const_offset + const_size]
    else:
        flatbuffer, constants = data, None
    identifier = bytes(flatbuffer[4:8])
    if identifier not in IDENTIFIERS:
        raise DelegateInvalidCompatibility(
            f"XNNPACK graph identifier is {identifier!r}; this runtime reads "
            f"{' and '.join(repr(i) for i in IDENTIFIERS)}"
        )
    # The FlatBuffers Python reader follows offsets blindly; only a verified buffer is safe to read.
    verify_buffer(flatbuffer, xnngraph_layout, error=DelegateInvalidCompatibility)
    return Blob(flatbuffer, constants, identifier)
