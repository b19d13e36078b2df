"""A method's memory and values, made once at load.

Each planned buffer (arena) is allocated from the allocator registered for
the device the plan tags it with, or the device the program was loaded for.
Planned tensors view their arena at their planned offset, so tensors the
plan overlaps overlap here too and in-place updates alias as planned; initial
values of mutable buffers are copied in. Arenas of the state a program's methods
share are the program's (shared.py). Constants view the program's data
(data.py). Scalars and lists are plain Python values. Tensors with no plan
and no data are the caller's: inputs are bound per call, outputs get buffers
(outputs.py).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from pterun.errors import PteError
from pterun.executor.context import LoadContext
from pterun.executor.load.tensors import shaped
from pterun.format import Kind, ListValue, Plan, Scalar, TensorSpec

_ITEM_LISTS = (Kind.INT_LIST, Kind.TENSOR_LIST, Kind.OPTIONAL_TENSOR_LIST)  # lists of other values


@dataclass(frozen=True)
class Values:
    arenas: list  # by memory id (0, the constants' segment, has none)
    objects: list  # every value's object (None: a tensor the caller binds or an output buffer)
    unplanned: list[int]  # tensors with no memory of the method's own: inputs and outputs
    scratch: list  # buffers of unplanned tensors that are neither (a view or a delegate fills them in)


def make_values(context: LoadContext, plan: Plan) -> Values:
    arenas = [None] + [_arena(context, plan, memory_id) for memory_id in range(1, len(plan.buffer_sizes))]
    objects: list[Any] = [None] * len(plan.values)
    unplanned: list[int] = []
    scratch: list = []
    inputs, outputs = set(plan.inputs), set(plan.outputs)
    data = context.data
    devices: dict[tuple[int, int], Any] = {}
    for i, value in enumerate(plan.values):
        if isinstance(value, TensorSpec):
            tag = (value.device_type, value.device_index)
            device = devices.get(tag)
            if device is None:
                device = devices[tag] = context.device_for(*tag)
            if value.memory_id is not None:
                tensor = shaped(arenas[value.memory_id].view(value.memory_offset, value.nbytes), value)
                initial = data.initial_value(value, f"method {plan.name!r} value {i}")
                if initial is not None:
                    tensor.view(-1).copy_(initial.view(-1))
                objects[i] = tensor
            elif value.external or value.data_buffer_idx > 0:
                objects[i] = data.constant(value, f"method {plan.name!r} value {i}", device)
            elif i in inputs or i in outputs:
                unplanned.append(i)
            else:
                # Unplanned and no input or output: something (a view, a delegate) fills it in at run time;
                # give it memory of its own in case a writer needs it.
                buffer = context.registries.allocators.allocate(value.nbytes, device)
                scratch.append(buffer)
                objects[i] = shaped(buffer.view(0, value.nbytes), value)
        elif isinstance(value, Scalar):
            objects[i] = value.value
        elif value.kind in (Kind.DOUBLE_LIST, Kind.BOOL_LIST):
            objects[i] = list(value.items)
    for i, value in enumerate(plan.values):
        if isinstance(value, ListValue) and value.kind in _ITEM_LISTS:
            objects[i] = [None if item == -1 else objects[item] for item in value.items]
    return Values(arenas, objects, unplanned, scratch)


def shared_lock(context: LoadContext, plan: Plan) -> threading.Lock | None:
    """Where the method's planned memory is partly the program's, shared with its other methods (shared.py),
    the lock its calls take; else None."""
    shared = context.shared
    if shared is None or not any(shared.shares(memory_id, context.device_for(*plan.arena_device(memory_id)))
                                 for memory_id in range(1, len(plan.buffer_sizes))):
        return None
    return shared.lock


def _arena(context: LoadContext, plan: Plan, memory_id: int):
    device = context.device_for(*plan.arena_device(memory_id))
    size = plan.buffer_sizes[memory_id]
    if context.shared is not None and context.shared.shares(memory_id, device):
        return context.shared.arena(memory_id, device)
    try:
        return context.registries.allocators.allocate(size, device)
    except PteError as exc:
        raise type(exc)(
            f"method {plan.name!r}: cannot allocate planned buffer {memory_id - 1} "
            f"({size} bytes) on device {device}: {exc.message}"
        ) from None
