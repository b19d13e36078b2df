"""What a dispatch is bound to: its parameter block (binding 0) and its tensors' buffers (1, 2, ...).

Every dispatch of a program has its block in one uniform buffer, at an offset
the device's alignment allows; resizing rewrites the host copy of the words
and uploads it once per call.
"""

from __future__ import annotations

import numpy as np

from pterun.backends.webgpu.device import PARAM_WORDS, Gpu
from pterun.backends.webgpu.node import Dispatch
from pterun.backends.webgpu.slots import TSlot
from pterun.errors import InvalidProgram


class ParamBlocks:
    """The parameter words of ``count`` dispatches: a host array and the uniform buffer it is written to."""

    def __init__(self, gpu: Gpu, count: int, label: str = "params") -> None:
        self.gpu = gpu
        self.stride = max(PARAM_WORDS, gpu.param_align // 4)
        self.words = np.zeros(max(1, count) * self.stride, dtype=np.uint32)
        self.buffer = gpu.buffer(self.words.nbytes, gpu.UNIFORM, label)

    def block(self, index: int) -> np.ndarray:
        """Dispatch ``index``'s words (a view: writing them is what the next upload sends)."""
        base = index * self.stride
        return self.words[base : base + PARAM_WORDS]

    def entry(self, index: int) -> dict:
        offset = index * self.stride * 4
        return {"binding": 0, "resource": {"buffer": self.buffer, "offset": offset, "size": PARAM_WORDS * 4}}

    def upload(self) -> None:
        self.gpu.queue.write_buffer(self.buffer, 0, self.words)


def bind(gpu: Gpu, d: Dispatch, params: ParamBlocks, index: int) -> None:
    """Compiles (or finds) ``d``'s pipeline and makes its bind group over block ``index`` of ``params``."""
    d.pipeline, layout, count = gpu.pipeline(d.source)
    entries = [params.entry(index)]
    for j, b in enumerate(d.bindings):
        buffer = (b.storage if isinstance(b, TSlot) else b).buffer
        assert buffer is not None, "bind groups are made once memory is planned"
        entries.append({"binding": j + 1, "resource": {"buffer": buffer, "offset": 0, "size": buffer.size}})
    if len(entries) != count:
        raise InvalidProgram(f"a kernel declares {count} bindings; {len(entries)} were given")
    d.bind_group = gpu.device.create_bind_group(layout=layout, entries=entries)
