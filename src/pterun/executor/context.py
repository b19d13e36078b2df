"""What loading a method needs from its program, and nothing else.

A method is loaded from its plan and a :class:`LoadContext`: the registries to
resolve kernels, backends and memory from, the program's data, the
options the program was loaded with (``LoadOptions``, whole) and the memory
its methods share. The method never sees the program, so
``program.py`` imports ``method.py`` and not the other way round.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pterun.backends import BackendRegistry
from pterun.core.device import Device, DeviceType
from pterun.executor.load.data import ProgramData
from pterun.executor.load.shared import SharedArenas
from pterun.executor.options import LoadOptions
from pterun.kernels import KernelRegistry
from pterun.memory import AllocatorRegistry


@dataclass
class Registries:
    kernels: KernelRegistry
    backends: BackendRegistry
    allocators: AllocatorRegistry


@dataclass(frozen=True)
class LoadContext:
    registries: Registries
    data: ProgramData
    options: LoadOptions
    load_nested: Callable  # (program bytes, device) -> a program run by the same executor (a delegate's)
    shared: SharedArenas | None = None  # planned memory the program's methods share (load/shared.py); None: none

    def device_for(self, device_type: int, device_index: int) -> Device:
        """Where a value the plan tags with this device lives."""
        if self.options.device is not None:
            return self.options.device
        return Device(DeviceType(device_type), device_index)

    @property
    def positions_on_device(self) -> bool:
        """Whether host reads of a start position become device-position calls: on a CUDA device (where they
        keep the method out of a CUDA graph) when chains are fused, or wherever ``device_positions`` says."""
        if self.options.device_positions is not None:
            return self.options.device_positions
        return self.options.fuse and self.run_device.type == DeviceType.CUDA

    @property
    def run_device(self) -> Device:
        """The device kernels are chosen for and delegates told about."""
        return Device.parse(self.options.device)
