"""The VulkanBackend delegate blob: a header, the VkGraph flatbuffer, raw constant bytes.

Layout (little-endian), as ExecuTorch's Vulkan serializer writes it::

    0   4 bytes   zero (where a bare flatbuffer keeps its root offset)
    4   "VH00"    header magic (where a bare flatbuffer keeps its identifier)
    8   u16       header length (30)
    10  u32       flatbuffer offset
    14  u32       flatbuffer size
    18  u32       constant region offset
    22  u64       constant region size

Each part starts on a 16-byte boundary. Constants (``VkGraph.constants``)
point into the constant region by offset, or name an entry of the program's
named data. Everything is checked before anything is read: a damaged blob
raises a :class:`~pterun.errors.PteError`, never a reader's exception.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from pterun.backends.webgpu._generated import vkgraph_layout
from pterun.errors import DelegateInvalidCompatibility, InvalidProgram
from pterun.flatbuf.verify import verify_buffer

HEADER_MAGIC = b"VH00"
HEADER_LENGTH = 30
IDENTIFIER = vkgraph_layout.IDENT.encode()

_HEADER = struct.Struct("<4s4sHIIIQ")


@dataclass(frozen=True)
class Blob:
    flatbuffer: memoryview
    constants: memoryview


def split_blob(processed: memoryview | bytes) -> Blob:
    """Locates the flatbuffer and the constant region of a blob and verifies the flatbuffer."""
    data = memoryview(processed).cast("B")
    size = len(data)
    if size < HEADER_LENGTH:
        raise DelegateInvalidCompatibility(
            f"Vulkan blob is {size} bytes; too short to hold its {HEADER_LENGTH}-byte header"
        )
    _, magic, length, fb_offset, fb_size, const_offset, const_size = _HEADER.unpack_from(data, 0)
    if magic != HEADER_MAGIC:
        raise DelegateInvalidCompatibility(
            f"Vulkan blob header magic is {magic!r}; expected {HEADER_MAGIC!r}"
        )
    if length != HEADER_LENGTH:
        raise InvalidProgram(f"Vulkan blob header length is {length}; expected {HEADER_LENGTH}")
    if fb_size < 8:
        raise InvalidProgram(f"Vulkan flatbuffer size is {fb_size}; too small to hold a graph")
    if fb_offset < HEADER_LENGTH or fb_offset > size or fb_size > size - fb_offset:
        raise InvalidProgram(
            f"Vulkan flatbuffer ({fb_size} bytes at {fb_offset}) lies outside the {size}-byte blob"
        )
    if const_offset > size or const_size > size - const_offset:
        raise InvalidProgram(
            f"Vulkan constant region ({const_size} bytes at {const_offset}) runs past the {size}-byte blob"
        )
    if const_offset < fb_offset + fb_size:
        raise InvalidProgram("Vulkan constant region overlaps the flatbuffer")
    flatbuffer = data[fb_offset : fb_offset + fb_size]
    identifier = bytes(flatbuffer[4:8])
    if identifier != IDENTIFIER:
        raise DelegateInvalidCompatibility(
            f"Vulkan graph identifier is {identifier!r}; this runtime reads {IDENTIFIER!r}"
        )
    # The FlatBuffers reader follows offsets blindly; only a verified buffer is safe to read.
    verify_buffer(flatbuffer, vkgraph_layout, error=InvalidProgram)
    return Blob(flatbuffer, data[const_offset : const_offset + const_size])
