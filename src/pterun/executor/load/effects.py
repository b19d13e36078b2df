"""What each step of a method does to its values, worked out once at load.

A step reads some values, writes the memory of others (a kernel's ``out``
arguments and in-place updates, a delegate's outputs) and may bind a value
to a new object: a kernel's result, a moved value. A new object can share
memory with what made it (``et_view`` of a tensor, a view ATen returns, a
``MoveCall`` that hands one value's tensor to another). Kernels say all of
this in their :class:`~pterun.kernels.Binding`; delegates through their
backend's ``written_arguments`` (steps.py describes each step). A list
stands for its items.

Memory is named by the value that owns it (a planned tensor, a constant, a
caller's tensor), and each value may refer to the memory of several: its
own, and whatever a bind could have given it, followed through every step
whatever the order the steps run in (so jumps need no special case).

What relies on it: :func:`check_writes`, which refuses a program in which
any step writes a constant (the file's bytes, or a data file's); fold.py's
rewrites of copies into views; functional.py, for what the method writes;
and graphs.py, for whether any step syncs with the host.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from pterun.core.dtype import storage_dtype
from pterun.errors import InvalidProgram, PteError
from pterun.executor.load.steps import Effect, describe, step_effect
from pterun.format import DelegateCall, Kind, ListValue, Plan, TensorSpec

_TENSOR_LISTS = (Kind.TENSOR_LIST, Kind.OPTIONAL_TENSOR_LIST)


class MethodEffects:
    """Every step's effect, and which steps write and read each piece of memory."""

    def __init__(self, plan: Plan, steps: Sequence, delegate_writes: Mapping[int, tuple[int, ...]],
                 before: MethodEffects | None = None) -> None:
        self.plan = plan
        self.steps = tuple(steps)
        self.delegate_writes = delegate_writes  # instruction index -> argument positions it writes
        # A step left as it was has the effect it had (``before``: the effects of the steps this rewrites).
        kept = before if before is not None and len(before.steps) == len(self.steps) else None
        changed: Sequence[int] = range(len(self.steps))
        if kept is None:
            self.effects: list[Effect] = [step_effect(s, delegate_writes.get(n, ())) for n, s in enumerate(self.steps)]
        else:
            changed = [n for n, (s, k) in enumerate(zip(self.steps, kept.steps)) if s is not k]
            self.effects = list(kept.effects)
            for n in changed:
                self.effects[n] = step_effect(self.steps[n], delegate_writes.get(n, ()))
        self._points_to = self._bindings()
        self.bound: set[int] = {b for e in self.effects for b in e.binds}  # values some step binds
        self.syncs = any(e.syncs for e in self.effects)  # some step reads tensor values on the host
        # A value no step binds, and no list, is its own memory whatever the binds of others: kept for every rewrite.
        self._own: dict[int, frozenset[int]] = kept._own if kept is not None else {}
        # Any other value's memory depends on the binds alone: where a rewrite leaves them as they were, what was
        # resolved is kept, and only the steps it changed are looked at again (a pass changes tens of a method's
        # hundreds).
        if kept is not None and kept._points_to == self._points_to:
            self._memo: dict[int, frozenset[int]] = kept._memo
            self.written: list[frozenset[int]] = list(kept.written)  # per step: memory it writes
            self.read: list[frozenset[int]] = list(kept.read)
            for n in changed:
                self.written[n] = self.memory(*self.effects[n].writes)
                self.read[n] = self.memory(*self.effects[n].reads)
            self.writers: dict[int, list[int]] = _moved(kept.writers, kept.written, self.written, changed)
            self.readers: dict[int, list[int]] = _moved(kept.readers, kept.read, self.read, changed)
        else:
            self._memo = {}
            self.written = [self.memory(*e.writes) for e in self.effects]
            self.read = [self.memory(*e.reads) for e in self.effects]
            self.writers = _by_memory(self.written)  # memory -> steps writing it, in step order
            self.readers = _by_memory(self.read)

    def after(self, steps: Sequence) -> MethodEffects:
        """The effects of rewritten steps (the same instructions, some folded away or replaced)."""
        if len(steps) == len(self.steps) and all(a is b for a, b in zip(steps, self.steps)):
            return self  # nothing was rewritten
        return MethodEffects(self.plan, steps, self.delegate_writes, self)

    def _bindings(self) -> dict[int, set[int]]:
        # value -> every value whose object a bind may have given it (its own included), to a fixed point.
        points: dict[int, set[int]] = {}
        binds = [(b, e.shares) for e in self.effects for b in e.binds]
        changed = bool(binds)
        while changed:
            changed = False
            for target, shares in binds:
                have = points.setdefault(target, {target})
                before = len(have)
                for source in shares:
                    have.update(points.get(source, (source,)))
                changed |= len(have) != before
        return points

    def memory(self, *values: int) -> frozenset[int]:
        """The memory (named by owning value) that ``values`` may refer to, lists standing for their items."""
        if len(values) == 1:
            return self._memory_of(values[0])
        return frozenset().union(*map(self._memory_of, values))

    def _memory_of(self, value: int) -> frozenset[int]:
        # Each value's memory once per set of effects: every step's reads and writes ask for it, thousands of
        # values a load (a 100M decoder's XNNPACK program: 215 -> 202 ms warm with it kept).
        points_to = self._points_to
        found = self._own.get(value)
        if found is not None and value not in points_to:
            return found
        found = self._memo.get(value)
        if found is not None:
            return found
        values_ = self.plan.values
        item = values_[value]
        if value not in points_to and not (isinstance(item, ListValue) and item.kind in _TENSOR_LISTS):
            found = self._own[value] = frozenset((value,))  # most values: bound by no step
            return found
        seen, stack, out = set(), [value], set()
        while stack:
            vi = stack.pop()
            if vi in seen:
                continue
            seen.add(vi)
            for m in points_to.get(vi, (vi,)):
                item = values_[m]
                if isinstance(item, ListValue) and item.kind in _TENSOR_LISTS:
                    stack.extend(i for i in item.items if i >= 0)
                else:
                    out.add(m)
        found = self._memo[value] = frozenset(out)
        return found


def _by_memory(per_step: Sequence[frozenset[int]]) -> dict[int, list[int]]:
    """Memory -> the steps (in order) whose entry in ``per_step`` holds it."""
    found: dict[int, list[int]] = {}
    for n, memory in enumerate(per_step):
        for m in memory:
            found.setdefault(m, []).append(n)
    return found


def _moved(index: dict[int, list[int]], before: Sequence[frozenset[int]], after: Sequence[frozenset[int]],
           changed: Sequence[int]) -> dict[int, list[int]]:
    """``index`` (``_by_memory(before)``) for ``after``, which differs from ``before`` at the steps ``changed`` only;
    ``index`` and its lists stay as they were (the effects they belong to are kept too)."""
    gone: dict[int, set[int]] = {}  # memory -> the changed steps that no longer touch it
    new: dict[int, list[int]] = {}  # memory -> the changed steps that now do
    for n in changed:
        for m in before[n] - after[n]:
            gone.setdefault(m, set()).add(n)
        for m in after[n] - before[n]:
            new.setdefault(m, []).append(n)
    found = dict(index)
    for m in gone.keys() | new.keys():
        drop = gone.get(m, ())
        steps = [k for k in index.get(m, ()) if k not in drop]
        if m in new:
            steps = sorted(steps + new[m])
        if steps:
            found[m] = steps
        else:
            del found[m]
    return found


def delegate_writes(plan: Plan, delegates: Sequence[tuple], objects: Sequence) -> dict[int, tuple[int, ...]]:
    """Per delegate call: the argument positions its backend says it writes (and the backend's checks of
    the call's arguments).

    ``delegates`` are the initialized ``(backend, handle)`` pairs, in the plan's order; ``objects`` the
    values made at load (None for tensors the caller binds, which the backend sees as meta tensors)."""
    found: dict[int, tuple[int, ...]] = {}
    for n, ins in enumerate(plan.instructions):
        if not isinstance(ins, DelegateCall):
            continue
        backend, handle = delegates[ins.delegate_index]
        where = f"method {plan.name!r} instruction {n} (delegate {plan.delegates[ins.delegate_index].backend_id})"
        args = [_as_known(plan.values[a], objects[a]) for a in ins.args]
        try:
            positions = tuple(sorted(set(backend.written_arguments(handle, args))))
        except PteError as exc:
            raise type(exc)(f"{where}: {exc.message}") from None
        if any(not isinstance(p, int) or not 0 <= p < len(ins.args) for p in positions):
            raise InvalidProgram(f"{where}: its backend names arguments {list(positions)} of {len(ins.args)}")
        repeated = [p for p in positions if ins.args.count(ins.args[p]) > 1]
        if repeated:
            # One value as an output and as another argument: the delegate would read what it overwrites.
            raise InvalidProgram(f"{where}: passes value {ins.args[repeated[0]]} more than once and writes it")
        found[n] = positions
    return found


def _as_known(value, obj):
    if obj is None and isinstance(value, TensorSpec):
        return torch.empty(value.sizes, dtype=storage_dtype(value.scalar_type), device="meta")
    return obj


def check_writes(plan: Plan, steps: Sequence, effects: MethodEffects) -> None:
    """Refuses a method in which a step writes a constant, or anything that may be one.

    Constants view the program's bytes or a data file's, on the CPU without a copy: memory the caller
    lent (immutable ``bytes``, a read-only map) and every method of the program shares. ExecuTorch's
    exporter never writes one; a file that does is corrupt or hostile."""
    constants = {i for i, v in enumerate(plan.values) if isinstance(v, TensorSpec) and v.is_constant}
    where = f"method {plan.name!r}"
    for i, vi in enumerate(plan.inputs):
        if vi in constants:
            raise InvalidProgram(f"{where}: input {i} is value {vi}, a constant; setting it would write the "
                                 f"program's bytes")
    if not constants:
        return
    for n, e in enumerate(effects.effects):
        for vi in e.binds:
            if vi in constants:
                raise InvalidProgram(f"{where} instruction {n} ({describe(steps[n])}) assigns value {vi}, "
                                     f"a constant")
        for vi in e.writes:
            hit = effects.memory(vi) & constants
            if hit:
                detail = (f"value {vi}, a constant" if vi in constants
                          else f"value {vi}, which may share memory with constant value {min(hit)}")
                if not e.known:
                    raise InvalidProgram(
                        f"{where} instruction {n} ({describe(steps[n])}) passes {detail}, and its kernel declares "
                        f"neither a result nor the arguments it writes (Binding.writes, Binding.mutates), so it "
                        f"may write it; constants are the program's bytes and are never written")
                raise InvalidProgram(f"{where} instruction {n} ({describe(steps[n])}) writes {detail}; "
                                     f"constants are the program's bytes and are never written")


def written_inputs(plan: Plan, effects: MethodEffects) -> frozenset[int]:
    """Positions of the method's inputs whose memory some step writes (an in-place update of an input)."""
    written = {m for ms in effects.written for m in ms}
    return frozenset(i for i, vi in enumerate(plan.inputs) if vi in written)

