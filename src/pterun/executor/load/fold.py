"""Turns copies the exporter made into views, at load.

ExecuTorch's exporter has no views: ``linear`` becomes ``permute_copy(weight)``
then ``addmm``, attention's transposes become ``permute_copy`` of activations,
and reshapes become ``view_copy``. The portable runtime copies every time.
PyTorch's kernels take strided inputs as they are, so a copy whose result is
only read by them can be a view, computed either

* once at load, when everything it reads is constant (a transposed weight: no
  memory is spent, the file's bytes stay the only copy), or
* at its place in the method, when the bytes it reads are not written by any
  instruction before its last reader runs (an activation transpose).

Either way a copy is replaced only when the memory it writes is written
nowhere else (through any value that may refer to it: what each step writes
and reads is effects.py's), is no method output, is read only by kernels that take
any strides (``Binding.strided``) or is a view laid out as the plan lays out
the copy (a delegate or ``et_view`` relies on that layout: see
``keeps_layout``), and no view the exporter planned on its bytes reads them
after it (such a view is read, never written, and sees its base's bytes
through the arena; memory planning reuses bytes, so only a reader after the
copy with no whole rewrite of the bytes in between counts). Methods with
jumps keep their copies: their instruction order is not the order they run in.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from collections.abc import Set as AbstractSet
from functools import cached_property

import torch

from pterun.core.layout import is_contiguous_order
from pterun.executor.load.effects import MethodEffects
from pterun.executor.load.steps import KernelStep
from pterun.format import Dynamism, JumpFalseCall, Kind, ListValue, Plan, TensorSpec
from pterun.kernels import Binding, Functional

_aten = torch.ops.aten
# Views that, of a tensor laid out contiguously, are laid out contiguously too, at no offset: their result has the
# layout the plan gives the copy, whatever the sizes (``expand`` where it expands nothing: Rewriter.keeps_layout).
_LAYOUT_KEEPING = frozenset({_aten.unsqueeze.default, _aten.squeeze.default, _aten.squeeze.dim, _aten.squeeze.dims,
                             _aten.alias.default, _aten.view.default})


def planned_bytes(spec: TensorSpec) -> tuple[int, int, int] | None:
    """(arena, start, end) of a memory-planned tensor's bytes; None where the plan gives it none."""
    if spec.memory_id is None:
        return None
    return spec.memory_id, spec.memory_offset, spec.memory_offset + spec.nbytes


def overlaps(a: TensorSpec, b: TensorSpec) -> bool:
    return (a.memory_id == b.memory_id and a.memory_offset < b.memory_offset + b.nbytes
            and b.memory_offset < a.memory_offset + a.nbytes)


class PlannedViews:
    """The views the exporter planned: tensors of an arena that steps read and never write, with the bytes they span.
    Worked out once per method: they depend on its steps before any pass."""

    def __init__(self, plan: Plan, original: MethodEffects) -> None:
        """``original``: the effects of the method's steps before any were folded (a copy folded into a view of
        constants no longer writes its planned bytes, yet is no planned view)."""
        written = set(original.writers) | original.bound | set(plan.inputs)
        views: dict[int, tuple[int, int, int]] = {}
        for vi in original.readers:
            value = plan.values[vi]
            if (vi not in written and isinstance(value, TensorSpec) and value.data_buffer_idx == 0
                    and (span := planned_bytes(value)) is not None):
                views[vi] = span
        # By arena, ordered by where they start: a question about some bytes looks only at the views that start
        # before those bytes end (a method has thousands of views and of questions).
        self._by_arena: dict[int, tuple[list[int], list[tuple[int, int, int]]]] = {}
        for vi, (arena, start, end) in sorted(views.items(), key=lambda item: item[1][1]):
            starts, entries = self._by_arena.setdefault(arena, ([], []))
            starts.append(start)
            entries.append((vi, start, end))

    def overlapping(self, span: tuple[int, int, int]) -> list[tuple[int, int, int]]:
        """(view, start, end) of each view whose bytes overlap ``span``'s (arena, start, end)."""
        found = self._by_arena.get(span[0])
        if found is None:
            return []
        starts, entries = found
        return [entry for entry in entries[:bisect.bisect_left(starts, span[2])] if entry[2] > span[1]]


class Rewriter:
    """Which copies of a method's steps could be views, and which views the exporter planned read what a step
    writes (fuse/ asks the same of a chain's intermediate values)."""

    def __init__(self, plan: Plan, steps: list, objects: list, computed: AbstractSet[int], effects: MethodEffects,
                 views: PlannedViews) -> None:
        """``effects`` are those of ``steps``, ``views`` the method's planned views."""
        self.plan, self.steps, self.objects, self.effects, self.views = plan, steps, objects, effects, views
        self.computed = computed
        self.outputs = set(plan.outputs)
        self.ordered = not any(isinstance(s, JumpFalseCall) for s in steps)  # steps run in the order listed
        # Per step, the (arena, start, end) it writes whole; None until asked.
        self._whole: list[tuple[tuple[int, int, int], ...] | None] = [None] * len(steps)

    @cached_property
    def moving(self) -> set[int]:
        """Values known only at run time (symbolic sizes), directly or inside a list."""
        moving = set(self.computed)
        for li, value in enumerate(self.plan.values):
            if isinstance(value, ListValue) and value.kind == Kind.INT_LIST and moving.intersection(value.items):
                moving.add(li)
        return moving

    def candidate(self, n: int, step) -> tuple | None:
        """(view op, output value, whether a reader relies on the planned layout) when step ``n`` is a copy whose
        result could be a view."""
        if not isinstance(step, KernelStep):
            return None
        b = step.binding
        view = b.view
        if view is None or len(b.writes) != 1:
            return None
        out = step.args[b.writes[0]]
        spec = self.plan.values[out]
        # Nothing else may write the result's memory, through any value that may refer to it.
        if (self.effects.writers.get(out) != [n] or out in self.effects.bound or out in self.outputs
                or not isinstance(spec, TensorSpec)):
            return None
        laid_out = not all(self.effects.effects[r].strided for r in self.effects.readers.get(out, ()))
        if laid_out and not self.keeps_layout(step, view, spec):
            return None
        if any(True for _ in self.reading_after(spec, n)):
            return None
        return view, out, laid_out

    def keeps_layout(self, step: KernelStep, view, spec: TensorSpec) -> bool:
        """Whether the view ``step`` copies, of a source laid out contiguously, is laid out as the plan lays out the
        copy, ``spec``: contiguously, from the source's first byte. So is an ``expand`` whose planned sizes are its
        source's (the exporter's repeat of a tensor to its own shape); that its sizes stay equal on every call is
        checked where it runs (``planned_layout``)."""
        inputs = self.tensor_inputs(step)
        if len(inputs) != 1 or not isinstance(source := self.plan.values[inputs[0]], TensorSpec):
            return False
        if not (is_contiguous_order(spec.dim_order) and is_contiguous_order(source.dim_order)
                and spec.scalar_type == source.scalar_type):
            return False
        if view is _aten.expand.default:
            return tuple(source.sizes) == tuple(spec.sizes)
        return view in _LAYOUT_KEEPING

    def reading_after(self, spec: TensorSpec, n: int) -> Iterator[int]:
        """The views the exporter planned that may read, through the arena, bytes of ``spec`` that step ``n``
        writes (none for a tensor with no planned bytes).

        Memory planning reuses bytes, so a planned view often overlaps a copy's result without viewing
        it. It reads the copy's bytes only if one of its readers runs after step ``n`` and no step in
        between writes the whole overlap again."""
        span = planned_bytes(spec)
        if span is None:
            return
        arena, lo, hi = span
        readers = self.effects.readers
        later: list[tuple[int, int, int, int]] = []  # (view, its first reader after step n, start, end)
        for alias, start, end in self.views.overlapping(span):
            if not self.ordered:
                yield alias
                continue
            # Only the first reader after step n matters: a step that rewrites the overlap before it also
            # comes before every later reader.
            read = readers.get(alias, ())  # in step order
            if read and read[-1] > n:
                later.append((alias, read[bisect.bisect_right(read, n)], start, end))
        if not later:
            return
        # A step that rewrites all of the tensor's bytes rewrites every overlap: the views first read after it
        # (most of them, where planning reuses bytes) need no look of their own.
        whole = self._first_rewrite(n + 1, max(first for _, first, _, _ in later), arena, lo, hi)
        for alias, first, start, end in later:
            if first <= whole and self._first_rewrite(n + 1, first, arena, max(lo, start), min(hi, end)) == first:
                yield alias

    def _first_rewrite(self, first: int, stop: int, memory_id: int, start: int, end: int) -> int:
        """The first step from ``first`` up to ``stop`` that writes bytes ``start:end`` of arena ``memory_id``
        whole; ``stop`` where none does."""
        whole = self._whole
        for k in range(first, stop):
            spans = whole[k]
            if spans is None:
                spans = whole[k] = self._whole_writes(self.steps[k])
            for m, lo, hi in spans:
                if m == memory_id and lo <= start and end <= hi:
                    return k
        return stop

    def _whole_writes(self, step) -> tuple[tuple[int, int, int], ...]:
        # A kernel's out argument of static shape is written whole, as is one it declares it covers; in-place
        # updates may write a part.
        if not isinstance(step, KernelStep):
            return ()
        found = []
        for p in (*step.binding.writes, *step.binding.covers):
            w = self.plan.values[step.args[p]]
            if isinstance(w, TensorSpec) and w.dynamism == Dynamism.STATIC and (span := planned_bytes(w)) is not None:
                found.append(span)
        return tuple(found)

    def tensor_inputs(self, step: KernelStep) -> list[int]:
        return [step.args[p] for p in self.tensor_positions(step)]

    def tensor_positions(self, step: KernelStep) -> list[int]:
        b = step.binding
        return [p for p in (*b.positional, *(i for _, i in b.keywords))
                if p not in b.writes and isinstance(self.plan.values[step.args[p]], TensorSpec)]


def fold_constant_views(plan: Plan, steps: list, objects: list, constants: frozenset[int], computed: frozenset[int],
                        effects: MethodEffects, planned: PlannedViews) -> tuple[list, dict[int, torch.Tensor]]:
    """Copies of constants computed now, as views: the steps with those copies replaced by None, and the
    views made, by value (constants themselves, from now on).

    ``objects`` are the values made at load, ``constants`` the values that are constants, ``computed``
    those steps assign, ``effects`` the steps' effects, ``planned`` the views the exporter planned."""
    rw = Rewriter(plan, steps, objects, computed, effects, planned)
    views: dict[int, torch.Tensor] = {}
    result = []
    for n, step in enumerate(steps):
        # Whether the copy reads constants alone first: a copy of activations is a view of no constants, and
        # asking whether its result could be a view at all costs more.
        found = rw.candidate(n, step) if _reads_constants(rw, step, constants, views) else None
        if found is not None and (view := _fold_now(rw, step, found, views)) is not None:
            views[found[1]] = view
            # None rather than removal: steps stay indexed by instruction, as jumps and errors are.
            result.append(None)
        else:
            result.append(step)
    return result, views


def _reads_constants(rw: Rewriter, step, constants: frozenset[int], views: dict) -> bool:
    """Whether ``step`` is a view's copy whose tensors are all constants (``views``: copies of constants folded)."""
    if not isinstance(step, KernelStep) or step.binding.view is None:
        return False
    inputs = rw.tensor_inputs(step)
    return bool(inputs) and all(vi in constants or vi in views for vi in inputs)


def _fold_now(rw: Rewriter, step: KernelStep, found, views: dict):
    """The view a copy of constants computes, or None."""
    view, out, laid_out = found
    b = step.binding
    if any(step.args[p] in rw.moving for p in (*b.positional, *(i for _, i in b.keywords))):
        return None
    converters = dict(b.convert)

    def arg(p):
        vi = step.args[p]
        value = views[vi] if vi in views else rw.objects[vi]
        return converters[p](value) if p in converters else value

    try:
        result = view(*[arg(p) for p in b.positional if p not in b.writes],
                      **{k: arg(p) for k, p in b.keywords if p not in b.writes})
    except (RuntimeError, TypeError, ValueError, IndexError):
        return None
    planned = rw.objects[out]
    if not isinstance(result, torch.Tensor) or result.shape != planned.shape or result.dtype != planned.dtype:
        return None
    if laid_out and result.stride() != planned.stride():
        return None
    return result


def with_views(plan: Plan, objects: list, views: dict[int, torch.Tensor]) -> list:
    """``objects`` with ``views`` in place of the values they replace, in lists that hold them too."""
    if not views:
        return objects
    objects = list(objects)
    for vi, view in views.items():
        objects[vi] = view
    # Lists were built from the planned tensors; those holding a replaced value are made anew.
    for li, value in enumerate(plan.values):
        if (isinstance(value, ListValue) and value.kind in (Kind.TENSOR_LIST, Kind.OPTIONAL_TENSOR_LIST)
                and any(item in views for item in value.items)):
            objects[li] = [views.get(item, old) for item, old in zip(value.items, objects[li])]
    return objects


def elide_view_copies(plan: Plan, steps: list, objects: list, computed: frozenset[int], params: set[int],
                      effects: MethodEffects, views: PlannedViews) -> tuple[list, frozenset[int]]:
    """Copies of activations that can be views made in their place; returns the steps and the new locals.

    ``effects`` are those of ``steps``, ``views`` the method's planned views."""
    if any(isinstance(s, JumpFalseCall) for s in steps):
        return steps, frozenset()
    rw = Rewriter(plan, steps, objects, computed, effects, views)
    result = list(steps)
    made: set[int] = set()
    for n, step in enumerate(steps):
        found = rw.candidate(n, step)
        if found is None:
            continue
        view, out, laid_out = found
        inputs = rw.tensor_inputs(step)
        if len(inputs) != 1 or inputs[0] in made:
            continue
        source = inputs[0]
        spec = plan.values[source]
        if not isinstance(spec, TensorSpec) or (spec.memory_id is None and source not in params):
            continue
        last = max(rw.effects.readers.get(out, [n]))
        if not _untouched(rw, source, spec, n, last):
            continue
        b = step.binding
        if view is torch.ops.aten.view.default:
            # The source (a caller's tensor) may be laid out so that no view has the new shape; reshape copies then.
            view = torch.ops.aten.reshape.default
        if laid_out:
            view = planned_layout(view)
        result[n] = KernelStep(step.name, Binding(
            view,
            tuple(p for p in b.positional if p not in b.writes),
            tuple((k, p) for k, p in b.keywords if p not in b.writes),
            b.writes[0],
            b.convert,
            aliases=tuple(rw.tensor_positions(step)),
            strided=True,
            functional=Functional(view),
        ), step.args)
        made.add(out)
    return result, frozenset(made)


def planned_layout(view):
    """``view`` whose result, where not laid out contiguously as the plan lays out the copy it replaces, is copied
    so: for readers that rely on that layout. ``Rewriter.keeps_layout`` chose views that are, so the copy is for an
    ``expand`` whose sizes came apart from its source's, which no exporter emits."""

    def laid_out(*args, **kwargs) -> torch.Tensor:
        result = view(*args, **kwargs)
        return result if result.is_contiguous() else result.contiguous()

    # Its name only: the qualified name stays planned_layout.<locals>.laid_out, by which torch's saved guards of the
    # compiled code that calls it find it again (a name that resolves to nothing made every entry a miss).
    laid_out.__name__ = f"{getattr(view, '__name__', 'view')}_laid_out"
    return laid_out


def _untouched(rw: Rewriter, source: int, spec: TensorSpec, first: int, last: int) -> bool:
    """No step after ``first``, up to ``last``, writes the source's memory or bytes it occupies (a delegate's
    writes are those its backend declares, ``written_arguments``)."""
    source_memory = rw.effects.memory(source)
    for k in range(first + 1, last + 1):
        for m in rw.effects.written[k]:
            if m in source_memory:
                return False
            written = rw.plan.values[m]
            if (spec.memory_id is not None and isinstance(written, TensorSpec) and written.memory_id is not None
                    and overlaps(spec, written)):
                return False
    return True
