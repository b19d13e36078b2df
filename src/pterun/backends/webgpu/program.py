"""A VkGraph compiled for one WebGPU device: slots, nodes, dispatches, memory, and resizing.

Compiling walks the operator chain once. Each operator's builder (in
``ops/``) declares its outputs with a function that computes their shape,
the scalars and shapes it reads, and its dispatches with functions that
compute their parameter blocks and grids. Everything an operator reads
through the builder becomes a dependency: the node's resize hook is
registered on each of those values, so a new shape for any of them (not
just the first input) recomputes the node's outputs and parameters.

Memory: each tensor gets a storage at its upper-bound size; views share
their source's storage; storages of tensors whose lifetimes do not overlap
share one GPU buffer, assigned once here and never reallocated. A buffer is
never both read and written by one dispatch (WebGPU forbids it), which holds
because an operator's output is live while its inputs are.

Execution: inputs are written straight from the caller's tensors into their
buffers (one copy), all dispatches go into one compute pass, outputs are
copied on the GPU into one mappable buffer and from its mapping into the
caller's tensors (one copy).
"""

from __future__ import annotations

import math
import struct
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np
import torch

from pterun.backends.webgpu.device import PARAM_WORDS, Gpu, render
from pterun.backends.webgpu.graph import (
    BoolList,
    DoubleList,
    DType,
    Graph,
    IntList,
    Op,
    SymInt,
    TensorValue,
    ValueList,
)
from pterun.errors import DelegateInvalidCompatibility, InvalidArgument, InvalidProgram

MAX_DIMS = 8

# How each VkDataType is held on the GPU: WGSL has no 8- or 64-bit storage types.
ELEM = {
    DType.FLOAT32: "f32",
    DType.FLOAT64: "f32",
    DType.INT32: "i32",
    DType.INT64: "i32",
    DType.INT8: "i32",
    DType.UINT8: "u32",
    DType.BOOL: "u32",
}
# What a GPU word is read back as before it is cast into the caller's tensor.
_READ_AS = {"f32": np.float32, "i32": np.int32, "u32": np.uint32}
# The caller's dtype that can be written to a buffer as it is.
_HOST_ELEM = {"f32": torch.float32, "i32": torch.int32, "u32": torch.int32}
# Caller dtypes widened or narrowed on the GPU (shaders/convert.wgsl), by mode.
_CONVERT_MODE = {torch.int64: 0, torch.bool: 1, torch.uint8: 1, torch.int8: 2}

_f32 = struct.Struct("<f")
_u32 = struct.Struct("<I")


def f32_bits(x: float) -> int:
    try:
        return _u32.unpack(_f32.pack(x))[0]
    except OverflowError:
        return _u32.unpack(_f32.pack(math.copysign(math.inf, x)))[0]


def word(x) -> int:
    if isinstance(x, float):
        return f32_bits(x)
    return int(x) & 0xFFFFFFFF


def groups(n: int, wg: int, limit: int = 65535) -> tuple[int, int, int]:
    """A grid covering ``n`` invocations of ``wg``-wide workgroups, spilling into y past the limit."""
    if n <= 0:
        return (0, 0, 0)
    g = -(-n // wg)
    if g <= limit:
        return (g, 1, 1)
    return (limit, -(-g // limit), 1)


def contiguous_strides(shape) -> list[int]:
    strides, acc = [0] * len(shape), 1
    for d in range(len(shape) - 1, -1, -1):
        strides[d] = acc
        acc *= shape[d]
    return strides


def numel(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


class Storage:
    """Memory of one tensor (shared by its views): a region of a GPU buffer."""

    __slots__ = ("nbytes", "kind", "buffer", "first", "last", "phys")

    def __init__(self, nbytes: int, kind: str) -> None:
        self.nbytes = nbytes
        self.kind = kind  # "const" | "input" | "plan"
        self.buffer = None
        self.first = -1
        self.last = -1
        self.phys = None


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
        return numel(self.shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __repr__(self) -> str:
        return f"%{self.vid}:{self.elem}{list(self.shape)}"


class SSlot:
    """A SymInt: an integer computed (or passed in) at run time."""

    __slots__ = ("vid", "value")

    def __init__(self, vid: int, value: int = 0) -> None:
        self.vid = vid
        self.value = value


@dataclass
class Dispatch:
    source: str
    bindings: list  # TSlots or Storages, bound at 1, 2, ... in order
    params: Callable[[], list]
    grid: Callable[[], tuple[int, int, int]]
    index: int = -1  # position in the graph's parameter buffer (-1 until memory is bound)
    words: list = field(default_factory=list)
    pipeline: object = None
    bind_group: object = None
    current: tuple = (0, 0, 0)


@dataclass
class Node:
    index: int
    name: str
    deps: set[int]
    reads: list  # TSlots the node reads (for lifetimes)
    outputs: list  # (TSlot, shape fn) or (SSlot, value fn)
    dispatches: list[Dispatch] = field(default_factory=list)
    scratch: list = field(default_factory=list)  # TSlots live only during this node


class NodeBuilder:
    """What an operator builder uses to declare one node."""

    def __init__(self, program: GpuProgram, op: Op, index: int) -> None:
        self.program = program
        self.op = op
        self.args = op.args
        self.node = Node(index, op.name, set(), [], [])

    # -- reading arguments -------------------------------------------------------

    def value(self, vid: int):
        return self.program.graph.values[vid]

    def is_tensor(self, vid: int) -> bool:
        return isinstance(self.value(vid), TensorValue)

    def tensor(self, vid: int) -> TSlot:
        slot = self.program.tensor_slot(vid)
        self.node.deps.add(vid)
        self.node.reads.append(slot)
        return slot

    def tensors(self, vid: int) -> list[TSlot]:
        v = self.value(vid)
        if not isinstance(v, ValueList):
            raise InvalidProgram(f"{self.op.name}: value {vid} is not a list of tensors")
        return [self.tensor(i) for i in v.items]

    def int(self, vid: int) -> Callable[[], int]:
        """A getter for an int argument (a literal or a SymInt)."""
        v = self.value(vid)
        if isinstance(v, SymInt):
            slot = self.program.sym_slot(vid)
            self.node.deps.add(vid)
            return lambda: slot.value
        if isinstance(v, bool) or not isinstance(v, int):
            if isinstance(v, float) and v.is_integer():
                n = int(v)
                return lambda: n
            raise InvalidProgram(f"{self.op.name}: value {vid} is {v!r}, expected an int")
        return lambda: v

    def opt_int(self, vid: int, default=None) -> Callable[[], int | None]:
        return (lambda: default) if self.value(vid) is None else self.int(vid)

    def ints(self, vid: int) -> Callable[[], list[int]]:
        """A getter for a list of ints whose items may be SymInts (a dynamic shape)."""
        v = self.value(vid)
        if isinstance(v, IntList):
            items = list(v.items)
            return lambda: items
        if isinstance(v, ValueList):
            getters = [self.int(i) for i in v.items]
            return lambda: [g() for g in getters]
        if v is None:
            return list
        if isinstance(v, int) and not isinstance(v, bool):
            return lambda: [v]
        raise InvalidProgram(f"{self.op.name}: value {vid} is {type(v).__name__}, expected a list of ints")

    def static_ints(self, vid: int) -> list[int]:
        v = self.value(vid)
        if isinstance(v, (IntList, ValueList)) and all(
            not isinstance(self.value(i), SymInt) for i in (v.items if isinstance(v, ValueList) else ())
        ):
            return self.ints(vid)()
        if v is None:
            return []
        if isinstance(v, int) and not isinstance(v, bool):
            return [v]
        raise DelegateInvalidCompatibility(f"{self.op.name}: argument {vid} must be a list of constant ints")

    def scalar(self, vid: int, default=None):
        """A constant scalar argument (int, float or bool) as a Python number."""
        v = self.value(vid)
        if v is None:
            return default
        if isinstance(v, (bool, int, float)):
            return v
        if isinstance(v, (DoubleList, BoolList, IntList)) and len(v.items) == 1:
            return v.items[0]
        raise DelegateInvalidCompatibility(f"{self.op.name}: argument {vid} must be a constant scalar")

    def outputs(self, vid: int) -> list[int]:
        """The value ids an operator returning several tensors writes (its last argument is their list)."""
        v = self.value(vid)
        if isinstance(v, ValueList):
            return list(v.items)
        return [vid]

    # -- declaring results -------------------------------------------------------

    def out(self, vid: int, shape: Callable[[], tuple], dtype: DType | None = None) -> TSlot:
        tv = self.program.graph.tensor(vid)
        dtype = tv.dtype if dtype is None else dtype
        self.program.check_dtype(dtype, vid)
        cap = numel(tv.dims)
        slot = TSlot(vid, dtype, tv.dims, cap, Storage(4 * cap, "plan"))
        self.program.define(vid, slot)
        self.node.outputs.append((slot, shape))
        return slot

    def alias(self, vid: int, source: TSlot, shape: Callable[[], tuple]) -> TSlot:
        """An output that is ``source``'s memory under another shape (a view of contiguous data)."""
        tv = self.program.graph.tensor(vid)
        if ELEM[tv.dtype] != source.elem:
            raise InvalidProgram(f"{self.op.name}: a view cannot change the element type")
        slot = TSlot(vid, tv.dtype, tv.dims, source.capacity, source.storage)
        self.program.define(vid, slot)
        self.node.outputs.append((slot, shape))
        return slot

    def sym_out(self, vid: int, value: Callable[[], int]) -> SSlot:
        slot = SSlot(vid)
        self.program.define(vid, slot)
        self.node.outputs.append((slot, value))
        return slot

    def scratch(self, elements: int, elem: str = "f32") -> TSlot:
        """Working memory for this node's dispatches alone, of ``elements`` 32-bit words."""
        dtype = {"f32": DType.FLOAT32, "i32": DType.INT32, "u32": DType.BOOL}[elem]
        slot = TSlot(-1, dtype, (elements,), elements, Storage(4 * elements, "plan"))
        self.node.scratch.append(slot)
        self.program.scratch.append(slot)
        return slot

    def dispatch(
        self,
        family: str,
        subs: Mapping[str, str],
        bindings: list,
        params: Callable[[], list],
        grid: Callable[[], tuple],
    ) -> Dispatch:
        d = Dispatch(render(family, **subs), list(bindings), params, grid)
        self.node.dispatches.append(d)
        return d


Builder = Callable[[NodeBuilder, Op], None]


class GpuProgram:
    def __init__(
        self, gpu: Gpu, graph: Graph, constant: Callable[[int], memoryview], builders: Mapping[str, Builder]
    ) -> None:
        self.gpu = gpu
        self.graph = graph
        self._constant = constant
        self.slots: dict[int, TSlot | SSlot] = {}
        self.nodes: list[Node] = []
        self.hooks: dict[int, list[Node]] = defaultdict(list)
        self._const_storage: dict[int, Storage] = {}
        self.scratch: list[TSlot] = []
        self._stale = False
        self.dispatch_count = 0  # dispatches recorded by the last execute

        unsupported = sorted({op.name for op in graph.chain if op.name not in builders})
        if unsupported:
            raise DelegateInvalidCompatibility(
                f"unsupported op: {unsupported[0]}"
                + (f" (and {', '.join(unsupported[1:])})" if len(unsupported) > 1 else "")
            )
        for vid, value in enumerate(graph.values):
            if isinstance(value, TensorValue):
                self.check_dtype(value.dtype, vid)
                nbytes = 4 * numel(value.dims)
                if nbytes > gpu.max_binding:
                    raise DelegateInvalidCompatibility(
                        f"tensor {vid} {list(value.dims)} needs {nbytes} bytes; this device binds at most "
                        f"{gpu.max_binding} bytes per tensor"
                    )

        self.inputs: list[TSlot | SSlot] = []
        for vid in graph.inputs:
            v = graph.values[vid]
            if isinstance(v, SymInt):
                slot = SSlot(vid)
            elif isinstance(v, TensorValue):
                cap = numel(v.dims)
                slot = TSlot(vid, v.dtype, v.dims, cap, Storage(4 * cap, "input"))
            else:
                raise DelegateInvalidCompatibility(f"graph input {vid} is a {type(v).__name__}")
            self.define(vid, slot)
            self.inputs.append(slot)

        # SymInt inputs have no value until the first call; nodes whose shapes follow from one keep
        # their serialized (upper-bound) shapes until then, and the first call resizes everything.
        unknown = {slot.vid for slot in self.inputs if isinstance(slot, SSlot)}
        for index, op in enumerate(graph.chain):
            b = NodeBuilder(self, op, index)
            try:
                builders[op.name](b, op)
                node = b.node
                self.nodes.append(node)
                for vid in node.deps:
                    self.hooks[vid].append(node)
                if node.deps & unknown:
                    unknown.update(slot.vid for slot, _ in node.outputs)
                    self._stale = True
                else:
                    self._refresh(node, initial=True)
            except (ArithmeticError, AttributeError, IndexError, KeyError, TypeError, ValueError) as exc:
                # A graph whose arguments do not fit its operators' schemas (a damaged or foreign blob).
                raise InvalidProgram(
                    f"operator {index} ({op.name}): malformed arguments ({type(exc).__name__}: {exc})"
                ) from None

        self.outputs = []
        for vid in graph.outputs:
            slot = self.slots.get(vid)
            if slot is None:
                slot = self.tensor_slot(vid) if isinstance(graph.values[vid], TensorValue) else None
            if slot is None:
                raise InvalidProgram(f"graph output {vid} is never computed")
            self.outputs.append(slot)

        self._plan_memory()
        self._finish()

    # -- slots -------------------------------------------------------------------

    def check_dtype(self, dtype: DType, vid) -> None:
        if dtype not in ELEM:
            raise DelegateInvalidCompatibility(
                f"unsupported dtype: {dtype.name}" + (f" (value {vid})" if vid else "")
            )

    def define(self, vid: int, slot) -> None:
        if vid in self.slots:
            raise InvalidProgram(f"value {vid} is written twice")
        self.slots[vid] = slot

    def tensor_slot(self, vid: int) -> TSlot:
        slot = self.slots.get(vid)
        if slot is not None:
            if not isinstance(slot, TSlot):
                raise InvalidProgram(f"value {vid} is not a tensor")
            return slot
        tv = self.graph.tensor(vid)
        if not tv.is_constant:
            raise InvalidProgram(f"value {vid} is read before any operator writes it")
        storage = self._const_storage.get(tv.constant_id)
        cap = numel(tv.dims)
        if storage is None:
            storage = self._upload_constant(tv, vid)
            self._const_storage[tv.constant_id] = storage
        if storage.nbytes < 4 * cap:
            raise InvalidProgram(f"constant {tv.constant_id} is smaller than tensor {vid}")
        slot = TSlot(vid, tv.dtype, tv.dims, cap, storage)
        self.slots[vid] = slot
        return slot

    def sym_slot(self, vid: int) -> SSlot:
        slot = self.slots.get(vid)
        if not isinstance(slot, SSlot):
            raise InvalidProgram(f"SymInt {vid} is read before any operator computes it")
        return slot

    def _upload_constant(self, tv: TensorValue, vid: int) -> Storage:
        data = self._constant(tv.constant_id)
        n = numel(tv.dims)
        elem = ELEM[tv.dtype]
        width = {
            DType.FLOAT32: 4,
            DType.INT32: 4,
            DType.BOOL: 1,
            DType.UINT8: 1,
            DType.INT8: 1,
            DType.FLOAT64: 8,
            DType.INT64: 8,
        }[tv.dtype]
        if len(data) < n * width:
            raise InvalidProgram(
                f"constant {tv.constant_id} has {len(data)} bytes; tensor {vid} "
                f"{list(tv.dims)} of {tv.dtype.name} needs {n * width}"
            )
        raw = np.frombuffer(data, dtype={1: np.uint8, 4: np.uint32, 8: np.uint64}[width], count=n)
        if tv.dtype == DType.INT8:
            host = raw.view(np.int8).astype(np.int32)
        elif width == 1:
            host = raw.astype(np.uint32)
        elif tv.dtype == DType.FLOAT64:
            host = raw.view(np.float64).astype(np.float32)
        elif tv.dtype == DType.INT64:
            host = raw.view(np.int64).astype(np.int32)
        else:
            host = raw
        storage = Storage(4 * n, "const")
        storage.buffer = self.gpu.buffer(4 * n, self.gpu.STORAGE, f"const{tv.constant_id}")
        if n:
            self.gpu.queue.write_buffer(storage.buffer, 0, np.ascontiguousarray(host))
        del elem
        return storage

    # -- resizing ------------------------------------------------------------------

    def _refresh(self, node: Node, initial: bool = False) -> list[int]:
        """Runs a node's resize hook; returns the values whose shape or value changed."""
        changed = []
        for slot, fn in node.outputs:
            if isinstance(slot, SSlot):
                value = int(fn())
                if value != slot.value or initial:
                    slot.value = value
                    changed.append(slot.vid)
                continue
            shape = tuple(int(s) for s in fn())
            if any(s < 0 for s in shape):
                raise InvalidArgument(
                    f"{node.name}: computed a negative size {list(shape)} for value {slot.vid}"
                )
            if numel(shape) > slot.capacity:
                raise InvalidArgument(
                    f"{node.name}: value {slot.vid} would be {list(shape)}, past its upper bound of "
                    f"{slot.capacity} elements"
                )
            if initial and len(shape) != len(slot.shape) and slot.shape:
                raise InvalidProgram(
                    f"{node.name}: value {slot.vid} is serialized with rank {len(slot.shape)} but computes "
                    f"to {list(shape)}"
                )
            if shape != slot.shape or initial:
                slot.shape = shape
                changed.append(slot.vid)
        for d in node.dispatches:
            words = d.params()
            if len(words) > PARAM_WORDS:
                raise InvalidProgram(f"{node.name}: {len(words)} parameter words")
            d.words = [word(w) for w in words]
            if d.index >= 0:
                base = d.index * self._param_stride
                self._params[base : base + len(words)] = d.words
            d.current = tuple(d.grid())
        return changed

    def _propagate(self, dirty: set[int]) -> None:
        pending: set[int] = set()
        for vid in dirty:
            pending.update(id(n) for n in self.hooks.get(vid, ()))
        if not pending:
            return
        try:
            for node in self.nodes:
                if id(node) in pending:
                    for vid in self._refresh(node):
                        pending.update(id(n) for n in self.hooks.get(vid, ()))
        except BaseException:
            self._stale = True
            raise
        self.gpu.queue.write_buffer(self._param_buffer, 0, self._params)

    def _refresh_all(self) -> None:
        for node in self.nodes:
            self._refresh(node)
        self.gpu.queue.write_buffer(self._param_buffer, 0, self._params)
        self._stale = False

    # -- memory --------------------------------------------------------------------

    def _plan_memory(self) -> None:
        end = len(self.nodes)
        for node in self.nodes:
            for slot, _ in node.outputs:
                if isinstance(slot, TSlot) and slot.storage.kind == "plan":
                    s = slot.storage
                    if s.first < 0:
                        s.first = node.index
                    s.last = max(s.last, node.index)
            for slot in node.reads:
                s = slot.storage
                if s.kind == "plan":
                    s.last = max(s.last, node.index)
            for slot in node.scratch:
                slot.storage.first = slot.storage.last = node.index
        for slot in self.outputs:
            if isinstance(slot, TSlot) and slot.storage.kind == "plan":
                slot.storage.last = end
        by_first: dict[int, list[Storage]] = defaultdict(list)
        by_last: dict[int, list[Storage]] = defaultdict(list)
        seen = set()
        for node in self.nodes:
            for slot, _ in [*node.outputs, *((t, None) for t in node.scratch)]:
                if isinstance(slot, TSlot) and slot.storage.kind == "plan" and id(slot.storage) not in seen:
                    seen.add(id(slot.storage))
                    by_first[slot.storage.first].append(slot.storage)
                    by_last[slot.storage.last].append(slot.storage)
        # Physical buffers: [nbytes]; storages with disjoint lifetimes share one, best fit first.
        self._phys: list[list[int]] = []
        free: list[int] = []
        for n in range(end + 1):
            for s in sorted(by_first.get(n, ()), key=lambda s: -s.nbytes):
                fits = [p for p in free if self._phys[p][0] >= s.nbytes]
                if fits:
                    p = min(fits, key=lambda p: self._phys[p][0])
                elif free:
                    p = max(free, key=lambda p: self._phys[p][0])
                    self._phys[p][0] = s.nbytes
                else:
                    p = len(self._phys)
                    self._phys.append([s.nbytes])
                    free.append(p)
                free.remove(p)
                s.phys = p
            for s in by_last.get(n, ()):
                free.append(s.phys)
        buffers = [self.gpu.buffer(p[0], self.gpu.STORAGE, f"t{i}") for i, p in enumerate(self._phys)]
        self.planned_bytes = sum(max(16, p[0]) for p in self._phys)
        for slot in [*self.slots.values(), *self.scratch]:
            if isinstance(slot, TSlot) and slot.storage.buffer is None:
                s = slot.storage
                if s.kind == "plan":
                    s.buffer = buffers[s.phys]
                else:
                    s.buffer = self.gpu.buffer(s.nbytes, self.gpu.STORAGE, f"in{slot.vid}")

    def _finish(self) -> None:
        gpu = self.gpu
        dispatches = [d for node in self.nodes for d in node.dispatches]
        self._param_stride = max(PARAM_WORDS, gpu.param_align // 4)
        self._params = np.zeros(max(1, len(dispatches)) * self._param_stride, dtype=np.uint32)
        self._param_buffer = gpu.buffer(self._params.nbytes, gpu.UNIFORM, "params")
        for i, d in enumerate(dispatches):
            d.index = i
            base = i * self._param_stride
            self._params[base : base + len(d.words)] = d.words
            d.pipeline, layout, count = gpu.pipeline(d.source)
            entries = [
                {
                    "binding": 0,
                    "resource": {"buffer": self._param_buffer, "offset": base * 4, "size": PARAM_WORDS * 4},
                }
            ]
            for j, b in enumerate(d.bindings):
                storage = b.storage if isinstance(b, TSlot) else b
                entries.append(
                    {
                        "binding": j + 1,
                        "resource": {"buffer": storage.buffer, "offset": 0, "size": storage.buffer.size},
                    }
                )
            if len(entries) != count:
                raise InvalidProgram(f"a kernel declares {count} bindings; {len(entries)} were given")
            d.bind_group = gpu.device.create_bind_group(layout=layout, entries=entries)
        self.dispatches = dispatches
        gpu.queue.write_buffer(self._param_buffer, 0, self._params)
        # Outputs come back through one mappable buffer, each at an 8-byte aligned offset.
        self._readback_at = []
        total = 0
        for slot in self.outputs:
            self._readback_at.append(total)
            if isinstance(slot, TSlot):
                total += (4 * slot.capacity + 7) & ~7
        self._readback = gpu.buffer(total, gpu.READBACK, "readback")
        self._staging: dict[tuple[int, torch.dtype], tuple] = {}
        for slot in self.inputs:
            if isinstance(slot, TSlot) and slot.elem != "f32":
                # Integer and bool inputs usually arrive as int64 / bool: compile their widening now.
                gpu.pipeline(render("convert", T_OUT=slot.elem))

    # -- execution -----------------------------------------------------------------

    def written_arguments(self, count: int) -> range:
        """The arguments execute writes: the outputs, which follow the inputs (inputs are only read)."""
        n_in, n_out = len(self.inputs), len(self.outputs)
        if count != n_in + n_out:
            raise InvalidProgram(
                f"VulkanBackend: the delegate takes {n_in} inputs and {n_out} outputs; the call passes {count} values"
            )
        return range(n_in, n_in + n_out)

    def execute(self, args: list) -> None:
        n_in = len(self.inputs)
        if len(args) != n_in + len(self.outputs):
            raise InvalidArgument(
                f"VulkanBackend: the delegate takes {n_in} inputs and {len(self.outputs)} outputs, "
                f"got {len(args)} values"
            )
        dirty: set[int] = set()
        for slot, x in zip(self.inputs, args, strict=False):
            if isinstance(slot, SSlot):
                v = int(x)
                if v != slot.value:
                    slot.value = v
                    dirty.add(slot.vid)
                continue
            if not isinstance(x, torch.Tensor):
                raise InvalidArgument(
                    f"VulkanBackend: input {slot.vid} must be a tensor, got {type(x).__name__}"
                )
            shape = tuple(x.shape)
            if shape != slot.shape:
                if len(shape) != len(slot.shape) and not (slot.shape == () or shape == ()):
                    raise InvalidArgument(
                        f"VulkanBackend: input {slot.vid} has shape {list(shape)}; expected rank "
                        f"{len(slot.shape)}"
                    )
                if numel(shape) > slot.capacity:
                    raise InvalidArgument(
                        f"VulkanBackend: input {slot.vid} has shape {list(shape)}, past its upper "
                        f"bound of {slot.capacity} elements"
                    )
                slot.shape = shape
                dirty.add(slot.vid)
        if self._stale:
            self._refresh_all()
        elif dirty:
            self._propagate(dirty)

        gpu = self.gpu
        pre = []
        for slot, x in zip(self.inputs, args, strict=False):
            if isinstance(slot, TSlot) and slot.numel:
                conv = self._upload(slot, x)
                if conv is not None:
                    pre.append(conv)

        encoder = gpu.device.create_command_encoder()
        cpass = encoder.begin_compute_pass()
        count = 0
        for d in pre:
            cpass.set_pipeline(d.pipeline)
            cpass.set_bind_group(0, d.bind_group)
            cpass.dispatch_workgroups(*d.current)
            count += 1
        for d in self.dispatches:
            x, y, z = d.current
            if x:
                cpass.set_pipeline(d.pipeline)
                cpass.set_bind_group(0, d.bind_group)
                cpass.dispatch_workgroups(x, y, z)
                count += 1
        cpass.end()
        reads = []
        for slot, at in zip(self.outputs, self._readback_at, strict=True):
            if isinstance(slot, TSlot):
                nbytes = 4 * slot.numel
                if nbytes:
                    encoder.copy_buffer_to_buffer(slot.storage.buffer, 0, self._readback, at, nbytes)
                reads.append((slot, at))
            else:
                reads.append((slot, None))
        gpu.queue.submit([encoder.finish()])
        self.dispatch_count = count

        rb = self._readback
        rb.map_sync(gpu.wgpu.MapMode.READ)
        try:
            mapped = rb.read_mapped(copy=False)
            for k, (slot, at) in enumerate(reads):
                out = args[n_in + k]
                if isinstance(slot, SSlot):
                    args[n_in + k] = slot.value
                    continue
                if not isinstance(out, torch.Tensor):
                    raise InvalidArgument(
                        f"VulkanBackend: output {k} must be a tensor, got {type(out).__name__}"
                    )
                if tuple(out.shape) != slot.shape:
                    out.resize_(slot.shape)
                if not slot.numel:
                    continue
                src = np.frombuffer(mapped, dtype=_READ_AS[slot.elem], count=slot.numel, offset=at)
                if out.device.type == "cpu" and out.dtype != torch.bfloat16 and out.dtype != torch.float16:
                    np.copyto(out.detach().numpy(), src.reshape(slot.shape), casting="unsafe")
                else:
                    out.copy_(torch.from_numpy(src.copy()).view(slot.shape))
        finally:
            rb.unmap()

    def _upload(self, slot: TSlot, x: torch.Tensor):
        """Writes input ``x`` into its buffer; returns the dispatch that widens or narrows it, if one must."""
        x = x.detach()
        if x.device.type != "cpu":
            x = x.cpu()
        if not x.is_contiguous():
            x = x.contiguous()
        host = _HOST_ELEM[slot.elem]
        if x.dtype == host:
            self.gpu.queue.write_buffer(slot.storage.buffer, 0, x.numpy(), 0, 4 * slot.numel)
            return None
        if slot.elem != "f32" and x.dtype in _CONVERT_MODE:
            return self._convert_on_gpu(slot, x)
        # A type with no WGSL counterpart (float64, float16, ...): converted on the host.
        y = x.to(host)
        self.gpu.queue.write_buffer(slot.storage.buffer, 0, y.numpy(), 0, 4 * slot.numel)
        return None

    def _convert_on_gpu(self, slot: TSlot, x: torch.Tensor):
        key = (slot.vid, x.dtype)
        entry = self._staging.get(key)
        width = x.element_size()
        if entry is None:
            gpu = self.gpu
            staging = Storage(width * slot.capacity, "input")
            staging.buffer = gpu.buffer(width * slot.capacity + 4, gpu.STORAGE, f"stage{slot.vid}")
            mode = _CONVERT_MODE[x.dtype]
            params = np.zeros(PARAM_WORDS, dtype=np.uint32)
            pbuf = gpu.buffer(PARAM_WORDS * 4, gpu.UNIFORM, "stage-params")
            pipeline, layout, _ = gpu.pipeline(render("convert", T_OUT=slot.elem))
            bind = gpu.device.create_bind_group(
                layout=layout,
                entries=[
                    {"binding": 0, "resource": {"buffer": pbuf, "offset": 0, "size": PARAM_WORDS * 4}},
                    {
                        "binding": 1,
                        "resource": {"buffer": staging.buffer, "offset": 0, "size": staging.buffer.size},
                    },
                    {
                        "binding": 2,
                        "resource": {
                            "buffer": slot.storage.buffer,
                            "offset": 0,
                            "size": slot.storage.buffer.size,
                        },
                    },
                ],
            )
            d = Dispatch("", [], list, lambda: (0, 0, 0), pipeline=pipeline, bind_group=bind)
            entry = self._staging[key] = (staging, params, pbuf, d, mode)
        staging, params, pbuf, d, mode = entry
        n = slot.numel
        if params[0] != n or params[1] != mode:
            params[0], params[1] = n, mode
            self.gpu.queue.write_buffer(pbuf, 0, params)
        raw = (
            x.view(-1).view(torch.uint8).numpy()
            if x.dtype != torch.bool
            else x.view(-1).numpy().view(np.uint8)
        )
        nbytes = n * width
        head = nbytes & ~3
        if head:
            self.gpu.queue.write_buffer(staging.buffer, 0, raw, 0, head)
        if nbytes > head:
            tail = np.zeros(4, dtype=np.uint8)
            tail[: nbytes - head] = raw[head:nbytes]
            self.gpu.queue.write_buffer(staging.buffer, head, tail)
        d.current = groups(n, 64, self.gpu.max_groups)
        return d

    # -- introspection -------------------------------------------------------------

    @property
    def op_names(self) -> list[str]:
        return [n.name for n in self.nodes]

    def release(self) -> None:
        """Frees the GPU memory now rather than when the garbage collector gets to it."""
        buffers = {
            id(b): b
            for b in (
                *(s.storage.buffer for s in [*self.slots.values(), *self.scratch] if isinstance(s, TSlot)),
                *(entry[0].buffer for entry in self._staging.values()),
                *(entry[2] for entry in self._staging.values()),
                self._param_buffer,
                self._readback,
            )
            if b is not None
        }
        for b in buffers.values():
            b.destroy()
        self.slots.clear()
        self.scratch.clear()
        self.nodes.clear()
        self.dispatches = []
        self._staging.clear()
