"""Allocators, one per device type, and the registry that holds them.

Modelled on ExecuTorch's ``DeviceAllocator`` registry, with two differences
its users asked for: registering a second allocator for a device type raises
:class:`AllocatorAlreadyRegistered` instead of aborting the process, and
asking for a device type that has none raises ``NotFound`` naming the device.

An allocator implements ``_allocate`` and returns a 1-D uint8 tensor of at
least the requested size on the requested device; :meth:`Allocator.allocate`
checks the request, wraps the result in a :class:`DeviceMemoryBuffer` and turns
failures into ``MemoryAllocationFailed`` naming the size and device. Memory
from raw pointers (a driver call, another library's pool) can be wrapped with
:func:`pterun.memory.external_memory`.

Threading: registration is expected at start-up; the registry takes a lock
for registration and lookup, and allocators must be safe to call from any
thread that runs methods.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable

import torch

from pterun.core.device import Device, DeviceType
from pterun.core.lazy import LazyTable
from pterun.errors import ErrorCode, InvalidArgument, MemoryAllocationFailed, NotFound, RegistrationAlreadyRegistered
from pterun.memory.buffer import DeviceMemoryBuffer

DEFAULT_ALIGNMENT = 64


class AllocatorAlreadyRegistered(RegistrationAlreadyRegistered):
    code = ErrorCode.RegistrationAlreadyRegistered


class Allocator(ABC):
    """Allocates memory on devices of one type."""

    device_type: DeviceType

    def allocate(self, nbytes: int, index: int = 0, alignment: int = DEFAULT_ALIGNMENT) -> DeviceMemoryBuffer:
        device = Device(self.device_type, index)
        if nbytes < 0:
            raise InvalidArgument(f"cannot allocate {nbytes} bytes on {device}")
        if alignment <= 0 or alignment & (alignment - 1):
            raise InvalidArgument(f"alignment {alignment} is not a power of two")
        try:
            memory = self._allocate(nbytes, index, alignment)
        except MemoryAllocationFailed:
            raise
        except (RuntimeError, MemoryError, OSError, ValueError, AssertionError) as exc:
            raise MemoryAllocationFailed(f"failed to allocate {nbytes} bytes on {device}: {exc}") from None
        buffer = DeviceMemoryBuffer(memory, device, nbytes)
        if nbytes and buffer.data_ptr % alignment:
            raise MemoryAllocationFailed(
                f"{type(self).__name__} returned {nbytes} bytes on {device} at 0x{buffer.data_ptr:x}, "
                f"not {alignment}-byte aligned"
            )
        return buffer

    @abstractmethod
    def _allocate(self, nbytes: int, index: int, alignment: int) -> torch.Tensor:
        """A 1-D uint8 tensor of at least ``nbytes`` bytes on device ``index`` of this type."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.device_type.name})"


class AllocatorRegistry:
    """One allocator per device type. Built-ins may be registered lazily, by factory."""

    def __init__(self) -> None:
        self._table: LazyTable[DeviceType, Allocator] = LazyTable()

    def register(self, allocator: Allocator) -> None:
        device_type = DeviceType(allocator.device_type)
        with self._table.lock:
            if device_type in self._table:
                existing = self._table.made(device_type) or "a built-in allocator"
                raise AllocatorAlreadyRegistered(
                    f"an allocator is already registered for device type {device_type.name} ({existing}); "
                    f"cannot also register {allocator!r}"
                )
            self._table.add(device_type, allocator)

    def register_lazy(self, device_type: DeviceType, factory: Callable[[], Allocator]) -> None:
        """Registers an allocator made on first use, so registering touches no device."""
        with self._table.lock:
            if device_type in self._table:
                raise AllocatorAlreadyRegistered(
                    f"an allocator is already registered for device type {device_type.name}"
                )
            self._table.add_factory(device_type, factory)

    def get(self, device_type: DeviceType) -> Allocator:
        allocator = self._table.get(device_type)
        if allocator is None:
            raise NotFound(
                f"no allocator registered for device type {DeviceType(device_type).name}; "
                f"registered: {', '.join(sorted(t.name for t in self.device_types)) or 'none'}"
            )
        return allocator

    @property
    def device_types(self) -> set[DeviceType]:
        return self._table.keys()

    def allocate(self, nbytes: int, device: Device, alignment: int = DEFAULT_ALIGNMENT) -> DeviceMemoryBuffer:
        return self.get(device.type).allocate(nbytes, device.index, alignment)
