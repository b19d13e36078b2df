"""Who owns bytes: allocators per device type, the registry, buffers and arenas."""

from pterun.memory.allocator import Allocator, AllocatorAlreadyRegistered, AllocatorRegistry
from pterun.memory.buffer import DeviceMemoryBuffer, external_memory

__all__ = ["Allocator", "AllocatorAlreadyRegistered", "AllocatorRegistry", "DeviceMemoryBuffer", "external_memory"]
