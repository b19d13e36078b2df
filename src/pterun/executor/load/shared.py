"""Planned memory the methods of one program share: the state ExecuTorch's exporter placed for sharing.

``ExecutorchBackendConfig(memory_planning_pass=MemoryPlanningPass(share_mutable_buffers=True))`` plans every
mutable buffer on memory id 2, at the same offset in every method that uses it, so that a ``write`` method and
a ``read`` method see one state. ExecuTorch's ``executorch.runtime`` programs give their methods one set of
arenas, so the state is shared; its pybindings modules (``_load_for_executorch``) give each method its own,
so it is not. pterun's ``Runtime`` programs share the arenas of memory id 2 and above on the host (sized to
the largest method's), and ``pterun.pybindings`` modules do not, each as ExecuTorch's counterpart does.
Activations stay on memory id 1, each method's own (ExecuTorch's programs share that arena too; sharing it
changes no result, as outputs are copied out, but would make two methods' calls overwrite each other).

Methods sharing memory take turns: their calls hold one lock (``lock``), as the calls of one method do.
"""

from __future__ import annotations

import threading

from pterun.core.device import Device, DeviceType
from pterun.format import ProgramFile
from pterun.memory import AllocatorRegistry

FIRST_SHARED_ID = 2  # the memory id ExecuTorch's planner puts shared mutable buffers on


class SharedArenas:
    def __init__(self, file: ProgramFile, allocators: AllocatorRegistry) -> None:
        self._file = file
        self._allocators = allocators
        self._sizes: dict[int, int] | None = None
        self._buffers: dict[int, object] = {}
        self._guard = threading.Lock()
        self.lock = threading.Lock()  # the calls of every method that shares memory

    @staticmethod
    def shares(memory_id: int, device: Device) -> bool:
        return memory_id >= FIRST_SHARED_ID and device.type == DeviceType.CPU

    def arena(self, memory_id: int, device: Device):
        """The program's one buffer for ``memory_id``, as large as any method's."""
        with self._guard:
            buffer = self._buffers.get(memory_id)
            if buffer is None:
                buffer = self._buffers[memory_id] = self._allocators.allocate(self._size(memory_id), device)
            return buffer

    def _size(self, memory_id: int) -> int:
        if self._sizes is None:
            sizes: dict[int, int] = {}
            for name in self._file.method_names:
                for mid, size in enumerate(self._file.plan(name).buffer_sizes):
                    if mid >= FIRST_SHARED_ID:
                        sizes[mid] = max(sizes.get(mid, 0), size)
            self._sizes = sizes
        return self._sizes[memory_id]
