"""Host memory: anonymous memory maps, page-aligned and zero-filled.

Pages are only backed when first written, so an arena costs resident memory in
proportion to what the method touches, and ExecuTorch's host arenas start
zeroed too (programs keep state such as a KV cache there without an initial
value).
"""

from __future__ import annotations

import mmap

import numpy as np
import torch

from pterun.core.device import DeviceType
from pterun.memory.allocator import Allocator


class CpuAllocator(Allocator):
    device_type = DeviceType.CPU

    def _allocate(self, nbytes: int, index: int, alignment: int) -> torch.Tensor:
        if index != 0:
            raise ValueError(f"there is one CPU device; index {index} was asked for")
        if nbytes == 0:
            return torch.empty(0, dtype=torch.uint8)
        if alignment > mmap.PAGESIZE:
            raise ValueError(f"alignment {alignment} exceeds the page size {mmap.PAGESIZE}")
        return torch.from_numpy(np.frombuffer(mmap.mmap(-1, nbytes), dtype=np.uint8))
