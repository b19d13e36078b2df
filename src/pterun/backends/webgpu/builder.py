"""What an operator builder (``ops/``) uses to declare one node: the op-author API.

A builder reads its arguments, declares its outputs with functions that
compute their shapes, and its dispatches with functions that compute their
parameter blocks and grids. Everything it reads through :class:`NodeBuilder`
becomes a dependency: the node's resize hook is registered on each of those
values, so a new shape for any of them (not just the first input) recomputes
the node's outputs and parameters.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

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
from pterun.backends.webgpu.node import Dispatch, Node
from pterun.backends.webgpu.slots import ELEM, INPUT, PLAN, HostValue, Slots, SSlot, Storage, TSlot, new_tensor
from pterun.backends.webgpu.wgsl import render
from pterun.errors import DelegateInvalidCompatibility, InvalidProgram


def groups(n: int, wg: int, limit: int = 65535) -> tuple[int, int, int]:
    """A grid covering ``n`` invocations of ``wg``-wide workgroups, spilling into y past the limit."""
    if n <= 0:
        return (0, 0, 0)
    g = -(-n // wg)
    if g <= limit:
        return (g, 1, 1)
    return (limit, -(-g // limit), 1)


class NodeBuilder:
    def __init__(self, graph: Graph, slots: Slots, op: Op, index: int) -> None:
        self.graph = graph
        self._slots = slots
        self.op = op
        self.args = op.args
        self.node = Node(index, op.name, set(), [], [])

    # -- reading arguments -------------------------------------------------------

    def value(self, vid: int):
        return self.graph.values[vid]

    def is_tensor(self, vid: int) -> bool:
        return isinstance(self.value(vid), TensorValue)

    def rank(self, vid: int) -> int:
        """The serialized rank of tensor ``vid`` (fixed, whatever its shape at run time)."""
        return len(self.graph.tensor(vid).dims)

    def tensor(self, vid: int) -> TSlot:
        slot = self._slots.tensor(vid)
        self.node.deps.add(vid)
        self.node.reads.append(slot)
        return slot

    def packed_constant(self, vid: int) -> TSlot:
        """A constant weight as its bytes, four to a word (see Slots.packed_constant)."""
        return self._slots.packed_constant(vid)

    def host_value(self, vid: int) -> Callable[[], object]:
        """A getter for the caller's tensor bound to graph input ``vid`` at this call (None before the
        first): for operators that read an input's values on the host. Every call then resizes the node."""
        slot = self.tensor(vid)
        if slot.storage.kind != INPUT:
            raise DelegateInvalidCompatibility(
                f"{self.op.name}: reads the values of tensor {vid} on the host; only a graph input's can be"
            )
        holder = self._slots.host_values.setdefault(vid, HostValue())
        return lambda: holder.tensor

    def tensors(self, vid: int) -> list[TSlot]:
        v = self.value(vid)
        if not isinstance(v, ValueList):
            raise InvalidProgram(f"{self.op.name}: value {vid} is not a list of tensors")
        return [self.tensor(i) for i in v.items]

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

    def out(self, vid: int, shape: Callable[[], tuple]) -> TSlot:
        slot = new_tensor(vid, self.graph.tensor(vid), PLAN)
        self._slots.define(vid, slot)
        self.node.outputs.append((slot, shape))
        return slot

    def alias(self, vid: int, source: TSlot, shape: Callable[[], tuple]) -> TSlot:
        """An output that is ``source``'s memory under another shape (a view of contiguous data)."""
        tv = self.graph.tensor(vid)
        if ELEM[tv.dtype] != source.elem:
            raise InvalidProgram(f"{self.op.name}: a view cannot change the element type")
        slot = TSlot(vid, tv.dtype, tv.dims, source.capacity, source.storage)
        self._slots.define(vid, slot)
        self.node.outputs.append((slot, shape))
        return slot

    def sym_out(self, vid: int, value: Callable[[], int]) -> SSlot:
        slot = SSlot(vid)
        self._slots.define(vid, slot)
        self.node.outputs.append((slot, value))
        return slot

    def scratch(self, elements: int, elem: str = "f32") -> TSlot:
        """Working memory for this node's dispatches alone, of ``elements`` 32-bit words."""
        dtype = {"f32": DType.FLOAT32, "i32": DType.INT32, "u32": DType.BOOL}[elem]
        slot = TSlot(-1, dtype, (elements,), elements, Storage(4 * elements, PLAN))
        self.node.scratch.append(slot)
        self._slots.scratch.append(slot)
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

    def finish(self) -> Node:
        """The node, with its half-precision results rounded to half after its dispatches (see slots.ELEM).
        Views share their source's values, rounded already."""
        for slot, _ in self.node.outputs:
            view = any(slot.storage is r.storage for r in self.node.reads) if isinstance(slot, TSlot) else True
            if not view and slot.dtype == DType.FLOAT16:
                self._round_half(slot)
        return self.node

    def _round_half(self, slot: TSlot) -> None:
        self.dispatch("round_half", {}, [slot], lambda: [slot.numel], lambda: groups(slot.numel, 64))

    # Last in the class: below it, ``int`` in an annotation would name this method.
    def int(self, vid: int) -> Callable[[], int]:
        """A getter for an int argument (a literal or a SymInt)."""
        v = self.value(vid)
        if isinstance(v, SymInt):
            slot = self._slots.sym(vid)
            self.node.deps.add(vid)
            return lambda: slot.value
        if isinstance(v, bool) or not isinstance(v, int):
            if isinstance(v, float) and v.is_integer():
                n = int(v)
                return lambda: n
            raise InvalidProgram(f"{self.op.name}: value {vid} is {v!r}, expected an int")
        return lambda: v


Builder = Callable[[NodeBuilder, Op], None]
