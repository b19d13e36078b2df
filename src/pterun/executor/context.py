"""What loading a method needs from its program, and nothing else.

A method is loaded from its plan and a :class:`LoadContext`: the registries to
resolve kernels, backends and memory from, the program's data, and the
options the program was loaded with. The method never sees the program, so
``program.py`` imports ``method.py`` and not the other way round.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pterun.backends import BackendRegistry
from pterun.core.device import Device, DeviceType
from pterun.executor.cache import LoadCache
from pterun.executor.data import ProgramData
from pterun.executor.etdump import ProgramTrace
from pterun.executor.shared import SharedArenas
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
    device: Device | None  # every method runs here, whatever its plan says
    backend_options: Mapping[str, Mapping[str, Any]]
    load_nested: Callable  # (program bytes, device) -> a program run by the same executor (a delegate's)
    compile: bool  # write methods functionally for torch.compile (functional.py)
    cuda_graphs: bool  # replay CUDA methods as captured graphs (graphs.py)
    allow_tf32: bool  # float32 products and convolutions may use TF32 (precision.py)
    cache: LoadCache | None  # compiled code kept between loads (cache.py); None: off
    fuse: bool = True  # decomposed chains run as one fused kernel each (fuse/)
    num_threads: int | None = None  # intra-op threads per call; None: chosen per method (threads.py)
    trace: ProgramTrace | None = None  # profiling on: the program's ETDump (etdump.py)
    device_positions: bool | None = None  # start positions stay on the device (fuse/positions.py); None: on CUDA
    shared: SharedArenas | None = None  # planned memory the program's methods share (shared.py); None: none
    trust_native_code: bool = False  # delegates whose blobs are native code may load (docs/trust.md)

    def device_for(self, device_type: int, device_index: int) -> Device:
        """Where a value the plan tags with this device lives."""
        if self.device is not None:
            return self.device
        return Device(DeviceType(device_type), device_index)

    @property
    def positions_on_device(self) -> bool:
        """Whether host reads of a start position become device-position calls: on a CUDA device (where they
        keep the method out of a CUDA graph) when chains are fused, or wherever ``device_positions`` says."""
        if self.device_positions is not None:
            return self.device_positions
        return self.fuse and self.run_device.type == DeviceType.CUDA

    @property
    def run_device(self) -> Device:
        """The device kernels are chosen for and delegates told about."""
        return Device.parse(self.device)
