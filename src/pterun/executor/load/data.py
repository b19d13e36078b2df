"""A program's data as its methods read it: constants, data files' tensors, initial values, delegate blobs.

Constants view the file's bytes on the CPU (no copy) and are copied once to any other device, shared by
every method of the program; they are read-only by contract (effects.py refuses a method that writes one).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import torch

from pterun.core.device import Device
from pterun.errors import InvalidArgument, InvalidExternalData, InvalidState, NotFound
from pterun.executor.load.tensors import check_external_layout, from_bytes, shaped
from pterun.format import DataFile, ProgramFile, TensorSpec
from pterun.format.data_file import NamedEntry
from pterun.memory import AllocatorRegistry


class ProgramData:
    def __init__(self, file: ProgramFile, data_files: Sequence[DataFile], allocators: AllocatorRegistry) -> None:
        self.file = file
        self.data_files = data_files
        self.allocators = allocators
        self.named_data = self._merge_named_data()
        self._constants: dict[tuple, torch.Tensor] = {}
        self._lock = threading.Lock()

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

    def external_bytes(self, spec: TensorSpec, where: str, *, planned: bool) -> memoryview:
        """A data file's bytes for ``spec``, checked against its layout and size."""
        key = spec.fqn
        assert key is not None, "the plan's reader refuses an external tensor with no name"
        entry = self.external_entry(key, where, planned=planned)
        check_external_layout(key, entry.layout, spec)
        if len(entry.data) < spec.nbytes:
            raise InvalidExternalData(
                f"{where}: tensor {spec.fqn!r} needs {spec.nbytes} bytes; the data file holds {len(entry.data)}"
            )
        return entry.data

    def initial_value(self, spec: TensorSpec, where: str) -> torch.Tensor | None:
        """The value a planned tensor starts with (a mutable buffer's), on the CPU; None if it has none."""
        if spec.external:
            return from_bytes(self.external_bytes(spec, where, planned=True)[: spec.nbytes], spec)
        if spec.data_buffer_idx > 0:
            return from_bytes(self.file.mutable_initial_value(spec.data_buffer_idx, spec.nbytes), spec)
        return None

    def constant(self, spec: TensorSpec, where: str, device: Device) -> torch.Tensor:
        """A constant tensor, viewing the file's bytes on the CPU and copied once to any other device."""
        # Identical bytes are stored once, so two tensors can share a buffer with different shapes.
        source = ("external", spec.fqn) if spec.external else ("buffer", spec.data_buffer_idx)
        key = (*source, spec.scalar_type, spec.sizes, spec.dim_order)
        with self._lock:
            host = self._constants.get((*key, None))
            if host is None:
                host = from_bytes(self._constant_bytes(spec, where), spec)
                self._constants[(*key, None)] = host
            if device.is_cpu:
                return host
            placed = self._constants.get((*key, device))
            if placed is None:
                # Device memory comes from the device's allocator, as arenas' does (and fails the same way).
                buffer = self.allocators.allocate(spec.nbytes, device)
                placed = shaped(buffer.view(0, spec.nbytes), spec)
                placed.copy_(host)
                self._constants[(*key, device)] = placed
                # The file's pages were read for the copy only (a CPU method maps them again if it uses them).
                self.release(self._constant_bytes(spec, where))
            return placed

    def _constant_bytes(self, spec: TensorSpec, where: str) -> memoryview:
        if spec.external:
            return self.external_bytes(spec, where, planned=False)
        return self.file.constant(spec.data_buffer_idx, spec.nbytes)

    def release(self, view: memoryview) -> int:
        """Gives back the pages of ``view`` (bytes of the program or of a data file) that a load has finished
        reading: they leave this process's resident memory and are read again from the file if touched
        (``format/pages.py``). Returns the bytes given back."""
        for file in (self.file.file, *(d.file for d in self.data_files)):
            released = file.release(view)
            if released:
                return released
        return 0

    def delegate_blob(self, inline: bool, index: int) -> memoryview:
        return self.file.delegate_data(inline, index)
