"""The values of a compiled graph: tensors at their current shape, SymInts at their current value.

A tensor's memory is a :class:`Storage`, shared by its views; the memory
planner (memory.py) decides which storages share a GPU buffer.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from pterun.backends.webgpu.graph import DType, Graph, TensorValue
from pterun.errors import DelegateInvalidCompatibility, InvalidProgram

# How each VkDataType is held on the GPU: WGSL has no 8- or 64-bit storage types.
# Half-precision tensors are held as f32 and rounded to half after every operator that writes one
# (NodeBuilder.finish), so they take the values a float16 tensor can hold.
ELEM = {
    DType.FLOAT32: "f32",
    DType.FLOAT16: "f32",
    DType.FLOAT64: "f32",
    DType.INT32: "i32",
    DType.INT64: "i32",
    DType.INT8: "i32",
    DType.UINT8: "u32",
    DType.BOOL: "u32",
}

# Storage kinds: uploaded once at load, written by the caller at each call, or planned (intermediates).
CONST, INPUT, PLAN = "const", "input", "plan"


class Storage:
    """Memory of one tensor (shared by its views): a GPU buffer once memory is planned."""

    __slots__ = ("nbytes", "kind", "buffer")

    def __init__(self, nbytes: int, kind: str) -> None:
        self.nbytes = nbytes
        self.kind = kind
        self.buffer = None


class TSlot:
    """A tensor of the graph at its current shape."""

    __slots__ = ("vid", "dtype", "elem", "shape", "capacity", "storage")

    def __init__(self, vid: int, dtype: DType, shape: tuple, capacity: int, storage: Storage) -> None:
        self.vid = vid
        self.dtype = dtype
        self.elem = ELEM[dtype]
        self.shape = tuple(shape)
        self.capacity = capacity
        self.storage = storage

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __repr__(self) -> str:
        return f"%{self.vid}:{self.elem}{list(self.shape)}"


class HostValue:
    """The caller's tensor for an input whose values an operator reads on the host (select_as_symint),
    set at each call before the graph resizes."""

    __slots__ = ("tensor",)

    def __init__(self) -> None:
        self.tensor: object | None = None


class SSlot:
    """A SymInt: an integer computed (or passed in) at run time."""

    __slots__ = ("vid", "value")

    def __init__(self, vid: int, value: int = 0) -> None:
        self.vid = vid
        self.value = value


def check_dtype(dtype: DType, vid) -> None:
    if dtype not in ELEM:
        raise DelegateInvalidCompatibility(
            f"unsupported dtype: {dtype.name}" + (f" (value {vid})" if vid else "")
        )


def new_tensor(vid: int, tv: TensorValue, kind: str) -> TSlot:
    """A tensor with memory of its own for its serialized (upper-bound) shape."""
    capacity = math.prod(tv.dims)
    return TSlot(vid, tv.dtype, tv.dims, capacity, Storage(4 * capacity, kind))


class Slots:
    """Value id -> slot, for every value computed so far; constants get theirs when first read."""

    def __init__(
        self,
        graph: Graph,
        upload_constant: Callable[[TensorValue, int], Storage],
        upload_bytes: Callable[[TensorValue, int], Storage],
    ) -> None:
        self.graph = graph
        self._upload_constant = upload_constant
        self._upload_bytes = upload_bytes
        self.by_vid: dict[int, TSlot | SSlot] = {}
        self.scratch: list[TSlot] = []
        self.packed: list[TSlot] = []  # constants read as their bytes (packed_constant)
        self._const_storage: dict[int, Storage] = {}
        self._byte_storage: dict[int, Storage] = {}
        self.host_values: dict[int, HostValue] = {}

    def define(self, vid: int, slot) -> None:
        if vid in self.by_vid:
            raise InvalidProgram(f"value {vid} is written twice")
        self.by_vid[vid] = slot

    def tensor(self, vid: int) -> TSlot:
        slot = self.by_vid.get(vid)
        if slot is not None:
            if not isinstance(slot, TSlot):
                raise InvalidProgram(f"value {vid} is not a tensor")
            return slot
        tv = self.graph.tensor(vid)
        if not tv.is_constant:
            raise InvalidProgram(f"value {vid} is read before any operator writes it")
        storage = self._const_storage.get(tv.constant_id)
        cap = math.prod(tv.dims)
        if storage is None:
            storage = self._const_storage[tv.constant_id] = self._upload_constant(tv, vid)
        if storage.nbytes < 4 * cap:
            raise InvalidProgram(f"constant {tv.constant_id} is smaller than tensor {vid}")
        slot = self.by_vid[vid] = TSlot(vid, tv.dtype, tv.dims, cap, storage)
        return slot

    def packed_constant(self, vid: int) -> TSlot:
        """Constant ``vid`` as the file holds its bytes, four to a 32-bit word (4-bit and 8-bit weights:
        a kernel unpacks them), rather than one element per word."""
        tv = self.graph.tensor(vid)
        if not tv.is_constant:
            raise DelegateInvalidCompatibility(f"value {vid} must be a constant (a packed weight)")
        storage = self._byte_storage.get(tv.constant_id)
        if storage is None:
            storage = self._byte_storage[tv.constant_id] = self._upload_bytes(tv, vid)
        slot = TSlot(vid, tv.dtype, tv.dims, storage.nbytes // 4, storage)
        self.packed.append(slot)
        return slot

    def sym(self, vid: int) -> SSlot:
        slot = self.by_vid.get(vid)
        if not isinstance(slot, SSlot):
            raise InvalidProgram(f"SymInt {vid} is read before any operator computes it")
        return slot

    def tensors(self) -> list[TSlot]:
        """Every tensor slot, scratch and packed constants included."""
        return [s for s in (*self.by_vid.values(), *self.scratch, *self.packed) if isinstance(s, TSlot)]
