"""A call's outputs: copied on the GPU into one mappable buffer, then from its mapping into the caller's
tensors (one copy); SymInt outputs are returned as ints."""

from __future__ import annotations

import numpy as np
import torch

from pterun.backends.webgpu.device import Gpu
from pterun.backends.webgpu.graph import DType
from pterun.backends.webgpu.slots import SSlot, TSlot
from pterun.errors import InvalidArgument

# What a GPU word is read back as before it is cast into the caller's tensor.
_READ_AS = {"f32": np.float32, "i32": np.int32, "u32": np.uint32}
# The tensor a value of each VkDataType is read back into when the caller gives none (profiling).
TORCH_DTYPE = {
    DType.FLOAT32: torch.float32,
    DType.FLOAT16: torch.float16,
    DType.FLOAT64: torch.float64,
    DType.INT32: torch.int32,
    DType.INT64: torch.int64,
    DType.INT8: torch.int8,
    DType.UINT8: torch.uint8,
    DType.BOOL: torch.bool,
}


class SymIntOutput:
    def __init__(self, slot: SSlot) -> None:
        self.slot = slot

    def record(self, encoder, readback) -> None:
        pass

    def read(self, mapped, out):
        return self.slot.value


class TensorOutput:
    def __init__(self, index: int, slot: TSlot, at: int) -> None:
        self.index = index
        self.slot = slot
        self.at = at  # where it lands in the readback buffer
        self.read_as = _READ_AS[slot.elem]

    def record(self, encoder, readback) -> None:
        nbytes = 4 * self.slot.numel
        if nbytes:
            encoder.copy_buffer_to_buffer(self.slot.storage.buffer, 0, readback, self.at, nbytes)

    def read(self, mapped, out):
        """Resizes the caller's tensor ``out`` to the output's shape and copies the values into it."""
        slot = self.slot
        if not isinstance(out, torch.Tensor):
            raise InvalidArgument(
                f"VulkanBackend: output {self.index} must be a tensor, got {type(out).__name__}"
            )
        if tuple(out.shape) != slot.shape:
            out.resize_(slot.shape)
        n = slot.numel
        if not n:
            return out
        src = np.frombuffer(mapped, dtype=self.read_as, count=n, offset=self.at)
        if out.device.type == "cpu" and out.dtype != torch.bfloat16 and out.dtype != torch.float16:
            np.copyto(out.detach().numpy(), src.reshape(slot.shape), casting="unsafe")
        else:
            out.copy_(torch.from_numpy(src.copy()).view(slot.shape))
        return out


def readback(gpu: Gpu, slots: list) -> tuple[list, object]:
    """The outputs' handlers and the one mappable buffer they land in, each at an 8-byte aligned offset."""
    outputs: list[TensorOutput | SymIntOutput] = []
    total = 0
    for k, slot in enumerate(slots):
        if isinstance(slot, TSlot):
            outputs.append(TensorOutput(k, slot, total))
            total += (4 * slot.capacity + 7) & ~7
        else:
            outputs.append(SymIntOutput(slot))
    return outputs, gpu.buffer(total, gpu.READBACK, "readback")


def read_into(gpu: Gpu, buffer, outputs: list, targets: list, first: int = 0) -> None:
    """Maps ``buffer`` (waiting for the submission that copied into it) and reads output ``k`` into
    ``targets[first + k]``."""
    buffer.map_sync(gpu.wgpu.MapMode.READ)
    try:
        mapped = buffer.read_mapped(copy=False)
        for k, out in enumerate(outputs, first):
            targets[k] = out.read(mapped, targets[k])
    finally:
        buffer.unmap()
