"""Buffers updated in place: an out-of-place update of a mutable buffer that the method copies back into it.

torch.export writes a static KV cache's update as ``index_put.out(cache, ..., out=updated)``, reads
``updated`` where the model reads the cache, and ends the method with ``copy_(cache, updated)``: every call
copies each cache whole, twice, to change one position (on a GPU, 48 copies of a 100M decoder's caches per
token). Where nothing between the update and the copy back reads or writes the cache, and nothing after the
copy back reads ``updated``, the update is made in the cache itself, ``updated`` becomes the cache's tensor
(its readers see the same values, in the same layout) and the copy back goes. The values every step computes
are the same.

The method's own code only: the pure function for ``torch.compile`` returns its buffers' new values, and a
profiled method runs every instruction as the file has it.
"""

from __future__ import annotations

from collections.abc import Sequence

from pterun.executor.load.effects import MethodEffects
from pterun.executor.load.steps import KernelStep, Step
from pterun.format import JumpFalseCall, Plan, TensorSpec
from pterun.kernels import in_place

UPDATES = {"aten::index_put.out": in_place.INDEX_PUT}
_COPY_BACK = "aten::copy_"


def update_in_place(plan: Plan, steps: Sequence[Step], effects: MethodEffects) -> tuple[list[Step], set[int]]:
    """The steps with each such update made in its buffer and its copy back gone, and the values that now hold
    the buffer's tensor (assigned by the update instead of written by it)."""
    new: list[Step] = list(steps)
    made: set[int] = set()
    if any(isinstance(s, JumpFalseCall) for s in steps):
        return new, made  # the instruction order is not the order steps run in
    for w, back in enumerate(steps):
        if not (isinstance(back, KernelStep) and back.name == _COPY_BACK and back.binding.mutates == (0,)):
            continue
        buffer, updated = back.args[0], back.args[1]
        writers = effects.writers.get(updated, [])
        if len(writers) != 1 or writers[0] >= w:
            continue
        a = writers[0]
        update = steps[a]
        if not isinstance(update, KernelStep) or (binding := UPDATES.get(update.name)) is None:
            continue
        if update.binding.writes != (4,) or update.args[0] != buffer or update.args[4] != updated:
            continue
        if _safe(plan, effects, a, w, buffer, updated, update.args[1:4]):
            new[a] = KernelStep(update.name.replace(".out", "_"), binding, update.args[:5],
                                replaces=(update.name, _COPY_BACK))
            new[w] = None
            made.add(updated)
    return new, made


def _safe(plan: Plan, effects: MethodEffects, a: int, w: int, buffer: int, updated: int,
          operands: Sequence[int]) -> bool:
    b, u = plan.values[buffer], plan.values[updated]
    if not (isinstance(b, TensorSpec) and isinstance(u, TensorSpec)) or buffer == updated:
        return False
    # Two tensors of their own, of one layout: the update's result is the buffer's tensor as it is.
    layout = (b.scalar_type, tuple(b.sizes), tuple(b.dim_order), b.dynamism)
    if (effects.memory(buffer) != {buffer} or effects.memory(updated) != {updated} or u.is_constant or b.is_constant
            or layout != (u.scalar_type, tuple(u.sizes), tuple(u.dim_order), u.dynamism)):
        return False
    if {buffer, updated} & (set(plan.inputs) | set(plan.outputs)):
        return False
    if effects.memory(*operands) & {buffer, updated}:
        return False  # the update reads what it would now write
    # Between the update and the copy back nothing touches the buffer; after the copy back nothing reads the
    # update's result (which the buffer's next update would change).
    between = range(a + 1, w)
    if any(n in between for n in (*effects.readers.get(buffer, ()), *effects.writers.get(buffer, ()))):
        return False
    return all(n <= w for n in effects.readers.get(updated, ()))
