"""Program: a loaded .pte file, its data files, and the methods loaded from it."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from pterun.backends import BackendRegistry
from pterun.core.device import Device
from pterun.errors import InvalidArgument, InvalidExternalData, InvalidState, NotFound
from pterun.executor.meta import MethodMeta
from pterun.executor.method import Method
from pterun.executor.tensors import check_external_layout, from_bytes, shaped
from pterun.format import DataFile, ProgramFile, TensorSpec
from pterun.format.data_file import NamedEntry
from pterun.kernels import KernelRegistry
from pterun.memory import AllocatorRegistry


@dataclass
class Registries:
    kernels: KernelRegistry
    backends: BackendRegistry
    allocators: AllocatorRegistry


@dataclass
class Program:
    file: ProgramFile
    registries: Registries
    data_files: Sequence[DataFile] = ()
    device: Device | None = None  # run every method on this device, whatever the plan says
    backend_options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    cuda_graphs: bool = True  # replay CUDA methods as captured graphs (executor/graphs.py)
    compile: bool = False  # run methods through torch.compile (executor/functional.py)
    allow_tf32: bool = False  # float32 products and convolutions may use TF32 on CUDA (executor/precision.py)

    def __post_init__(self) -> None:
        self._methods: dict[str, Method] = {}
        self._constants: dict[tuple, torch.Tensor] = {}
        self._lock = threading.RLock()
        self.named_data = self._merge_named_data()

    def _merge_named_data(self) -> dict[str, memoryview]:
        merged: dict[str, memoryview] = {}
        for data_file in self.data_files:
            for key, entry in data_file.entries.items():
                if key in merged:
                    raise InvalidArgument(f"named data key {key!r} is in more than one data file")
                merged[key] = entry.data
        for key, data in self.file.named_data.items():
            if key in merged:
                raise InvalidArgument(f"named data key {key!r} is both in the program and in a data file")
            merged[key] = data
        return merged

    # -- methods -----------------------------------------------------------------

    @property
    def method_names(self) -> set[str]:
        return set(self.file.method_names)

    def load_method(self, name: str, *, cached: bool = True) -> Method:
        """The method ``name``, loaded on first use and the same object on every later call.

        ``cached=False`` loads a new, independent method every time: its own planned memory, delegate
        state and compiled function, sharing only the program's read-only constants. Give each thread
        its own (see docs/threads.md); a method holds state (inputs, outputs, mutable buffers such as a
        KV cache) that one call at a time can use.
        """
        if not cached:
            return Method(self, self.file.plan(name))
        with self._lock:
            method = self._methods.get(name)
            if method is None:
                method = Method(self, self.file.plan(name))
                self._methods[name] = method
            return method

    def metadata(self, name: str) -> MethodMeta:
        return MethodMeta(self.file.plan(name))

    def load_nested(self, data, device) -> "Program":
        """A program carried inside this one (a delegate blob), run by the same executor on ``device``."""
        # The outer method captures the whole call, nested program included.
        return Program(ProgramFile(bytes(data)), self.registries, device=Device.parse(device), cuda_graphs=False,
                       allow_tf32=self.allow_tf32)

    # -- data --------------------------------------------------------------------

    def external_entry(self, key: str, where: str, *, planned: bool) -> NamedEntry:
        if not self.data_files:
            if planned:
                raise InvalidExternalData(f"{where}: tensor {key!r} is stored in a data file, and none was given")
            raise InvalidState(f"{where}: tensor {key!r} is stored in a data file (.ptd), and none was given")
        for data_file in self.data_files:
            entry = data_file.entries.get(key)
            if entry is not None:
                return entry
        raise NotFound(f"{where}: tensor {key!r} is in none of the data files given")

    def constant(self, spec: TensorSpec, where: str, device: Device) -> torch.Tensor:
        """A constant tensor, viewing the file's bytes on the CPU and copied once to any other device."""
        # Identical bytes are stored once, so two tensors can share a buffer with different shapes.
        source = ("external", spec.fqn) if spec.external else ("buffer", spec.data_buffer_idx)
        key = (*source, spec.scalar_type, spec.sizes, spec.dim_order)
        with self._lock:
            host = self._constants.get((*key, None))
            if host is None:
                if spec.external:
                    entry = self.external_entry(spec.fqn, where, planned=False)
                    check_external_layout(spec.fqn, entry.layout, spec)
                    if len(entry.data) < spec.nbytes:
                        raise InvalidExternalData(
                            f"{where}: tensor {spec.fqn!r} needs {spec.nbytes} bytes; the data file holds {len(entry.data)}"
                        )
                    data = entry.data
                else:
                    data = self.file.constant(spec.data_buffer_idx, spec.nbytes)
                host = from_bytes(data, spec)
                self._constants[(*key, None)] = host
            if device.is_cpu:
                return host
            placed = self._constants.get((*key, device))
            if placed is None:
                # Device memory comes from the device's allocator, as arenas' does (and fails the same way).
                buffer = self.registries.allocators.allocate(spec.nbytes, device)
                placed = shaped(buffer.view(0, spec.nbytes), spec)
                placed.copy_(host)
                self._constants[(*key, device)] = placed
            return placed
