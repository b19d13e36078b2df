"""The VulkanBackend delegate blob: a header, the VkGraph flatbuffer, raw constant bytes.

The header (``VH00``) is the one ExecuTorch's delegates share (:mod:`pterun.backends.blob`);
Vulkan's is exactly 30 bytes and precedes the flatbuffer. Constants
(``VkGraph.constants``) point into the constant region by offset, or name an
entry of the program's named data. Everything is checked before anything is
read: a damaged blob raises a :class:`~pterun.errors.PteError`, never a
reader's exception.
"""

from __future__ import annotations

from dataclasses import dataclass

from pterun.backends.blob import HEADER_LENGTH, split_header
from pterun.backends.webgpu._generated import vkgraph_layout
from pterun.errors import DelegateInvalidCompatibility, InvalidProgram
from pterun.flatbuf.verify import verify_buffer

HEADER_MAGIC = b"VH00"
IDENTIFIER = vkgraph_layout.IDENT.encode()


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
    magic = bytes(data[4:8])
    if magic != HEADER_MAGIC:
        raise DelegateInvalidCompatibility(
            f"Vulkan blob header magic is {magic!r}; expected {HEADER_MAGIC!r}"
        )
    flatbuffer, constants = split_header(data, "Vulkan", exact=True)
    identifier = bytes(flatbuffer[4:8])
    if identifier != IDENTIFIER:
        raise DelegateInvalidCompatibility(
            f"Vulkan graph identifier is {identifier!r}; this runtime reads {IDENTIFIER!r}"
        )
    # The FlatBuffers reader follows offsets blindly; only a verified buffer is safe to read.
    verify_buffer(flatbuffer, vkgraph_layout, error=InvalidProgram)
    return Blob(flatbuffer, constants)
