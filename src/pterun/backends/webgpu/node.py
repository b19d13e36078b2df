"""A compiled operator: its outputs' shape functions, its dispatches, and the resize hook that runs them.

A dispatch's parameters are 32-bit words (floats bit-cast) written into its
block of the program's uniform buffer, so resizing rewrites words and grids
and never compiles or allocates anything.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pterun.backends.webgpu.device import PARAM_WORDS
from pterun.backends.webgpu.slots import SSlot
from pterun.errors import InvalidArgument, InvalidProgram

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


@dataclass
class Dispatch:
    source: str
    bindings: list  # TSlots or Storages, bound at 1, 2, ... in order
    params: Callable[[], list]
    grid: Callable[[], tuple[int, int, int]]
    words: list = field(default_factory=list)
    block: Any = None  # this dispatch's words in the program's parameter array, once memory is bound
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

    def refresh(self, initial: bool = False) -> list[int]:
        """Runs the resize hook; returns the values whose shape or value changed."""
        changed = []
        for slot, fn in self.outputs:
            if isinstance(slot, SSlot):
                value = int(fn())
                if value != slot.value or initial:
                    slot.value = value
                    changed.append(slot.vid)
                continue
            shape = tuple(int(s) for s in fn())
            self._check_shape(slot, shape, initial)
            if shape != slot.shape or initial:
                slot.shape = shape
                changed.append(slot.vid)
        for d in self.dispatches:
            words = d.params()
            if len(words) > PARAM_WORDS:
                raise InvalidProgram(f"{self.name}: {len(words)} parameter words")
            d.words = [word(w) for w in words]
            if d.block is not None:
                d.block[: len(words)] = d.words
            d.current = tuple(d.grid())
        return changed

    def _check_shape(self, slot, shape: tuple, initial: bool) -> None:
        if any(s < 0 for s in shape):
            raise InvalidArgument(f"{self.name}: computed a negative size {list(shape)} for value {slot.vid}")
        if math.prod(shape) > slot.capacity:
            raise InvalidArgument(
                f"{self.name}: value {slot.vid} would be {list(shape)}, past its upper bound of "
                f"{slot.capacity} elements"
            )
        if initial and len(shape) != len(slot.shape) and slot.shape:
            raise InvalidProgram(
                f"{self.name}: value {slot.vid} is serialized with rank {len(slot.shape)} but computes "
                f"to {list(shape)}"
            )
