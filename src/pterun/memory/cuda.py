"""CUDA memory from PyTorch's caching allocator.

Using torch's pool keeps pterun's buffers in the same stream-ordered pool as
every tensor the caller makes, which CUDA graph capture needs. Memory is
zero-filled: programs moved from the host rely on arenas that start zeroed.
"""

from __future__ import annotations

import torch

from pterun.core.device import DeviceType
from pterun.memory.allocator import Allocator


class CudaAllocator(Allocator):
    device_type = DeviceType.CUDA

    def _allocate(self, nbytes: int, index: int, alignment: int) -> torch.Tensor:
        if not torch.cuda.is_available():
            raise RuntimeError("CUDA is not available (no driver or no device)")
        if not 0 <= index < torch.cuda.device_count():
            raise RuntimeError(f"there is no CUDA device {index}; {torch.cuda.device_count()} are visible")
        # The caching allocator hands out 512-byte aligned blocks.
        return torch.zeros(nbytes, dtype=torch.uint8, device=torch.device("cuda", index))
