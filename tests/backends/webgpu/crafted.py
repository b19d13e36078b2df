"""VkGraphs built or edited in memory, for kernel tests and for graphs no exporter writes.

A :class:`Craft` assembles values and operator calls the way ExecuTorch's
Vulkan serializer lays them out (inputs first, an operator's result last in
its arguments) and compiles them into a :class:`WebGPUDelegate` without a
program around them.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch

from pterun.backends.webgpu import WebGPUDelegate
from pterun.backends.webgpu.graph import (
    BoolList,
    Constant,
    DoubleList,
    DType,
    Graph,
    IntList,
    Op,
    SymInt,
    TensorValue,
    ValueList,
)

DTYPES = {
    torch.float32: DType.FLOAT32,
    torch.float16: DType.FLOAT16,
    torch.int32: DType.INT32,
    torch.int64: DType.INT32,
    torch.bool: DType.BOOL,
    torch.uint8: DType.UINT8,
    torch.int8: DType.INT8,
}
TORCH = {
    DType.FLOAT32: torch.float32,
    DType.FLOAT16: torch.float16,
    DType.INT32: torch.int64,
    DType.BOOL: torch.bool,
    DType.UINT8: torch.uint8,
    DType.INT8: torch.int8,
}


class Craft:
    def __init__(self) -> None:
        self.values: list = []
        self.chain: list[Op] = []
        self.inputs: list[int] = []
        self.outputs: list[int] = []
        self.constants: list[Constant] = []
        self.data: dict[int, bytes] = {}

    def _add(self, value) -> int:
        self.values.append(value)
        return len(self.values) - 1

    def tensor(self, dims: Sequence[int], dtype: DType = DType.FLOAT32) -> int:
        return self._add(TensorValue(dtype, tuple(dims)))

    def input(self, dims: Sequence[int], dtype: DType = DType.FLOAT32) -> int:
        vid = self.tensor(dims, dtype)
        self.inputs.append(vid)
        return vid

    def sym_input(self) -> int:
        vid = self._add(SymInt())
        self.inputs.append(vid)
        return vid

    def const(self, t: torch.Tensor) -> int:
        dtype = DTYPES[t.dtype]
        if t.dtype == torch.int64:
            t = t.to(torch.int32)
        index = len(self.constants)
        self.data[index] = t.contiguous().numpy().tobytes()
        self.constants.append(Constant(0, len(self.data[index]), None))
        return self._add(TensorValue(dtype, tuple(t.shape), constant_id=index))

    def scalar(self, v) -> int:
        return self._add(v)

    def ints(self, items: Sequence[int]) -> int:
        return self._add(IntList(tuple(items)))

    def doubles(self, items: Sequence[float]) -> int:
        return self._add(DoubleList(tuple(items)))

    def bools(self, items: Sequence[bool]) -> int:
        return self._add(BoolList(tuple(items)))

    def vlist(self, vids: Sequence[int]) -> int:
        return self._add(ValueList(tuple(vids)))

    def op(self, name: str, *args: int, out=None, dtype: DType = DType.FLOAT32) -> int:
        """Appends an operator; ``out`` is the result's dims, or a list of dims for several results."""
        if out and isinstance(out[0], (list, tuple)):
            outs = [
                self.tensor(d, dtype if not isinstance(dtype, list) else dtype[i]) for i, d in enumerate(out)
            ]
            result = self.vlist(outs)
        elif out == "sym":
            result = self._add(SymInt())
        else:
            result = self.tensor(out, dtype)
        self.chain.append(Op(name, [*args, result]))
        return result

    def output(self, *vids: int) -> None:
        self.outputs.extend(vids)

    def graph(self) -> Graph:
        return Graph(
            copy.deepcopy(self.values),
            copy.deepcopy(self.chain),
            list(self.inputs),
            list(self.outputs),
            list(self.constants),
        )

    def delegate(self, *, fuse: bool = True) -> WebGPUDelegate:
        return WebGPUDelegate.from_graph(self.graph(), self.data, fuse=fuse)


def run(delegate: WebGPUDelegate, inputs: Sequence) -> list[torch.Tensor]:
    """Calls a delegate as the executor does: inputs, then output tensors it writes in place."""
    graph = delegate.graph
    outs = []
    for vid in graph.outputs:
        v = graph.values[vid]
        outs.append(torch.empty(v.dims, dtype=TORCH[v.dtype]) if isinstance(v, TensorValue) else 0)
    args = [*inputs, *outs]
    delegate(args)
    return args[len(inputs) :]
