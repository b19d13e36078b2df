"""Which steps of a method the generated code wraps in a Replay (replay.py): runs of consecutive steps that make
native calls alone, with the views between them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet

import torch

from pterun.executor.load.steps import DelegateStep, KernelStep, Step
from pterun.format import FreeCall, JumpFalseCall, MoveCall


class Runs:
    def __init__(self, steps: Sequence[Step], objects: list, per_call: AbstractSet[int],
                 list_items: Mapping[int, tuple[int, ...]], dynamic: AbstractSet[int], outputs: Sequence[int]) -> None:
        self.steps = steps
        self.objects = objects  # each value's load-time object
        self.per_call = per_call  # values a call computes or passes in (the generated code's locals and parameters)
        self.list_items = list_items
        self.dynamic = dynamic  # tensors whose sizes change from call to call
        self.outputs = outputs
        self._last_read: dict[int, int] | None = None

    def native_step(self, n: int) -> bool:
        """Whether step ``n`` may be in a run as a call of native calls: its kernel says whether a call was native
        calls alone (``ran_natively``), and its lines are that call (no result, no out sized around it, no argument
        converted per call); a delegate's arguments are tensors."""
        step = self.steps[n]
        if isinstance(step, KernelStep):
            b = step.binding
            if not callable(getattr(b.fn, "ran_natively", None)) or b.result is not None:
                return False
            if any(step.args[pos] in self.per_call for pos, _ in b.convert):
                return False
            return all(b.sizes_outs or step.args[pos] not in self.dynamic for pos in b.writes)
        if isinstance(step, DelegateStep):
            return callable(getattr(step.fn, "ran_natively", None)) and all(
                vi not in self.list_items and isinstance(self.objects[vi], torch.Tensor) for vi in step.args)
        return False

    def view_made(self, n: int) -> int | None:
        """The view step ``n`` makes (its result, of its input's bytes) where that is all it does, else None: a
        replay, which skips the step, leaves the view unmade, so it may be in a run only where no step after the
        run reads it."""
        step = self.steps[n]
        if not isinstance(step, KernelStep):
            return None
        b = step.binding
        if b.result is None or not b.aliases or b.writes or b.mutates or b.convert:
            return None
        return step.args[b.result]

    def reads(self, n: int) -> list[int]:
        """The values step ``n`` reads, list items included, in order."""
        step = self.steps[n]
        if isinstance(step, KernelStep):
            b = step.binding
            args = [step.args[pos] for pos in (*b.positional, *(i for _, i in b.keywords))]
        elif isinstance(step, DelegateStep):
            args = list(step.args)
        elif isinstance(step, MoveCall):
            args = [step.source]
        elif isinstance(step, JumpFalseCall):
            args = [step.condition]
        else:
            args = []
        read = dict.fromkeys(args)
        for vi in args:
            read.update((i, None) for i in self.list_items.get(vi, ()) if i >= 0)
        return list(read)

    def at(self, start: int) -> list[int]:
        """The run from ``start``: native steps and views (with steps that write no line among them: folded away,
        frees), beginning and ending at a native step; else none. One native step alone is a run too: replaying its
        call checks the state the recording kept, which costs less than its kernel's own checks of its tensors (a
        layer norm's five)."""
        if not self.native_step(start):
            return []
        run, n = [start], start + 1
        while n < len(self.steps):
            if self.native_step(n) or self.view_made(n) is not None:
                run.append(n)
            elif not isinstance(self.steps[n], (FreeCall, type(None))):
                break
            n += 1
        # A list updated ahead of the run cannot take a view the run makes: the run ends before its reader.
        made: set[int | None] = set()
        for i, k in enumerate(run):
            if any(item in made for vi in self.reads(k) for item in self.list_items.get(vi, ())):
                del run[i:]
                break
            made.add(self.view_made(k))
        last_read = self._last_reads()
        while run:  # a view whose result a step after the run reads ends the run before it
            while run and not self.native_step(run[-1]):
                run.pop()
            end = run[-1] if run else -1
            cut = next((i for i, k in enumerate(run) if (view := self.view_made(k)) is not None
                        and last_read.get(view, -1) > end), None)
            if cut is None:
                break
            del run[cut:]
        return run

    def _last_reads(self) -> dict[int, int]:
        """Each value's last reader, by step (past the last step for the method's outputs)."""
        if self._last_read is None:
            self._last_read = {vi: n for n in range(len(self.steps)) for vi in self.reads(n)}
            self._last_read.update((vi, len(self.steps)) for vi in self.outputs)
        return self._last_read
