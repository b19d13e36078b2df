"""Memory planning: which intermediate tensors share a GPU buffer.

Each planned storage (an operator's output, with its views, or a node's
scratch memory) lives from the node that first writes it to the last node
that reads it (graph outputs: past the last node). Storages whose lifetimes
do not overlap share one buffer, assigned once at load and never
reallocated. A storage that starts at a node is placed before the storages
that end there are freed, so a dispatch never binds one buffer both as an
input and as its output (WebGPU forbids it).

:func:`plan` is pure: lifetimes in, buffer assignments out; nothing here
touches a GPU.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from pterun.backends.webgpu.node import Node
from pterun.backends.webgpu.slots import PLAN, Storage, TSlot


@dataclass(frozen=True)
class Lifetime:
    first: int  # the node that writes it first
    last: int  # the last node that reads it
    nbytes: int


@dataclass(frozen=True)
class Plan:
    buffer_of: list[int]  # for each lifetime, the buffer it lives in
    sizes: list[int]  # bytes of each buffer


def plan(lifetimes: Sequence[Lifetime]) -> Plan:
    """Shares buffers between lifetimes that do not overlap: at each step, the largest new storage first,
    each into the smallest free buffer it fits, else the largest free buffer (grown), else a new one."""
    starting: dict[int, list[int]] = defaultdict(list)
    ending: dict[int, list[int]] = defaultdict(list)
    for k, life in enumerate(lifetimes):
        starting[life.first].append(k)
        ending[life.last].append(k)
    buffer_of = [-1] * len(lifetimes)
    sizes: list[int] = []
    free: list[int] = []
    for step in sorted(starting.keys() | ending.keys()):
        for k in sorted(starting.get(step, ()), key=lambda k: -lifetimes[k].nbytes):
            nbytes = lifetimes[k].nbytes
            fits = [p for p in free if sizes[p] >= nbytes]
            if fits:
                p = min(fits, key=sizes.__getitem__)
            elif free:
                p = max(free, key=sizes.__getitem__)
                sizes[p] = nbytes
            else:
                p = len(sizes)
                sizes.append(nbytes)
                free.append(p)
            free.remove(p)
            buffer_of[k] = p
        for k in ending.get(step, ()):
            free.append(buffer_of[k])
    return Plan(buffer_of, sizes)


def lifetimes(nodes: Sequence[Node], outputs: Sequence) -> dict[Storage, Lifetime]:
    """Each planned storage's lifetime, in the order the nodes first write them."""
    span: dict[Storage, list[int]] = {}
    for node in nodes:
        i = node.index
        for slot, _ in node.outputs:
            if isinstance(slot, TSlot) and slot.storage.kind == PLAN:
                first_last = span.setdefault(slot.storage, [i, i])
                first_last[1] = max(first_last[1], i)
        for slot in node.scratch:
            span[slot.storage] = [i, i]
        for slot in node.reads:
            if slot.storage.kind == PLAN:
                span[slot.storage][1] = max(span[slot.storage][1], i)
    end = len(nodes)
    for slot in outputs:
        if isinstance(slot, TSlot) and slot.storage.kind == PLAN:
            span[slot.storage][1] = end
    return {s: Lifetime(first, last, s.nbytes) for s, (first, last) in span.items()}
