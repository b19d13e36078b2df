"""DeviceMemoryBuffer: one allocation on one device, owned by whoever holds it.

Python owns memory by reference: a buffer is freed when the last object that
needs it goes away. Every tensor view made from a buffer (`view`) holds it, so
memory handed to a caller stays valid for as long as the caller keeps the
tensor, and is never reused behind its back.

Views get storage of their own that cannot grow: a kernel asked to write more
than the planned bytes fails instead of reallocating, so the memory plan is
never silently left.
"""

from __future__ import annotations

import weakref

import numpy as np
import torch

from pterun.core.device import Device


class _HostRange:
    """Exposes host bytes [ptr, ptr + n) to numpy, keeping `owner` alive."""

    __slots__ = ("__array_interface__", "owner")

    def __init__(self, ptr: int, nbytes: int, owner: object) -> None:
        self.owner = owner
        self.__array_interface__ = {"data": (ptr, False), "shape": (nbytes,), "typestr": "|u1", "version": 3}


class _CudaRange:
    """Exposes device bytes [ptr, ptr + n) to torch, keeping `owner` alive."""

    __slots__ = ("__cuda_array_interface__", "owner")

    def __init__(self, ptr: int, nbytes: int, owner: object) -> None:
        self.owner = owner
        self.__cuda_array_interface__ = {
            "data": (ptr, False), "shape": (nbytes,), "typestr": "|u1", "version": 3, "strides": None,
            "stream": None,
        }


class DeviceMemoryBuffer:
    """``nbytes`` bytes on ``device``; ``memory`` is a 1-D uint8 tensor over them."""

    __slots__ = ("memory", "device", "nbytes", "_host", "__weakref__")

    def __init__(self, memory: torch.Tensor, device: Device, nbytes: int) -> None:
        if memory.dtype != torch.uint8 or memory.dim() != 1 or memory.numel() < nbytes:
            raise ValueError(f"an allocator returned {memory.dtype} {tuple(memory.shape)} for {nbytes} bytes")
        self.memory = memory
        self.device = device
        self.nbytes = nbytes
        # A weak reference to the bytes as one NumPy array, while a view of host memory lives.
        self._host: weakref.ref[np.ndarray] | None = None

    @property
    def data_ptr(self) -> int:
        return self.memory.data_ptr()

    def view(self, offset: int, nbytes: int) -> torch.Tensor:
        """A uint8 tensor over [offset, offset + nbytes), with its own storage that cannot grow."""
        if offset < 0 or offset + nbytes > self.nbytes:
            raise ValueError(f"bytes {offset}..{offset + nbytes} lie outside a {self.nbytes}-byte buffer")
        if nbytes == 0:
            return torch.empty(0, dtype=torch.uint8, device=self.memory.device)
        # Where the memory really is decides how to view it (a test allocator may serve a device
        # type from host memory).
        if self.memory.device.type == "cpu":
            host = None if self._host is None else self._host()
            if host is None:
                host = np.asarray(_HostRange(self.data_ptr, self.nbytes, self))
                self._host = weakref.ref(host)  # weak: the array holds this buffer
            # A slice of the array holds the array, which holds this buffer.
            return torch.from_numpy(host[offset : offset + nbytes])
        return torch.as_tensor(_CudaRange(self.data_ptr + offset, nbytes, self), device=self.memory.device)

    def copy_from_host(self, data: bytes | memoryview | torch.Tensor, offset: int = 0) -> None:
        src = data if isinstance(data, torch.Tensor) else torch.frombuffer(bytearray(data), dtype=torch.uint8)
        self.memory[offset : offset + src.numel()].copy_(src.view(torch.uint8).reshape(-1))

    def copy_to_host(self, offset: int = 0, nbytes: int | None = None) -> bytes:
        end = self.nbytes if nbytes is None else offset + nbytes
        return self.memory[offset:end].cpu().numpy().tobytes()

    def __repr__(self) -> str:
        return f"DeviceMemoryBuffer({self.nbytes} bytes on {self.device})"


class _Release:
    __slots__ = ("free",)

    def __init__(self, free) -> None:
        self.free = free

    def __del__(self) -> None:
        self.free()


def external_memory(ptr: int, nbytes: int, device: Device, free=None) -> torch.Tensor:
    """A uint8 tensor over memory someone else allocated; ``free()`` runs when the last view is gone.

    For allocators built on raw pointers (a driver call, another library's pool).
    """
    owner = _Release(free) if free is not None else None
    if device.is_cpu:
        return torch.from_numpy(np.asarray(_HostRange(ptr, nbytes, owner)))
    return torch.as_tensor(_CudaRange(ptr, nbytes, owner), device=device.torch)
