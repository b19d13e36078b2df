"""A method's outputs that have no planned memory: one :class:`OutputSlot` each.

An unplanned output's buffer comes from the allocator of the device the
plan tags it with, or is a tensor the caller sets (``set_output``, ExecuTorch's
set_output_data_ptr). A buffer handed to the caller with
``clone_outputs=False`` is the caller's from then on: the next call gets a
new one. Planned outputs live in the method's arenas and need none of this.
"""

from __future__ import annotations

import torch

from pterun.core.device import Device, DeviceType
from pterun.core.dtype import name as dtype_name
from pterun.core.dtype import storage_dtype
from pterun.errors import InvalidArgument, InvalidState
from pterun.executor.load.tensors import shaped
from pterun.format import TensorSpec
from pterun.memory import AllocatorRegistry
from pterun.memory.pointer import device_memory_kind


def check_device_memory(tensor: torch.Tensor, device: Device, where: str) -> None:
    """Refuses a tensor torch calls a CUDA tensor whose memory the driver says is on the host."""
    # A lying wrapper or a third-party allocator can do that; the driver is asked once, when the memory
    # is bound.
    if device.type == DeviceType.CUDA and tensor.is_cuda and tensor.numel():
        kind = device_memory_kind(tensor.data_ptr())
        if kind not in ("device", "managed"):
            raise InvalidArgument(
                f"{where}: the program places it on {device}, but its memory at 0x{tensor.data_ptr():x} "
                f"is {kind} memory, not device memory"
            )


class OutputSlot:
    """One unplanned output: the argument of the compiled function it is passed as, and its buffer."""

    def __init__(self, spec: TensorSpec, argument: int, device: Device, where: str) -> None:
        self.spec, self.argument, self.device, self.where = spec, argument, device, where
        self.buffer: torch.Tensor | None = None
        self.handed_out = False  # the caller holds the buffer: the next call needs another
        self.caller_bound = False  # the caller set the buffer (set_output); the method never replaces it

    @property
    def needs_buffer(self) -> bool:
        return not self.caller_bound and (self.buffer is None or self.handed_out)

    def new_buffer(self, allocators: AllocatorRegistry) -> torch.Tensor:
        spec, device = self.spec, self.device
        if spec.nbytes == 0:
            # Zero bytes need no memory on any device, and no allocator is asked.
            on = device.torch if device.is_cpu or torch.cuda.is_available() else torch.device("cpu")
            return shaped(torch.empty(0, dtype=torch.uint8, device=on), spec)
        buffer = allocators.allocate(spec.nbytes, device)
        tensor = shaped(buffer.view(0, spec.nbytes), spec)
        check_device_memory(tensor, device, self.where)
        return tensor

    def use(self, tensor: torch.Tensor, args: list, *, caller: bool = False) -> None:
        self.buffer = tensor
        self.handed_out = False
        self.caller_bound = self.caller_bound or caller
        args[self.argument] = tensor

    def check(self, tensor: torch.Tensor) -> None:
        """Refuses a tensor the caller sets that cannot hold the output."""
        spec = self.spec
        if not isinstance(tensor, torch.Tensor) or tensor.dtype != storage_dtype(spec.scalar_type):
            raise InvalidArgument(f"{self.where}: expected a {dtype_name(spec.scalar_type)} tensor, got {tensor!r:.60}")
        capacity = tensor.untyped_storage().nbytes() - tensor.storage_offset() * tensor.element_size()
        if capacity < spec.nbytes:
            raise InvalidArgument(f"{self.where}: needs {spec.nbytes} bytes; the tensor given has {capacity}")
        check_device_memory(tensor, self.device, self.where)


def prepare(slots: list[OutputSlot], allocators: AllocatorRegistry, args: list) -> None:
    """Gives every slot that needs one a buffer. All or nothing: if one allocation fails, no buffer changes
    and the next call starts over. Allocates nothing when every slot has its buffer (the steady state)."""
    fresh: list | None = None
    for slot in slots:
        if slot.needs_buffer:
            fresh = fresh or []
            fresh.append((slot, slot.new_buffer(allocators)))
    if fresh:
        for slot, tensor in fresh:
            slot.use(tensor, args)


def collect(outputs: tuple | None, clone_outputs: bool, slots: list[OutputSlot], copied: frozenset[int],
            where: str) -> list:
    """A run's outputs for the caller: copies with ``clone_outputs``; else the tensors themselves, but for the
    positions in ``copied`` (unplanned outputs a replayed CUDA graph writes again on every replay), after which
    the caller owns the slots' buffers and the next call gets new ones."""
    if outputs is None:
        raise InvalidState(f"{where}: has not been executed")
    if clone_outputs:
        return [o.clone() if isinstance(o, torch.Tensor) else _plain(o) for o in outputs]
    if copied:
        return [o.clone() if i in copied else (o if isinstance(o, torch.Tensor) else _plain(o))
                for i, o in enumerate(outputs)]
    for slot in slots:
        slot.handed_out = True
    return [o if isinstance(o, torch.Tensor) else _plain(o) for o in outputs]


def _plain(value):
    return list(value) if isinstance(value, list) else value
