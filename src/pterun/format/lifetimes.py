"""A method's memory plan over its instructions: which planned tensor is alive where, and when.

ExecuTorch's exporter gives each planned tensor a lifetime and places tensors whose lifetimes overlap at
disjoint bytes of an arena. The lifetime is the span of instructions that name the tensor among their
arguments (every argument is read or written by its instruction; a list stands for its items, a move
for its source and target, a jump for its condition). As the exporter counts them, inputs live from the
start of the method, outputs to its end, and mutable buffers the whole method (they keep their values
between calls): the file marks those it names (``fqn``) or gives an initial value; one it neither names
nor initializes (the KV caches of ExecuTorch's LLM export) looks like any other tensor here. An input's
bytes are reused after its last reader. A view is planned on its base's bytes, so two tensors may share
bytes while both are alive; a buffer here is such a group.

Pure: the plan in, the intervals out. The executor's effects.py says more of each step (which argument
it writes, what a view shares) but needs the method loaded; this needs only the file.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass

from pterun.format.plan import Kind, ListValue, Plan, TensorSpec

_TENSOR_LISTS = (Kind.TENSOR_LIST, Kind.OPTIONAL_TENSOR_LIST)


@dataclass(frozen=True, slots=True)
class PlannedTensor:
    value: int  # index in the method's values
    role: str  # "input", "output", "mutable" (a mutable buffer the file names) or "temporary"
    offset: int
    nbytes: int  # at the upper bound of a dynamic tensor
    first: int | None  # instruction index; None: no instruction names it and it is no input or output
    last: int | None

    @property
    def span(self) -> int:
        return 0 if self.first is None or self.last is None else self.last - self.first + 1


@dataclass(frozen=True)
class ArenaPlan:
    memory_id: int  # as the plan's tensors name it (1 is the first arena)
    size: int
    tensors: tuple[PlannedTensor, ...]  # ordered by offset, then first instruction
    steps: int  # columns of the plan: the method's instructions, at least one

    def live(self) -> Iterator[tuple[int, list[tuple[int, int]]]]:
        """Per instruction, the byte ranges ``[start, end)`` live tensors cover, merged and sorted."""
        starting: dict[int, list[PlannedTensor]] = {}
        for t in self.tensors:
            if t.first is not None and t.nbytes:
                starting.setdefault(t.first, []).append(t)
        alive: list[tuple[int, int, int, int]] = []  # heap of (last, value, offset, end)
        for n in range(self.steps):
            while alive and alive[0][0] < n:
                heapq.heappop(alive)
            for t in starting.get(n, ()):
                assert t.last is not None  # a tensor with a first instruction has a last
                heapq.heappush(alive, (t.last, t.value, t.offset, t.offset + t.nbytes))
            yield n, _merged(sorted((start, end) for _, _, start, end in alive))

    def live_bytes(self) -> list[int]:
        """Per instruction, how many of the arena's bytes some live tensor covers."""
        return [sum(end - start for start, end in ranges) for _, ranges in self.live()]

    @property
    def unshared_bytes(self) -> int:
        """What one buffer per tensor would take: the bytes of every buffer (a view and its base counted once)."""
        total = 0
        seen: dict[tuple[int, int], int] = {}  # (offset, bytes) -> the last instruction it is alive at
        for t in sorted(self.tensors, key=lambda t: (t.offset, t.nbytes, t.first if t.first is not None else -1)):
            key = (t.offset, t.nbytes)
            last = seen.get(key)
            if last is not None and t.first is not None and t.first <= last:
                assert t.last is not None  # a tensor with a first instruction has a last
                seen[key] = max(last, t.last)  # alive together at the same bytes: a view of the same buffer
                continue
            seen[key] = t.last if t.last is not None else -1
            total += t.nbytes
        return total


def _merged(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for start, end in ranges:
        if out and start <= out[-1][1]:
            if end > out[-1][1]:
                out[-1] = (out[-1][0], end)
        else:
            out.append((start, end))
    return out


def _named(plan: Plan) -> dict[int, list[int]]:
    """value -> the instructions that compute with it (``uses``; a list's items through the list)."""
    uses: dict[int, list[int]] = {}
    values = plan.values

    def name(vi: int, n: int) -> None:
        value = values[vi]
        if isinstance(value, ListValue) and value.kind in _TENSOR_LISTS:
            for item in value.items:
                if item >= 0:
                    uses.setdefault(item, []).append(n)
        else:
            uses.setdefault(vi, []).append(n)

    for n, ins in enumerate(plan.instructions):
        for vi in ins.uses:
            name(vi, n)
    return uses


def memory_plan(plan: Plan) -> tuple[ArenaPlan, ...]:
    """Every arena of the method with its planned tensors and their lifetimes (indices checked: ``check_plan``)."""
    uses = _named(plan)
    steps = max(len(plan.instructions), 1)
    inputs, outputs = set(plan.inputs), set(plan.outputs)
    by_arena: dict[int, list[PlannedTensor]] = {m: [] for m in range(1, len(plan.buffer_sizes))}
    for vi, value in enumerate(plan.values):
        if not isinstance(value, TensorSpec) or value.memory_id is None:
            continue
        named = uses.get(vi, ())
        first, last = (min(named), max(named)) if named else (None, None)
        if value.fqn is not None or value.data_buffer_idx > 0:
            role, first, last = "mutable", 0, steps - 1
        else:
            role = "input" if vi in inputs else "output" if vi in outputs else "temporary"
            if vi in inputs:
                first, last = 0, 0 if last is None else last
            if vi in outputs:
                first, last = 0 if first is None else first, steps - 1
        by_arena[value.memory_id].append(PlannedTensor(vi, role, value.memory_offset, value.nbytes, first, last))
    return tuple(
        ArenaPlan(m, plan.buffer_sizes[m],
                  tuple(sorted(tensors, key=lambda t: (t.offset, -1 if t.first is None else t.first, t.value))), steps)
        for m, tensors in by_arena.items()
    )
