"""A call's inputs: checked against the graph, then written straight from the caller's tensors (one copy).

Each graph input gets its handler at load. A tensor whose dtype the GPU holds
as it is (float32, int32) is written as it is; int64, bool and 8-bit integers
are written as raw bytes to a staging buffer and converted by a dispatch
(shaders/convert.wgsl) that runs before the graph's; anything else (float64,
float16, ...) is converted on the host.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from pterun.backends.webgpu.binding import ParamBlocks, bind
from pterun.backends.webgpu.builder import groups
from pterun.backends.webgpu.device import Gpu
from pterun.backends.webgpu.graph import DType
from pterun.backends.webgpu.node import Dispatch
from pterun.backends.webgpu.slots import INPUT, HostValue, SSlot, Storage, TSlot
from pterun.backends.webgpu.wgsl import render
from pterun.errors import InvalidArgument

# The caller's dtype that can be written to a buffer as it is.
_HOST_ELEM = {"f32": torch.float32, "i32": torch.int32, "u32": torch.int32}
# Caller dtypes widened or narrowed on the GPU (shaders/convert.wgsl), by mode.
_CONVERT_MODE = {torch.int64: 0, torch.bool: 1, torch.uint8: 1, torch.int8: 2}


class SymIntInput:
    def __init__(self, slot: SSlot) -> None:
        self.slot = slot

    def bind(self, x, dirty: set[int]) -> None:
        v = int(x)
        if v != self.slot.value:
            self.slot.value = v
            dirty.add(self.slot.vid)


class TensorInput:
    def __init__(self, gpu: Gpu, slot: TSlot, host_value: HostValue | None = None) -> None:
        self.gpu = gpu
        self.slot = slot
        self.host_value = host_value
        self.host = _HOST_ELEM[slot.elem]
        self._conversions: dict[torch.dtype, _Conversion] = {}
        slot.storage.buffer = gpu.buffer(slot.storage.nbytes, gpu.STORAGE, f"in{slot.vid}")
        if slot.elem != "f32":
            # Integer and bool inputs usually arrive as int64 / bool: compile their widening now.
            gpu.pipeline(render("convert", T_OUT=slot.elem))

    def bind(self, x, dirty: set[int]) -> None:
        """Takes ``x``'s shape (the graph resizes when it changed)."""
        slot = self.slot
        if not isinstance(x, torch.Tensor):
            raise InvalidArgument(f"VulkanBackend: input {slot.vid} must be a tensor, got {type(x).__name__}")
        if self.host_value is not None:
            # An operator reads this input's values on the host: whatever they are, it recomputes.
            self.host_value.tensor = x
            dirty.add(slot.vid)
        shape = tuple(x.shape)
        if shape != slot.shape:
            if len(shape) != len(slot.shape) and not (slot.shape == () or shape == ()):
                raise InvalidArgument(
                    f"VulkanBackend: input {slot.vid} has shape {list(shape)}; expected rank {len(slot.shape)}"
                )
            if math.prod(shape) > slot.capacity:
                raise InvalidArgument(
                    f"VulkanBackend: input {slot.vid} has shape {list(shape)}, past its upper "
                    f"bound of {slot.capacity} elements"
                )
            slot.shape = shape
            dirty.add(slot.vid)

    def write(self, x: torch.Tensor) -> Dispatch | None:
        """Writes ``x`` into the input's buffer; returns the dispatch that widens or narrows it, if one must."""
        slot = self.slot
        if not slot.numel:
            return None
        x = x.detach()
        if x.device.type != "cpu":
            x = x.cpu()
        if not x.is_contiguous():
            x = x.contiguous()
        if slot.dtype == DType.FLOAT16 and x.dtype != torch.float16:
            # A float16 tensor of the graph the caller fills with another type (force_fp16 programs
            # take float32): it holds the values as float16 would.
            x = x.to(torch.float16)
        if x.dtype == self.host:
            self.gpu.queue.write_buffer(slot.storage.buffer, 0, x.numpy(), 0, 4 * slot.numel)
            return None
        if slot.elem != "f32" and x.dtype in _CONVERT_MODE:
            conversion = self._conversions.get(x.dtype)
            if conversion is None:
                conversion = self._conversions[x.dtype] = _Conversion(self.gpu, slot, x.dtype)
            return conversion.write(x)
        # A type with no WGSL counterpart (float64, float16, ...): converted on the host.
        y = x.to(self.host)
        self.gpu.queue.write_buffer(slot.storage.buffer, 0, y.numpy(), 0, 4 * slot.numel)
        return None

    def buffers(self) -> list:
        return [self.slot.storage.buffer, *(b for c in self._conversions.values() for b in c.buffers())]


class _Conversion:
    """A staging buffer for one input's raw bytes of one dtype, and the dispatch converting them."""

    def __init__(self, gpu: Gpu, slot: TSlot, dtype: torch.dtype) -> None:
        self.gpu = gpu
        self.slot = slot
        self.mode = _CONVERT_MODE[dtype]
        self.width = torch.empty((), dtype=dtype).element_size()
        self.staging = Storage(self.width * slot.capacity, INPUT)
        self.staging.buffer = gpu.buffer(self.width * slot.capacity + 4, gpu.STORAGE, f"stage{slot.vid}")
        self.params = ParamBlocks(gpu, 1, "stage-params")
        # write() sets the grid itself: the params and grid functions are never called.
        self.dispatch = Dispatch(render("convert", T_OUT=slot.elem), [self.staging, slot], list, tuple)  # type: ignore[arg-type]
        bind(gpu, self.dispatch, self.params, 0)

    def write(self, x: torch.Tensor) -> Dispatch:
        n = self.slot.numel
        words = self.params.words
        if words[0] != n or words[1] != self.mode:
            words[0], words[1] = n, self.mode
            self.params.upload()
        raw = (
            x.view(-1).view(torch.uint8).numpy()
            if x.dtype != torch.bool
            else x.view(-1).numpy().view(np.uint8)
        )
        buffer = self.staging.buffer
        nbytes = n * self.width
        head = nbytes & ~3
        if head:
            self.gpu.queue.write_buffer(buffer, 0, raw, 0, head)
        if nbytes > head:
            tail = np.zeros(4, dtype=np.uint8)
            tail[: nbytes - head] = raw[head:nbytes]
            self.gpu.queue.write_buffer(buffer, head, tail)
        self.dispatch.current = groups(n, 64, self.gpu.max_groups)
        return self.dispatch

    def buffers(self) -> list:
        return [self.staging.buffer, self.params.buffer]
